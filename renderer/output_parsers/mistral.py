"""Mistral tool calls (pre-v11 tokenizers): ``[TOOL_CALLS][{"name": ..., "arguments": ...}, ...]``.

Held to vLLM 0.32's ``mistral`` parser for tokenizers without ``[ARGS]`` (tekken 240911 and
older): content is what precedes the marker; the first non-empty text after a marker is read as
JSON (one object or a list of them; entries without ``name`` and ``arguments`` skipped, missing
arguments "{}", a non-string name ""). When nothing parses, the text after the marker is the
content. Streamed, content until the marker; then each call's name once whole and the raw text of
its ``arguments`` as it arrives, as far as it is valid JSON (trailing blanks held back), every
piece marked ``"type": "function"``.
"""

from __future__ import annotations

import json
import re

from .base import ExtractedToolCalls, ToolCallParser
from .text import dump_arguments
from .types import Delta, ToolCall, ToolCallDelta, new_tool_call_id

TOOL_CALLS = "[TOOL_CALLS]"
_ARRAY = re.compile(r"\[{.*}\]", re.DOTALL)
_decoder = json.JSONDecoder()
_NUMBER_PREFIX = re.compile(r"-?(?:0|[1-9]\d*)?(?:\.\d*)?(?:[eE][+-]?\d*)?")


class MistralToolParser(ToolCallParser):
    """vLLM's "mistral" (pre-v11 format)."""

    name = "mistral"
    own_content_without_calls = True  # an engine-based parser in vLLM

    def __init__(self) -> None:
        super().__init__()
        self._content_sent = 0
        self._names: list[str] = []
        self._broken = False

    def extract(self, text: str) -> ExtractedToolCalls:
        if TOOL_CALLS not in text:
            return ExtractedToolCalls(False, (), text)
        content, *after = text.split(TOOL_CALLS)
        raw = next((s.strip() for s in after if s.strip()), "")
        try:
            parsed, _ = _decoder.raw_decode(raw)
        except json.JSONDecodeError:
            found = _ARRAY.findall(raw)
            try:
                parsed = json.loads(found[0]) if found else None
            except json.JSONDecodeError:
                parsed = None
        calls = _calls(parsed)
        if not calls:
            return ExtractedToolCalls(False, (), raw)
        return ExtractedToolCalls(True, calls, content if content.strip() else None)

    def stream(self, previous_text: str, current_text: str, delta_text: str) -> Delta | None:
        at = current_text.find(TOOL_CALLS)
        if at == -1:
            piece = current_text[self._content_sent :]
            self._content_sent = len(current_text)
            return Delta(content=piece) if piece else None
        pieces: list[ToolCallDelta] = []
        content = current_text[self._content_sent : at] if at > self._content_sent else None
        self._content_sent = max(self._content_sent, at)
        calls, valid = _scan(current_text[at + len(TOOL_CALLS) :]) if not self._broken else ([], False)
        if not valid:
            # vLLM's incremental JSON reader sends nothing of a step it cannot read, nor after it.
            self._broken = True
            calls = []
        for i, (name, args) in enumerate(calls):
            if i >= len(self._names):
                if name is None:
                    break
                self._names.append(name)
                self.streamed_args.append("")
                self.parsed_args.append("")
                pieces.append(ToolCallDelta(i, id=new_tool_call_id(), type="function", name=name))
            if args is not None and len(args) > len(self.streamed_args[i]):
                pieces.append(ToolCallDelta(i, type="function", arguments=args[len(self.streamed_args[i]) :]))
                self.streamed_args[i] = self.parsed_args[i] = args
        if content or pieces:
            return Delta(content=content, tool_calls=tuple(pieces))
        return None


def _calls(parsed: object) -> tuple[ToolCall, ...]:
    if isinstance(parsed, dict):
        parsed = [parsed]
    if not isinstance(parsed, list):
        return ()
    out = []
    for call in parsed:
        if not isinstance(call, dict) or not ("name" in call or "arguments" in call):
            continue
        name, args = call.get("name"), call.get("arguments")
        args = "{}" if args is None else args if isinstance(args, str) else dump_arguments(args)
        out.append(ToolCall(name=name if isinstance(name, str) else "", arguments=args))
    return tuple(out)


def _scan(text: str) -> tuple[list[tuple[str | None, str | None]], bool]:
    """(name, raw arguments so far) of each call object in the JSON after the marker, a name only
    once its string is closed; and whether the text stopped being valid JSON."""
    s = _Scanner(text)
    try:
        s.run()
    except _InvalidJSONError:
        return s.calls, False
    return s.calls, True


