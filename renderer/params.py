"""``TokenizeParams``: how one prompt is tokenized, truncated and length-checked (vLLM semantics).

Order of work, as in vLLM: text checks (length bound or pre-trim, lower-casing) before
tokenizing; padding, truncation, then the length check after it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar, Mapping, Sequence

from .errors import (
    FieldTypeError,
    LengthLimitError,
    OutputTokensError,
    PadTokenMissingError,
    PromptCharsTooLongError,
    PromptTooLongError,
    TotalTokensOverContextError,
    TruncationSideError,
    TruncationSizeError,
    UnknownFieldError,
)
from .json_fields import check_depth

TRUNCATION_SIDES = ("left", "right")


@dataclass(frozen=True)
class TokenizeParams:
    """Configuration of how prompts are tokenized (vLLM's ``TokenizeParams``)."""

    max_total_tokens: int | None
    """Maximum allowed input + output tokens: the model's context length."""

    max_output_tokens: int = 0
    """Requested output tokens; they reserve room in the context."""

    pad_prompt_tokens: int | None = None
    """Pad the prompt to this many tokens with the pad token; -1 means ``max_input_tokens``."""

    truncate_prompt_tokens: int | None = None
    """Tokens to keep: None no truncation, -1 ``max_input_tokens``, N keeps N."""

    truncation_side: str | None = None
    """"left" keeps the last N tokens, "right" the first N; None takes the tokenizer's side."""

    do_lower_case: bool = False
    """Lower-case text before tokenizing (sentence-transformers encoder configs)."""

    add_special_tokens: bool = True
    """Let the tokenizer add its special tokens (BOS/EOS). Chat defaults to False."""

    return_token_offsets: bool = False
    """Return per-token (start, end) character spans; special tokens get (0, 0)."""

    needs_detokenization: bool = False
    """Decode token-id prompts back into text for ``rendered_prompt``."""

    max_total_tokens_param: str = "max_total_tokens"
    """Name used for max_total_tokens in error messages."""

    max_output_tokens_param: str = "max_output_tokens"
    """Name used for max_output_tokens in error messages."""

    truncate_prompt_tokens_param: str = "truncate_prompt_tokens"
    """Name used for truncate_prompt_tokens in error messages."""

    @property
    def max_input_tokens(self) -> int | None:
        """Maximum allowed input tokens."""
        if self.max_total_tokens is None:
            return None
        return self.max_total_tokens - self.max_output_tokens

    def __post_init__(self) -> None:
        total, out, inp = self.max_total_tokens, self.max_output_tokens, self.max_input_tokens
        if total is not None and out > total:
            raise OutputTokensError(self.max_output_tokens_param, out, self.max_total_tokens_param, total)
        trunc = self.truncate_prompt_tokens
        if inp is not None and trunc is not None and trunc > inp:
            raise TruncationSizeError(
                self.truncate_prompt_tokens_param, trunc, self.max_total_tokens_param, self.max_output_tokens_param, inp
            )
        if self.truncation_side is not None and self.truncation_side not in TRUNCATION_SIDES:
            raise TruncationSideError(self.truncation_side)

    # --- derived values -------------------------------------------------------------------

    @property
    def truncation_length(self) -> int | None:
        """Tokens to keep after truncation (-1 resolved), or None."""
        n = self.truncate_prompt_tokens
        if n is not None and n < 0:
            return self.max_input_tokens
        return n

    def side(self, tokenizer_side: str) -> str:
        return self.truncation_side or tokenizer_side

    def encode_max_length(self) -> int | None:
        """Bound handed to the tokenizer: the truncation size, else ``max_input_tokens + 1``.

        The +1 bound means an over-long prompt is never fully tokenized yet still fails the
        length check (its count is then "at least" that many).
        """
        n = self.truncation_length
        if n is not None:
            return n
        if self.max_input_tokens is not None:
            return self.max_input_tokens + 1
        return None

    # --- text steps (before tokenizing) ---------------------------------------------------

    def prepare_text(self, text: str, max_chars_per_token: int, tokenizer_side: str) -> tuple[str, int]:
        """Length-bound or pre-trim the text, lower-case it; returns (text, chars trimmed before)."""
        inp = self.max_input_tokens
        shift = 0
        if inp is not None:
            keep = self.truncation_length
            if keep is None:
                max_chars = inp * max_chars_per_token
                if len(text) > max_chars:
                    # Fail before tokenizing: no amount of tokenizer work can make it fit.
                    raise PromptCharsTooLongError(
                        len(text), self.max_output_tokens, self.max_total_tokens, inp, max_chars
                    )
            else:
                max_chars = keep * max_chars_per_token
                if len(text) > max_chars:
                    # Pre-trim: the kept tokens lie within the kept characters.
                    if self.side(tokenizer_side) == "left":
                        shift = len(text) - max_chars
                        text = text[shift:]
                    else:
                        text = text[:max_chars]
        if self.do_lower_case:
            text = text.lower()
        return text, shift

    # --- token steps (after tokenizing) ---------------------------------------------------

    @property
    def pad_length(self) -> int | None:
        """Length to pad to (-1 resolved), or None."""
        n = self.pad_prompt_tokens
        return self.max_input_tokens if n is not None and n < 0 else n

    def pad(
        self, ids: list[int], pad_id: int | None, tokenizer_side: str = "right", *, at_least: bool = False
    ) -> list[int]:
        """``ids`` padded to ``pad_length``, building no more than the steps after it keep: a pad
        length past the context is refused here, with the length check's own error, before a list
        of that length exists (``pad_prompt_tokens`` is the client's number); with truncation after
        it, only the pads truncation keeps are made. The result of pad-then-truncate is vLLM's."""
        n = self.pad_length
        if n is None or n <= len(ids):
            return ids
        if pad_id is None:
            raise PadTokenMissingError()
        keep = self.truncation_length
        if keep is None:
            self.check_length(n, at_least=at_least)
        elif self.side(tokenizer_side) == "left":
            n = min(n, len(ids) + keep)  # truncation keeps the last ``keep``: pads beyond are cut
        else:
            n = min(n, max(keep, len(ids)))  # it keeps the first ``keep``
        return ids + [pad_id] * (n - len(ids))

    def truncate(self, ids: list, tokenizer_side: str) -> list:
        n = self.truncation_length
        if n is None or n >= len(ids):
            return ids
        if n == 0:
            return ids[:0]
        return ids[-n:] if self.side(tokenizer_side) == "left" else ids[:n]

    def check_length(self, n_tokens: int, *, at_least: bool = False) -> None:
        inp = self.max_input_tokens
        if inp is None or n_tokens <= inp:
            return
        raise PromptTooLongError(self.max_total_tokens, self.max_output_tokens, n_tokens, at_least=at_least)

    @property
    def length_limit(self) -> "LengthLimit":
        """The part of these params a later stage needs to check a longer prompt (``mm_process``
        after placeholder expansion), so it need not read the request again."""
        return LengthLimit(self.max_total_tokens, self.max_output_tokens)

    # --- parsing a request's JSON bag -----------------------------------------------------

    def with_request(self, bag: Mapping[str, Any] | None, *, max_model_len: int | None) -> "TokenizeParams":
        """Overlay a request's ``tokenize_params`` on these defaults, validating every field."""
        if not bag:
            return self
        # Before an error message's repr() of a value recurses into it.
        check_depth(bag, "tokenize_params")
        if not isinstance(bag, Mapping):
            raise FieldTypeError("request", "tokenize_params", "a JSON object", bag)
        unknown = [k for k in bag if k not in REQUEST_FIELDS]
        if unknown:
            raise UnknownFieldError("tokenize_params", unknown, list(REQUEST_FIELDS))
        changes: dict[str, Any] = {}
        for name, value in bag.items():
            if value is None:
                if name in NULLABLE_FIELDS:
                    changes[name] = None
                    continue
                raise FieldTypeError("tokenize_params", name, REQUEST_FIELDS[name], value)
            kind = REQUEST_FIELDS[name]
            if kind.startswith("a boolean"):
                if not isinstance(value, bool):
                    raise FieldTypeError("tokenize_params", name, kind, value)
            elif kind.startswith("an integer"):
                if isinstance(value, bool) or not isinstance(value, int):
                    raise FieldTypeError("tokenize_params", name, kind, value)
            elif name == "truncation_side":
                if value not in TRUNCATION_SIDES:
                    raise TruncationSideError(value)
            changes[name] = value
        _check_ranges(changes, max_model_len)
        return replace(self, **changes)


@dataclass(frozen=True)
class LengthLimit:
    """The context-length check as ``tokenize`` resolved it for one request (the server's
    ``MAX_MODEL_LEN``, the request's ``max_total_tokens`` and ``max_output_tokens`` / ``max_tokens``).

    It travels to ``mm_process`` as the INT32 [2] tensor ``length_limit``, so the expanded ids are
    checked against exactly the limit the text was, with vLLM's wording.
    """

    max_total_tokens: int | None
    """Input plus output tokens allowed; None: no limit."""

    max_output_tokens: int = 0
    """Tokens reserved for the output."""

    NO_LIMIT: ClassVar[int] = -1
    """How ``max_total_tokens`` None travels in the tensor."""

    def values(self) -> tuple[int, int]:
        """The ``length_limit`` tensor's two values."""
        total = self.NO_LIMIT if self.max_total_tokens is None else self.max_total_tokens
        return total, self.max_output_tokens

    @classmethod
    def from_values(cls, values: Sequence[int]) -> "LengthLimit":
        """The inverse of ``values``; refuses anything but two integers a ``TokenizeParams`` allows."""
        vals = [int(v) for v in values]
        if len(vals) != 2:
            raise LengthLimitError(vals)
        total, out = vals
        if total == cls.NO_LIMIT:
            return cls(None, out)
        if total < 1 or not 0 <= out <= total:
            raise LengthLimitError(vals)
        return cls(total, out)

    def check(self, n_tokens: int) -> None:
        """vLLM's length check on ``n_tokens`` prompt tokens (``PromptTooLongError``)."""
        TokenizeParams(max_total_tokens=self.max_total_tokens, max_output_tokens=self.max_output_tokens).check_length(
            n_tokens
        )


REQUEST_FIELDS: dict[str, str] = {
    "max_total_tokens": "an integer >= 1",
    "max_output_tokens": "an integer >= 0",
    "pad_prompt_tokens": "an integer >= -1 or null",
    "truncate_prompt_tokens": "an integer >= -1 or null",
    "truncation_side": "'left', 'right' or null",
    "do_lower_case": "a boolean",
    "add_special_tokens": "a boolean",
    "return_token_offsets": "a boolean",
    "needs_detokenization": "a boolean",
}
NULLABLE_FIELDS = {"pad_prompt_tokens", "truncate_prompt_tokens", "truncation_side"}


def _check_ranges(changes: dict[str, Any], max_model_len: int | None) -> None:
    total = changes.get("max_total_tokens")
    if total is not None:
        if total < 1:
            raise FieldTypeError("tokenize_params", "max_total_tokens", REQUEST_FIELDS["max_total_tokens"], total)
        if max_model_len is not None and total > max_model_len:
            raise TotalTokensOverContextError(total, max_model_len)
    if changes.get("max_output_tokens", 0) < 0:
        raise FieldTypeError(
            "tokenize_params", "max_output_tokens", REQUEST_FIELDS["max_output_tokens"], changes["max_output_tokens"]
        )
    for name in ("pad_prompt_tokens", "truncate_prompt_tokens"):
        v = changes.get(name)
        if v is not None and v < -1:
            raise FieldTypeError("tokenize_params", name, REQUEST_FIELDS[name], v)


def request_tokenize_params(
    max_model_len: int, bag: Mapping[str, Any] | None, *, chat: bool = False, max_output_tokens: int | None = None
) -> TokenizeParams:
    """A request's ``tokenize_params`` over the defaults (vLLM's: chat adds no special tokens,
    since the template wrote them), with a generation request's ``max_tokens`` reserving room."""
    base = TokenizeParams(max_total_tokens=max_model_len, add_special_tokens=not chat)
    if (
        max_output_tokens is not None
        and (bag is None or isinstance(bag, Mapping))
        and "max_output_tokens" not in (bag or {})
    ):
        bag = {**(bag or {}), "max_output_tokens": max_output_tokens}
    return base.with_request(bag, max_model_len=max_model_len)
