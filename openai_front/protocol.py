"""OpenAI and vLLM request bodies -> the ensembles' inputs.

The front renders nothing: a chat request becomes the ``chat`` ensemble's ``messages`` and
``chat_params``, a completion the ``completion`` ensemble's ``prompt`` (or ids, or embeddings),
and the sampling fields its ``sampling_params``, all under vLLM's field names. Defaults are
vLLM's: sampling fields the request leaves out come from the model's ``generation_config.json``
(temperature 1.0 otherwise), and a request without ``max_tokens`` may use the rest of the context.
Fields vLLM ignores are ignored here too; what this server cannot do is a 400 saying so.

A request is checked as vLLM 0.32 checks it, before any stage sees it (``checked_request``): its
request model's own checks, its fields' types (pydantic, in vLLM's words), the model, ``max_tokens``
against the context, the sampling values; each refusal is answered with vLLM's status, ``type``,
``param`` and message (``tests/unit/test_front_vllm_errors.py`` holds them to vLLM's recorded ones).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Annotated, Any, Mapping

import numpy as np
from pydantic import BaseModel, BeforeValidator, Field, ValidationError
from pydantic_core import InitErrorDetails

from renderer.chat.params import REQUEST_FIELDS as CHAT_REQUEST_FIELDS
from renderer.chat.validation_message import format_validation_error
from renderer.errors import (
    NoPromptError,
    OutputOverContextError,
    RenderError,
    SamplingRangeError,
    TruncationOverContextError,
)
from renderer.sampling import SAMPLING_FIELDS, SamplingParams

from .errors import (
    BodyNotObjectError,
    CacheSaltFieldError,
    CacheSaltFormError,
    GenerationPromptFlagsError,
    LogprobsLimitError,
    LogprobsRangeError,
    LogprobsTypeError,
    MessagesNotIterableError,
    MessagesNotListError,
    NoPromptGivenError,
    PromptAndEmbedsError,
    PromptBatchError,
    PromptEmbedsFieldError,
    PromptFieldError,
    PromptLogprobsStreamError,
    RequestModelError,
    SingleChoiceError,
    StreamOptionsError,
    TokensFieldError,
    TopLogprobsWithoutLogprobsError,
    UnknownModelError,
    UnsupportedFieldError,
)


class FrontError(Exception):
    """An OpenAI-shaped error answer: its message, HTTP status, ``param`` and ``type``. The front's
    request rules raise ``renderer.errors`` types (``FrontRequestError`` and the stages' own); this
    is what any of them, or a failed call into Triton, is answered as.

    ``error_type`` is the ``type`` vLLM 0.32 answers the same refusal with: its error class's name
    by the status (``vllm_error_type``: "BadRequestError" for a refused value, "NotFoundError" for
    an unknown model, ...), and "Bad Request" for a body that fails its request model (pydantic),
    which vLLM answers as FastAPI's request-validation error. A stage's message in that form (the
    chat stage validates messages with vLLM's own models) is recognised as one, and its ``param``
    is, as vLLM's, the location of its first error."""

    def __init__(
        self,
        message: str,
        status: int = HTTPStatus.BAD_REQUEST,
        param: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = int(status)
        location = validation_location(message) if self.status == HTTPStatus.BAD_REQUEST else None
        self.param = param if param is not None else location
        if error_type is None:
            error_type = HTTPStatus.BAD_REQUEST.phrase if location is not None else vllm_error_type(self.status)
        self.error_type = error_type

    @classmethod
    def of(cls, e: RenderError) -> "FrontError":
        """A refused request's answer: a 400 (or the front's own status) naming its parameter."""
        return cls(str(e), getattr(e, "status", HTTPStatus.BAD_REQUEST), e.parameter, getattr(e, "error_type", None))


# The ``type`` of vLLM's error answers by status (its ``create_error_response``: the error class's
# name); any other status is answered with its HTTP phrase, as vLLM answers FastAPI's own errors.
VLLM_ERROR_TYPES = {
    HTTPStatus.BAD_REQUEST: "BadRequestError",
    HTTPStatus.FORBIDDEN: "PermissionDeniedError",
    HTTPStatus.NOT_FOUND: "NotFoundError",
    HTTPStatus.UNPROCESSABLE_ENTITY: "UnprocessableEntityError",
    HTTPStatus.INTERNAL_SERVER_ERROR: "InternalServerError",
    HTTPStatus.NOT_IMPLEMENTED: "NotImplementedError",
    HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError",
}


def vllm_error_type(status: int) -> str:
    """vLLM's ``type`` for an error it raised itself with this status."""
    if status in VLLM_ERROR_TYPES:
        return VLLM_ERROR_TYPES[HTTPStatus(status)]
    return HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Client Closed Request"


# vLLM's answer to a body its request model refuses: "<n> validation error(s):", then each of
# pydantic's errors as a dict, the cleaned location second (``format_validation_error``).
_VALIDATION = re.compile(r"\A\d+ validation errors?:\n  \{'type': '[^']*', 'loc': '([^']*)'")


def validation_location(message: str) -> str | None:
    """The first error's location of a message in vLLM's request-validation form (vLLM's ``param``
    for it), or None for any other message."""
    found = _VALIDATION.match(message)
    return found.group(1) if found else None


# Fields forwarded even as an explicit null: vLLM tells ``tool_choice: null`` (accepted, no tool
# use) from an absent one (defaults to "auto" when tools are given).
NULL_MEANS_SOMETHING = frozenset({"tool_choice"})
# What vLLM takes and this server does not do: refused when set to anything but "off".
UNSUPPORTED = {
    "logprobs": "log probabilities are not returned by this server",
    "top_logprobs": "log probabilities are not returned by this server",
    "prompt_logprobs": "log probabilities are not returned by this server",
    "logit_bias": "logit_bias is not served",
    "response_format": "structured output (response_format) is not served",
    "structured_outputs": "structured output is not served",
    "guided_json": "guided decoding is not served",
    "guided_regex": "guided decoding is not served",
    "guided_choice": "guided decoding is not served",
    "best_of": "best_of is not served",
    "echo": "echo is not served",
    "suffix": "suffix is not served",
}
# Generation-config keys vLLM takes as default sampling values (vllm/config/model.py).
GENERATION_CONFIG_DEFAULTS = ("temperature", "top_p", "top_k", "repetition_penalty")


@dataclass(frozen=True)
class ModelCard:
    """What the front knows of the served model, read from its folder's JSON files (no weights)."""

    name: str
    """The model id clients send (``/v1/models``)."""

    max_model_len: int
    """Context length, for ``/tokenize`` and the default ``max_tokens``."""

    sampling_defaults: dict[str, Any] = field(default_factory=dict)
    """vLLM's defaults from ``generation_config.json``."""

    default_max_tokens: int | None = None
    """``max_new_tokens`` of ``generation_config.json``, when it sets one."""

    vocab_size: int = 0
    """The model config's vocabulary size (vLLM's bound on ``stop_token_ids`` and the count
    ``logprobs: -1`` stands for); 0: unknown, and those checks are left out."""

    @classmethod
    def from_model_dir(cls, model_dir: str, name: str = "", max_model_len: int = 0) -> "ModelCard":
        from renderer.model_info import ModelInfo

        info = ModelInfo.from_model_dir(model_dir, max_model_len)
        gen_path = Path(model_dir) / "generation_config.json"
        gen = json.loads(gen_path.read_text()) if gen_path.exists() else {}
        return cls(
            name=name or Path(model_dir).name,
            max_model_len=info.max_model_len,
            sampling_defaults={k: gen[k] for k in GENERATION_CONFIG_DEFAULTS if k in gen},
            default_max_tokens=gen.get("max_new_tokens"),
            vocab_size=info.vocab_size,
        )


@dataclass
class Plan:
    """One generation request, ready for an ensemble."""

    model: str
    """``chat`` or ``completion``."""

    tensors: dict[str, np.ndarray]
    """The ensemble's inputs (batch dimension included), ``max_tokens`` not yet."""

    max_tokens: int | None
    """What the request asked for; None: the rest of the context."""

    stream: bool
    """Server-sent events."""

    include_usage: bool
    """``stream_options.include_usage``: a last chunk with the token counts."""

    continuous_usage: bool = False
    """``stream_options.continuous_usage_stats``: usage on every chunk."""


def _bytes(value: str | bytes) -> np.ndarray:
    return np.array([[value.encode() if isinstance(value, str) else value]], dtype=np.object_)


def _json(value: Any) -> np.ndarray:
    return _bytes(json.dumps(value, ensure_ascii=False))


# --- vLLM's request models, for the fields this front reads -----------------------------------
#
# vLLM validates a body with pydantic before anything else, so a field of the wrong type is
# refused with pydantic's errors (``RequestModelError``). The models below give the fields the
# front reads the types the OpenAI API (and vLLM's request models) give them, in vLLM's field order
# (pydantic reports errors in it), so pydantic refuses what vLLM's refuses, in the same words, and
# takes what it takes (``"0.5"`` as a temperature, ``true`` as ``max_tokens`` 1). Fields the front
# does not read, and a chat's message items (the chat stage validates those with vLLM's own
# message types), are left to the stages.

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_STOP_STRINGS = 4
"""vLLM's ``VLLM_MAX_STOP_STRINGS`` default: a ``stop`` list holds at most this many strings."""
MAX_LOGPROBS = 20
"""vLLM's ``--max-logprobs`` default: log probabilities per token a request may ask for."""
MAX_CACHE_SALT_CHARS = 128
"""vLLM's bound on ``cache_salt``, checked before its field's own (1024)."""
CACHE_SALT_FORBIDDEN = frozenset("@/\\\x00")

TokenId = Annotated[int, Field(ge=0)]
Seed = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
Stop = str | Annotated[list[str], Field(max_length=MAX_STOP_STRINGS)] | None
TruncatePromptTokens = Annotated[int, Field(ge=-1, le=INT64_MAX)]
# ``top_logprobs`` is nullable in the OpenAI spec; null means 0.
TopLogprobs = Annotated[int, BeforeValidator(lambda v: 0 if v is None else v)]
CacheSalt = Annotated[str, Field(min_length=1, max_length=1024)]


class StreamOptions(BaseModel):
    """OpenAI's ``stream_options``."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class CompletionFields(BaseModel):
    """What the front reads of a completion (vLLM's ``CompletionRequest``)."""

    model: str | None = None
    prompt: list[TokenId] | list[list[TokenId]] | str | list[str] | None = None
    echo: bool | None = False
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = None
    n: int = 1
    presence_penalty: float | None = None
    seed: Seed | None = None
    stop: Stop = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    truncate_prompt_tokens: TruncatePromptTokens | None = None
    prompt_logprobs: int | None = None
    prompt_embeds: bytes | list[bytes] | None = None
    add_special_tokens: bool = True
    cache_salt: CacheSalt | None = None


class ChatFields(BaseModel):
    """What the front reads of a chat (vLLM's ``ChatCompletionRequest``)."""

    messages: list[Any]
    model: str | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = False
    top_logprobs: TopLogprobs = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = None
    seed: Seed | None = None
    stop: Stop = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    truncate_prompt_tokens: TruncatePromptTokens | None = None
    prompt_logprobs: int | None = None
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    cache_salt: CacheSalt | None = None


class TokenizePromptFields(BaseModel):
    """``/tokenize`` of a prompt (vLLM's ``TokenizeCompletionRequest``)."""

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatFields(BaseModel):
    """``/tokenize`` of messages (vLLM's ``TokenizeChatRequest``)."""

    model: str | None = None
    messages: list[Any]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False
    continue_final_message: bool = False
    add_special_tokens: bool = False


# Fields whose value goes on as the client sent it, not as pydantic read it: prompt embeddings stay
# the base64 text the stage decodes (pydantic reads them as bytes); messages are read as any list,
# so their items are the client's (not copied: a long chat is not walked again here).
AS_SENT = frozenset({"prompt_embeds", "messages"})


def _read(model: type[BaseModel], body: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with the fields ``model`` declares as pydantic read them; a ``RequestModelError``
    in vLLM's words when they fail."""
    try:
        fields = model.model_validate(dict(body))
    except ValidationError as e:
        raise request_model_error(e) from None
    return {**body, **fields.model_dump(exclude_unset=True, exclude=AS_SENT)}


def request_model_error(e: ValidationError) -> RequestModelError:
    """pydantic's refusal as vLLM answers it: its errors listed, ``param`` the first's location."""
    message = format_validation_error(e)
    return RequestModelError(message, parameter=validation_location(message))


# --- vLLM's checks, in its order -----------------------------------------------------------------


def _body_object(body: Any) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise BodyNotObjectError()
    return body


def _check_cache_salt(body: Mapping[str, Any]) -> None:
    salt = body.get("cache_salt")
    if salt is None:
        return
    if not isinstance(salt, str) or not salt:
        raise CacheSaltFieldError()
    if len(salt) > MAX_CACHE_SALT_CHARS or any(c in CACHE_SALT_FORBIDDEN for c in salt):
        raise CacheSaltFormError(MAX_CACHE_SALT_CHARS)


def _check_stream_options(body: Mapping[str, Any]) -> None:
    # On the raw values, as vLLM's check runs before the fields are read: any truthy value counts.
    if body.get("stream_options") and not body.get("stream"):
        raise StreamOptionsError()


def _check_logprobs(body: Mapping[str, Any], names: tuple[str, ...]) -> None:
    """vLLM's checks of the log-probability counts, before their fields are read (``names``: a
    completion's ``prompt_logprobs`` and ``logprobs``, a chat's ``prompt_logprobs`` and
    ``top_logprobs``). This server returns no log probabilities; a value vLLM takes is refused later
    (``UNSUPPORTED``), one it refuses is refused as vLLM refuses it."""
    for name in names:
        value = body.get(name)
        if value is not None and not isinstance(value, (int, float)):  # JSON's true and false pass, as in vLLM
            raise LogprobsTypeError(name, value)
    prompt_logprobs = body.get("prompt_logprobs")
    if prompt_logprobs is not None:
        if body.get("stream") and (prompt_logprobs > 0 or prompt_logprobs == -1):
            raise PromptLogprobsStreamError()
        if prompt_logprobs < 0 and prompt_logprobs != -1:
            raise LogprobsRangeError("prompt_logprobs", prompt_logprobs)
    other = names[1]
    value = body.get(other)
    if value is not None and value < 0 and value != -1:
        raise LogprobsRangeError(other, value)
    if other == "top_logprobs" and value is not None and (value == -1 or value > 0) and not body.get("logprobs"):
        raise TopLogprobsWithoutLogprobsError()


def _check_messages_iterable(body: Mapping[str, Any]) -> None:
    messages = body.get("messages", [])
    if not isinstance(messages, (list, dict, str)):
        raise MessagesNotIterableError(messages)


def _check_generation_prompt(body: Mapping[str, Any]) -> None:
    # The raw values' truth, as vLLM's check sees them before the fields are read.
    if body.get("continue_final_message") and body.get("add_generation_prompt"):
        raise GenerationPromptFlagsError()


def _before_model(body: Mapping[str, Any], *, chat: bool) -> None:
    """vLLM's request model's own checks, which run before its fields are read, in the order vLLM
    runs them (the last defined first)."""
    if chat:
        _check_messages_iterable(body)
        _check_generation_prompt(body)
        _check_logprobs(body, ("prompt_logprobs", "top_logprobs"))
        _check_stream_options(body)
    else:
        prompt, embeds = body.get("prompt"), body.get("prompt_embeds")
        if prompt in (None, "") and (embeds is None or embeds == []):
            raise NoPromptGivenError()
        _check_stream_options(body)
        _check_logprobs(body, ("prompt_logprobs", "logprobs"))
    _check_cache_salt(body)


def check_model(body: Mapping[str, Any], card: ModelCard, *, aliases: bool = True) -> None:
    """``model``, if given, must be the served model's name; vLLM's refusal of a request body lists
    the served name (``aliases``)."""
    model = body.get("model")
    if model is not None and model != card.name:
        raise UnknownModelError(model, card.name if aliases else None)


def _max_tokens(body: Mapping[str, Any], card: ModelCard, *, chat: bool) -> int | None:
    """The request's ``max_tokens`` (a chat's ``max_completion_tokens`` first), checked against the
    context in vLLM's words, under the name it was sent as; None: not given."""
    name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    value = body.get(name)
    if value is None:
        return card.default_max_tokens
    if value > card.max_model_len:
        raise OutputOverContextError(name, value, card.max_model_len)
    return value


def _check_truncation(body: Mapping[str, Any], card: ModelCard) -> None:
    truncate = body.get("truncate_prompt_tokens")
    if truncate is not None and truncate > card.max_model_len:
        raise TruncationOverContextError(truncate, card.max_model_len)


def check_sampling_fields(body: Mapping[str, Any], max_tokens: int | None, card: ModelCard, *, chat: bool) -> None:
    """vLLM's checks of the sampling values (its ``SamplingParams``): ``n``, then the rules the
    generation stage applies again (``renderer.sampling``), ``min_p`` in its place among them, then
    those that need the model: the log-probability counts against vLLM's default limit and the stop
    ids against the vocabulary. The front checks them all before any stage sees the request; the
    stage's own check is for its other clients."""
    n = body.get("n")
    if n is not None and n < 1:
        raise SamplingRangeError("n", "at least 1", n)
    bag = {k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None}
    # Its errors name their parameter themselves; the router answers them as 400s with ``param``.
    params = SamplingParams.from_request(bag, max_tokens, body.get("min_p"), card.vocab_size)
    # A chat's per-token count is ``top_logprobs`` (with ``logprobs: true``); a completion's ``logprobs``.
    sample = (body.get("top_logprobs") if body.get("logprobs") else None) if chat else body.get("logprobs")
    for kind, name, value in (
        ("sample", "logprobs", sample),
        ("prompt", "prompt_logprobs", body.get("prompt_logprobs")),
    ):
        if value == -1 and card.vocab_size:
            value = card.vocab_size  # -1: the whole vocabulary
        if value and value > MAX_LOGPROBS:
            raise LogprobsLimitError(kind, name, value, MAX_LOGPROBS)
    if card.vocab_size:
        params.check_vocab(card.vocab_size)


def _unsupported(body: Mapping[str, Any], *, render: bool) -> None:
    """What vLLM takes and this server does not do: refused once vLLM's own checks passed."""
    n = body.get("n", 1)
    if not render and n is not None and n > 1:  # a render only echoes ``n``
        raise SingleChoiceError(n)
    for name, why in UNSUPPORTED.items():
        v = body.get(name)
        if v not in (None, False, 0, {}, [], ""):
            raise UnsupportedFieldError(name, why)


@dataclass(frozen=True)
class CheckedRequest:
    """A chat or completion body that passed vLLM's checks."""

    body: dict[str, Any]
    """The body, its fields as vLLM reads them."""

    max_tokens: int | None
    """``max_tokens`` (or ``max_completion_tokens``) as given, or the model's default; None: none."""


def checked_request(body: Any, card: ModelCard, *, chat: bool, render: bool = False) -> CheckedRequest:
    """A chat or completion body through vLLM's checks, in vLLM's order: its request model's
    own checks, its fields' types, the model, ``max_tokens`` and ``truncate_prompt_tokens``
    against the context, the sampling values; then what this server refuses. Each refusal is a
    ``renderer.errors`` type, answered as vLLM answers the same request."""
    body = _body_object(body)
    _before_model(body, chat=chat)
    read = _read(ChatFields if chat else CompletionFields, body)
    check_model(read, card)
    max_tokens = _max_tokens(read, card, chat=chat)
    _check_truncation(read, card)
    check_sampling_fields(read, max_tokens, card, chat=chat)
    _unsupported(read, render=render)
    return CheckedRequest(read, max_tokens)


def sampling_params(body: Mapping[str, Any], card: ModelCard) -> dict[str, Any]:
    """vLLM's sampling fields of the request, over the model's generation-config defaults."""
    out = {"temperature": 1.0, **card.sampling_defaults}
    out.update({k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None})
    return out


def _stream_options(body: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options") or {}
    return stream, bool(opts.get("include_usage")), bool(opts.get("continuous_usage_stats"))


def tokenize_params(body: Mapping[str, Any]) -> dict[str, Any]:
    return {k: body[k] for k in ("truncate_prompt_tokens", "add_special_tokens") if body.get(k) is not None}


def _with_extras(t: dict[str, np.ndarray], body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The inputs every render takes beside its prompt: tokenize_params and cache_salt."""
    tp = tokenize_params(body)
    if tp:
        t["tokenize_params"] = _json(tp)
    if body.get("cache_salt") is not None:
        t["cache_salt"] = _bytes(str(body["cache_salt"]))
    return t


def chat_tensors(body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The render inputs of a chat request (``render_chat`` / ``chat``)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise MessagesNotListError()
    t = {"messages": _json(messages)}
    # chat_params: vLLM's request fields that shape the rendered chat, as the renderer reads them.
    chat = {
        k: body[k] for k in CHAT_REQUEST_FIELDS if body.get(k) is not None or (k in NULL_MEANS_SOMETHING and k in body)
    }
    if chat:
        t["chat_params"] = _json(chat)
    return _with_extras(t, body)


def completion_tensors(body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The render inputs of a completion request (one prompt: text, ids, or embeddings)."""
    prompt, embeds = body.get("prompt"), body.get("prompt_embeds")
    if prompt == [] and embeds is None:
        raise NoPromptError()  # a batch of no prompts (vLLM's wording); ``[[]]`` is one empty prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    t: dict[str, np.ndarray] = {}
    if embeds is not None:
        if prompt not in (None, "", []):
            raise PromptAndEmbedsError()
        if not isinstance(embeds, str):
            raise PromptEmbedsFieldError()
        t["prompt_embeds"] = _bytes(embeds)
    elif isinstance(prompt, str):
        t["prompt"] = _bytes(prompt)
    elif isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        t["prompt_token_ids"] = np.array([prompt], dtype=np.int32) if prompt else np.zeros((1, 0), np.int32)
    elif isinstance(prompt, list):
        raise PromptBatchError()
    else:
        raise PromptFieldError()
    return _with_extras(t, body)


def generation_plan(body: Mapping[str, Any], card: ModelCard, *, chat: bool) -> Plan:
    checked = checked_request(body, card, chat=chat)
    req = checked.body
    stream, include_usage, continuous = _stream_options(req)
    tensors = chat_tensors(req) if chat else completion_tensors(req)
    tensors["sampling_params"] = _json(sampling_params(req, card))
    tensors["stream"] = np.array([[stream]], dtype=np.bool_)
    return Plan("chat" if chat else "completion", tensors, checked.max_tokens, stream, include_usage, continuous)


def render_plan(
    body: Mapping[str, Any], card: ModelCard, *, chat: bool
) -> tuple[dict[str, np.ndarray], int | None, dict[str, Any]]:
    """A render endpoint's request: the render ensemble's inputs, ``max_tokens`` if given, and the
    body as vLLM read it (what the render response echoes). vLLM's render endpoints check what its
    generation would."""
    checked = checked_request(body, card, chat=chat, render=True)
    req = checked.body
    return (chat_tensors(req) if chat else completion_tensors(req)), checked.max_tokens, req


def _tokenize_request(body: Mapping[str, Any]) -> tuple[bool, dict[str, Any]]:
    """``/tokenize``'s body as vLLM reads it, and whether it is a chat: a prompt or messages (a
    union: a body that reads as neither is refused with both readings' errors, the prompt's first,
    each located in the body as vLLM's answer locates it)."""
    read: dict[bool, dict[str, Any]] = {}
    errors: list[InitErrorDetails] = []
    for chat, model in ((False, TokenizePromptFields), (True, TokenizeChatFields)):
        if chat and ("messages" in body or False not in read):
            _check_generation_prompt(body)  # the messages reading's own check, run before its fields
        try:
            read[chat] = {**body, **model.model_validate(dict(body)).model_dump(exclude_unset=True)}
        except ValidationError as e:
            errors += [_details(err) for err in e.errors(include_url=False)]
    if True in read and ("messages" in body or False not in read):
        return True, read[True]
    if False in read:
        return False, read[False]
    raise request_model_error(ValidationError.from_exception_data("TokenizeRequest", errors))


def _details(err: Mapping[str, Any]) -> InitErrorDetails:
    """One of pydantic's errors as the details that make it again (in another ``ValidationError``)."""
    details = InitErrorDetails(type=err["type"], loc=err["loc"], input=err["input"])
    if "ctx" in err:
        details["ctx"] = err["ctx"]
    return details


def tokenize_plan(body: Mapping[str, Any], card: ModelCard) -> tuple[str, dict[str, np.ndarray]]:
    """vLLM's ``/tokenize``: a prompt (special tokens added by default) or messages (chat rendering,
    generation prompt added by default, no special tokens)."""
    chat, req = _tokenize_request(_body_object(body))
    check_model(req, card)
    if chat:
        req.setdefault("add_generation_prompt", True)
        return "render_chat", chat_tensors(req)
    return "render_completion", completion_tensors(req)


def tokenize_chat_refusal(body: Mapping[str, Any], e: FrontError) -> FrontError:
    """The answer to a ``/tokenize`` of messages the chat stage refused as vLLM's request model
    does: vLLM reads the body as a prompt or messages, so its answer lists the prompt reading's
    errors first, then the messages'. The messages' are made again here, from the stage's own model
    (only on this refusal: a valid request is validated once, by the stage)."""
    if validation_location(e.message) is None:
        return e
    errors: list[InitErrorDetails] = []
    try:
        TokenizePromptFields.model_validate(dict(body))
    except ValidationError as prompt_error:
        errors += [_details(err) for err in prompt_error.errors(include_url=False)]
    # Imported here: the chat request model brings the ``openai`` package's types (about 40 MB
    # the front would otherwise hold from its start), and only this refusal needs it.
    from renderer.chat.request import ChatRequestModel

    try:
        ChatRequestModel.model_validate({"messages": body.get("messages")}, from_attributes=True)
    except ValidationError as chat_error:
        errors += [_details(err) for err in chat_error.errors(include_url=False)]
    else:
        return e  # not a refusal of the messages themselves
    return FrontError.of(request_model_error(ValidationError.from_exception_data("TokenizeRequest", errors)))


def detokenize_tensors(body: Mapping[str, Any], card: ModelCard) -> dict[str, np.ndarray]:
    check_model(body, card)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in tokens):
        raise TokensFieldError()
    return {
        "prompt_token_ids": np.array([tokens], dtype=np.int32) if tokens else np.zeros((1, 0), np.int32),
        "tokenize_params": _json({"needs_detokenization": True, "add_special_tokens": False}),
    }
