"""Server settings refused at start-up, in vLLM's words for the same arguments: not a request's
fault, so never a 400 (these derive from ``ValueError``, not ``RenderError``).
"""

from __future__ import annotations


class ParserSettingError(ValueError):
    """``TOOL_CALL_PARSER`` / ``REASONING_PARSER`` / ``ENABLE_AUTO_TOOL_CHOICE`` refused at load, in
    vLLM's words for the same arguments."""


class UnknownToolParserError(ParserSettingError):
    """A tool-call parser this server does not have."""

    def __init__(self, name: str, names: tuple[str, ...]) -> None:
        super().__init__(f"invalid tool call parser: {name} (chose from {{ {','.join(names)} }})")


class UnknownReasoningParserError(ParserSettingError):
    """A reasoning parser this server does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"reasoning_parser_name='{name}' has not been registered")


class AutoToolChoiceWithoutParserError(ParserSettingError):
    """Auto tool choice on without a tool-call parser to read the calls."""

    def __init__(self) -> None:
        super().__init__("Error: --enable-auto-tool-choice requires --tool-call-parser")


class ReasoningMarkersError(ParserSettingError):
    """A reasoning parser whose start and end markers are not tokens of the model."""

    def __init__(self, parser: str) -> None:
        super().__init__(f"{parser} reasoning parser could not locate think start/end tokens in the tokenizer!")
