"""JSON text of a request field (a ``*_params`` bag, ``messages``) parsed with a named error, and
the nesting-depth limit every request field is held to.

Depth is checked with iterative walks, before any recursive step (pydantic's validation, a deep
copy, ``json.dumps``) sees the value: those raise ``RecursionError`` somewhere near Python's limit
of 1000 frames, which would otherwise surface as a 500.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, Iterable, Mapping

from .errors import InvalidJSONError, ParamsNestingError, RequestNestingError

MAX_NESTING_DEPTH = 1000
"""Deepest nesting of lists and objects a JSON input may have (the outermost container is level
1). vLLM 0.32 itself has no limit of its own: its request models (pydantic) accept any depth, and
its HTTP body parse (stdlib ``json.loads`` under Python's recursion limit) accepts a body nested
963 deep and answers 400 "There was an error parsing the body" above that (measured with vLLM's
render app). This limit is above that figure, so whatever vLLM accepts is accepted here; the
renderer's own walks and copies are iterative, and ``RECURSION_LIMIT`` gives the recursive steps
that remain (``json.loads`` / ``json.dumps``, pydantic, a template's ``tojson``) room for this
depth on top of the stub's own stack."""

RECURSION_LIMIT = 4 * MAX_NESTING_DEPTH
"""Python's recursion limit in the processes that render requests (raised on import, never
lowered): Python's default of 1000 frames would refuse a value nested 963 deep that vLLM accepts
as soon as the stack below it is 40 frames deep. C-level recursion per level is a few hundred
bytes of stack, far inside the 8 MiB the stubs' threads have at this depth."""

if sys.getrecursionlimit() < RECURSION_LIMIT:
    sys.setrecursionlimit(RECURSION_LIMIT)

# Fields whose over-deep values are an invalid chat request rather than an invalid parameter.
_REQUEST_FIELDS = ("messages", "tools", "documents")
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def parse_json(text: str, name: str) -> Any:
    """``text`` as JSON, exactly ``json.loads``'s value; ``InvalidJSONError`` naming the field
    ``name`` and where it broke, a nesting error when it nests deeper than ``MAX_NESTING_DEPTH``."""
    value = _compiled_parse(text)
    if value is _REFUSED:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise InvalidJSONError(name, e.msg, e.lineno, e.colno) from None
        except RecursionError:
            raise nesting_error(name) from None
        # Deeper than the limit takes more than twice as many characters (a bracket to open and
        # one to close each level). Past that, walk the value: its cost follows the containers,
        # which a megabyte data URL does not add to, where counting the text's brackets cost
        # 1.6 ms per image.
        if len(text) > 2 * MAX_NESTING_DEPTH:
            check_depth(value, name)
    return value


_REFUSED = object()
"""``_compiled_parse``: this text is ``json``'s to parse (or to refuse, in its own words)."""


class _FloatLeafError(Exception):
    """A float in orjson's value: it may have been an integer past 64 bits in the text."""


def _compiled_parse(text: str) -> Any:
    """orjson's value of ``text`` where it is provably ``json.loads``'s, else ``_REFUSED``.

    orjson (compiled, about twice as fast on a chat's messages) accepts no text that ``json``
    refuses, and gives the same value for every text both accept, with one exception: an integer
    past 64 bits comes back as a float. It refuses what ``json`` takes (NaN and Infinity, a number
    past a double's range, a lone surrogate, nesting past 1,024 levels): those go to ``json``. So a
    value holding any float is parsed again by ``json``, which costs one walk over the containers
    (made once anyway, for the depth limit). ``tests/unit/test_json_fields.py`` holds the two equal.
    """
    try:
        # Imported here: the llm stub in vLLM's own environment, which has no orjson, imports this
        # module (through triton_io) and never parses a request field.
        import orjson

        value = orjson.loads(text)
    except ValueError:  # orjson.JSONDecodeError
        return _REFUSED
    kind = type(value)
    if kind is float:
        return _REFUSED
    if kind is dict or kind is list:
        try:
            if _depth_no_float(value, 1, MAX_NESTING_DEPTH) is not None:
                return _REFUSED  # json words (or, past the stack, refuses) the over-deep value
        except _FloatLeafError:
            return _REFUSED
    return value


def _depth_no_float(value: Any, depth: int, limit: int) -> int | None:
    """``_depth_recursive`` over orjson's value (only ``dict``, ``list`` and scalars), raising
    ``_FloatLeafError`` at a float."""
    for child in value.values() if type(value) is dict else value:
        kind = type(child)
        if kind is dict or kind is list:
            if depth + 1 > limit:
                return depth + 1
            found = _depth_no_float(child, depth + 1, limit)
            if found is not None:
                return found
        elif kind is float:
            raise _FloatLeafError
    return None


def nesting_error(field: str) -> RequestNestingError | ParamsNestingError:
    """The named error for ``field`` nested deeper than the limit."""
    root = re.split(r"[.\[]", field, maxsplit=1)[0]
    cls = RequestNestingError if root in _REQUEST_FIELDS else ParamsNestingError
    return cls(field, MAX_NESTING_DEPTH)


def check_depth(value: Any, field: str, start: int = 0) -> None:
    """Raise a nesting error naming ``field`` if ``value`` (itself at level ``start``) nests deeper
    than ``MAX_NESTING_DEPTH``. Iterative; a value with few containers returns at once."""
    if nesting_depth(value, MAX_NESTING_DEPTH - start) is not None:
        raise nesting_error(field)


def nesting_depth(value: Any, limit: int) -> int | None:
    """The depth of ``value`` if it exceeds ``limit`` (lists, tuples and dicts count a level
    each), else None. Stops at the first branch over the limit, so it never descends more than
    ``limit`` + 1 levels: recursive (fast), with an iterative walk where the stack is short."""
    if not isinstance(value, (list, tuple, dict)):
        return None
    if limit < 1:
        return 1
    try:
        return _depth_recursive(value, 1, limit)
    except RecursionError:
        return _depth_iterative(value, limit)


_CONTAINERS = (list, tuple, dict)


def _depth_recursive(value: Any, depth: int, limit: int) -> int | None:
    for child in value.values() if type(value) is dict else value:
        if type(child) in _CONTAINER_TYPES or isinstance(child, _CONTAINERS):
            if depth + 1 > limit:
                return depth + 1
            found = _depth_recursive(child, depth + 1, limit)
            if found is not None:
                return found
    return None


_CONTAINER_TYPES = frozenset(_CONTAINERS)


def _depth_iterative(value: Any, limit: int) -> int | None:
    stack: list[tuple[Iterable[Any], int]] = [(_children(value), 1)]
    while stack:
        children, depth = stack[-1]
        for child in children:
            if isinstance(child, _CONTAINERS):
                if depth + 1 > limit:
                    return depth + 1
                stack.append((_children(child), depth + 1))
                break
        else:
            stack.pop()
    return None


def json_text_depth(text: str, limit: int) -> int | None:
    """The bracket depth of JSON ``text`` if it exceeds ``limit``, else None, without parsing it
    (brackets inside strings do not count)."""
    if text.count("[") + text.count("{") <= limit:
        return None  # cannot nest deeper than it has brackets
    depth = 0
    for m in _STRING_OR_BRACKET.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > limit:
                return depth
        elif c in "]}":
            depth -= 1
    return None


def json_copy(value: Any) -> Any:
    """A structural copy of JSON data (objects and lists copied, leaves shared; mappings become
    dicts). Recursive, which is fast; a value too deep for the stack is copied iteratively."""
    try:
        return _copy_recursive(value)
    except RecursionError:
        return _copy_iterative(value)


_JSON_LEAVES = frozenset({str, int, float, bool, type(None)})


def _copy_recursive(value: Any) -> Any:
    t = type(value)
    if t in _JSON_LEAVES:  # first: most values are, and an ABC isinstance check is slow
        return value
    if t is dict:
        return {k: _copy_recursive(v) for k, v in value.items()}
    if t is list:
        return [_copy_recursive(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _copy_recursive(v) for k, v in value.items()}
    return value


def _copy_iterative(value: Any) -> Any:
    if not isinstance(value, (Mapping, list)):
        return value
    root: Any = {} if isinstance(value, Mapping) else []
    stack: list[tuple[Any, Any]] = [(value, root)]
    while stack:
        src, dst = stack.pop()
        items = src.items() if isinstance(src, Mapping) else enumerate(src)
        for key, child in items:
            if isinstance(child, (Mapping, list)):
                child_copy: Any = {} if isinstance(child, Mapping) else []
                stack.append((child, child_copy))
                child = child_copy
            if isinstance(dst, dict):
                dst[key] = child
            else:
                dst.append(child)
    return root


def _children(value: Any) -> Iterable[Any]:
    return iter(value.values()) if isinstance(value, dict) else iter(value)
