"""The OpenAI front's own refusals: a request body or field refused before any stage sees it,
each a named type that owns its message and its HTTP status. They never cross Triton (unlike the
renderer's ``RenderError``s, which the stages raise), so they live with the front."""

from __future__ import annotations

from http import HTTPStatus

from renderer.errors import RenderError


class FrontRequestError(RenderError):
    """A request the HTTP front refuses before any stage sees it, answered with ``status``.

    It never crosses Triton, so its parameter stays beside the message, as vLLM's front passes
    ``param``, rather than printed in it (a subclass whose vLLM counterpart prints the suffix sets
    ``prints_parameter``). ``error_type`` is the ``type`` of vLLM's answer to the same refusal;
    None: the one its status implies (``openai_front.protocol.vllm_error_type``)."""

    status: int = HTTPStatus.BAD_REQUEST
    prints_parameter = False
    error_type: str | None = None

    @property
    def message(self) -> str:
        return str(self)


class RequestModelError(FrontRequestError):
    """The body fails vLLM's request model (pydantic's field types and bounds). vLLM answers it as
    FastAPI's request-validation error: pydantic's errors listed in the message, ``type`` the status
    phrase, ``param`` the first error's location (``body.max_tokens``)."""

    error_type = HTTPStatus.BAD_REQUEST.phrase


class FrontValidationError(FrontRequestError):
    """A refusal vLLM raises as a ``VLLMValidationError`` from its request model's own checks,
    before rendering: its message ends in the ``(parameter=...)`` suffix, as vLLM's does."""

    prints_parameter = True


class StreamOptionsError(FrontValidationError):
    """``stream_options`` set on a request that does not stream."""

    def __init__(self) -> None:
        super().__init__("Stream options can only be defined when `stream=True`.", parameter="stream_options")


class CacheSaltFieldError(FrontValidationError):
    """``cache_salt`` that is not a non-empty string."""

    def __init__(self) -> None:
        super().__init__("Parameter 'cache_salt' must be a non-empty string if provided.", parameter="cache_salt")


class CacheSaltFormError(FrontValidationError):
    """``cache_salt`` longer than vLLM takes, or holding a character it forbids."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"Parameter 'cache_salt' must be at most {limit} characters and must not contain '@', '/', '\\\\', or NUL.",
            parameter="cache_salt",
        )


class NoPromptGivenError(FrontValidationError):
    """A completion without a prompt (absent, null or "") and without ``prompt_embeds``."""

    def __init__(self) -> None:
        super().__init__("Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt")


class LogprobsTypeError(FrontValidationError):
    """``logprobs`` (of a completion), ``top_logprobs`` or ``prompt_logprobs`` that is not a number."""

    def __init__(self, name: str, value: object) -> None:
        super().__init__(f"`{name}` must be an integer.", parameter=name, value=value)


class LogprobsRangeError(FrontValidationError):
    """A log-probability count below -1."""

    def __init__(self, name: str, value: object) -> None:
        super().__init__(f"`{name}` must be a positive value or -1.", parameter=name, value=value)


class PromptLogprobsStreamError(FrontValidationError):
    """``prompt_logprobs`` asked for on a streamed request."""

    def __init__(self) -> None:
        super().__init__("`prompt_logprobs` are not available when `stream=True`.", parameter="prompt_logprobs")


class TopLogprobsWithoutLogprobsError(FrontValidationError):
    """A chat's ``top_logprobs`` without ``logprobs: true``."""

    def __init__(self) -> None:
        super().__init__("when using `top_logprobs`, `logprobs` must be set to true.", parameter="top_logprobs")


class LogprobsLimitError(FrontValidationError):
    """More log probabilities per token than vLLM's default ``--max-logprobs`` allows."""

    def __init__(self, kind: str, parameter: str, value: int, limit: int) -> None:
        super().__init__(
            f"Requested {kind} logprobs of {value}, which is greater than max allowed: {limit}",
            parameter=parameter,
            value=value,
        )


class GenerationPromptFlagsError(FrontRequestError):
    """``continue_final_message`` and ``add_generation_prompt`` both true: vLLM's request model
    refuses it before rendering, in these words and naming no parameter."""

    def __init__(self) -> None:
        super().__init__("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")


class MessagesNotIterableError(FrontRequestError):
    """``messages`` that is no JSON array, object or string (null, a number, a boolean): vLLM's
    request model iterates it before validating it and fails with Python's own words (a
    ``TypeError``, answered as a 400 naming no parameter); the same words here."""

    def __init__(self, value: object) -> None:
        super().__init__(f"'{type(value).__name__}' object is not iterable")


