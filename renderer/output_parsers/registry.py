"""The output parsers by vLLM's names (``--tool-call-parser``, ``--reasoning-parser``)."""

from __future__ import annotations

TOOL_PARSER_NAMES = ("hermes", "llama3_json", "mistral")
"""Tool-call parsers this project has (``TOOL_CALL_PARSER``)."""

REASONING_PARSER_NAMES = ("deepseek_r1", "qwen3")
"""Reasoning parsers this project has (``REASONING_PARSER``)."""
