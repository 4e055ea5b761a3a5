"""Small text helpers the parsers share."""

from __future__ import annotations

import json


def tag_prefix_at_end(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could begin ``tag`` (held back while streaming,
    as the tag may be arriving in pieces); 0 when none could."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


def is_json(text: str) -> bool:
    """Whether ``text`` is one complete JSON value."""
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def common_prefix(a: str, b: str) -> str:
    """The longest prefix ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return a[:n]


def dump_arguments(value: object) -> str:
    """Arguments as vLLM sends them: the JSON text of the parsed value, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False)
