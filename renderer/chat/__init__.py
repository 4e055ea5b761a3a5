"""Chat rendering: OpenAI chat messages + ``ChatParams`` -> prompt text, as vLLM 0.32 renders them
(its request validation, message parsing and template application), in a bounded Jinja sandbox."""

from .apply import apply_chat_template, resolve_template_kwargs
from .content_format import detect_content_format, resolve_content_format
from .messages import MultiModalItem, ParsedMessages, developer_to_system, parse_messages
from .params import ChatParams
from .renderer import UNTRUSTED_TEMPLATE_MESSAGE, ChatRenderer, RenderedChat
from .request import ValidatedChatRequest, validate_chat_request
from .sandbox import TemplateLimits, compile_template
from .template import ChatTemplateSource, resolve_chat_template

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
