"""One chat answer split as vLLM 0.32's chat serving splits it, whole or step by step: the JSON of
its message or of each step's delta (the ``parsed_output`` tensor), and the finish reason it
reports ("tool_calls" where vLLM says so).

vLLM's rules (``chat_completion/serving.py``): whole, the message carries the calls of tool_choice
"auto" and then finishes "tool_calls", whatever ended generation; streamed, a step with nothing
to send sends no chunk unless it is the last (then an empty delta), and the last step finishes
"tool_calls" when call pieces were streamed and generation stopped ("stop"). A reasoning parser
starts in the thinking unless the prompt already closed it (``is_reasoning_end`` on the prompt
ids: a template that renders an empty thinking block).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .compose import OutputParser, OutputStream
from .registry import output_parser
from .request import OutputParsing
from .types import ParsedOutput, new_tool_call_id


@dataclass(frozen=True)
class AnswerStep:
    """What one streamed step of an answer sends."""

    delta: str
    """The JSON of the step's delta (vLLM's ``DeltaMessage``); "null" when the step sends no chunk
    (the last step always sends one, "{}" when empty)."""

    finish_reason: str | None
    """The finish reason to report (None while generating)."""


def message_json(parsed: ParsedOutput) -> dict[str, Any]:
    """vLLM's ``ChatMessage`` fields for a split answer (``tool_calls`` only when there are any)."""
    out: dict[str, Any] = {"role": "assistant", "content": parsed.content, "reasoning": parsed.reasoning}
    if parsed.tool_calls:
        out["tool_calls"] = [
            {"id": new_tool_call_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.tool_calls
        ]
    return out


class AnswerParser:
    """The server's parsers for one model (made once; each answer gets its own state)."""

    def __init__(self, vocab: Mapping[str, int]) -> None:
        self._vocab = vocab
        self._parsers: dict[tuple[str | None, str | None], OutputParser] = {}

    def _parser(self, parsing: OutputParsing) -> OutputParser:
        key = (parsing.tool_call_parser, parsing.reasoning_parser)
        if key not in self._parsers:
            self._parsers[key] = output_parser(*key, self._vocab)
        return self._parsers[key]

    def whole(self, parsing: OutputParsing, text: str, finish_reason: str) -> tuple[str, str]:
        """(``parsed_output``, finish reason) of a non-streamed answer."""
        if not parsing.active:
            return "", finish_reason
        parsed = self._parser(parsing).parse(text)
        if parsed.tool_calls:
            finish_reason = "tool_calls"
        return json.dumps(message_json(parsed), ensure_ascii=False), finish_reason

    def stream(self, parsing: OutputParsing, prompt_ids: Sequence[int] | None) -> "AnswerStream | None":
        """A streamed answer's state; None when nothing is parsed."""
        if not parsing.active:
            return None
        return AnswerStream(self._parser(parsing).stream(prompt_ids or ()))


class AnswerStream:
    """One streamed answer's parsing."""

    def __init__(self, stream: OutputStream) -> None:
        self._stream = stream
        self._calls_streamed = False

    def step(self, delta_text: str, delta_ids: Sequence[int], finish_reason: str | None) -> AnswerStep:
        """The step of ``delta_text`` / ``delta_ids``; ``finish_reason`` set on the last one."""
        finished = finish_reason is not None
        delta = self._stream.feed(delta_text, delta_ids, finished)
        if delta is not None and delta.tool_calls:
            self._calls_streamed = True
        if finished and self._calls_streamed and finish_reason == "stop":
            finish_reason = "tool_calls"
        if delta is None:
            return AnswerStep("{}" if finished else "null", finish_reason)
        return AnswerStep(json.dumps(delta.to_json(), ensure_ascii=False), finish_reason)
