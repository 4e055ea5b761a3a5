"""Validated chat messages to the conversation a chat template sees, as vLLM parses them.

Input: the messages ``validate_chat_request`` returns (vLLM's request model already refused what it
refuses and rebuilt each message). Per message:

* ``content`` ``null`` is no parts, a string is one text part; a system message loses a leading
  Claude Code billing-header line. Parts are read in order (a lazily validated list fails here with
  pydantic's text). A string part is text; an object is typed by its ``type`` (or, without one or
  with a ``uuid``, by its media key): ``text``/``input_text``/``output_text``/``refusal``/``thinking``
  are text (``text`` and ``refusal`` without text are skipped), ``image_url``/``input_image``/
  ``image_embeds`` are image items, ``tool_reference`` is its name.
* Content format "openai" keeps a list: ``{"type": "text", "text": ...}`` per text and
  ``{"type": "image"}`` per image, each with the part's keys vLLM does not know. Format "string"
  joins the non-empty texts with "\\n"; media add nothing unless the renderer has a model
  placeholder string, which goes in front once per item the text does not already hold.
* Then the role's fields: an assistant's ``tool_calls`` and ``reasoning`` (also copied to
  ``reasoning_content``), a tool message's ``tool_call_id`` (its all-text content list joined into
  one string), ``name`` and ``task`` when strings, a developer message's ``tools``.
* Finally assistant tool calls: an empty list is dropped, ``arguments`` become a dict (a JSON
  string is parsed; invalid JSON or a non-object becomes ``{}``, so one bad turn in a history
  cannot fail every later request).

``developer_to_system``: a template that never mentions the developer role gets developer
messages as system messages, merged with the other system messages into one at the front.
Images are not decoded here: each is collected, in order, as a ``MultiModalItem``.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..errors import (
    ContentPartShapeError,
    ImagePartValidationError,
    MediaItemsCountError,
    MediaItemsDataError,
    MediaItemsEntryError,
    MultiModalPlaceholderError,
    NotSubscriptableError,
    PartTypeInvalidError,
    PartTypeMissingError,
    PartUUIDMissingError,
    TextPartJoinError,
    ToolCallEntryError,
    ToolCallTypeError,
    UnknownPartTypeError,
    UnrenderedPartTypeError,
)
from .request import ChatCompletionContentPartParam, content_parts
from .validation_message import sanitize_message
from .shape import plain_fields

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal", "thinking"})
"""Part types parsed as text."""

SKIP_WITHOUT_CONTENT = ("text", "refusal")
"""Text part types skipped (not refused) when their text is missing."""

IMAGE_PART_TYPES = ("image_url", "input_image", "image_embeds")
"""Part types that are image items."""

RENDERED_PART_TYPES = tuple(sorted(TEXT_PART_TYPES | {*IMAGE_PART_TYPES, "tool_reference"}))
"""Part types this renderer renders (vLLM also parses audio, video and prompt-embedding parts)."""

# Part types vLLM parses (its multimodal parser map): the ones a request may name.
PARSED_PART_TYPES = (
    "text",
    "thinking",
    "input_text",
    "output_text",
    "input_image",
    "image_url",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "image_pil",
    "audio_url",
    "input_audio",
    "refusal",
    "video_url",
    "tool_reference",
)
# Keys a part without a usable type is recognized by, in vLLM's order, and the key holding its data.
_SNIFFED_KEYS = (
    ("image_url", "image_url"),
    ("image_pil", "image_pil"),
    ("image_embeds", "image_embeds"),
    ("audio_embeds", "audio_embeds"),
    ("video_embeds", "video_embeds"),
    ("prompt_embeds", "data"),
    ("audio_url", "audio_url"),
    ("input_audio", "input_audio"),
    ("video_url", "video_url"),
    ("tool_reference", "name"),
)
_TEXT_KEY = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal", "thinking": "thinking"}
# Claude Code stamps system prompts with a line that changes on every request; vLLM drops it.
BILLING_HEADER = "x-anthropic-billing-header"


def _known_part_keys() -> frozenset[str]:
    """Every key some content-part type declares; the other keys of a part reach the template."""
    keys: set[str] = set()
    pending: list[Any] = [ChatCompletionContentPartParam]
    while pending:
        node = pending.pop()
        if typing.get_origin(node) in (typing.Union, types.UnionType):
            pending.extend(typing.get_args(node))
        elif hasattr(node, "__required_keys__"):
            keys |= node.__required_keys__ | node.__optional_keys__
    return frozenset(keys)


KNOWN_PART_KEYS = _known_part_keys()


@dataclass(frozen=True)
class MultiModalItem:
    """One media item of a chat, left for the multimodal stage to load and process."""

    modality: str
    """Kind of media: "image"."""

    source: str
    """The part type it came from: "image_url" or "image_embeds"."""

    data: Any
    """The data URL string (``image_url``), the embeddings payload (``image_embeds``), or None
    when only ``uuid`` names an item the processor cache already holds."""

    uuid: str | None
    """Caller-given identity of the item; None means "hash the content"."""

    message_index: int
    """Index of the message in the request's ``messages``."""

    part_index: int
    """Index of the part in that message's content."""

    def to_wire(self) -> tuple[str, bytes]:
        """The item as the chat stage hands it to the multimodal stage: one JSON object of
        metadata (an ``mm_items`` element) and the data URL's text as UTF-8 (an ``mm_data``
        element), so a megabyte of base64 is neither escaped into JSON nor parsed out of it.
        Other data (an embeddings payload) stays inside the JSON, with an empty ``mm_data``."""
        meta = {"modality": self.modality, "source": self.source, "uuid": self.uuid}
        if isinstance(self.data, str):
            return json.dumps({**meta, "data": None, "data_in_mm_data": True}), self.data.encode(
                "utf-8", "surrogatepass"
            )
        return json.dumps({**meta, "data": self.data}), b""

    @classmethod
    def from_wire(cls, raw: str | bytes, data: bytes | None) -> "MultiModalItem":
        """The inverse of ``to_wire``: ``raw`` the ``mm_items`` element, ``data`` the item's
        ``mm_data`` element (None where the request carried no ``mm_data``)."""
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise MediaItemsEntryError()
        value = d.get("data")
        if d.get("data_in_mm_data"):
            if data is None:
                raise MediaItemsDataError()
            value = bytes(data).decode("utf-8", "surrogatepass")
        return cls(
            modality=d.get("modality", "image"),
            source=d.get("source", "image_url"),
            data=value,
            uuid=d.get("uuid"),
            message_index=-1,
            part_index=-1,
        )


