"""The interfaces of a tool-call parser and of a reasoning parser, as vLLM's serving layer uses them.

A tool-call parser is made per request (it keeps the stream's state) and is called with the text so
far at every step; a reasoning parser likewise, with token ids too (vLLM's reasoning parsers decide
by the ids of their markers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .types import Delta, ToolCall


@dataclass(frozen=True)
class ExtractedToolCalls:
    """A tool-call parser's answer for a whole output."""

    called: bool
    """Whether it found tool calls (else ``content`` is the output unchanged)."""

    tool_calls: tuple[ToolCall, ...]
    """The calls, in order."""

    content: str | None
    """The text around them that a client sees as content."""


class ToolCallParser:
    """One request's tool-call parser (subclasses: one per model family)."""

    name: str = ""
    """vLLM's name for it (``--tool-call-parser``)."""

    own_content_without_calls: bool = False
    """When no call is found, whether the content is this parser's (vLLM's engine-based parsers,
    which drop the markup) rather than the text as it came."""

    def __init__(self) -> None:
        # Per call of the stream: the arguments text already sent, and what was parsed of it
        # (what vLLM's finish step compares to send any arguments still unsent).
        self.streamed_args: list[str] = []
        self.parsed_args: list[object] = []

    def extract(self, text: str) -> ExtractedToolCalls:
        """Split a whole output."""
        raise NotImplementedError

    def stream(self, previous_text: str, current_text: str, delta_text: str) -> Delta | None:
        """The delta of one step, given the text before it and after it."""
        raise NotImplementedError

    def unstreamed_arguments(self) -> str:
        """Arguments of the last call parsed but not sent yet (sent with the stream's last delta)."""
        if not self.parsed_args:
            return ""
        expected = self.parsed_args[-1]
        if not isinstance(expected, str):
            from .text import dump_arguments

            expected = dump_arguments(expected)
        index = len(self.parsed_args) - 1
        sent = self.streamed_args[index] if index < len(self.streamed_args) else ""
        return expected[len(sent) :] if expected.startswith(sent) else ""


class ReasoningParser:
    """One request's reasoning parser: splits the thinking from the answer."""

    name: str = ""
    """vLLM's name for it (``--reasoning-parser``)."""

    start: str = "<think>"
    """The marker that opens the thinking."""

    end: str = "</think>"
    """The marker that closes it."""

    def __init__(self, start_id: int, end_id: int) -> None:
        self.start_id = start_id
        """The token id of ``start`` in the model's vocabulary."""
        self.end_id = end_id
        """The token id of ``end``."""

    def extract(self, text: str) -> tuple[str | None, str | None]:
        """(reasoning, content) of a whole output."""
        raise NotImplementedError

    def stream(self, previous_ids: Sequence[int], delta_text: str, delta_ids: Sequence[int]) -> Delta | None:
        """The delta of one step while the thinking may still be open."""
        raise NotImplementedError

    def closed_in(self, prompt_ids: Sequence[int]) -> bool:
        """vLLM's ``is_reasoning_end`` on the prompt: its last marker is the end marker (a template
        that rendered an empty thinking block), so the answer starts outside the thinking."""
        for token in reversed(prompt_ids):
            if token == self.start_id:
                return False
            if token == self.end_id:
                return True
        return False

    def ends_in(self, delta_ids: Sequence[int]) -> bool:
        """Whether this step closes the thinking (vLLM: its end marker's id is in the step)."""
        return self.end_id in delta_ids
