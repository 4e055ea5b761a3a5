"""JSON text of a request field (a ``*_params`` bag, ``messages``) parsed with a named error."""

from __future__ import annotations

import json
from typing import Any

from .errors import InvalidJSONError


def parse_json(text: str, name: str) -> Any:
    """``text`` as JSON; ``InvalidJSONError`` naming the field ``name`` and where it broke."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidJSONError(name, f"{e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise InvalidJSONError(name, "nested too deeply") from None