def items_from_wire(raw_items: Any, raw_data: Any) -> list[MultiModalItem]:
    """The ``mm_items`` and ``mm_data`` tensors (arrays of BYTES elements, or None when absent)
    as items; the two arrays go in step, one element per item."""
    metas = [] if raw_items is None else list(raw_items.reshape(-1))
    data: list[Any] = [None] * len(metas) if raw_data is None else list(raw_data.reshape(-1))
    if len(data) != len(metas):
        raise MediaItemsCountError(len(data), len(metas))
    return [MultiModalItem.from_wire(m, d) for m, d in zip(metas, data)]


@dataclass(frozen=True)
class ParsedMessages:
    """The conversation handed to the chat template, and the media it referred to."""

    conversation: list[dict[str, Any]]
    """One dict per message: ``role``, ``content`` and the role's extra fields."""

    mm_items: tuple[MultiModalItem, ...]
    """Media items in order of appearance."""


def parse_messages(
    messages: list[Any],
    content_format: str,
    *,
    image_placeholder: str | None = None,
) -> ParsedMessages:
    """Convert validated messages (``validate_chat_request``) for a template of ``content_format``."""
    items: list[MultiModalItem] = []
    conversation = [_parse_message(i, msg, content_format, items, image_placeholder) for i, msg in enumerate(messages)]
    _postprocess_tool_calls(conversation)
    return ParsedMessages(conversation, tuple(items))


def _parse_message(
    i: int,
    msg: Any,
    fmt: str,
    items: list[MultiModalItem],
    placeholder: str | None,
) -> dict[str, Any]:
    plain = plain_message(msg, fmt)
    return plain if plain is not None else parse_message(i, msg, fmt, items, placeholder)


# Roles whose message of a string content parses to itself; the others carry fields of their own.
_PLAIN_ROLES = frozenset({"system", "user", "assistant", "developer"})


def plain_message(msg: Any, fmt: str) -> dict[str, Any] | None:
    """What ``parse_message`` returns for a plain message (a ``dict`` of exactly-``str`` ``role``
    and ``content``, and maybe ``name``: most of any chat), built in one step; None for anything
    else. Per message, the general parse costs about four times as much for the same result
    (``tests/unit/test_lane_equivalence.py`` holds the two equal)."""
    fields = plain_fields(msg)
    if fields is None or fields[0] not in _PLAIN_ROLES:
        return None
    role, content, name = fields
    if role == "system" and content.startswith(BILLING_HEADER):
        return None
    # One text part: "string" joins the non-empty texts (this one, or none: "" either way);
    # "openai" keeps it wrapped, empty or not (the wrapped part is what is tested for truth).
    result: dict[str, Any] = {
        "role": role,
        "content": content if fmt != "openai" else [{"type": "text", "text": content}],
    }
    if name is not None:
        result["name"] = name
    if role == "developer":
        result["tools"] = None
    return result


