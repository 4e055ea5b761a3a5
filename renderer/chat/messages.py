"""OpenAI chat messages to the conversation a chat template sees, as vLLM parses them.

* ``content`` may be a string, ``null`` or a list of parts; a part is a string or an object with a
  ``type``: ``text`` (also ``input_text``/``output_text``), ``refusal``, ``image_url`` (a data URL,
  optional ``uuid``) or ``image_embeds``. A part without ``type`` is typed by its media key.
* Content format "openai" keeps a list of parts: text parts become ``{"type": "text", "text": ...}``
  and every image part becomes ``{"type": "image"}`` (unknown extra keys of a part are kept).
  Format "string" joins the text parts with "\\n" (``null`` content becomes ""); media parts add
  nothing unless the renderer is given a model placeholder string, which vLLM prepends once per
  item the text does not already contain.
* Images are not decoded here: each is collected, in order, as a ``MultiModalItem`` for the
  multimodal stage.
* Assistant ``tool_calls`` are checked and their ``arguments`` turned into a dict (a JSON string is
  parsed; invalid JSON or a non-object becomes ``{}``, as vLLM does so that a bad turn in the
  history cannot fail every later request); an empty list is dropped. ``reasoning`` is passed on
  as ``reasoning`` and ``reasoning_content``. Tool messages keep ``tool_call_id``; their list
  content becomes one string.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import (
    ContentPartError,
    InvalidMessagesError,
    MultiModalPlaceholderError,
    ToolCallError,
    UnknownRoleError,
    _short,
)

ROLES = ("assistant", "developer", "function", "system", "tool", "user")
"""Message roles of the chat API (``function`` is OpenAI's legacy tool role)."""

# Part type -> the key holding its text.
TEXT_PART_KEYS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
MEDIA_PART_TYPES = ("image_url", "image_embeds")
SUPPORTED_PART_TYPES = tuple(sorted([*TEXT_PART_KEYS, *MEDIA_PART_TYPES]))

# Keys that belong to a part's definition; any other key is passed through to the template.
_KNOWN_PART_KEYS = frozenset({
    "type", "text", "refusal", "image_url", "image_embeds", "uuid", "detail",
    "input_audio", "audio_url", "video_url", "file", "image_pil", "audio_embeds", "video_embeds",
})


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

    def to_json(self) -> str:
        """The item as the chat stage hands it to the multimodal stage (one JSON object)."""
        return json.dumps({"modality": self.modality, "source": self.source, "data": self.data, "uuid": self.uuid})

    @classmethod
    def from_json(cls, raw: str | bytes) -> "MultiModalItem":
        d = json.loads(raw)
        if not isinstance(d, dict):
            raise InvalidMessagesError("mm_items entries must be JSON objects.")
        return cls(modality=d.get("modality", "image"), source=d.get("source", "image_url"),
                   data=d.get("data"), uuid=d.get("uuid"), message_index=-1, part_index=-1)


@dataclass(frozen=True)
class ParsedMessages:
    """The conversation handed to the chat template, and the media it referred to."""

    conversation: list[dict[str, Any]]
    """One dict per message: ``role``, ``content`` and the role's extra fields."""

    mm_items: tuple[MultiModalItem, ...]
    """Media items in order of appearance."""


def parse_messages(
    messages: Any,
    content_format: str,
    *,
    image_placeholder: str | None = None,
) -> ParsedMessages:
    """Validate OpenAI chat messages and convert them for a template of ``content_format``."""
    if not isinstance(messages, list) or not messages:
        raise InvalidMessagesError(
            f"messages must be a non-empty list of message objects, got {_describe(messages)}."
        )
    items: list[MultiModalItem] = []
    conversation = [
        _parse_message(i, msg, content_format, items, image_placeholder) for i, msg in enumerate(messages)
    ]
    return ParsedMessages(conversation, tuple(items))


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "an empty list"
    return f"{type(value).__name__} {_short(value)}"


def _parse_message(
    i: int, msg: Any, fmt: str, items: list[MultiModalItem], placeholder: str | None,
) -> dict[str, Any]:
    where = f"messages[{i}]"
    if not isinstance(msg, Mapping):
        raise InvalidMessagesError(f"{where} must be an object, got {type(msg).__name__} {_short(msg)}.")
    if "role" not in msg:
        raise InvalidMessagesError(f"{where} is missing the required field 'role'.")
    role = msg["role"]
    if not isinstance(role, str):
        raise InvalidMessagesError(f"{where}.role must be a string, got {type(role).__name__} {_short(role)}.")
    if role not in ROLES:
        raise UnknownRoleError(
            f"{where}.role must be one of {', '.join(repr(r) for r in ROLES)}, got {role!r}."
        )

    content = msg.get("content")
    if content is None:
        parts: Sequence[Any] = []
    elif isinstance(content, str):
        parts = [content]
    elif isinstance(content, list):
        parts = content
    else:
        raise InvalidMessagesError(
            f"{where}.content must be a string, a list of content parts or null, "
            f"got {type(content).__name__} {_short(content)}."
        )
    result: dict[str, Any] = {"role": role, "content": _parse_content(i, parts, fmt, items, placeholder)}

    if role == "assistant":
        tool_calls = msg.get("tool_calls")
        if tool_calls is not None:
            parsed_calls = _parse_tool_calls(where, tool_calls)
            if parsed_calls:  # an empty list would steer templates off the plain-answer path
                result["tool_calls"] = parsed_calls
        reasoning = msg.get("reasoning")
        if reasoning is not None:
            if not isinstance(reasoning, str):
                raise InvalidMessagesError(
                    f"{where}.reasoning must be a string, got {type(reasoning).__name__} {_short(reasoning)}."
                )
            result["reasoning"] = reasoning
            result["reasoning_content"] = reasoning
    elif role == "tool":
        if "tool_call_id" in msg:
            call_id = msg["tool_call_id"]
            if not isinstance(call_id, str):
                raise InvalidMessagesError(
                    f"{where}.tool_call_id must be a string, got {type(call_id).__name__} {_short(call_id)}."
                )
            result["tool_call_id"] = call_id
        if isinstance(result["content"], list):
            result["content"] = _tool_content(result["content"])

    name = msg.get("name")
    if name is not None:
        if not isinstance(name, str):
            raise InvalidMessagesError(f"{where}.name must be a string, got {type(name).__name__} {_short(name)}.")
        result["name"] = name
    if role == "developer":
        result["tools"] = copy.deepcopy(msg.get("tools"))
    return result


def _tool_content(parts: list[dict[str, Any]]) -> Any:
    # Most templates print a tool result as a string; vLLM joins all-text lists into one.
    if any(p.get("type") != "text" for p in parts):
        return parts
    return "\n".join(p["text"] for p in parts)


def _parse_content(
    i: int, parts: Sequence[Any], fmt: str, items: list[MultiModalItem], placeholder: str | None,
) -> Any:
    wrapped: list[dict[str, Any]] = []
    texts: list[str] = []
    n_media = 0
    for j, part in enumerate(parts):
        where = f"messages[{i}].content[{j}]"
        if isinstance(part, str):
            ptype, payload, uuid = "text", part, None
        elif isinstance(part, Mapping):
            ptype, payload, uuid = _part_fields(where, part)
        else:
            raise ContentPartError(
                f"{where} must be a string or a content part object, got {type(part).__name__} {_short(part)}."
            )
        if ptype in TEXT_PART_KEYS:
            if payload is None:
                continue  # vLLM skips text parts without text
            if not isinstance(payload, str):
                raise ContentPartError(
                    f"{where}.{TEXT_PART_KEYS[ptype]} must be a string, got {type(payload).__name__} {_short(payload)}."
                )
            if payload:  # vLLM drops empty strings before joining (but keeps empty parts as parts)
                texts.append(payload)
            wrapped.append({"type": "text", "text": payload, **_extras(part)})
            continue
        modality = "image"
        index = sum(1 for it in items if it.modality == modality)
        if payload is None and uuid is None:
            raise ContentPartError(
                f"multi_modal_data[{modality!r}][{index}] is empty but "
                f"multi_modal_uuids[{modality!r}][{index}] is missing."
            )
        items.append(MultiModalItem(modality, ptype, payload, uuid, i, j))
        n_media += 1
        wrapped.append({"type": modality, **_extras(part)})
    if fmt == "openai":
        return wrapped
    text = "\n".join(texts)
    if placeholder and n_media:
        missing = n_media - text.count(placeholder)
        if missing < 0:
            raise MultiModalPlaceholderError(
                f"Found more '{placeholder}' placeholders in input prompt than actual multimodal data items."
            )
        return "\n".join([placeholder] * missing + ([text] if text else []))
    return text


def _extras(part: Any) -> dict[str, Any]:
    if not isinstance(part, Mapping):
        return {}
    return {k: copy.deepcopy(v) for k, v in part.items() if k not in _KNOWN_PART_KEYS}


def _part_fields(where: str, part: Mapping[str, Any]) -> tuple[str, Any, str | None]:
    """(type, payload, uuid) of a content part object."""
    ptype = part.get("type")
    if ptype is None:
        ptype = next((k for k in MEDIA_PART_TYPES if k in part), None)
        if ptype is None:
            raise ContentPartError("Missing 'type' field in multimodal part.")
    if not isinstance(ptype, str):
        raise ContentPartError("Invalid 'type' field in multimodal part.")
    if ptype in TEXT_PART_KEYS:
        return ptype, part.get(TEXT_PART_KEYS[ptype]), None
    if ptype not in MEDIA_PART_TYPES:
        raise ContentPartError(
            f"Unsupported chat content part type: {ptype!r}. Supported types: {', '.join(SUPPORTED_PART_TYPES)}."
        )
    uuid = part.get("uuid")
    if uuid is not None:
        if isinstance(uuid, bool) or not isinstance(uuid, (str, int)):
            raise ContentPartError(f"{where}.uuid must be a string, got {type(uuid).__name__} {_short(uuid)}.")
        uuid = str(uuid)
    if ptype == "image_url":
        url = part.get("image_url")
        if isinstance(url, Mapping):
            url = url.get("url")
        if url is not None and not isinstance(url, str):
            raise ContentPartError(
                f"{where}.image_url.url must be a string, got {type(url).__name__} {_short(url)}."
            )
        return ptype, url, uuid
    embeds = part.get("image_embeds")
    if embeds is not None and not isinstance(embeds, (str, Mapping)):
        raise ContentPartError(
            f"{where}.image_embeds must be a base64 string or an object of them, "
            f"got {type(embeds).__name__} {_short(embeds)}."
        )
    return ptype, copy.deepcopy(embeds), uuid


def _parse_tool_calls(where: str, tool_calls: Any) -> list[dict[str, Any]]:
    if not isinstance(tool_calls, list):
        raise ToolCallError(
            f"{where}.tool_calls must be a list, got {type(tool_calls).__name__} {_short(tool_calls)}."
        )
    out = []
    for k, call in enumerate(tool_calls):
        if not isinstance(call, Mapping):
            raise ToolCallError("assistant tool_calls entries must be objects.")
        function = call.get("function")
        if call.get("type", "function") != "function" or not isinstance(function, Mapping):
            raise ToolCallError("chat completions only support assistant tool_calls of type 'function'.")
        name = function.get("name")
        if not isinstance(name, str):
            raise ToolCallError(
                f"{where}.tool_calls[{k}].function.name must be a string, got {type(name).__name__} {_short(name)}."
            )
        call = copy.deepcopy(dict(call))
        call["function"] = dict(call["function"], arguments=_arguments(function.get("arguments")))
        out.append(call)
    return out


def _arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict: templates expect a mapping (transformers' convention)."""
    if not raw:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    parsed = raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            return {}
    return parsed if isinstance(parsed, dict) else {}
