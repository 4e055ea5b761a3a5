"""The oracle the chat validation's shortcuts are held to: the full, vLLM-shaped validation
(``_validate_full``) on every chat the project has recorded or written, compared exactly."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from chat_cases import CASES, TEMPLATE_ERROR_CASES
from chat_rules import BAD_MESSAGES, tools_rendered
from pydantic_core import ValidationError

from benchmarks.chat_validation import short_chats
from benchmarks.make_inputs import load
from renderer.chat.request import ValidatedChatRequest
from renderer.chat.tool_choice import UNSET

ROOT = Path(__file__).resolve().parents[2]
VLLM_CHAT = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())["cases"]


def validation_args(messages: Any, params: dict[str, Any] | None) -> tuple[Any, Any, Any, Any]:
    """validate_chat_request's arguments for a request's messages and chat_params, as sent."""
    p = params if isinstance(params, dict) else {}
    return messages, p.get("tools"), p.get("documents"), p.get("tool_choice", UNSET)


def chat_corpus() -> list[tuple[str, tuple[Any, Any, Any, Any]]]:
    """Every chat the project has recorded (vLLM fixtures, benchmark inputs) or written (test cases)."""
    out = []
    for c in VLLM_CHAT:
        out.append((f"vllm:{c['id']}", validation_args(c["messages"], c["chat_params"])))
        out.append((f"vllm-rendered:{c['id']}", validation_args(c["messages"], tools_rendered(c["chat_params"]))))
    for c in CASES + TEMPLATE_ERROR_CASES:
        out.append((f"cases:{c['id']}", validation_args(c["messages"], c.get("chat_params"))))
    for i, (messages, _, _) in enumerate(BAD_MESSAGES):
        out.append((f"bad:{i}", validation_args(messages, None)))
    for name in ("chat_multiturn", "chat_tools", "chat_mix"):
        for i, r in enumerate(load(name)):
            out.append((f"{name}:{i}", validation_args(r["messages"], r.get("chat_params"))))
    for i, r in enumerate(short_chats()):
        out.append((f"short:{i}", validation_args(r["messages"], None)))
    return out


CORPUS = chat_corpus()
"""(name, validate_chat_request's arguments) for every recorded or written chat."""


def same(a: Any, b: Any) -> bool:
    """Equal with the same types all the way down and dict keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        keys_a, keys_b = list(a), list(b)
        return (
            keys_a == keys_b
            and [type(k) for k in keys_a] == [type(k) for k in keys_b]
            and all(same(a[k], b[k]) for k in keys_a)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a).__name__ == "ValidatorIterator":  # lazy content parts (full path only): what they read
        return same(read_lazy(a), read_lazy(b))
    if isinstance(a, float) and math.isnan(a):  # NaN is never == itself; both NaN is the same value
        return math.isnan(b)
    return bool(a == b)


def read_lazy(lazy: Any) -> Any:
    """What lazily validated content parts give when read: their parts, or the error."""
    try:
        return ("parts", list(lazy))
    except ValidationError as e:
        return ("error", str(e))


def outcome(fn: Any, args: tuple[Any, Any, Any, Any]) -> Any:
    """What a validation function gives for ``args``: its result's fields, or the error raised."""
    try:
        r = fn(*args)
    except Exception as e:  # noqa: BLE001 (the error is the outcome compared)
        return ("raised", type(e), str(e))
    assert type(r) is ValidatedChatRequest
    return ("ok", r.messages, r.tools, r.documents, r.tool_choice)
