"""Tool lists already validated, kept by their exact serialisation.

A client that calls tools resends the same ``tools`` list on every turn of a conversation, and
vLLM's request validation of it (a copy, a depth walk, pydantic over each definition, its dump)
is about a third of a tool chat's validation on the benchmark's two small tools, more for real
ones with large parameter schemas. The validated list depends only on the list itself: no other
field of the request changes it. So ``request.py`` validates a list once, alone, and keeps the
dump here under the list's key; a later request with the same key gets a fresh copy of it, its
messages validated as usual.

The key is ``marshal``'s serialisation of the list: C speed, a small part of the validation it
saves, and exact: it writes each value's type (``1``, ``1.0`` and ``True`` differ, as do a list
and a tuple) and refuses subclasses and other mappings, which pydantic may keep as they are. So
two lists with the same key are the same input to pydantic, and a miss validates the list
rebuilt from its key. A list with no key (not a non-empty list, a subclass inside, longer than
``MAX_KEY_BYTES``, too deep to serialise), one the validation refuses, and one whose dump is not
exact JSON (a NaN, say) take the full path, which alone words refusals.
"""

from __future__ import annotations

import marshal
import math
from collections.abc import Callable
from functools import lru_cache
from typing import Any

MAX_KEY_BYTES = 32 * 1024
"""Largest serialised tools list kept (about 4 MiB of keys in a full cache)."""

CACHE_SIZE = 128
"""Distinct tool lists kept per process, least recently used dropped first."""

# Version 2: no back-references, so equal lists serialise alike however their objects are shared.
_MARSHAL_VERSION = 2
_NONE = type(None)


def tools_key(tools: Any) -> bytes | None:
    """``tools``' key; None when it is not a non-empty list, holds a value ``marshal`` refuses
    (a subclass, a mapping other than ``dict``, nesting past its limit) or is over ``MAX_KEY_BYTES``."""
    if type(tools) is not list or not tools:
        return None
    try:
        key = marshal.dumps(tools, _MARSHAL_VERSION)
    except ValueError:  # unmarshallable, or too deep: the full path decides
        return None
    return key if len(key) <= MAX_KEY_BYTES else None


def is_exact_json(value: Any) -> bool:
    """Whether ``value`` is made only of the types ``json.loads`` returns (``dict`` with ``str``
    keys, ``list``, ``str``, ``int``, ``bool``, ``None``, finite ``float``). Recursive: a caller
    catches ``RecursionError``."""
    t = type(value)
    if t is str or t is int or t is bool or t is _NONE:
        return True
    if t is float:
        return math.isfinite(value)
    if t is list:
        return all(map(is_exact_json, value))
    if t is dict:
        return all(type(k) is str and is_exact_json(v) for k, v in value.items())
    return False


class KnownTools:
    """Validated tool lists by key: ``validated(key)`` is a fresh copy of the list's validated
    dump, or None when the validation refused it or dumped something that is not exact JSON."""

    def __init__(self, validate: Callable[[list[Any]], list[dict[str, Any]]], size: int = CACHE_SIZE) -> None:
        """``validate`` takes a tools list and returns its validated dump, or raises."""
        self._validate = validate
        self._dumps = lru_cache(maxsize=size)(self._validated_dump)  # thread-safe, in C

    def validated(self, key: bytes) -> list[dict[str, Any]] | None:
        dump = self._dumps(key)
        return None if dump is None else marshal.loads(dump)

    def clear(self) -> None:
        self._dumps.cache_clear()

    def info(self) -> Any:
        """``functools.lru_cache``'s hits, misses and size."""
        return self._dumps.cache_info()

    def _validated_dump(self, key: bytes) -> bytes | None:
        try:
            dumped = self._validate(marshal.loads(key))
            if not is_exact_json(dumped):
                return None
            return marshal.dumps(dumped, _MARSHAL_VERSION)
        except Exception:  # noqa: BLE001 (refused, or anything else: the full path decides and words it)
            return None