def parse_message(
    i: int,
    msg: Any,
    fmt: str,
    items: list[MultiModalItem],
    placeholder: str | None,
) -> dict[str, Any]:
    """Message ``i`` as the template sees it, any shape (media collected into ``items``)."""
    if not isinstance(msg, Mapping):
        # A harmony-shaped message passes vLLM's validation, then fails where vLLM reads it.
        raise NotSubscriptableError(type(msg).__name__)
    role = msg["role"]
    content = msg.get("content")
    if content is None:
        parts: Any = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    else:
        parts = content
    if role == "system":
        parts = _strip_billing_header(content_parts(parts))
    result: dict[str, Any] = {"role": role, "content": _parse_content(i, content_parts(parts), fmt, items, placeholder)}

    if role == "assistant":
        if msg.get("tool_calls") is not None:
            result["tool_calls"] = list(msg["tool_calls"])
        reasoning = msg.get("reasoning")
        if reasoning is not None:
            result["reasoning"] = reasoning
            result["reasoning_content"] = reasoning  # the name most templates read
    elif role == "tool":
        if "tool_call_id" in msg:
            result["tool_call_id"] = msg["tool_call_id"]
        if isinstance(result["content"], list):
            result["content"] = _tool_content(result["content"])
    for key in ("name", "task"):
        if isinstance(msg.get(key), str):
            result[key] = msg[key]
    if role == "developer":
        result["tools"] = msg.get("tools")
    return result


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    out = []
    for part in parts:
        if isinstance(part, str):
            text: Any = part
        elif isinstance(part, Mapping) and part.get("type") == "text":
            text = part.get("text")
        else:
            text = None
        if not (isinstance(text, str) and text.startswith(BILLING_HEADER)):
            out.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _tool_content(parts: list[Any]) -> Any:
    # Most templates print a tool result as a string; vLLM joins all-text lists into one.
    if any(isinstance(p, Mapping) and p.get("type") != "text" for p in parts):
        return parts
    texts = [p.get("text", "") for p in parts if isinstance(p, Mapping) and p.get("type") == "text"]
    return _join_texts(texts) if texts else ""


def _parse_content(
    i: int,
    parts: list[Any],
    fmt: str,
    items: list[MultiModalItem],
    placeholder: str | None,
) -> Any:
    wrapped: list[Any] = []
    n_media = 0
    for j, part in enumerate(parts):
        parsed = _parse_part(i, j, part, fmt == "openai", items)
        if parsed is _MEDIA:
            n_media += 1
        elif parsed:  # vLLM keeps truthy results only: "" texts are dropped
            wrapped.append(parsed)
    if fmt == "openai":
        return wrapped
    text = _join_texts(wrapped)
    if placeholder and n_media:
        missing = n_media - text.count(placeholder)
        if missing < 0:
            raise MultiModalPlaceholderError(placeholder)
        return "\n".join([placeholder] * missing + ([text] if text else []))
    return text


_MEDIA = object()  # marks a media part in string format (it adds no text of its own)


def _join_texts(texts: list[Any]) -> str:
    """The texts joined by newlines; a text that is not a string (a text part without its text)
    fails as vLLM's join fails, with Python's words."""
    for k, text in enumerate(texts):
        if not isinstance(text, str):
            raise TextPartJoinError(k, type(text).__name__)
    return "\n".join(texts)


def _parse_part(i: int, j: int, part: Any, wrap: bool, items: list[MultiModalItem]) -> Any:
    """One part: its text (a string, or a wrapped dict), a wrapped media dict, ``_MEDIA``, or None."""
    if isinstance(part, str):
        return {"type": "text", "text": part} if wrap else part
    if not isinstance(part, Mapping):
        raise ContentPartShapeError(i, j)
    ptype, payload = _part_type_and_payload(part)
    if ptype in SKIP_WITHOUT_CONTENT and payload is None:
        return None
    if ptype in TEXT_PART_TYPES:
        return {"type": "text", "text": payload, **_extras(part)} if wrap else payload
    if ptype == "tool_reference":
        return {"type": "tool_reference", "name": payload} if wrap else payload
    if ptype not in IMAGE_PART_TYPES:
        if ptype in PARSED_PART_TYPES:
            # Audio, video, PIL images and prompt embeddings: vLLM parses them, this renderer does not.
            raise UnrenderedPartTypeError(ptype, RENDERED_PART_TYPES)
        supported = sorted(set(PARSED_PART_TYPES) | set(SKIP_WITHOUT_CONTENT))
        raise UnknownPartTypeError(ptype, supported)
    uuid = part.get("uuid")
    uuid = None if uuid is None else str(uuid)
    index = sum(1 for it in items if it.modality == "image")
    if payload is None and uuid is None:
        raise PartUUIDMissingError(index)
    source = "image_embeds" if ptype == "image_embeds" else "image_url"
    items.append(MultiModalItem("image", source, payload, uuid, i, j))
    return {"type": "image", **_extras(part)} if wrap else _MEDIA


