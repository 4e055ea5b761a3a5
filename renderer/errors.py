"""Every way a request can be wrong, as a named error type with a precise message.

All derive from ``RenderError`` so an adapter maps exactly these to a client error (HTTP 400 /
gRPC INVALID_ARGUMENT) and anything else to an internal error. Messages follow vLLM's wording
where vLLM has one; tests match on them.
"""

from __future__ import annotations

import re
from typing import Any

# vLLM's validation errors print the parameter (and value) they are about after the message:
# ``<message> (parameter=max_tokens, value=0)``. That is the one form in which an error names its
# parameter here too, in the message itself, so it crosses Triton (which carries only a message and
# a code) and reaches a client as vLLM's would; ``parameter_of`` reads it back.
_PARAMETER = re.compile(r"\(parameter=([A-Za-z0-9_.\[\]-]+)(?:, value=.*)?\)\s*$", re.S)


def parameter_suffix(message: str, parameter: str | None = None, value: Any = None) -> str:
    """A message as vLLM's validation errors print: the parameter and value named after it."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


def parameter_of(message: str) -> str | None:
    """The parameter a message names in vLLM's form (``parameter_suffix``), or None."""
    found = _PARAMETER.search(message or "")
    return found.group(1) if found else None


class RenderError(ValueError):
    """A request the renderer refuses; the message says what was wrong.

    ``parameter`` (and ``value``, where it is safe to echo) name the request field it is about; the
    message then ends in vLLM's ``(parameter=..., value=...)``, which is how the parameter travels.
    A class whose vLLM counterpart prints no suffix sets ``prints_parameter = False``: the message
    stays vLLM's exact text and the parameter is kept beside it."""

    prints_parameter: bool = True

    def __init__(self, message: str = "", *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(parameter_suffix(message, parameter, value) if self.prints_parameter else message)
        self._parameter = parameter

    @property
    def parameter(self) -> str | None:
        """The request field this error is about, when it names one."""
        return parameter_of(str(self)) if self.prints_parameter else self._parameter


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
    """A tensor that must carry JSON (a parameter bag, the messages) does not parse."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what} is not valid JSON: {detail}")


class ParamsNestingError(InvalidParamsError):
    """A JSON parameter bag (``chat_params`` fields such as ``chat_template_kwargs``,
    ``tokenize_params``, ``sampling_params``) nests deeper than ``MAX_NESTING_DEPTH``."""


class TruncationSizeError(InvalidParamsError):
    """vLLM: truncate_prompt_tokens larger than max_total_tokens - max_output_tokens."""


class TruncationOverContextError(TruncationSizeError):
    """``truncate_prompt_tokens`` larger than the context: the front's check, in vLLM 0.32's words
    (its request's ``TokenizeParams``, which measures truncation against the whole context)."""

    def __init__(self, value: int, max_model_len: int) -> None:
        super().__init__(
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
    """max_output_tokens larger than max_total_tokens."""


class OutputOverContextError(OutputTokensError):
    """``max_tokens`` (or a chat's ``max_completion_tokens``, named as sent) larger than the
    context: the front's check, before any stage sees the number, in vLLM's words."""

    def __init__(self, parameter: str, value: int, max_model_len: int) -> None:
        super().__init__(
            f"{parameter}={value} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens.",
            parameter=parameter,
            value=value,
        )


class PromptError(RenderError):
    """The prompt itself is unusable."""


class NoPromptError(PromptError):
    """A completion request with no prompt in any form (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("You must pass at least one prompt")


class PromptFormError(PromptError):
    """Zero or several prompt forms (text, token ids, embeds) in one request."""


class PromptTypeError(PromptError):
    """A text prompt that is not a string (vLLM's words, pointing at ``prompt_token_ids``)."""

    def __init__(self) -> None:
        super().__init__(
            "Expected prompt['prompt'] to be a string before tokenization; use 'prompt_token_ids' for token ID inputs"
        )


class InvalidUTF8Error(PromptError):
    """A text tensor's bytes are not UTF-8."""

    def __init__(self, what: str, detail: str) -> None:
        super().__init__(f"{what} is not valid UTF-8: {detail}")


class EmptyPromptError(PromptError):
    """A prompt (or an encoder-decoder model's decoder prompt) with no text and no ids (vLLM's words)."""

    def __init__(self, prompt_type: str = "decoder") -> None:
        super().__init__(f"The {prompt_type} prompt cannot be empty")


class TokenIdError(PromptError):
    """Token ids out of the vocabulary or not integers."""


class PromptTooLongError(PromptError):
    """The prompt (plus requested output) does not fit the context length."""


class CacheSaltError(PromptError):
    """``cache_salt`` is empty or too long."""


class TensorError(RenderError):
    """An input tensor has the wrong dtype, shape or batch size."""


class MissingInputError(TensorError):
    """A required input tensor is absent."""

    def __init__(self, name: str, when: str = "") -> None:
        super().__init__(f"Input '{name}' is required{' ' + when if when else ''}.", parameter=name)


class TensorShapeError(TensorError):
    """An input tensor of the wrong size or shape: what it must hold and what it held."""

    def __init__(self, name: str, expected: str, got: object) -> None:
        super().__init__(f"Input '{name}' must {expected}, got {got}.", parameter=name)


# --- TensorRT-LLM's tensors (the ``ensemble`` front and the engines) ----------------------------


class UnsupportedInputError(InvalidParamsError):
    """A TensorRT-LLM input this server, or the engine behind it, does not serve."""

    def __init__(self, name: str, why: str, value: object = None) -> None:
        got = "" if value is None else f" (got {short(value)})"
        super().__init__(f"Input '{name}' is not supported by this server: {why}{got}.", parameter=name)


class EngineError(RenderError):
    """The engine refused the request: its own message, a client error."""


class StreamingNeedsDecoupledError(EngineError):
    """A streamed request to an engine deployed without decoupled mode: TensorRT-LLM's words."""

    prints_parameter = False

    def __init__(self) -> None:
        super().__init__(
            "Streaming is only supported if model is deployed using decoupled mode.", parameter="streaming"
        )


class BatchNeedsDecoupledEngineError(EngineError):
    """A request of several rows for an engine deployed without decoupled mode: TensorRT-LLM's
    words (its ``tensorrt_llm`` backend, ``createRequestsFromInputTensors`` in
    ``inflight_batcher_llm/src/utils.cc``), which it sends as an internal error; a refusal of what
    the client sent here, so a client error."""

    prints_parameter = False

    def __init__(self) -> None:
        super().__init__("Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy")


class BatchRowError(RenderError):
    """One row of a batched request refused (``renderer/batch_rows.py``): the request's error,
    naming the row as ``batch_index`` numbers it, then the row's own message (and its parameter)."""

    prints_parameter = False

    def __init__(self, row: int, rows: int, cause: RenderError) -> None:
        super().__init__(f"Row {row} of the batch of {rows} (batch_index {row}): {cause}", parameter=cause.parameter)
        self.row = row
        """The refused row, counted from 0."""
        self.cause = cause
        """The row's own error."""


class EngineFaultError(RuntimeError):
    """The engine failed the request: an internal error, not the client's."""


def short(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: safe to echo in a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- chat rendering (renderer/chat) -----------------------------------------------------------


class ChatError(RenderError):
    """A chat request (messages, chat params or chat template) the renderer refuses."""


class InvalidMessagesError(ChatError):
    """``messages`` is not a non-empty list of well-formed OpenAI chat messages."""


class ContentPartError(InvalidMessagesError):
    """A content part is missing its type, has an unsupported type or malformed fields."""


class ToolCallError(InvalidMessagesError):
    """An assistant message's ``tool_calls`` are malformed."""


class MultiModalPlaceholderError(InvalidMessagesError):
    """Text holds more media placeholders than the message has media items."""


class GenerationPromptConflictError(InvalidParamsError):
    """``continue_final_message`` and ``add_generation_prompt`` both True."""


class ChatTemplateError(ChatError):
    """The chat template cannot be found, compiled or rendered."""


class ChatTemplateResolutionError(ChatTemplateError):
    """Neither the request, the processor nor the tokenizer supplies a chat template."""


class ChatTemplateSyntaxError(ChatTemplateError):
    """The chat template is not valid Jinja."""


class ChatTemplateRenderError(ChatTemplateError):
    """Rendering failed: the template raised (``raise_exception``) or hit a runtime error."""


class ChatTemplateSecurityError(ChatTemplateRenderError):
    """The sandbox refused an operation (attribute walking to Python internals, unsafe calls)."""


class ChatTemplateLimitError(ChatTemplateError):
    """Rendering hit a sandbox bound: range size, loop iterations, output size, time or recursion."""


class ChatTemplateNestingError(ChatTemplateSyntaxError):
    """A chat template nests too deeply to parse or compile (Jinja's parser recursion, Python's
    limit of 20 statically nested blocks, its compiler's recursion) or is too large to compile."""


class ChatTemplateLiteralError(ChatTemplateSyntaxError):
    """A chat template holds an integer literal longer than Python converts (4300 digits)."""


# Request-supplied chat templates render in a separate process (renderer/chat/template_worker.py).


class ChatTemplateWorkerError(ChatTemplateLimitError):
    """A request's template failed in its render worker in a way the template's own errors do not
    name; the worker was replaced."""


class ChatTemplateSizeError(ChatTemplateLimitError):
    """A request's template is larger than ``REQUEST_TEMPLATE_MAX_BYTES`` (checked before parsing)."""


class ChatTemplateTimeoutError(ChatTemplateLimitError):
    """A request's template ran past its wall-clock deadline or CPU limit; the worker was killed."""


class ChatTemplateResourceError(ChatTemplateLimitError):
    """A template ran out of memory: for a request's template, its worker's address-space cap
    (``REQUEST_TEMPLATE_MEMORY_MB``)."""


class ChatTemplateWorkerCrashError(ChatTemplateWorkerError):
    """A request's template crashed its render worker (a signal such as SIGSEGV from a C-stack
    overflow, or an unexpected exit)."""


class ContinueFinalMessageError(ChatError):
    """``continue_final_message`` cannot continue the final message (transformers' checks)."""


class RequestNestingError(InvalidMessagesError):
    """``messages``, ``tools`` or ``documents`` nest deeper than Python's recursion allows."""


class ChatRequestValidationError(InvalidMessagesError):
    """The chat request fails vLLM's request models (messages, tool calls, content parts, tools,
    documents); the message is vLLM's, pydantic's errors included."""


class EmptyToolsError(InvalidParamsError):
    """``tools`` is an empty list (vLLM and OpenAI refuse it: omit the field instead)."""


class UntrustedChatTemplateError(ChatTemplateError):
    """A request supplied a chat template and the server does not trust request templates."""


class UntrustedMultiModalKwargsError(RenderError):
    """A request supplied ``mm_processor_kwargs`` or ``media_io_kwargs`` and the server does not
    trust them (vLLM's ``--trust-request-mm-kwargs``, off by default)."""


class EmbedsError(PromptError):
    """Prompt embeddings that cannot be used (vLLM's wording)."""


class EncoderDecoderError(PromptError):
    """An encoder-decoder prompt that cannot be used."""


class MultiModalLimitError(PromptError):
    """More items of one modality than ``LIMIT_MM_PER_PROMPT`` allows (vLLM's ``--limit-mm-per-prompt``)."""

    def __init__(self, limit: int, modality: str) -> None:
        super().__init__(f"At most {limit} {modality}(s) may be provided in one prompt.")


# --- multimodal processing (renderer/multimodal) ----------------------------------------------


class MultiModalError(RenderError):
    """A media item or multimodal parameter the multimodal stage refuses."""


class MediaLoadError(MultiModalError):
    """Media that cannot be loaded: bad data URL, bad base64, unreadable or refused source."""


class MediaURLError(MediaLoadError):
    """A media URL whose scheme, host or path is not allowed (no network, outside the media dir)."""


class MediaTooLargeError(MediaLoadError):
    """Encoded media larger than the configured byte limit."""


class ImageDecodeError(MediaLoadError):
    """Bytes that are not an image Pillow can decode, or a truncated image."""


class ImageFormatError(ImageDecodeError):
    """Image bytes in a format vLLM does not open (its allow-list of Pillow formats)."""


class ImageTooLargeError(MediaLoadError):
    """An image whose header declares more pixels than allowed (decompression-bomb guard)."""


class MultiModalUUIDError(MultiModalError):
    """``multi_modal_uuids`` inconsistent with ``multi_modal_data`` (vLLM's wording)."""


class MultiModalCacheMissError(MultiModalError):
    """An item given only by ``uuid`` that the processor cache does not hold."""


class MultiModalPlaceholderCountError(MultiModalError):
    """The prompt's placeholder tokens do not match the number of media items (vLLM's wording)."""


class MultiModalProcessorKwargsError(MultiModalError):
    """``mm_processor_kwargs`` / ``media_io_kwargs`` with unknown keys or bad values."""


class UnsupportedMultiModalError(MultiModalError):
    """A modality, input kind or model family the multimodal stage does not support."""


class UnsupportedImageProcessorError(UnsupportedMultiModalError):
    """An ``IMAGE_PROCESSOR`` setting that is not "fast" or "slow", or a model whose resampling
    filter the chosen processor cannot run (a deployment error, raised when the stage loads)."""


class ImageDeviceError(UnsupportedMultiModalError):
    """An ``IMAGE_DEVICE`` / ``IMAGE_DECODE_DEVICE`` setting that cannot run here (a deployment
    error, raised when the launcher renders the repository or the stage loads)."""

    def __init__(self, setting: str, value: object, why: str) -> None:
        super().__init__(f"{setting}={value} {why}")


class ImageDecoderUnavailableError(ImageDeviceError):
    """``IMAGE_DECODE_DEVICE=cuda`` where torchvision (its ``decode_jpeg``) cannot be imported."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "IMAGE_DECODE_DEVICE",
            "cuda",
            f"decodes JPEG images with torchvision.io.decode_jpeg, which cannot be imported here ({reason}); "
            "install torchvision beside torch, or set IMAGE_DECODE_DEVICE=cpu (Pillow, as vLLM decodes).",
        )


class ImageAspectRatioError(MultiModalError):
    """An image too elongated for the model's resize rule (Qwen2-VL's smart_resize refuses > 200)."""


# --- stage seams (what one Triton step hands the next) -----------------------------------------


class EmptyMessagesError(InvalidMessagesError):
    """``messages`` is absent or blank: there is no chat to render."""

    def __init__(self) -> None:
        super().__init__("messages is empty: send a JSON array of chat messages.")


class MaxTokensError(ValueRangeError):
    """``max_tokens`` below one (vLLM's wording)."""

    def __init__(self, value: object) -> None:
        super().__init__("max_tokens", "at least 1", value)


class MissingMaxTokensError(MissingInputError):
    """A generation request without ``max_tokens``."""

    def __init__(self) -> None:
        super().__init__("max_tokens", "for generation")


class LengthLimitError(TensorError):
    """The ``length_limit`` tensor ``tokenize`` hands on is not (max_total_tokens, max_output_tokens)."""


# --- tool choice (vLLM's request model and online renderer) -------------------------------------


class ToolChoiceError(ChatError):
    """``tool_choice`` is refused: by vLLM's request model (its message ends in
    ``(parameter=tool_choice...)``) or because the server parses no tool calls."""


class ToolChoiceWithoutToolsError(ToolChoiceError):
    """``tool_choice`` other than "none" or null was sent without ``tools``."""

    def __init__(self) -> None:
        super().__init__("When using `tool_choice`, `tools` must be set.", parameter="tool_choice")


class InvalidToolChoiceError(ToolChoiceError):
    """``tool_choice`` is neither "none", "auto", "required" nor a named function, or a named
    function's ``function`` / ``name`` is malformed; vLLM's messages and parameter names."""


class UnknownToolChoiceError(ToolChoiceError):
    """The function ``tool_choice`` names is not one of ``tools``."""

    def __init__(self) -> None:
        super().__init__(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            parameter="tool_choice",
        )


class ToolParsingUnavailableError(ToolChoiceError):
    """``tool_choice`` needs tool calls parsed from the output and the server parses none.

    vLLM's online renderer answers these with ``param`` null and no ``(parameter=...)`` suffix, so
    the message is left bare (its exact wording) and ``parameter`` is kept beside it."""

    prints_parameter = False

    def __init__(self, message: str) -> None:
        super().__init__(message, parameter="tool_choice")


class AutoToolChoiceDisabledError(ToolParsingUnavailableError):
    """``tool_choice`` "auto" (the default when tools are given) without ``ENABLE_AUTO_TOOL_CHOICE``
    and ``TOOL_CALL_PARSER``."""

    def __init__(self) -> None:
        super().__init__('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')


class ToolParserRequiredError(ToolParsingUnavailableError):
    """``tool_choice`` "required" or a named function without a tool-call parser in use."""

    def __init__(self, described: str) -> None:
        super().__init__(f"tool_choice={described} requires --tool-call-parser to be set")


class ForcedToolChoiceUnavailableError(ToolChoiceError):
    """``tool_choice`` "required" or a named function, with a tool-call parser in use, on a request
    that generates: vLLM forces the call with structured outputs (a grammar in its sampler), which
    no engine here takes (TensorRT-LLM's ``guided_decoding_*`` inputs are not served)."""

    def __init__(self, described: str) -> None:
        super().__init__(
            f"tool_choice={described} is not served: vLLM forces the call with structured outputs "
            'and this server\'s engines take no guided decoding; send tool_choice "auto"',
            parameter="tool_choice",
        )


# --- server settings refused at start-up (not a request's fault: never a 400) ------------------


class ParserSettingError(ValueError):
    """``TOOL_CALL_PARSER`` / ``REASONING_PARSER`` / ``ENABLE_AUTO_TOOL_CHOICE`` refused at load, in
    vLLM's words for the same arguments."""


class UnknownToolParserError(ParserSettingError):
    """A tool-call parser this server does not have."""

    def __init__(self, name: str, names: tuple[str, ...]) -> None:
        super().__init__(f"invalid tool call parser: {name} (chose from {{ {','.join(names)} }})")


class UnknownReasoningParserError(ParserSettingError):
    """A reasoning parser this server does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"reasoning_parser_name='{name}' has not been registered")


class AutoToolChoiceWithoutParserError(ParserSettingError):
    """Auto tool choice on without a tool-call parser to read the calls."""

    def __init__(self) -> None:
        super().__init__("Error: --enable-auto-tool-choice requires --tool-call-parser")


class ReasoningMarkersError(ParserSettingError):
    """A reasoning parser whose start and end markers are not tokens of the model."""

    def __init__(self, parser: str) -> None:
        super().__init__(f"{parser} reasoning parser could not locate think start/end tokens in the tokenizer!")


class OutputParsingError(TensorError):
    """The ``output_parsing`` tensor (``chat_render``'s instructions to ``detokenize``) is not one."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Input 'output_parsing' {detail}.", parameter="output_parsing")
