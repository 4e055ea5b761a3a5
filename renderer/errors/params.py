"""The JSON parameter bags (``tokenize_params``, ``chat_params``, ``sampling_params``) and the
numbers in them: unknown fields, wrong types, values out of range, truncation and output lengths.
"""

from __future__ import annotations

from .base import RenderError, short


class InvalidParamsError(RenderError):
    """A JSON parameter bag (``tokenize_params``, ``chat_params``, ``sampling_params``) is malformed."""


class UnknownFieldError(InvalidParamsError):
    """Fields a bag does not take; the parameter is the first of them."""

    def __init__(self, bag: str, names: list[str], allowed: list[str]) -> None:
        super().__init__(
            f"Unknown field(s) in {bag}: {', '.join(sorted(names))}. Allowed fields: {', '.join(sorted(allowed))}.",
            parameter=sorted(names)[0],
        )


class FieldTypeError(InvalidParamsError):
    """A field of a bag (or the bag itself, ``bag="request"``) of the wrong type or out of range."""

    def __init__(self, bag: str, name: str, expected: str, value: object) -> None:
        super().__init__(f"{bag}.{name} must be {expected}, got {type(value).__name__} {short(value)}.", parameter=name)


class ValueRangeError(InvalidParamsError):
    """A number outside what its parameter takes, in vLLM's shape: ``<name> must be <rule>, got <value>.``"""

    def __init__(self, parameter: str, rule: str, value: object) -> None:
        super().__init__(f"{parameter} must be {rule}, got {value}.", parameter=parameter, value=value)


class SamplingRangeError(InvalidParamsError):
    """A sampling number outside what vLLM's ``SamplingParams`` takes, for the checks vLLM words
    without naming their parameter (``n``, the three penalties, ``top_k``, ``min_p``,
    ``min_tokens``): ``<name> must be <rule>, got <value>.`` and no suffix, so vLLM's answer, and
    this one, has ``param`` null."""

    def __init__(self, name: str, rule: str, value: object) -> None:
        super().__init__(f"{name} must be {rule}, got {value}.")


class MaxTokensError(ValueRangeError):
    """``max_tokens`` below one (vLLM's wording)."""

    def __init__(self, value: object) -> None:
        super().__init__("max_tokens", "at least 1", value)


class OutOfVocabStopIdsError(InvalidParamsError):
    """``stop_token_ids`` outside the model's vocabulary (vLLM's wording, naming the parameter)."""

    def __init__(self, ids: list[int], vocab_size: int) -> None:
        super().__init__(
            f"token_id(s) {ids} in stop_token_ids contain out-of-vocab token ids. Vocabulary size: {vocab_size}",
            parameter="stop_token_ids",
            value=ids,
        )


class EmptyStopStringError(InvalidParamsError):
    """``stop`` holds an empty string (vLLM's wording; it names no parameter)."""

    def __init__(self) -> None:
        super().__init__("stop cannot contain an empty string.")


class InvalidJSONError(InvalidParamsError):
    """A tensor that must carry JSON (a parameter bag, the messages) does not parse: the JSON
    parser's ``reason``, and where."""

    def __init__(self, what: str, reason: str, line: int, column: int) -> None:
        super().__init__(f"{what} is not valid JSON: {reason} at line {line} column {column}")


class ParamsNestingError(InvalidParamsError):
    """A JSON parameter bag (``chat_params`` fields such as ``chat_template_kwargs``,
    ``tokenize_params``, ``sampling_params``) nests deeper than ``MAX_NESTING_DEPTH`` (``limit``);
    ``field`` is the path to it."""

    template = "{field} is nested more than {limit} levels deep (lists and objects); the limit is {limit}."
    """The wording, shared with the chat request's own nesting error."""

    def __init__(self, field: str, limit: int) -> None:
        super().__init__(self.template.format(field=field, limit=limit))


