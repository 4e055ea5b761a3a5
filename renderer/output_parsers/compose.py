"""A model's output split as vLLM's chat serving splits it: reasoning first, then tool calls in
what remains (its ``DelegatingParser``), whole (``parse``) or streamed (``OutputStream.feed``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Callable

from .base import ReasoningParser, ToolCallParser
from .types import Delta, ParsedOutput


@dataclass(frozen=True)
class OutputParser:
    """The server's parsers (each made per request: streaming keeps state)."""

    tool_parser: Callable[[], ToolCallParser] | None = None
    """Makes the tool-call parser (``TOOL_CALL_PARSER`` with auto tool choice on), or None."""

    reasoning_parser: Callable[[], ReasoningParser] | None = None
    """Makes the reasoning parser (``REASONING_PARSER``), or None."""

    def parse(self, text: str) -> ParsedOutput:
        """A whole output (tool_choice "auto")."""
        reasoning, content = (None, text) if self.reasoning_parser is None else self.reasoning_parser().extract(text)
        if self.tool_parser is None:
            return ParsedOutput(content=content, reasoning=reasoning)
        parser = self.tool_parser()
        found = parser.extract(content if content is not None else "")
        if not found.called:
            return ParsedOutput(
                content=found.content if parser.own_content_without_calls else content, reasoning=reasoning
            )
        content = found.content
        if content is not None and not content.strip():
            content = None
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=found.tool_calls)

    def stream(self, prompt_ids: Sequence[int] = ()) -> "OutputStream":
        """A stream's parser state: ``feed`` it each step's text and token ids; ``prompt_ids``
        decide whether it starts in the thinking (vLLM's check of the prompt)."""
        return OutputStream(
            None if self.tool_parser is None else self.tool_parser(),
            None if self.reasoning_parser is None else self.reasoning_parser(),
            prompt_ids,
        )


class OutputStream:
    """One streamed response's parsing (vLLM's ``parse_delta``)."""

    def __init__(
        self, tools: ToolCallParser | None, reasoning: ReasoningParser | None, prompt_ids: Sequence[int] = ()
    ) -> None:
        self.tools = tools
        self.reasoning = reasoning
        self.reasoning_ended = reasoning is None or reasoning.closed_in(prompt_ids)
        self._tools_started = False
        self._text = ""
        self._ids: list[int] = []

    def feed(self, delta_text: str, delta_ids: Sequence[int], finished: bool = False) -> Delta | None:
        """What this step sends (None: nothing); ``finished`` on the last step."""
        text = self._text + delta_text
        ids = [*self._ids, *delta_ids]
        delta: Delta | None = None
        ended_now = False
        if not self.reasoning_ended and self.reasoning is not None:
            delta = self.reasoning.stream(self._ids, delta_text, delta_ids)
            if self.reasoning.ends_in(delta_ids):
                self.reasoning_ended = ended_now = True
                # From here on only the content counts: the text after the marker.
                ids = _after(delta_ids, self.reasoning.end_id)
                text = delta_text = (delta.content if delta else None) or ""
        if self.tools is not None and self.reasoning_ended:
            if not self._tools_started:
                self._tools_started = True
                self._text, self._ids = "", []
                delta_text = text
            thought = delta.reasoning if delta else None
            delta = self.tools.stream(self._text, text, delta_text)
            if thought:
                delta = (
                    Delta(reasoning=thought) if delta is None else replace(delta, reasoning=delta.reasoning or thought)
                )
        in_reasoning = not self.reasoning_ended
        in_tools = self.tools is not None and self.reasoning_ended
        if delta is None and not ended_now and not in_reasoning and not in_tools:
            delta = Delta(content=delta_text)
        self._text, self._ids = text, ids
        if finished and delta is not None and delta.tool_calls and self.tools is not None:
            # The last step also sends whatever arguments were parsed but not streamed.
            last = delta.tool_calls[-1]
            last = replace(last, arguments=(last.arguments or "") + self.tools.unstreamed_arguments())
            delta = replace(delta, tool_calls=(*delta.tool_calls[:-1], last))
        return delta


def _after(ids: Sequence[int], marker: int) -> list[int]:
    """The ids after ``marker`` in ``ids`` (none unless it comes before the last one; vLLM's rule)."""
    head = list(ids[:-1])
    if marker not in head:
        return []
    return list(ids[head.index(marker) + 1 :])
