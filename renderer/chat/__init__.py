"""Chat rendering: OpenAI chat messages + ``ChatParams`` -> prompt text, as vLLM 0.32 renders them
(its request validation, message parsing and template application), in a bounded Jinja sandbox."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each name is imported from its module on first use (PEP 562): a process that needs one light
# module of this package (the OpenAI front reads ``params`` and ``validation_message``) does not
# pay for the request model, the ``openai`` types and the Jinja sandbox.
_HOME = {
    "apply_chat_template": "apply",
    "resolve_template_kwargs": "apply",
    "detect_content_format": "content_format",
    "resolve_content_format": "content_format",
    "MultiModalItem": "messages",
    "ParsedMessages": "messages",
    "developer_to_system": "messages",
    "parse_messages": "messages",
    "ChatParams": "params",
    "UNTRUSTED_TEMPLATE_MESSAGE": "renderer",
    "ChatRenderer": "renderer",
    "RenderedChat": "renderer",
    "ValidatedChatRequest": "request",
    "validate_chat_request": "request",
    "TemplateLimits": "sandbox",
    "compile_template": "sandbox",
    "ChatTemplateSource": "template",
    "resolve_chat_template": "template",
}

if TYPE_CHECKING:
    from .apply import apply_chat_template, resolve_template_kwargs
    from .content_format import detect_content_format, resolve_content_format
    from .messages import MultiModalItem, ParsedMessages, developer_to_system, parse_messages
    from .params import ChatParams
    from .renderer import UNTRUSTED_TEMPLATE_MESSAGE, ChatRenderer, RenderedChat
    from .request import ValidatedChatRequest, validate_chat_request
    from .sandbox import TemplateLimits, compile_template
    from .template import ChatTemplateSource, resolve_chat_template


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "UNTRUSTED_TEMPLATE_MESSAGE",
    "ChatParams",
    "ChatRenderer",
    "ChatTemplateSource",
    "MultiModalItem",
    "ParsedMessages",
    "RenderedChat",
    "TemplateLimits",
    "ValidatedChatRequest",
    "apply_chat_template",
    "compile_template",
    "detect_content_format",
    "developer_to_system",
    "parse_messages",
    "resolve_chat_template",
    "resolve_content_format",
    "resolve_template_kwargs",
    "validate_chat_request",
]
