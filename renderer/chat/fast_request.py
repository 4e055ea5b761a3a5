"""A fast path through vLLM's chat request validation for the plain chats it hands back unchanged.

Most chats are a list of ``{"role", "content"[, "name"]}`` objects with string values, no tools and
no documents. vLLM's request model (``request.py``) validates each such message against OpenAI's
message types and gives it back rebuilt: the same strings, its keys in the chosen type's declared
order (``content, role, name`` for system, user and developer messages; ``role, content, name``
for assistant ones), and ``tool_choice`` defaulted to "none". Nothing there can fail, so this
module builds that result directly, without the copy and pydantic (about a fifth of an in-process
chat render on short chats).

It recognises only what it can prove equal; anything else (another role or key, a value that is
not exactly a ``str``, a content list, tools, documents, a ``tool_choice`` other than "none" or
null) returns None and takes the full path, which alone words refusals. Exact types matter:
pydantic turns a ``str`` subclass in ``content`` into a lazy iterator of parts, for one.
``tests/unit/test_chat_fast_path.py`` holds it equal to the full path on every committed chat and
by a property test near the boundary.
"""

from __future__ import annotations

from typing import Any

from .tool_choice import UNSET

# The role values whose message pydantic validates as OpenAI's system, user or developer type
# (declared order: content, role, name) or its assistant type (role, content, name).
_CONTENT_FIRST = frozenset({"system", "user", "developer"})
_ROLE_FIRST = frozenset({"assistant"})


def fast_validate(
    messages: Any, tools: Any, documents: Any, tool_choice: Any
) -> tuple[list[dict[str, str]], Any] | None:
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
    out: list[dict[str, str]] = []
    for msg in messages:
        if type(msg) is not dict:
            return None
        role = msg.get("role")
        content = msg.get("content")
        if type(role) is not str or type(content) is not str:
            return None
        size = len(msg)
        if size == 3:  # role, content and one more key, which must be name
            name = msg.get("name")
            if type(name) is not str:
                return None
        elif size != 2:  # only role and content (both found above)
            return None
        if role in _CONTENT_FIRST:
            rebuilt = {"content": content, "role": role}
        elif role in _ROLE_FIRST:
            rebuilt = {"role": role, "content": content}
        else:  # tool, function or vLLM's catch-all roles: other types, other orders
            return None
        if size == 3:
            rebuilt["name"] = name
        out.append(rebuilt)
    return out, choice
