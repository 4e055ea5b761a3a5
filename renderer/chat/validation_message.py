"""vLLM's wording of a refused request body: a pydantic ``ValidationError`` as vLLM's HTTP layer
reports it (the count, at most ten errors, each location cleaned and each input bounded), and the
clean-up vLLM gives every error message (no memory addresses, trace lines or file paths).

Light on purpose (``re`` and pydantic's error type): the OpenAI front words its refusals with it
without importing the chat request model and the ``openai`` types behind it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

# pydantic-core's internal schema names that vLLM drops from an error's location.
_INTERNAL_LOC_MARKERS = frozenset(
    {
        "function-wrap",
        "function-after",
        "function-before",
        "function-plain",
        "json-or-python",
        "lax-or-strict",
        "chain",
        "default",
        "nullable",
        "tagged-union",
        "union",
        "call",
        "arguments",
        "is-instance",
        "is-subclass",
        "callable",
        "str",
        "int",
        "float",
        "bool",
        "bytes",
        "bytearray",
        "list",
        "tuple",
        "dict",
        "set",
        "frozenset",
        "complex",
        "none",
        "nonetype",
    }
)
_BRACKETED = re.compile(r"[\[\]{}()]")
MAX_REPORTED_ERRORS = 10
MAX_INPUT_CHARS = 200
MAX_ERROR_CHARS = 1000


def format_validation_error(error: ValidationError, prefix: tuple[str, ...] = ("body",)) -> str:
    """A pydantic error as vLLM's HTTP layer reports a request body that fails validation: the
    count, then at most ten errors, each a dict with its location cleaned and its input bounded."""
    errors = error.errors(include_url=False)
    if not errors:
        return "Validation error"
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"{len(errors)} validation {label}:"]
    lines += [f"  {_format_one(err, prefix)}" for err in errors[:MAX_REPORTED_ERRORS]]
    if len(errors) > MAX_REPORTED_ERRORS:
        lines.append(f"  ...and {len(errors) - MAX_REPORTED_ERRORS} more {label}")
    return sanitize_message("\n".join(lines).rstrip())


def _format_one(err: Mapping[str, Any], prefix: tuple[str, ...]) -> str:
    shown = dict(err)
    shown["loc"] = _clean_loc((*prefix, *err.get("loc", ())))
    if "input" in shown:
        shown["input"] = _summarize_input(shown["input"])
    text = str(shown)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "...[truncated]"


def _clean_loc(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if not _is_internal(str(p))]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def _is_internal(segment: str) -> bool:
    return bool(_BRACKETED.search(segment)) or segment.lower() in _INTERNAL_LOC_MARKERS


def _summarize_input(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= MAX_INPUT_CHARS else value[:MAX_INPUT_CHARS] + "...[truncated]"
    if isinstance(value, (bytes, bytearray)):
        return f"<{type(value).__name__} of {len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 (an int too long to print, say: vLLM names the type instead)
        return f"<{type(value).__name__}>"
    return text if len(text) <= MAX_INPUT_CHARS else text[:MAX_INPUT_CHARS] + "...[truncated]"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_TRACE_LINE = re.compile(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?')
_SYSTEM_PATH = re.compile(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+")
_FILE_PATH = re.compile(r"(?:/[\w\-]+)+/[\w\-]+\.\w+")


def sanitize_message(message: str) -> str:
    """vLLM's clean-up of every error message: no memory addresses, trace lines or file paths."""
    message = _ADDRESS.sub(">", message)
    message = _TRACE_LINE.sub("", message)
    message = _SYSTEM_PATH.sub("<path>", message)
    message = _FILE_PATH.sub("<path>", message)
    return message.strip()
