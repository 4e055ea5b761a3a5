"""The output parsers by vLLM's names (``--tool-call-parser``, ``--reasoning-parser``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

from ..errors import ReasoningMarkersError, UnknownReasoningParserError, UnknownToolParserError
from .base import ReasoningParser, ToolCallParser
from .compose import OutputParser
from .hermes import HermesToolParser
from .llama3_json import Llama3JsonToolParser
from .mistral import MistralToolParser
from .reasoning import DeepSeekR1ReasoningParser, Qwen3ReasoningParser

TOOL_PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes": HermesToolParser,
    "llama3_json": Llama3JsonToolParser,
    "mistral": MistralToolParser,
}
REASONING_PARSERS: dict[str, type[ReasoningParser]] = {
    "deepseek_r1": DeepSeekR1ReasoningParser,
    "qwen3": Qwen3ReasoningParser,
}

TOOL_PARSER_NAMES = tuple(TOOL_PARSERS)
"""Tool-call parsers this project has (``TOOL_CALL_PARSER``)."""

REASONING_PARSER_NAMES = tuple(REASONING_PARSERS)
"""Reasoning parsers this project has (``REASONING_PARSER``)."""


def output_parser(tool_call_parser: str | None, reasoning_parser: str | None, vocab: Mapping[str, int]) -> OutputParser:
    """The server's parsers from their names and the model's vocabulary (a reasoning parser needs
    its markers' ids: vLLM refuses a tokenizer without them, and so does this)."""
    tools: Callable[[], ToolCallParser] | None = None
    if tool_call_parser:
        if tool_call_parser not in TOOL_PARSERS:
            raise UnknownToolParserError(tool_call_parser, TOOL_PARSER_NAMES)
        tools = TOOL_PARSERS[tool_call_parser]
    reasoning: Callable[[], ReasoningParser] | None = None
    if reasoning_parser:
        if reasoning_parser not in REASONING_PARSERS:
            raise UnknownReasoningParserError(reasoning_parser)
        cls = REASONING_PARSERS[reasoning_parser]
        start, end = vocab.get(cls.start), vocab.get(cls.end)
        if start is None or end is None:
            raise ReasoningMarkersError(cls.__name__)
        reasoning = lambda: cls(start, end)  # noqa: E731 (a parser per request)
    return OutputParser(tools, reasoning)
