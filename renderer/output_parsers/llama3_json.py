"""Llama 3.x JSON tool calls: ``{"name": ..., "parameters": ...}`` (or ``"arguments"``), several
joined by ``"; "``, optionally after ``<|python_tag|>``.

Held to vLLM 0.32's ``llama3_json`` parser: a whole output's calls are every top-level JSON object
in it (text around them is dropped); one without ``name`` or without both ``arguments`` and
``parameters``, or one that does not parse, leaves the whole output as content. Streamed, an output
that does not start with ``{`` or the tag is content; otherwise each call's name is sent once whole
and its arguments' JSON text as far as the parsed value is stable (the common prefix of the last two
parses; all of it once the call is complete).
"""

from __future__ import annotations

import json

from .base import ExtractedToolCalls, ToolCallParser
from .partial_json import loads_prefix
from .text import common_prefix, dump_arguments, is_json
from .types import Delta, ToolCall, ToolCallDelta, new_tool_call_id

PYTHON_TAG = "<|python_tag|>"
_SEPARATOR = len("; ")
_decoder = json.JSONDecoder()


class Llama3JsonToolParser(ToolCallParser):
    """vLLM's "llama3_json"."""

    name = "llama3_json"

    def __init__(self) -> None:
        super().__init__()
        self._current = -1  # the call being streamed
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        if PYTHON_TAG not in text and "{" not in text:
            return ExtractedToolCalls(False, (), text)
        calls: list[ToolCall] = []
        end = -1
        for start, c in enumerate(text):
            if c != "{" or start <= end:  # braces inside an object already read are skipped
                continue
            try:
                body, length = _decoder.raw_decode(text[start:])
                end = start + length
                args = body["arguments"] if "arguments" in body else body["parameters"]
                calls.append(ToolCall(name=body["name"], arguments=dump_arguments(args)))
            except (ValueError, KeyError, TypeError):
                return ExtractedToolCalls(False, (), text)
        if calls:
            return ExtractedToolCalls(True, tuple(calls), None)
        return ExtractedToolCalls(False, (), text)

    def stream(self, previous_text: str, current_text: str, delta_text: str) -> Delta | None:
        if not (current_text.startswith(PYTHON_TAG) or current_text.startswith("{")):
            return Delta(content=delta_text)
        try:
            return self._step(current_text)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, AssertionError):
            return None  # vLLM skips a step it cannot parse

    def _step(self, text: str) -> Delta | None:
        bodies, complete = _parse_all(text, partial_strings=self._name_sent)
        if not bodies:
            return None
        current = bodies[self._current]  # -1 before the first call: the last body
        if len(bodies) > self._current + 1:
            # A new call begins: first send what the last one still owed (its arguments as
            # completed by the parse), then move on; the parsed state is kept from before.
            delta = None
            if self._current >= 0:
                args = current.get("arguments")
                if args:
                    owed = dump_arguments(args)[len(self.streamed_args[self._current]) :]
                    delta = Delta(tool_calls=(ToolCallDelta(self._current, arguments=owed),))
                    self.streamed_args[self._current] += owed
            self._current = len(bodies) - 1
            self._name_sent = False
            self.streamed_args.append("")
            return delta
        delta = None
        if not self._name_sent:
            name = current.get("name")
            if name:
                delta = Delta(
                    tool_calls=(ToolCallDelta(self._current, id=new_tool_call_id(), type="function", name=name),)
                )
                self._name_sent = True
        else:
            args = current.get("arguments")
            if args:
                sent = len(self.streamed_args[self._current])
                now = dump_arguments(args)
                before = self.parsed_args[self._current].get("arguments")
                piece = None
                if complete[self._current]:
                    piece = now[sent:]
                elif before:
                    then = dump_arguments(before)
                    if now != then:
                        piece = common_prefix(then, now)[sent:]
                if piece is not None:
                    delta = Delta(tool_calls=(ToolCallDelta(self._current, arguments=piece),))
                    self.streamed_args[self._current] += piece
        self.parsed_args = bodies
        return delta

    def unstreamed_arguments(self) -> str:
        if not self.parsed_args:
            return ""
        last = self.parsed_args[-1]
        expected = dump_arguments(last.get("arguments", {}))
        index = len(self.parsed_args) - 1
        sent = self.streamed_args[index] if index < len(self.streamed_args) else ""
        return expected[len(sent) :] if expected.startswith(sent) else ""


def _parse_all(text: str, *, partial_strings: bool) -> tuple[list[dict], list[bool]]:
    """Every call body so far (``parameters`` read as ``arguments``), and whether each is whole."""
    bodies: list[dict] = []
    complete: list[bool] = []
    pos = len(PYTHON_TAG) if text.startswith(PYTHON_TAG) else 0
    while pos < len(text):
        body, length = loads_prefix(text[pos:], partial_strings=partial_strings)
        complete.append(is_json(text[pos : pos + length]))
        pos += length + _SEPARATOR
        if "parameters" in body:
            assert "arguments" not in body, "both parameters and arguments"
            body["arguments"] = body["parameters"]
        bodies.append(body)
    return bodies, complete
