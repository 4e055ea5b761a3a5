"""The request body, read under a size limit and parsed as strict JSON.

Everything a client can get wrong in the body itself is a 4xx that says what: more bytes than the
limit (413, before the rest is read), bytes that are not UTF-8, text that is not JSON, JSON's
non-standard ``NaN`` / ``Infinity``, a lone UTF-16 surrogate escape (``"\\ud800"``: valid JSON,
but no Unicode text, so no tensor can carry it), nesting deeper than the parser's stack, and a
body that is not an object. Before these checks, the last three were 500s.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator

from .errors import (
    BodyEncodingError,
    BodyJSONConstantError,
    BodyJSONSyntaxError,
    BodyNestingError,
    BodyNotObjectError,
    BodySurrogateError,
    BodyTooLargeError,
)

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""The launcher passes MAX_INPUT_BYTES, the ensembles' own limit per input tensor."""


def _refuse_constant(name: str) -> Any:
    raise BodyJSONConstantError(name)


async def read_body(chunks: AsyncIterator[bytes], declared_length: str | None, limit: int) -> dict[str, Any]:
    """The body of one request as a JSON object; a named ``RequestBodyError`` otherwise."""
    if declared_length is not None and declared_length.strip().isdigit() and int(declared_length) > limit:
        raise BodyTooLargeError(int(declared_length), limit, declared=True)
    parts, size = [], 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(size, limit, declared=False)
        parts.append(chunk)
    return parse_body(b"".join(parts))


def parse_body(raw: bytes) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyEncodingError(e) from None
    try:
        body = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise BodyNestingError() from None
    except json.JSONDecodeError as e:
        raise BodyJSONSyntaxError(e) from None
    if not isinstance(body, dict):
        raise BodyNotObjectError(type(body).__name__)
    if "\\u" in text:  # only an escape can bring a lone surrogate in
        _refuse_lone_surrogates(body)
    return body


def _refuse_lone_surrogates(body: dict[str, Any]) -> None:
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as e:
        bad = e.object[e.start : e.end]
        raise BodySurrogateError(bad.encode("unicode_escape").decode()) from None
    except RecursionError:  # parsed, but too deep to walk again
        raise BodyNestingError() from None
