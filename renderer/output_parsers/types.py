"""What an output parser returns: a whole output split, or one streamed delta (vLLM's shapes)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


def new_tool_call_id() -> str:
    """A tool-call id in vLLM's form (``chatcmpl-tool-`` and 32 hex digits)."""
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class ToolCall:
    """One complete tool call parsed from an output."""

    name: str
    """The function's name."""

    arguments: str
    """Its arguments as JSON text (``json.dumps(..., ensure_ascii=False)`` of what the model wrote)."""


@dataclass(frozen=True)
class ParsedOutput:
    """A whole output split as vLLM's serving layer splits it (non-streamed responses)."""

    content: str | None
    """The text a client sees as ``message.content`` (None when there is none)."""

    reasoning: str | None = None
    """The thinking (``message.reasoning_content``), when a reasoning parser is in use."""

    tool_calls: tuple[ToolCall, ...] = ()
    """The tool calls (``message.tool_calls``), when a tool-call parser found any."""


@dataclass(frozen=True)
class ToolCallDelta:
    """One piece of a streamed tool call (``delta.tool_calls[i]``)."""

    index: int
    """Which call of the output this piece belongs to (0-based)."""

    id: str | None = None
    """The call's id, on its first piece only."""

    type: str | None = None
    """"function" where vLLM sends it (the first piece; Mistral's every piece)."""

    name: str | None = None
    """The function's whole name, on its first piece."""

    arguments: str | None = None
    """The next piece of the arguments' JSON text ("" is sent too, as vLLM does)."""

    def to_json(self) -> dict[str, Any]:
        """As vLLM serializes it (absent fields left out)."""
        out: dict[str, Any] = {"index": self.index}
        if self.id is not None:
            out["id"] = self.id
        if self.type is not None:
            out["type"] = self.type
        function = {k: v for k, v in (("name", self.name), ("arguments", self.arguments)) if v is not None}
        out["function"] = function
        return out


@dataclass(frozen=True)
class Delta:
    """What one streamed step adds (vLLM's ``DeltaMessage``); None is returned for nothing."""

    content: str | None = None
    """New content text."""

    reasoning: str | None = None
    """New reasoning text."""

    tool_calls: tuple[ToolCallDelta, ...] = field(default_factory=tuple)
    """New tool-call pieces."""

    def to_json(self) -> dict[str, Any]:
        """As vLLM serializes it (absent fields left out; ``tool_calls`` only when there are any)."""
        out: dict[str, Any] = {}
        if self.content is not None:
            out["content"] = self.content
        if self.reasoning is not None:
            out["reasoning"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [t.to_json() for t in self.tool_calls]
        return out
