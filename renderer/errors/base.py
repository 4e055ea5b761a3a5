"""The root of every request error, and vLLM's ``(parameter=..., value=...)`` suffix that carries an
error's parameter across Triton in its message.
"""

from __future__ import annotations

import re
from typing import Any

# vLLM's validation errors print the parameter (and value) they are about after the message:
# ``<message> (parameter=max_tokens, value=0)``. That is the one form in which an error names its
# parameter here too, in the message itself, so it crosses Triton (which carries only a message and
# a code) and reaches a client as vLLM's would; ``parameter_of`` reads it back.
_PARAMETER = re.compile(r"\(parameter=([A-Za-z0-9_.\[\]-]+)(?:, value=.*)?\)\s*$", re.S)


def parameter_suffix(message: str, parameter: str | None = None, value: Any = None) -> str:
    """A message as vLLM's validation errors print: the parameter and value named after it."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


def parameter_of(message: str) -> str | None:
    """The parameter a message names in vLLM's form (``parameter_suffix``), or None."""
    found = _PARAMETER.search(message or "")
    return found.group(1) if found else None


class RenderError(ValueError):
    """A request the renderer refuses; the message says what was wrong.

    ``parameter`` (and ``value``, where it is safe to echo) name the request field it is about; the
    message then ends in vLLM's ``(parameter=..., value=...)``, which is how the parameter travels.
    A class whose vLLM counterpart prints no suffix sets ``prints_parameter = False``: the message
    stays vLLM's exact text and the parameter is kept beside it."""

    prints_parameter: bool = True
    _parameter: str | None = None  # an error rebuilt from its message alone (a render worker's) names none

    def __init__(self, message: str = "", *, parameter: str | None = None, value: Any = None) -> None:
        super().__init__(parameter_suffix(message, parameter, value) if self.prints_parameter else message)
        self._parameter = parameter

    @property
    def parameter(self) -> str | None:
        """The request field this error is about, when it names one."""
        return parameter_of(str(self)) if self.prints_parameter else self._parameter


def short(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters: safe to echo in a message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
