"""What makes a chat message plain, decided in one place for every lane that skips work on it.

A plain message is a ``dict`` holding exactly ``role`` and ``content`` (and maybe ``name``), each
exactly a ``str``: vLLM's validation hands it back unchanged but for key order, the "string"
content format's parse keeps it, and (valid UTF-8) minijinja receives it unchanged. Exact types
matter: pydantic turns a ``str`` subclass in ``content`` into a lazy iterator of parts. Each lane
adds only its own rule on top (which roles it takes, whether the text must be valid UTF-8):
``fast_request`` (validation), ``messages.plain_message`` (the parse), ``plain_lane`` (the whole
render) and ``compiled_template.is_plain`` (the minijinja template).
"""

from __future__ import annotations

from typing import Any

PLAIN_KEYS = frozenset({"role", "content", "name"})
"""The keys a plain message may hold (``role`` and ``content`` always)."""


def plain_fields(msg: Any) -> tuple[str, str, str | None] | None:
    """The ``role``, ``content`` and ``name`` (None when not sent) of a plain message; None for any
    other value: another type, another key, a value not exactly a ``str``."""
    if type(msg) is not dict:
        return None
    role, content = msg.get("role"), msg.get("content")
    if type(role) is not str or type(content) is not str:
        return None
    size = len(msg)
    if size == 2:
        return role, content, None
    name = msg.get("name")
    return (role, content, name) if size == 3 and type(name) is str else None


def valid_utf8(text: str) -> bool:
    """Whether ``text`` encodes as UTF-8 (no lone surrogate, which minijinja would turn into U+FFFD)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
