"""How one chat's generated text is to be split: decided where the chat is rendered (``chat_render``,
which knows the request's ``tools`` and ``tool_choice`` and the server's settings), applied where
the text is made (``detokenize``). It crosses that process boundary as the ``output_parsing``
tensor, the JSON of ``OutputParsing``.

vLLM 0.32's rules (``vllm/entrypoints/openai/chat_completion/serving.py``, ``vllm/parser/``): its
chat serving builds a parser only with ``--reasoning-parser`` or, with ``--enable-auto-tool-choice``,
``--tool-call-parser``; tool calls are read only when the request sends ``tools`` and its
``tool_choice`` is not "none"; the tool parser's ``adjust_request`` then keeps special tokens in the
text (Hermes and Mistral: their markers may be special tokens).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import (
    ForcedToolChoiceUnavailableError,
    OutputParserNameError,
    OutputParsingJSONError,
    OutputParsingObjectError,
)

# vLLM's tool parsers whose ``adjust_request`` sets ``skip_special_tokens`` False when tools are in
# use (``HermesToolParser.adjust_request``; Mistral's parser engine, ``ParserEngine.adjust_request``).
KEEPS_SPECIAL_TOKENS = frozenset({"hermes", "mistral"})


@dataclass(frozen=True)
class OutputParsing:
    """What ``detokenize`` makes of one request's text beside the text itself."""

    tool_call_parser: str | None = None
    """vLLM's name of the tool-call parser to read calls with; None: no calls are read."""

    tool_choice: Any = None
    """The request's ``tool_choice`` when calls are read: "auto", "required" or a named function
    (``{"type": "function", "function": {"name": ...}}``)."""

    reasoning_parser: str | None = None
    """vLLM's name of the reasoning parser that splits the thinking off; None: none."""

    keep_special_tokens: bool = False
    """Whether the text is decoded with special tokens kept, whatever ``skip_special_tokens`` says
    (the tool parser needs its markers)."""

    @property
    def active(self) -> bool:
        """Whether any parser runs."""
        return self.tool_call_parser is not None or self.reasoning_parser is not None

    def to_json(self) -> str:
        """The ``output_parsing`` tensor's text; "" when nothing is parsed."""
        if not self.active:
            return ""
        return json.dumps(
            {
                "tool_call_parser": self.tool_call_parser,
                "tool_choice": self.tool_choice,
                "reasoning_parser": self.reasoning_parser,
                "keep_special_tokens": self.keep_special_tokens,
            },
            ensure_ascii=False,
        )

    @classmethod
    def from_json(cls, text: str | None) -> "OutputParsing":
        """The inverse of ``to_json`` (None or "": nothing parsed)."""
        if not text:
            return cls()
        try:
            bag = json.loads(text)
        except ValueError as e:
            raise OutputParsingJSONError(e) from None
        if not isinstance(bag, Mapping):
            raise OutputParsingObjectError()
        from .registry import REASONING_PARSER_NAMES, TOOL_PARSER_NAMES

        for key, names in (("tool_call_parser", TOOL_PARSER_NAMES), ("reasoning_parser", REASONING_PARSER_NAMES)):
            if bag.get(key) is not None and bag.get(key) not in names:
                raise OutputParserNameError(key, bag.get(key))
        return cls(
            tool_call_parser=bag.get("tool_call_parser"),
            tool_choice=bag.get("tool_choice"),
            reasoning_parser=bag.get("reasoning_parser"),
            keep_special_tokens=bool(bag.get("keep_special_tokens")),
        )

    @property
    def forced_tool_choice(self) -> str | None:
        """How a forcing ``tool_choice`` is described ("required", or the named function); None
        when it forces no call."""
        if self.tool_call_parser is None or self.tool_choice == "auto":
            return None
        if isinstance(self.tool_choice, Mapping):
            return f'function "{self.tool_choice["function"]["name"]}"'
        return f'"{self.tool_choice}"'

    def check_servable(self) -> None:
        """Refuse what no engine here can honour before any token is generated: vLLM makes a
        forced ``tool_choice`` ("required", a named function) come true with structured outputs
        (a grammar in the sampler); this project's engines take no guided decoding, and parsing an
        unconstrained answer as a forced call would return calls the model never made."""
        forced = self.forced_tool_choice
        if forced is not None:
            raise ForcedToolChoiceUnavailableError(forced)


def output_parsing_for(
    tool_call_parser: str | None, reasoning_parser: str | None, tools: Any, tool_choice: Any
) -> OutputParsing:
    """One request's parsing under the server's parsers (``tool_call_parser``: the one in use, None
    without auto tool choice), its ``tools`` and validated ``tool_choice``."""
    reads_calls = tool_call_parser is not None and bool(tools) and tool_choice not in (None, "none")
    return OutputParsing(
        tool_call_parser=tool_call_parser if reads_calls else None,
        tool_choice=tool_choice if reads_calls else None,
        reasoning_parser=reasoning_parser or None,
        keep_special_tokens=reads_calls and tool_call_parser in KEEPS_SPECIAL_TOKENS,
    )
