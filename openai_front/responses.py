"""What the ensembles returned -> OpenAI's and vLLM 0.32's response bodies."""

from __future__ import annotations

import secrets
import time
from http import HTTPStatus
from typing import Any, Mapping

from .protocol import ModelCard


def request_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(8)}"


def error_body(message: str, status: int, param: str | None = None, error_type: str | None = None) -> dict[str, Any]:
    """vLLM's ``ErrorResponse``: OpenAI's error object. ``error_type``: the ``type`` vLLM gives the
    same error (``FrontError.error_type``: "BadRequestError" for a refused value, ...); without one,
    the status phrase, vLLM's ``type`` for FastAPI's own errors (no such route, a wrong method)."""
    if error_type is None:
        known = status in HTTPStatus._value2member_map_
        error_type = HTTPStatus(status).phrase if known else "Client Closed Request"
    return {"error": {"message": message, "type": error_type, "param": param, "code": int(status)}}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def completion_body(
    kind: str,
    rid: str,
    model: str,
    text: str,
    finish: str,
    prompt_tokens: int,
    completion_tokens: int,
    message: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A whole answer: ``chat.completion`` or ``text_completion``; ``message``: the chat's answer
    as the server's parsers split it (content, reasoning, tool calls), else the text as content."""
    if kind == "chat":
        choice = {
            "index": 0,
            "message": message if message is not None else {"role": "assistant", "content": text},
            "logprobs": None,
            "finish_reason": finish,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(prompt_tokens, completion_tokens),
    }


def chunk_body(
    kind: str,
    rid: str,
    model: str,
    created: int,
    *,
    text: str | None = None,
    role: bool = False,
    finish: str | None = None,
    usage_: dict[str, int] | None = None,
    no_choices: bool = False,
    delta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One server-sent event of a streamed answer; ``delta``: a chat step as the server's parsers
    made it (vLLM's ``DeltaMessage``), in place of the text as content."""
    if no_choices:
        choices: list[dict[str, Any]] = []
    elif kind == "chat":
        if delta is None:
            delta = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
        choices = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    else:
        choices = [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}]
    body: dict[str, Any] = {
        "id": rid,
        "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
        "created": created,
        "model": model,
        "choices": choices,
    }
    if usage_ is not None:
        body["usage"] = usage_
    return body


def sampling_params_body(body: Mapping[str, Any], max_tokens: int | None) -> dict[str, Any]:
    """The ``sampling_params`` of vLLM's render response: what vLLM 0.32 serializes (its fields
    with their defaults, the request's values over them)."""
    sp: dict[str, Any] = {}
    if body.get("n", 1) != 1:
        sp["n"] = body["n"]
    sp.update(
        {
            "presence_penalty": float(body.get("presence_penalty") or 0.0),
            "frequency_penalty": float(body.get("frequency_penalty") or 0.0),
            "repetition_penalty": float(body.get("repetition_penalty") or 1.0),
            "temperature": float(body["temperature"]) if body.get("temperature") is not None else 1.0,
            "top_p": float(body["top_p"]) if body.get("top_p") is not None else 1.0,
        }
    )
    for k in ("top_k", "seed", "min_tokens"):
        if body.get(k):
            sp[k] = body[k]
    sp["min_p"] = float(body.get("min_p") or 0.0)
    stop = body.get("stop") or []
    sp["stop"] = [stop] if isinstance(stop, str) else list(stop)
    sp["stop_token_ids"] = list(body.get("stop_token_ids") or [])
    for k in ("ignore_eos", "include_stop_str_in_output"):
        if body.get(k):
            sp[k] = True
    if max_tokens is not None:
        sp["max_tokens"] = max_tokens
    if body.get("skip_special_tokens") is False:
        sp["skip_special_tokens"] = False
    sp.update({"output_kind": 2, "skip_clone": True, "bad_words": [], "skip_reading_prefix_cache": False})
    return sp


def render_body(
    prefix: str, out: Mapping[str, Any], body: Mapping[str, Any], card: ModelCard, max_tokens: int | None
) -> dict[str, Any]:
    """vLLM's ``GenerateRequest``, what its render endpoints return."""
    ids = [int(i) for i in out["input_ids"]]
    return {
        "request_id": request_id(prefix),
        "token_ids": ids,
        "token_offsets": None,
        "features": None,
        "content_parts": None,
        "sampling_params": sampling_params_body(body, max_tokens),
        "model": body.get("model") or card.name,
        "reasoning_ended": None,
        "reasoning_parser_kwargs": None,
        "return_token_ids": None,
        "output_mode": "tokens",
        "stream": False,
        "stream_options": None,
        "cache_salt": body.get("cache_salt"),
        "priority": 0,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
    }


def model_card_body(card: ModelCard, created: int) -> dict[str, Any]:
    """vLLM's ``ModelCard``: one entry of ``/v1/models``, and ``/v1/models/{id}``'s whole answer."""
    return {
        "id": card.name,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": card.name,
        "parent": None,
        "max_model_len": card.max_model_len,
        "permission": [
            {
                "id": request_id("modelperm"),
                "object": "model_permission",
                "created": created,
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": False,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ],
    }


def models_body(card: ModelCard, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model_card_body(card, created)]}
