"""The value a JSON text arriving in pieces holds so far (what streaming tool-call parsers read).

Containers not closed yet are closed; a key without its value yet is left out; a string not closed
yet is kept as far as it goes, or left out where strings must be whole (a function's name must
never be sent in part); a number is taken as far as it is one; a partial ``true`` / ``false`` /
``null`` is left out. Text that cannot begin any JSON is ``MalformedJSONError``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_WS = " \t\n\r"
_decoder = json.JSONDecoder()


class MalformedJSONError(ValueError):
    """The text is not the beginning of a JSON value."""


class _Missing:
    """A value not there yet (left out of its container)."""


_MISSING = _Missing()


def loads_prefix(text: str, *, partial_strings: bool = True) -> tuple[Any, int]:
    """(value, characters it took): a first value that is complete takes only its own characters
    (text after it is another value), else the whole text is read as one value's beginning."""
    try:
        value, end = _decoder.raw_decode(text)
    except json.JSONDecodeError:
        pass
    else:
        return value, (len(text) if not text[end:].strip(_WS) else end)
    value = _Reader(text, partial_strings).value_at_top()
    return value, len(text)


class _Reader:
    def __init__(self, text: str, partial_strings: bool) -> None:
        self.s = text
        self.i = 0
        self.partial_strings = partial_strings

    def value_at_top(self) -> Any:
        self._ws()
        if self.i >= len(self.s):
            raise MalformedJSONError("no value yet")
        value = self._value()
        if value is _MISSING:
            raise MalformedJSONError("no value yet")
        return value

    def _ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in _WS:
            self.i += 1

    def _end(self) -> bool:
        return self.i >= len(self.s)

    def _value(self) -> Any:
        c = self.s[self.i]
        if c == "{":
            return self._object()
        if c == "[":
            return self._array()
        if c == '"':
            return self._string(as_key=False)
        if c == "-" or c.isdigit():
            return self._number()
        for word, value in _LITERALS.items():
            rest = self.s[self.i : self.i + len(word)]
            if rest == word:
                self.i += len(word)
                return value
            if word.startswith(rest) and self.i + len(rest) == len(self.s):
                self.i = len(self.s)
                return _MISSING
        raise MalformedJSONError(f"unexpected {c!r} at {self.i}")

    def _object(self) -> Any:
        self.i += 1
        out: dict[str, Any] = {}
        while True:
            self._ws()
            if self._end():
                return out
            if self.s[self.i] == "}":
                self.i += 1
                return out
            if self.s[self.i] != '"':
                raise MalformedJSONError(f"expected a key at {self.i}")
            key = self._string(as_key=True)
            if key is _MISSING:
                return out
            self._ws()
            if self._end():
                return out
            if self.s[self.i] != ":":
                raise MalformedJSONError(f"expected ':' at {self.i}")
            self.i += 1
            self._ws()
            if self._end():
                return out
            value = self._value()
            if value is not _MISSING:
                out[key] = value
            self._ws()
            if self._end():
                return out
            if self.s[self.i] == ",":
                self.i += 1
            elif self.s[self.i] != "}":
                raise MalformedJSONError(f"expected ',' or '}}' at {self.i}")

    def _array(self) -> Any:
        self.i += 1
        out: list[Any] = []
        while True:
            self._ws()
            if self._end():
                return out
            if self.s[self.i] == "]":
                self.i += 1
                return out
            value = self._value()
            if value is not _MISSING:
                out.append(value)
            self._ws()
            if self._end():
                return out
            if self.s[self.i] == ",":
                self.i += 1
            elif self.s[self.i] != "]":
                raise MalformedJSONError(f"expected ',' or ']' at {self.i}")

    def _string(self, *, as_key: bool) -> Any:
        start = self.i
        j = self.i + 1
        while j < len(self.s):
            c = self.s[j]
            if c == "\\":
                j += 2
                continue
            if c == '"':
                self.i = j + 1
                try:
                    return json.loads(self.s[start : j + 1])
                except json.JSONDecodeError as e:
                    raise MalformedJSONError(str(e)) from None
            j += 1
        self.i = len(self.s)
        if as_key or not self.partial_strings:
            return _MISSING
        return _decode_partial(self.s[start + 1 :])

    def _number(self) -> Any:
        found = _NUMBER.match(self.s, self.i)
        if not found:
            if self.s[self.i :] == "-":  # only a sign so far
                self.i = len(self.s)
                return _MISSING
            raise MalformedJSONError(f"bad number at {self.i}")
        self.i = found.end()
        # A number cut short ("2.", "1e", "1e-"): what is there is taken, the rest is still coming.
        if not self._end() and self.s[self.i] in ".eE+-":
            tail = self.s[self.i :]
            if re.fullmatch(r"\.\d*|[eE][+-]?\d*|\.\d+[eE][+-]?\d*", tail):
                self.i = len(self.s)
        return json.loads(found.group(0))


def _decode_partial(body: str) -> str:
    """A string's characters so far, an escape cut short left out."""
    for cut in range(len(body), max(-1, len(body) - 7), -1):
        try:
            return json.loads('"' + body[:cut] + '"')
        except json.JSONDecodeError:
            continue
    raise MalformedJSONError("bad string")
