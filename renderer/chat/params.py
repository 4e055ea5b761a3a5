"""``ChatParams``: how one request's messages become a prompt (vLLM's chat parameters).

A request's ``chat_params`` JSON bag is parsed with the same strictness as ``tokenize_params``:
unknown fields and wrongly typed values are refused with a message naming the field. ``tools`` and
``documents`` (and ``tool_choice``) are kept as sent: vLLM's request model validates them with the
messages (``request.validate_chat_request``), and its messages are the ones a client gets.

``chat_template_kwargs`` may carry ``chat_template`` (a template, as vLLM takes it when the request
names none) and ``tokenize`` (ignored: the renderer always returns text).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..errors import (
    FieldTypeError,
    GenerationPromptConflictError,
    UnknownFieldError,
)
from ..json_fields import check_depth
from .content_format import CONTENT_FORMATS
from .tool_choice import UNSET

BAG = "chat_params"

TEMPLATE_CHOICE_KWARGS = frozenset({"chat_template", "tokenize"})
"""Keys of ``chat_template_kwargs`` that choose how to render, not what the template sees."""


@dataclass(frozen=True)
class ChatParams:
    """How to turn chat messages into a prompt."""

    chat_template: str | None = None
    """A Jinja chat template (or the name of one of the tokenizer's named templates); None uses the model's."""

    chat_template_content_format: str = "auto"
    """"string", "openai", or "auto" to detect from the template."""

    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra template variables (filtered to those the template uses, plus transformers' own)."""

    add_generation_prompt: bool = True
    """Append the header that starts the assistant's reply."""

    continue_final_message: bool = False
    """Leave the final message open so the model continues it (prefill)."""

    tools: Any = None
    """Tool definitions as sent (validated and normalized when the chat is rendered)."""

    tool_choice: Any = UNSET
    """``tool_choice`` as sent ("none", "auto", "required", a named function, null), or ``UNSET``
    when not sent: vLLM then takes "auto" if tools are given (validated when rendered)."""

    documents: Any = None
    """Retrieval documents as sent, for templates that take them (validated when rendered)."""

    media_io_kwargs: Mapping[str, Any] | None = None
    """Options for loading media, per modality; passed on to the multimodal stage."""

    mm_processor_kwargs: Mapping[str, Any] | None = None
    """Options for the multimodal processor; passed on to the multimodal stage."""

    def __post_init__(self) -> None:
        if self.continue_final_message and self.add_generation_prompt:
            raise GenerationPromptConflictError(sent=False)
        if self.chat_template_content_format not in CONTENT_FORMATS:
            raise FieldTypeError(
                BAG,
                "chat_template_content_format",
                "one of 'auto', 'string', 'openai'",
                self.chat_template_content_format,
            )

    @classmethod
    def from_request(cls, bag: Mapping[str, Any] | None) -> "ChatParams":
        """Parse a request's ``chat_params`` bag over the defaults."""
        if (bag is None or (type(bag) is dict and not bag)) and cls is ChatParams:
            return DEFAULT_PARAMS  # frozen; most requests send no bag, or an empty one
        return cls().with_request(bag)

    def with_request(self, bag: Mapping[str, Any] | None) -> "ChatParams":
        """Overlay a request's ``chat_params`` on these (server) defaults, validating every field.

        ``chat_template_kwargs`` merge over the defaults' kwargs (request values that are null or
        "auto" do not override, as in vLLM); every other field replaces the default.
        """
        if bag is None:
            return self
        if not isinstance(bag, Mapping):
            raise FieldTypeError("request", BAG, "a JSON object", bag)
        unknown = [k for k in bag if k not in REQUEST_FIELDS]
        if unknown:
            raise UnknownFieldError(BAG, unknown, list(REQUEST_FIELDS))
        # vLLM checks the raw request before defaults apply.
        if bag.get("continue_final_message") is True and bag.get("add_generation_prompt") is True:
            raise GenerationPromptConflictError(sent=True)
        changes: dict[str, Any] = {}
        for name, value in bag.items():
            # Before any copy or validation recurses into it (the bag is level 1).
            check_depth(value, f"{BAG}.{name}", start=1)
            changes[name] = _PARSERS[name](name, value)
        if "chat_template_kwargs" in changes:
            overrides = changes["chat_template_kwargs"] or {}
            changes["chat_template_kwargs"] = {
                **self.chat_template_kwargs,
                **{k: v for k, v in overrides.items() if v is not None and v != "auto"},
            }
        return replace(self, **changes)

    @property
    def request_template(self) -> str | None:
        """The template the request supplies: ``chat_template``, else one inside the kwargs."""
        if self.chat_template is not None:
            return self.chat_template
        kw_template = self.chat_template_kwargs.get("chat_template")
        return kw_template if isinstance(kw_template, str) else None

    @property
    def sends_template(self) -> bool:
        """Whether the request carries a template of its own (vLLM's trust check)."""
        return self.chat_template is not None or self.chat_template_kwargs.get("chat_template") is not None

    def template_kwargs(self, documents: Any = None) -> dict[str, Any]:
        """``chat_template_kwargs`` with the request-level switches folded in (vLLM's merge);
        ``documents`` are the validated ones."""
        merged = dict(self.chat_template_kwargs)
        merged["add_generation_prompt"] = self.add_generation_prompt
        merged["continue_final_message"] = self.continue_final_message
        if documents is not None:
            merged["documents"] = documents
        return merged


DEFAULT_PARAMS = ChatParams()
"""The parameters of a request that sends no ``chat_params`` (or an empty bag): ``from_request``
returns this one object, which the renderer's plain-chat lane recognises by identity."""


# --- field parsers ------------------------------------------------------------------------------


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise FieldTypeError(BAG, name, "a boolean", value)
    return value


def _str_or_null(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise FieldTypeError(BAG, name, "a string or null", value)
    return value


def _object_or_null(name: str, value: Any) -> dict[str, Any] | None:
    if value is not None and not isinstance(value, Mapping):
        raise FieldTypeError(BAG, name, "a JSON object or null", value)
    return None if value is None else dict(value)


def _content_format(name: str, value: Any) -> str:
    if value is None:
        return "auto"
    if value not in CONTENT_FORMATS:
        raise FieldTypeError(BAG, name, "one of 'auto', 'string', 'openai'", value)
    return value


def _as_sent(name: str, value: Any) -> Any:
    return value


_PARSERS = {
    "chat_template": _str_or_null,
    "chat_template_content_format": _content_format,
    "chat_template_kwargs": _object_or_null,
    "add_generation_prompt": _bool,
    "continue_final_message": _bool,
    "tools": _as_sent,
    "tool_choice": _as_sent,
    "documents": _as_sent,
    "media_io_kwargs": _object_or_null,
    "mm_processor_kwargs": _object_or_null,
}

REQUEST_FIELDS = tuple(_PARSERS)
"""Fields a request's ``chat_params`` may carry."""