def _part_type_and_payload(part: Mapping[str, Any]) -> tuple[str, Any]:
    """vLLM's reading of a part object: its type, and the text or media payload it carries."""
    ptype = part.get("type")
    if isinstance(ptype, str) and ptype in PARSED_PART_TYPES and part.get("uuid") is None:
        return ptype, _typed_payload(ptype, part)
    if ptype is None or part.get("uuid") is not None:
        for key, data_key in _SNIFFED_KEYS:
            if key in part:
                payload = part.get(data_key)
                if isinstance(payload, Mapping) and key in ("image_url", "audio_url", "video_url"):
                    payload = payload.get("url")
                return key, payload
        raise PartTypeMissingError()
    if not isinstance(ptype, str):
        raise PartTypeInvalidError()
    return ptype, None


_IMAGE_PART = None  # TypeAdapter of OpenAI's image part, built on first use


def _typed_payload(ptype: str, part: Mapping[str, Any]) -> Any:
    if ptype in _TEXT_KEY:
        return part.get(_TEXT_KEY[ptype])
    if ptype == "image_url":
        return _validated_image_part(part).get("image_url", {}).get("url")
    if ptype == "input_image":
        return part.get("image_url")
    if ptype == "tool_reference":
        return part.get("name")
    if ptype == "prompt_embeds":
        return part.get("data")
    return part.get(ptype)


def _validated_image_part(part: Mapping[str, Any]) -> Mapping[str, Any]:
    """vLLM validates a typed image part again (OpenAI's type) before reading its URL."""
    global _IMAGE_PART
    if _IMAGE_PART is None:
        from openai.types.chat import ChatCompletionContentPartImageParam

        _IMAGE_PART = TypeAdapter(ChatCompletionContentPartImageParam)
    try:
        return _IMAGE_PART.validate_python(part)
    except ValidationError as e:
        raise ImagePartValidationError(sanitize_message(str(e))) from None


def _extras(part: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in part.items() if k not in KNOWN_PART_KEYS}


def _postprocess_tool_calls(conversation: list[dict[str, Any]]) -> None:
    """Assistant tool calls as templates expect them (vLLM's pass after parsing)."""
    for message in conversation:
        tool_calls = message.get("tool_calls")
        if message["role"] != "assistant" or not isinstance(tool_calls, list):
            continue
        if not tool_calls:  # an empty list would steer templates off the plain-answer path
            message.pop("tool_calls")
            continue
        for call in tool_calls:
            if not isinstance(call, dict):
                raise ToolCallEntryError()
            function = call.get("function")
            if call.get("type", "function") != "function" or not isinstance(function, dict):
                raise ToolCallTypeError()
            function["arguments"] = _arguments(function.get("arguments"))


def _arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict: templates expect a mapping (transformers' convention)."""
    if not raw:
        return {}
    if isinstance(raw, dict):
        return raw
    parsed = raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return parsed if isinstance(parsed, dict) else {}


def mentions_developer_role(chat_template: str) -> bool:
    """Whether the template names the developer role (vLLM looks for the quoted word)."""
    return '"developer"' in chat_template or "'developer'" in chat_template


def developer_to_system(conversation: list[dict[str, Any]], chat_template: str) -> list[dict[str, Any]]:
    """For a template that does not know the developer role: developer messages become system
    messages (without their ``tools``), and all system messages merge into one at the front."""
    if mentions_developer_role(chat_template) or not any(m["role"] == "developer" for m in conversation):
        return conversation
    converted = []
    for message in conversation:
        if message["role"] == "developer":
            message = {**message, "role": "system"}
            message.pop("tools", None)
        converted.append(message)
    return _merge_system_messages(converted)


def _merge_system_messages(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One system message at the front, its text the non-empty system texts joined by blank lines;
    the conversation unchanged when it already has at most one, first."""
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    merge = False
    for i, message in enumerate(conversation):
        if message["role"] != "system":
            others.append(message)
            continue
        merge = merge or i > 0 or bool(texts)
        content = message.get("content", "")
        if isinstance(content, list):
            content = _join_texts(
                [
                    p["text"] if isinstance(p, Mapping) else p
                    for p in content
                    if (isinstance(p, Mapping) and "text" in p) or isinstance(p, str)
                ]
            )
        if content:
            texts.append(content)
    if not merge:
        return conversation
    return [{"role": "system", "content": "\n\n".join(texts)}, *others]
