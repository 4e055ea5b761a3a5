"""A fast path through vLLM's chat request validation for the plain chats it hands back unchanged.

Most chats are a list of ``{"role", "content"[, "name"]}`` objects with string values, no tools and
no documents. vLLM's request model (``request.py``) validates each such message against OpenAI's
message types and gives it back rebuilt: the same strings, its keys in the chosen type's declared
order (``content, role, name`` for system, user and developer messages; ``role, content, name``
for assistant ones), and ``tool_choice`` defaulted to "none". Nothing there can fail, so this
module builds that result directly, without the copy and pydantic (about a fifth of an in-process
chat render on short chats).

Tool chats' turns are taken too, in the shapes OpenAI's clients send: an assistant message with
``tool_calls`` (each exactly ``id``, ``type`` "function" and ``function`` of ``name`` and
``arguments`` strings; ``content`` a string, null or left out) comes back as ``role, content,
name, tool_calls`` with each call as ``id, function (arguments, name), type``; a tool result
(``role``, ``content``, ``tool_call_id``, all strings) as ``content, role, tool_call_id``, or with
a ``name`` as vLLM's catch-all type orders it, ``role, content, name, tool_call_id``. The tools
list itself is validated elsewhere (``known_tools.py``).

It recognises only what it can prove equal; anything else (another role or key, a value that is
not exactly a ``str``, a content list, tools, documents, a ``tool_choice`` other than "none" or
null) returns None and takes the full path, which alone words refusals. Exact types matter:
pydantic turns a ``str`` subclass in ``content`` into a lazy iterator of parts, for one.
``tests/unit/test_lane_equivalence.py`` holds it equal to the full path on every committed chat and
by a property test near the boundary.
"""

from __future__ import annotations

from typing import Any

from ..json_fields import MAX_NESTING_DEPTH, json_text_depth
from .shape import plain_fields
from .tool_choice import UNSET

# The role values whose message pydantic validates as OpenAI's system, user or developer type
# (declared order: content, role, name).
_CONTENT_FIRST = frozenset({"system", "user", "developer"})
_ASSISTANT_KEYS = frozenset({"role", "content", "name", "tool_calls"})

ARGUMENTS_LEVEL = 5
"""Levels above a tool call's ``arguments``: messages, message, tool_calls, call, function (the
request's nesting limit counts the JSON text's own brackets below them)."""


def fast_validate(
    messages: Any, tools: Any, documents: Any, tool_choice: Any
) -> tuple[list[dict[str, Any]], Any] | None:
    """The validated messages and ``tool_choice`` of a plain chat, exactly as the full validation
    returns them; None when the request is not one this path can prove equal."""
    if tools is not None or documents is not None:
        return None
    if tool_choice is UNSET or (type(tool_choice) is str and tool_choice == "none"):
        choice: Any = "none"
    elif tool_choice is None:
        choice = None
    else:  # "auto", "required", a named function, anything else: checked (and refused) there
        return None
    if type(messages) is not list:
        return None
    out: list[dict[str, Any]] = []
    for msg in messages:
        if type(msg) is not dict:
            return None
        role = msg.get("role")
        if type(role) is not str:
            return None
        if role in _CONTENT_FIRST:
            rebuilt = _plain(msg, role)
        elif role == "assistant":
            rebuilt = _assistant(msg)
        elif role == "tool":
            rebuilt = _tool_result(msg)
        else:  # function or vLLM's catch-all roles: other types, other orders
            return None
        if rebuilt is None:
            return None
        out.append(rebuilt)
    return out, choice


def _plain(msg: dict[str, Any], role: str) -> dict[str, Any] | None:
    fields = plain_fields(msg)
    if fields is None:
        return None
    _, content, name = fields
    rebuilt = {"content": content, "role": role}
    if name is not None:
        rebuilt["name"] = name
    return rebuilt


def _assistant(msg: dict[str, Any]) -> dict[str, Any] | None:
    # OpenAI's assistant type: content a string or null (or left out), tool calls in its order.
    if not _ASSISTANT_KEYS.issuperset(msg):
        return None
    rebuilt: dict[str, Any] = {"role": "assistant"}
    if "content" in msg:
        content = msg["content"]
        if content is not None and type(content) is not str:
            return None
        rebuilt["content"] = content
    if "name" in msg:
        name = msg["name"]
        if type(name) is not str:
            return None
        rebuilt["name"] = name
    if "tool_calls" in msg:
        calls = msg["tool_calls"]
        if type(calls) is not list:
            return None
        out = []
        for call in calls:
            validated = _tool_call(call)
            if validated is None:
                return None
            out.append(validated)
        rebuilt["tool_calls"] = out
    elif "content" not in msg:
        return None  # neither: left to the full path
    return rebuilt


def _tool_call(call: Any) -> dict[str, Any] | None:
    if type(call) is not dict or len(call) != 3:
        return None
    call_id, kind, function = call.get("id"), call.get("type"), call.get("function")
    if type(call_id) is not str or type(kind) is not str or kind != "function":
        return None
    if type(function) is not dict or len(function) != 2:
        return None
    name, arguments = function.get("name"), function.get("arguments")
    if type(name) is not str or type(arguments) is not str:
        return None
    if json_text_depth(arguments, MAX_NESTING_DEPTH - ARGUMENTS_LEVEL) is not None:
        return None  # refused for its nesting: the full path words it
    return {"id": call_id, "function": {"arguments": arguments, "name": name}, "type": kind}


def _tool_result(msg: dict[str, Any]) -> dict[str, Any] | None:
    content, call_id = msg.get("content"), msg.get("tool_call_id")
    if type(content) is not str or type(call_id) is not str:
        return None
    size = len(msg)
    if size == 3:  # OpenAI's tool message type
        return {"content": content, "role": "tool", "tool_call_id": call_id}
    name = msg.get("name")
    if size != 4 or type(name) is not str:
        return None
    return {"role": "tool", "content": content, "name": name, "tool_call_id": call_id}  # vLLM's catch-all
