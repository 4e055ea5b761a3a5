"""Hermes-style tool calls (Qwen2.5, Qwen3, Hermes 2/3): ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``.

Held to vLLM 0.32's ``hermes`` parser: a whole output's calls are the JSON bodies of every
``<tool_call>`` region (the last may be unclosed), the content what precedes the first; any body
that fails (not JSON, no ``name`` or ``arguments``) leaves the whole output as content. Streamed,
text before the first tag is sent as content (holding back what may be the tag's beginning), each
call's name once whole, then the raw text of its ``arguments`` as it grows (without the object's
closing brace once the body is complete).
"""

from __future__ import annotations

import json
import re

from .base import ExtractedToolCalls, ToolCallParser
from .text import dump_arguments, is_json, tag_prefix_at_end
from .types import Delta, ToolCall, ToolCallDelta, new_tool_call_id

START = "<tool_call>"
END = "</tool_call>"
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')
_ARGUMENTS = re.compile(r'"arguments"\s*:\s*')


class HermesToolParser(ToolCallParser):
    """vLLM's "hermes"."""

    name = "hermes"

    def __init__(self) -> None:
        super().__init__()
        self._content_sent = 0  # characters of the text already sent as content
        self._names: list[str | None] = []

    def extract(self, text: str) -> ExtractedToolCalls:
        if START not in text:
            return ExtractedToolCalls(False, (), text)
        try:
            calls = tuple(
                ToolCall(name=body["name"], arguments=dump_arguments(body["arguments"]))
                for body in (json.loads(raw) for raw in _bodies(text))
            )
        except (ValueError, KeyError, TypeError):
            return ExtractedToolCalls(False, (), text)
        before = text[: text.find(START)]
        return ExtractedToolCalls(True, calls, before or None)

    def stream(self, previous_text: str, current_text: str, delta_text: str) -> Delta | None:
        content = self._new_content(current_text)
        pieces: list[ToolCallDelta] = []
        for i, (body, complete) in enumerate(_open_bodies(current_text)):
            if i >= len(self._names):
                self._names.append(None)
                self.streamed_args.append("")
                self.parsed_args.append({})  # none parsed yet: vLLM's finish step counts it as "{}"
            if self._names[i] is None:
                found = _NAME.search(body)
                if not found:
                    break  # a later call cannot start before this one's name
                self._names[i] = found.group(1)
                pieces.append(ToolCallDelta(i, id=new_tool_call_id(), type="function", name=found.group(1)))
            args = _arguments_text(body, complete)
            if args is not None and len(args) > len(self.streamed_args[i]):
                pieces.append(ToolCallDelta(i, arguments=args[len(self.streamed_args[i]) :]))
                self.streamed_args[i] = self.parsed_args[i] = args
        if content or pieces:
            return Delta(content=content, tool_calls=tuple(pieces))
        return None

    def _new_content(self, text: str) -> str | None:
        if START in text:
            upto = text.index(START)
        else:
            upto = len(text) - tag_prefix_at_end(text, START)
        if upto <= self._content_sent:
            return None
        content = text[self._content_sent : upto]
        self._content_sent = upto
        return content


def _bodies(text: str) -> list[str]:
    """The text inside every ``<tool_call>`` region of a whole output (the last may be unclosed)."""
    out = []
    pos = text.find(START)
    while pos != -1:
        begin = pos + len(START)
        end = text.find(END, begin)
        if end == -1:
            out.append(text[begin:])
            break
        out.append(text[begin:end])
        pos = text.find(START, end + len(END))
    return out


def _open_bodies(text: str) -> list[tuple[str, bool]]:
    """(body, complete) of every region so far: closed ones are complete; an open one is complete
    once its body is whole JSON (the closing tag has not arrived yet)."""
    out: list[tuple[str, bool]] = []
    pos = 0
    while (start := text.find(START, pos)) != -1:
        begin = start + len(START)
        end = text.find(END, begin)
        if end != -1:
            out.append((text[begin:end].strip(), True))
            pos = end + len(END)
            continue
        raw = text[begin:]
        held = tag_prefix_at_end(raw, END)
        body = (raw[:-held] if held else raw).strip()
        out.append((body, bool(body) and is_json(body)))
        break
    return out


def _arguments_text(body: str, complete: bool) -> str | None:
    """The raw text after ``"arguments":`` (without the body's closing brace once complete)."""
    found = _ARGUMENTS.search(body)
    if not found:
        return None
    raw = body[found.end() :]
    if complete:
        raw = raw.rstrip()
        if raw.endswith("}"):
            raw = raw[:-1].rstrip()
    return raw