class TruncationSizeError(InvalidParamsError):
    """vLLM: truncate_prompt_tokens larger than max_total_tokens - max_output_tokens (``limit``),
    each named as the request's parameters name it."""

    def __init__(self, parameter: str, value: int, total_parameter: str, output_parameter: str, limit: int) -> None:
        super().__init__(
            f"{parameter}={value} cannot be greater than {total_parameter} - {output_parameter} = {limit}. "
            "Please request a smaller truncation size.",
            parameter=parameter,
            value=value,
        )


class TruncationOverContextError(TruncationSizeError):
    """``truncate_prompt_tokens`` larger than the context: the front's check, in vLLM 0.32's words
    (its request's ``TokenizeParams``, which measures truncation against the whole context)."""

    def __init__(self, value: int, max_model_len: int) -> None:
        # Its own words: the bound is the context, not a difference of two parameters.
        InvalidParamsError.__init__(
            self,
            f"truncate_prompt_tokens={value} cannot be greater than max_model_len = {max_model_len}. "
            "Please request a smaller truncation size.",
            parameter="truncate_prompt_tokens",
            value=value,
        )


class TruncationSideError(InvalidParamsError):
    """``truncation_side`` other than "left" or "right" (vLLM's words)."""

    def __init__(self, value: object) -> None:
        super().__init__(
            "`truncation_side` must be either 'left' or 'right'.", parameter="truncation_side", value=str(value)[:60]
        )


class OutputTokensError(InvalidParamsError):
    """max_output_tokens larger than max_total_tokens, each named as the request's parameters name it."""

    def __init__(self, parameter: str, value: int, total_parameter: str, total: int) -> None:
        super().__init__(
            f"{parameter}={value} cannot be greater than {total_parameter}={total}. Please request fewer output tokens.",
            parameter=parameter,
            value=value,
        )


class OutputOverContextError(OutputTokensError):
    """``max_tokens`` (or a chat's ``max_completion_tokens``, named as sent) larger than the
    context: the front's check, before any stage sees the number, in vLLM's words."""

    def __init__(self, parameter: str, value: int, max_model_len: int) -> None:
        super().__init__(parameter, value, "max_model_len", max_model_len)


class TotalTokensOverContextError(InvalidParamsError):
    """``tokenize_params.max_total_tokens`` larger than the model's context."""

    def __init__(self, total: int, max_model_len: int) -> None:
        super().__init__(
            f"max_total_tokens={total} cannot be greater than the model's maximum context "
            f"length of {max_model_len} tokens.",
            parameter="max_total_tokens",
            value=total,
        )


class PadTokenMissingError(InvalidParamsError):
    """``pad_prompt_tokens`` asked of a model whose tokenizer has no pad token."""

    def __init__(self) -> None:
        super().__init__("pad_prompt_tokens needs a tokenizer with a pad token.", parameter="pad_prompt_tokens")


class StopStringsLimitError(InvalidParamsError):
    """``stop`` with more than ``max_strings`` strings, or one longer than ``max_chars``."""

    def __init__(self, max_strings: int, max_chars: int) -> None:
        super().__init__(
            f"stop takes at most {max_strings} strings of at most {max_chars} characters.", parameter="stop"
        )


class StopTokenIdsTypeError(InvalidParamsError):
    """``stop_token_ids`` that is not a list of integers (negative ones refused without a vocabulary)."""

    def __init__(self, ids: object) -> None:
        super().__init__(f"stop_token_ids must contain only integers, got {short(ids)}.", parameter="stop_token_ids")


class StopTokenIdsLimitError(InvalidParamsError):
    """``stop_token_ids`` with more than ``limit`` ids."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"stop_token_ids takes at most {limit} ids.", parameter="stop_token_ids")


class TopKTypeError(InvalidParamsError):
    """``top_k`` that is not an integer (vLLM's words, naming its type)."""

    def __init__(self, value: object) -> None:
        super().__init__(f"top_k must be an integer, got {type(value).__name__}", parameter="top_k")
