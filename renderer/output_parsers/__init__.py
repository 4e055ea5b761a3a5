"""Tool calls and reasoning read from a model's output, as vLLM 0.32's parsers read them.

One module per model family (``hermes``, ``llama3_json``, ``mistral``, ``reasoning``), composed as
vLLM's chat serving composes them (``compose``), found by vLLM's names (``registry``). Held equal
to vLLM's own parsers on a recorded corpus (``tests/fixtures/vllm/output_parsers.json``).
"""

from .compose import OutputParser, OutputStream
from .registry import REASONING_PARSER_NAMES, TOOL_PARSER_NAMES, output_parser
from .types import Delta, ParsedOutput, ToolCall, ToolCallDelta

__all__ = [
    "REASONING_PARSER_NAMES",
    "TOOL_PARSER_NAMES",
    "Delta",
    "OutputParser",
    "OutputStream",
    "ParsedOutput",
    "ToolCall",
    "ToolCallDelta",
    "output_parser",
]