class _InvalidJSONError(Exception):
    """The text stops being valid JSON here."""


class _Scanner:
    """Walks the calls' JSON, recording each call's name and the valid extent of its arguments."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.calls: list[tuple[str | None, str | None]] = []
        self.valid_end = 0  # end of the last character known valid (blanks excluded)

    def run(self) -> None:
        self._ws()
        if self._eof():
            return
        if self.s[self.i] == "[":
            self.i += 1
            while True:
                self._ws()
                if self._eof() or self.s[self.i] == "]":
                    return
                self._call()
                self._ws()
                if self._eof():
                    return
                if self.s[self.i] == ",":
                    self.i += 1
                    continue
                if self.s[self.i] == "]":
                    return
                raise _InvalidJSONError
        self._call()

    def _eof(self) -> bool:
        return self.i >= len(self.s)

    def _ws(self) -> None:
        while not self._eof() and self.s[self.i] in " \t\n\r":
            self.i += 1
            self._mark()  # blanks are sent as they arrive

    def _call(self) -> None:
        if self.s[self.i] != "{":
            raise _InvalidJSONError
        self.i += 1
        index = len(self.calls)
        self.calls.append((None, None))
        while True:
            self._ws()
            if self._eof():
                return
            if self.s[self.i] == "}":
                self.i += 1
                return
            key = self._string()
            if key is None:
                return
            self._ws()
            if self._eof():
                return
            if self.s[self.i] != ":":
                raise _InvalidJSONError
            self.i += 1
            self._ws()
            if self._eof():
                return
            start = self.i
            if key == "name" and self.s[self.i] == '"':
                name = self._string()
                if name is None:
                    return
                self.calls[index] = (name, self.calls[index][1])
            elif key == "arguments":
                try:
                    closed = self._value()
                finally:
                    self.calls[index] = (self.calls[index][0], self.s[start : self.valid_end])
                if not closed:
                    return
            elif not self._value():
                return
            self._ws()
            if self._eof():
                return
            if self.s[self.i] == ",":
                self.i += 1
            elif self.s[self.i] != "}":
                raise _InvalidJSONError

    def _mark(self) -> None:
        self.valid_end = self.i

    def _string(self) -> str | None:
        """A whole string's value, or None at the end of the text (valid so far)."""
        if self.s[self.i] != '"':
            raise _InvalidJSONError
        start = self.i
        self.i += 1
        self._mark()
        while not self._eof():
            c = self.s[self.i]
            if c == "\\":
                if self.i + 1 >= len(self.s):
                    return None
                self.i += 2
                self._mark()
                continue
            self.i += 1
            self._mark()
            if c == '"':
                return json.loads(self.s[start : self.i])
        return None

    def _value(self) -> bool:
        """Read one value; False when the text ended inside it."""
        c = self.s[self.i]
        if c == '"':
            return self._string() is not None
        if c in "{[":
            close = "}" if c == "{" else "]"
            self.i += 1
            self._mark()
            first = True
            while True:
                self._ws()
                if self._eof():
                    return False
                if self.s[self.i] == close:
                    self.i += 1
                    self._mark()
                    return True
                if not first:
                    if self.s[self.i] != ",":
                        raise _InvalidJSONError
                    self.i += 1
                    self._mark()
                    self._ws()
                    if self._eof():
                        return False
                first = False
                if c == "{":
                    if self._string() is None:
                        return False
                    self._ws()
                    if self._eof():
                        return False
                    if self.s[self.i] != ":":
                        raise _InvalidJSONError
                    self.i += 1
                    self._mark()
                    self._ws()
                    if self._eof():
                        return False
                if not self._value():
                    return False
        if c == "-" or c.isdigit():
            # A number is sent as it arrives ("2", "2.", "2.5"); it ends where a non-number char is.
            j = self.i
            while j < len(self.s) and self.s[j] in "0123456789+-.eE":
                j += 1
            if not _NUMBER_PREFIX.fullmatch(self.s[self.i : j]):
                raise _InvalidJSONError
            self.i = j
            self._mark()
            return not self._eof()
        for word in ("true", "false", "null"):
            rest = self.s[self.i : self.i + len(word)]
            if rest == word:
                self.i += len(word)
                self._mark()
                return True
            if word.startswith(rest) and self.i + len(rest) == len(self.s):
                self.i = len(self.s)
                self._mark()
                return False
        raise _InvalidJSONError
