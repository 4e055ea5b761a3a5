"""OpenAI and vLLM request bodies -> the ensembles' inputs.

The front renders nothing: a chat request becomes the ``chat`` ensemble's ``messages`` and
``chat_params``, a completion the ``completion`` ensemble's ``prompt`` (or ids, or embeddings),
and the sampling fields its ``sampling_params``, all under vLLM's field names. Defaults are
vLLM's: sampling fields the request leaves out come from the model's ``generation_config.json``
(temperature 1.0 otherwise), and a request without ``max_tokens`` may use the rest of the context.
Fields vLLM ignores are ignored here too; what this server cannot do is a 400 saying so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from renderer.errors import (
    BodyNotObjectError,
    FrontRequestError,
    RenderError,
    UnknownModelError,
    UnsupportedFieldError,
)
from renderer.sampling import SAMPLING_FIELDS


class FrontError(Exception):
    """An OpenAI-shaped error answer: its message, HTTP status and ``param``. The front's request
    rules raise ``renderer.errors`` types (``FrontRequestError`` and the stages' own); this is what
    any of them, or a failed call into Triton, is answered as."""

    def __init__(self, message: str, status: int = HTTPStatus.BAD_REQUEST, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = int(status)
        self.param = param

    @classmethod
    def of(cls, e: RenderError) -> "FrontError":
        """A refused request's answer: a 400 (or the front's own status) naming its parameter."""
        return cls(str(e), getattr(e, "status", HTTPStatus.BAD_REQUEST), e.parameter)


# chat_params fields (vLLM's request fields that shape the rendered chat).
CHAT_FIELDS = (
    "chat_template",
    "chat_template_kwargs",
    "add_generation_prompt",
    "continue_final_message",
    "tools",
    "tool_choice",
    "documents",
    "media_io_kwargs",
    "mm_processor_kwargs",
)
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
INT32_MAX = 2**31 - 1
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


def check_model(body: Mapping[str, Any], card: ModelCard) -> None:
    model = body.get("model")
    if model is not None and model != card.name:
        raise UnknownModelError(model)


def _common(body: Mapping[str, Any], card: ModelCard) -> None:
    if not isinstance(body, Mapping):
        raise BodyNotObjectError("The request body must be a JSON object.")
    check_model(body, card)
    n = body.get("n", 1)
    if n != 1:
        raise FrontRequestError(f"n must be 1: this server returns one choice per request, got {n!r}.", parameter="n")
    for name, why in UNSUPPORTED.items():
        v = body.get(name)
        if v not in (None, False, 0, {}, [], ""):
            raise UnsupportedFieldError(name, why)


def sampling_params(body: Mapping[str, Any], card: ModelCard) -> dict[str, Any]:
    """vLLM's sampling fields of the request, over the model's generation-config defaults."""
    out = {"temperature": 1.0, **card.sampling_defaults}
    out.update({k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None})
    return out


def _max_tokens(body: Mapping[str, Any], card: ModelCard) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    if value is None:
        return card.default_max_tokens
    if isinstance(value, bool) or not isinstance(value, int):
        raise FrontRequestError(f"max_tokens must be an integer, got {value!r}.", parameter="max_tokens")
    if value > INT32_MAX:  # the ensembles' max_tokens is INT32; past the context anyway
        raise FrontRequestError(f"max_tokens must be at most {INT32_MAX}, got {value}.", parameter="max_tokens")
    return value


def _stream_options(body: Mapping[str, Any]) -> tuple[bool, bool, bool]:
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options") or {}
    if not isinstance(opts, Mapping):
        raise FrontRequestError("stream_options must be an object.", parameter="stream_options")
    if opts and not stream:
        raise FrontRequestError("Stream options can only be defined when `stream=True`.", parameter="stream_options")
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
        raise FrontRequestError("messages must be a list of chat messages.", parameter="messages")
    t = {"messages": _json(messages)}
    chat = {k: body[k] for k in CHAT_FIELDS if body.get(k) is not None or (k in NULL_MEANS_SOMETHING and k in body)}
    if chat:
        t["chat_params"] = _json(chat)
    return _with_extras(t, body)


def completion_tensors(body: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The render inputs of a completion request (one prompt: text, ids, or embeddings)."""
    prompt, embeds = body.get("prompt"), body.get("prompt_embeds")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    t: dict[str, np.ndarray] = {}
    if embeds is not None:
        if prompt not in (None, "", []):
            raise FrontRequestError("Provide either prompt or prompt_embeds, not both.", parameter="prompt")
        if not isinstance(embeds, str):
            raise FrontRequestError(
                "prompt_embeds must be a base64 string of one serialized tensor.", parameter="prompt_embeds"
            )
        t["prompt_embeds"] = _bytes(embeds)
    elif isinstance(prompt, str):
        t["prompt"] = _bytes(prompt)
    elif isinstance(prompt, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
        t["prompt_token_ids"] = np.array([prompt], dtype=np.int32) if prompt else np.zeros((1, 0), np.int32)
    elif isinstance(prompt, list):
        raise FrontRequestError(
            "This server takes one prompt per request; send the prompts as separate requests.", parameter="prompt"
        )
    else:
        raise FrontRequestError(
            "prompt must be a string, a list of token ids, or a list holding one of them.", parameter="prompt"
        )
    return _with_extras(t, body)


def generation_plan(body: Mapping[str, Any], card: ModelCard, *, chat: bool) -> Plan:
    _common(body, card)
    stream, include_usage, continuous = _stream_options(body)
    tensors = chat_tensors(body) if chat else completion_tensors(body)
    tensors["sampling_params"] = _json(sampling_params(body, card))
    tensors["stream"] = np.array([[stream]], dtype=np.bool_)
    return Plan("chat" if chat else "completion", tensors, _max_tokens(body, card), stream, include_usage, continuous)


def render_plan(body: Mapping[str, Any], card: ModelCard, *, chat: bool) -> tuple[dict[str, np.ndarray], int | None]:
    """A render endpoint's request: the render ensemble's inputs, and ``max_tokens`` if given."""
    _common(body, card)
    max_tokens = _max_tokens(body, card)
    check_sampling_fields(body, max_tokens)
    return (chat_tensors(body) if chat else completion_tensors(body)), max_tokens


def check_sampling_fields(body: Mapping[str, Any], max_tokens: int | None) -> None:
    """The sampling fields of a render request, checked as a generation request's are (by
    ``generation_params``, in the ensemble): vLLM's render endpoints refuse what its generation
    would, and the render response echoes them as numbers."""
    from renderer.sampling import SamplingParams

    bag = {k: body[k] for k in SAMPLING_FIELDS if body.get(k) is not None}
    # Its errors name their parameter themselves; the router answers them as 400s with ``param``.
    SamplingParams.from_request(bag, max_tokens).verify(max_tokens)
    min_p = body.get("min_p")
    if min_p is not None and (isinstance(min_p, bool) or not isinstance(min_p, (int, float))):
        raise FrontRequestError(f"min_p must be a number, got {min_p!r}.", parameter="min_p")


def tokenize_plan(body: Mapping[str, Any], card: ModelCard) -> tuple[str, dict[str, np.ndarray]]:
    """vLLM's ``/tokenize``: a prompt (special tokens added by default) or messages (chat rendering,
    generation prompt added by default, no special tokens)."""
    check_model(body, card)
    if "messages" in body:
        b = dict(body)
        b.setdefault("add_generation_prompt", True)
        return "render_chat", chat_tensors(b)
    if not isinstance(body.get("prompt"), str):
        raise FrontRequestError("prompt must be a string, or send messages.", parameter="prompt")
    return "render_completion", completion_tensors(body)


def detokenize_tensors(body: Mapping[str, Any], card: ModelCard) -> dict[str, np.ndarray]:
    check_model(body, card)
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in tokens):
        raise FrontRequestError("tokens must be a list of token ids.", parameter="tokens")
    return {
        "prompt_token_ids": np.array([tokens], dtype=np.int32) if tokens else np.zeros((1, 0), np.int32),
        "tokenize_params": _json({"needs_detokenization": True, "add_special_tokens": False}),
    }
