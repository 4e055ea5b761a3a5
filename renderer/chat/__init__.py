"""Chat rendering: OpenAI chat messages + ``ChatParams`` -> prompt text, token-exact with
transformers' ``apply_chat_template`` and vLLM's message parsing, in a bounded Jinja sandbox."""

from .apply import apply_chat_template, resolve_template_kwargs
from .content_format import detect_content_format, resolve_content_format
from .messages import MultiModalItem, ParsedMessages, parse_messages
from .params import ChatParams, normalize_tools
from .renderer import ChatRenderer, RenderedChat
from .sandbox import TemplateLimits, compile_template
from .template import ChatTemplateSource, resolve_chat_template

__all__ = [
    "ChatParams", "ChatRenderer", "ChatTemplateSource", "MultiModalItem", "ParsedMessages",
    "RenderedChat", "TemplateLimits", "apply_chat_template", "compile_template",
    "detect_content_format", "normalize_tools", "parse_messages", "resolve_chat_template",
    "resolve_content_format", "resolve_template_kwargs",
]
