"""``tool_choice``: vLLM 0.32's defaulting and validation, and its refusal without a tool parser.

Two places in vLLM decide it, and both are reproduced here:

* its request model (``check_tool_usage``): ``tool_choice`` left out with ``tools`` given is
  "auto"; anything but "none" or null needs ``tools``; only "none", "auto", "required" or a named
  function that is one of ``tools`` is taken. Those errors end in ``(parameter=tool_choice...)``;
* its online renderer: unless tool calls are parsed (``--enable-auto-tool-choice`` with a
  ``--tool-call-parser``), "auto" is refused, and "required" or a named function too, each with
  its own message (``param`` null there). vLLM's in-process renderer does not check this, so
  neither does ``ChatRenderer`` unless it is given a ``ToolChoicePolicy`` (the server's stage is).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import stage_params as sp
from ..errors import (
    AutoToolChoiceDisabledError,
    AutoToolChoiceWithoutParserError,
    ToolChoiceFunctionError,
    ToolChoiceNameError,
    ToolChoiceNameMissingError,
    ToolChoiceValueError,
    ToolChoiceWithoutToolsError,
    ToolParserRequiredError,
    UnknownReasoningParserError,
    UnknownToolChoiceError,
    UnknownToolParserError,
)
from ..flags import parse_flag
from ..output_parsers.request import OutputParsing, output_parsing_for


class _Unset:
    """The type of ``UNSET``."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""``tool_choice`` the request did not send (vLLM tells it apart from an explicit null)."""


def effective_tool_choice(tools: Any, tool_choice: Any) -> Any:
    """The ``tool_choice`` vLLM's request model validates and keeps: "auto" when left out with
    ``tools`` given, its default "none" when left out without; else as sent. Raises vLLM's
    ``tool_choice`` errors (an empty ``tools`` list is refused before, as ``EmptyToolsError``)."""
    if tool_choice is UNSET:
        return "auto" if tools else "none"
    if tool_choice is None or tool_choice == "none":
        return tool_choice
    if tools is None:
        raise ToolChoiceWithoutToolsError()
    if not isinstance(tool_choice, Mapping):
        if tool_choice not in ("auto", "required"):
            raise ToolChoiceValueError(tool_choice)
        return tool_choice
    function = tool_choice.get("function")
    if not isinstance(function, Mapping):
        raise ToolChoiceFunctionError(function)
    if "name" not in function:
        raise ToolChoiceNameMissingError()
    name = function["name"]
    if not isinstance(name, str) or not name:
        raise ToolChoiceNameError(name)
    if name not in _tool_names(tools):
        raise UnknownToolChoiceError()
    return tool_choice


def _tool_names(tools: Any) -> list[Any]:
    # Malformed tools are skipped here: the request model then reports them in pydantic's words.
    if not isinstance(tools, list):
        return []
    return [
        t["function"].get("name") for t in tools if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
    ]


def tool_parser_names() -> tuple[str, ...]:
    """The tool-call parsers this project has, by vLLM's names."""
    from ..output_parsers.registry import TOOL_PARSER_NAMES

    return TOOL_PARSER_NAMES


@dataclass(frozen=True)
class ToolChoicePolicy:
    """The server's tool-call settings (vLLM's ``--enable-auto-tool-choice`` and
    ``--tool-call-parser``); checked at start-up as vLLM checks its arguments."""

    enable_auto_tool_choice: bool = False
    """``ENABLE_AUTO_TOOL_CHOICE``: let the model decide when to call tools ("auto")."""

    tool_call_parser: str = ""
    """``TOOL_CALL_PARSER``: vLLM's name of the parser that reads tool calls from the output
    (a key of ``output_parsers.registry.TOOL_PARSERS``); empty for none."""

    reasoning_parser: str = ""
    """``REASONING_PARSER``: vLLM's ``--reasoning-parser`` (a key of ``REASONING_PARSERS``), which splits a
    reasoning model's thinking into ``reasoning``; empty for none. Its markers must be tokens of
    the model's vocabulary (``check_vocabulary``)."""

    def __post_init__(self) -> None:
        if self.reasoning_parser:
            from ..output_parsers.registry import REASONING_PARSER_NAMES

            if self.reasoning_parser not in REASONING_PARSER_NAMES:
                raise UnknownReasoningParserError(self.reasoning_parser)
        if not self.enable_auto_tool_choice:
            return  # vLLM reads the parser only with auto tool choice on
        if not self.tool_call_parser:
            raise AutoToolChoiceWithoutParserError()
        names = tool_parser_names()
        if self.tool_call_parser not in names:
            raise UnknownToolParserError(self.tool_call_parser, tuple(names))

    @classmethod
    def from_config(cls, params: Mapping[str, str]) -> "ToolChoicePolicy":
        """From a model config's ``parameters`` (absent ones take the defaults)."""
        return cls(
            enable_auto_tool_choice=parse_flag(params.get(sp.ENABLE_AUTO_TOOL_CHOICE) or "false"),
            tool_call_parser=params.get(sp.TOOL_CALL_PARSER) or "",
            reasoning_parser=params.get(sp.REASONING_PARSER) or "",
        )

    def check_vocabulary(self, vocab: Mapping[str, int]) -> None:
        """Refuse, at start-up, a reasoning parser whose markers the model's vocabulary lacks (as
        vLLM refuses to build it)."""
        from ..output_parsers.registry import output_parser

        output_parser(self.parser, self.reasoning_parser or None, vocab)

    def output_parsing(self, tools: Any, tool_choice: Any) -> OutputParsing:
        """What ``detokenize`` reads from one request's output (``tool_choice`` validated)."""
        return output_parsing_for(self.parser, self.reasoning_parser or None, tools, tool_choice)

    @property
    def parser(self) -> str | None:
        """The tool-call parser in use: vLLM builds one only with auto tool choice on."""
        return self.tool_call_parser if self.enable_auto_tool_choice else None

    def check(self, tool_choice: Any) -> None:
        """Refuse a (validated) ``tool_choice`` the server cannot honour without a parser."""
        if self.parser is not None or tool_choice is None or tool_choice == "none":
            return
        if tool_choice == "auto":
            raise AutoToolChoiceDisabledError()
        if isinstance(tool_choice, Mapping):
            raise ToolParserRequiredError(f'function "{tool_choice["function"]["name"]}"')
        raise ToolParserRequiredError(f'"{tool_choice}"')
