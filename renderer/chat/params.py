"""``ChatParams``: how one request's messages become a prompt (vLLM's chat parameters).

A request's ``chat_params`` JSON bag is parsed with the same strictness as ``tokenize_params``:
unknown fields and wrongly typed values are refused with a message naming the field. ``tools`` are
normalized to the shape vLLM hands templates (its pydantic ``model_dump``: ``type``, then
``function`` with ``name``, ``description`` and ``parameters`` present even when null, then any
extra keys), so ``{{ tools | tojson }}`` prints what vLLM prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..errors import (
    FieldTypeError,
    GenerationPromptConflictError,
    UnexpectedChatTemplateKwargsError,
    UnknownFieldError,
)
from .content_format import CONTENT_FORMATS

BAG = "chat_params"

CONFLICT_MESSAGE = "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
# transformers' own wording, which vLLM returns when add_generation_prompt was left at its default.
HF_CONFLICT_MESSAGE = (
    "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message "
    "when you want the model to continue the final message, and add_generation_prompt when you want "
    "to add a header that will prompt it to start a new assistant message instead."
)

UNEXPECTED_KWARGS = frozenset({"chat_template", "tokenize"})
"""Keys vLLM refuses inside ``chat_template_kwargs``."""


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

    tools: list[dict[str, Any]] | None = None
    """Tool definitions for the template, normalized as vLLM does."""

    documents: list[dict[str, Any]] | None = None
    """Retrieval documents for templates that take them."""

    media_io_kwargs: Mapping[str, Any] | None = None
    """Options for loading media, per modality; passed on to the multimodal stage."""

    mm_processor_kwargs: Mapping[str, Any] | None = None
    """Options for the multimodal processor; passed on to the multimodal stage."""

    def __post_init__(self) -> None:
        if self.continue_final_message and self.add_generation_prompt:
            raise GenerationPromptConflictError(HF_CONFLICT_MESSAGE)
        if self.chat_template_content_format not in CONTENT_FORMATS:
            raise FieldTypeError(
                BAG, "chat_template_content_format", "one of 'auto', 'string', 'openai'",
                self.chat_template_content_format,
            )
        unexpected = UNEXPECTED_KWARGS & set(self.chat_template_kwargs)
        if unexpected:
            raise UnexpectedChatTemplateKwargsError(
                "Found unexpected chat template kwargs from request: "
                "{" + ", ".join(repr(k) for k in sorted(unexpected)) + "}"
            )

    @classmethod
    def from_request(cls, bag: Mapping[str, Any] | None) -> "ChatParams":
        """Parse a request's ``chat_params`` bag over the defaults."""
        if bag is None and cls is ChatParams:
            return _DEFAULT_PARAMS  # frozen; most requests send no bag
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
            raise GenerationPromptConflictError(CONFLICT_MESSAGE)
        changes: dict[str, Any] = {}
        for name, value in bag.items():
            changes[name] = _PARSERS[name](name, value)
        if "chat_template_kwargs" in changes:
            overrides = changes["chat_template_kwargs"] or {}
            changes["chat_template_kwargs"] = {
                **self.chat_template_kwargs,
                **{k: v for k, v in overrides.items() if v is not None and v != "auto"},
            }
        return replace(self, **changes)

    def template_kwargs(self) -> dict[str, Any]:
        """``chat_template_kwargs`` with the request-level switches folded in (vLLM's merge)."""
        merged = dict(self.chat_template_kwargs)
        merged["add_generation_prompt"] = self.add_generation_prompt
        merged["continue_final_message"] = self.continue_final_message
        if self.documents is not None:
            merged["documents"] = self.documents
        return merged


_DEFAULT_PARAMS = ChatParams()


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


def _documents(name: str, value: Any) -> list[dict[str, Any]] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldTypeError(BAG, name, "a list of objects or null", value)
    for i, doc in enumerate(value):
        if not isinstance(doc, Mapping):
            raise FieldTypeError(BAG, f"{name}[{i}]", "an object", doc)
    return [dict(d) for d in value]


def normalize_tools(value: Any, name: str = "tools") -> list[dict[str, Any]] | None:
    """Validate tool definitions and give them vLLM's ``model_dump`` shape."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise FieldTypeError(BAG, name, "a list of tool objects or null", value)
    out = []
    for i, tool in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(tool, Mapping):
            raise FieldTypeError(BAG, where, "an object", tool)
        if tool.get("type", "function") != "function":
            raise FieldTypeError(BAG, f"{where}.type", "'function'", tool.get("type"))
        fn = tool.get("function")
        if not isinstance(fn, Mapping):
            raise FieldTypeError(BAG, f"{where}.function", "an object", fn)
        if not isinstance(fn.get("name"), str):
            raise FieldTypeError(BAG, f"{where}.function.name", "a string", fn.get("name"))
        if fn.get("description") is not None and not isinstance(fn["description"], str):
            raise FieldTypeError(BAG, f"{where}.function.description", "a string or null", fn["description"])
        if fn.get("parameters") is not None and not isinstance(fn["parameters"], Mapping):
            raise FieldTypeError(BAG, f"{where}.function.parameters", "an object or null", fn["parameters"])
        function = {"name": fn["name"], "description": fn.get("description"), "parameters": fn.get("parameters")}
        function.update({k: v for k, v in fn.items() if k not in function})
        normalized = {"type": "function", "function": function}
        normalized.update({k: v for k, v in tool.items() if k not in normalized})
        out.append(normalized)
    return out


_PARSERS = {
    "chat_template": _str_or_null,
    "chat_template_content_format": _content_format,
    "chat_template_kwargs": _object_or_null,
    "add_generation_prompt": _bool,
    "continue_final_message": _bool,
    "tools": lambda name, value: normalize_tools(value, name),
    "documents": _documents,
    "media_io_kwargs": _object_or_null,
    "mm_processor_kwargs": _object_or_null,
}

REQUEST_FIELDS = tuple(_PARSERS)
"""Fields a request's ``chat_params`` may carry."""