class UnknownModelError(FrontRequestError):
    """``model`` names a model this server does not serve (vLLM's wording, a 404); ``served``: the
    served name, which vLLM's answer to a request body lists."""

    status = HTTPStatus.NOT_FOUND

    def __init__(self, model: object, served: str | None = None) -> None:
        aliases = f" Valid aliases: {served}." if served is not None else ""
        super().__init__(f"The model `{model}` does not exist.{aliases}", parameter="model")


class SingleChoiceError(FrontRequestError):
    """``n`` above 1: this server returns one choice per request (vLLM returns ``n``)."""

    def __init__(self, n: object) -> None:
        super().__init__(f"n must be 1: this server returns one choice per request, got {n!r}.", parameter="n")


class UnsupportedFieldError(FrontRequestError):
    """A field vLLM takes and this server does not serve, set to something but its default."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"{name} is not supported: {why}.", parameter=name)


class RequestBodyError(FrontRequestError):
    """The request body itself, before any field is read."""


class BodyTooLargeError(RequestBodyError):
    """The body is larger than the front takes (a 413, before the rest is read)."""

    status = HTTPStatus.REQUEST_ENTITY_TOO_LARGE

    def __init__(self, size: int, limit: int, declared: bool) -> None:
        said = "declares" if declared else "has at least"
        super().__init__(f"The request body {said} {size} bytes, more than the limit of {limit} bytes.")


class BodyNotJSONError(RequestBodyError):
    """The body is not strict JSON (or not UTF-8, or holds text no Unicode string can). The group:
    each way is a subclass that words its own message."""


class BodyEncodingError(BodyNotJSONError):
    """The body's bytes are not UTF-8; ``reason`` is the decoder's message."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"The request body is not valid UTF-8: {reason}.")


class BodyJSONSyntaxError(BodyNotJSONError):
    """The body is not JSON; ``reason`` is the parser's message (what, and where)."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"The request body is not valid JSON: {reason}")


class BodyJSONConstantError(BodyNotJSONError):
    """The body holds one of JSON's non-standard constants (``NaN``, ``Infinity``, ``-Infinity``)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"The request body is not valid JSON: {name} is not a JSON value.")


class BodySurrogateError(BodyNotJSONError):
    """The body holds a lone UTF-16 surrogate escape: valid JSON, but no Unicode text, so no tensor
    can carry it; ``escape`` is the surrogate, escaped."""

    def __init__(self, escape: str) -> None:
        super().__init__(f"The request body holds a lone UTF-16 surrogate ({escape}), which is no Unicode character.")


class BodyNestingError(RequestBodyError):
    """The body nests arrays and objects deeper than it can be parsed."""

    def __init__(self) -> None:
        super().__init__("The request body nests arrays and objects too deeply to be parsed.")


class BodyNotObjectError(RequestBodyError):
    """The body is JSON, but not an object; ``kind`` names what it is, where the message says."""

    def __init__(self, kind: str | None = None) -> None:
        got = "" if kind is None else f", got {kind}"
        super().__init__(f"The request body must be a JSON object{got}.")


class MessagesNotListError(FrontRequestError):
    """A chat request whose ``messages`` is not a list."""

    def __init__(self) -> None:
        super().__init__("messages must be a list of chat messages.", parameter="messages")


class PromptAndEmbedsError(FrontRequestError):
    """A completion request with both a prompt and ``prompt_embeds``."""

    def __init__(self) -> None:
        super().__init__("Provide either prompt or prompt_embeds, not both.", parameter="prompt")


class PromptEmbedsFieldError(FrontRequestError):
    """``prompt_embeds`` that is not a base64 string."""

    def __init__(self) -> None:
        super().__init__("prompt_embeds must be a base64 string of one serialized tensor.", parameter="prompt_embeds")


class PromptBatchError(FrontRequestError):
    """A completion request with several prompts: this server takes one per request."""

    def __init__(self) -> None:
        super().__init__(
            "This server takes one prompt per request; send the prompts as separate requests.", parameter="prompt"
        )


class PromptFieldError(FrontRequestError):
    """A ``prompt`` that is neither a string, a list of token ids, nor a list holding one of them."""

    def __init__(self) -> None:
        super().__init__(
            "prompt must be a string, a list of token ids, or a list holding one of them.", parameter="prompt"
        )


class TokensFieldError(FrontRequestError):
    """A detokenize request whose ``tokens`` is not a list of token ids."""

    def __init__(self) -> None:
        super().__init__("tokens must be a list of token ids.", parameter="tokens")
