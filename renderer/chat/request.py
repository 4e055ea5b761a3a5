"""vLLM's request validation of a chat: its pydantic request models, reproduced.

vLLM 0.32 validates ``/v1/chat/completions`` bodies with pydantic before rendering anything, and
that validation shapes what templates see, not only what is refused:

* each message is validated against the union of OpenAI's message types (``openai.types.chat``),
  vLLM's own catch-all message type (any ``role`` string) and openai-harmony's ``Message``;
  pydantic's smart union picks one, and the message comes out as that type rebuilt: its declared
  keys first, in the type's order, then the keys it does not declare (the request model allows
  extra keys), so a template printing a whole tool call or message with ``tojson`` prints vLLM's
  order;
* OpenAI's types take ``content`` and ``tool_calls`` as lazy iterables: their items are validated
  only when read, so a bad content part surfaces while the messages are parsed, with pydantic's
  own text ("... validation errors for ValidatorIterator");
* ``reasoning_content`` is renamed ``reasoning`` (when ``reasoning`` is unset) before validation;
* tool definitions come out as vLLM dumps them: ``type``, then ``function`` with ``name``,
  ``description`` and ``parameters`` (``strict`` and ``defer_loading`` only when set), every
  other key dropped; an empty ``tools`` list is refused;
* ``documents`` must be objects of strings.

The models below declare the same types, field for field and under the same names, as vLLM's
(``vllm/entrypoints/openai/chat_completion/protocol.py``, ``vllm/renderers/chat_utils.py``,
``vllm/entrypoints/generate/base/protocol.py``), so pydantic makes the same choices and reports
the same errors; refusals are worded as vLLM's HTTP layer words them (``format_validation_error``).
"""

# No ``from __future__ import annotations``: pydantic reads these TypedDicts' annotations at runtime.

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Literal, Optional, TypeAlias

from openai.types.chat import (
    ChatCompletionContentPartInputAudioParam,
    ChatCompletionContentPartRefusalParam,
    ChatCompletionFunctionToolParam,
    ChatCompletionMessageToolCallParam,
)
from openai.types.chat import ChatCompletionContentPartParam as OpenAIChatCompletionContentPartParam
from openai.types.chat import ChatCompletionMessageParam as OpenAIChatCompletionMessageParam
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_serializer, model_validator
from typing_extensions import Required, TypedDict

from ..errors import ChatRequestValidationError, EmptyToolsError, NotIterableError, RequestRecursionError
from .fast_request import ARGUMENTS_LEVEL, fast_validate
from .known_tools import KnownTools, tools_key
from .tool_choice import UNSET, effective_tool_choice
from .validation_message import format_validation_error, sanitize_message
from ..json_fields import MAX_NESTING_DEPTH, check_depth, json_copy, json_text_depth, nesting_depth, nesting_error

# --- content parts vLLM adds to OpenAI's (same names and fields as vLLM's) -------------------


class AudioURL(TypedDict, total=False):
    url: Required[str]


class ChatCompletionContentPartAudioParam(TypedDict, total=False):
    audio_url: Required[AudioURL]
    type: Required[Literal["audio_url"]]


MultiModalEmbedsPayload: TypeAlias = str | dict[str, str | list[int | float]]


class ChatCompletionContentPartImageEmbedsParam(TypedDict, total=False):
    image_embeds: MultiModalEmbedsPayload | None
    type: Required[Literal["image_embeds"]]
    uuid: str | None


class ChatCompletionContentPartAudioEmbedsParam(TypedDict, total=False):
    audio_embeds: MultiModalEmbedsPayload | None
    type: Required[Literal["audio_embeds"]]
    uuid: str | None


class ChatCompletionContentPartVideoEmbedsParam(TypedDict, total=False):
    video_embeds: MultiModalEmbedsPayload | None
    type: Required[Literal["video_embeds"]]
    uuid: str | None


class ChatCompletionContentPartPromptEmbedsParam(TypedDict, total=False):
    data: Required[str]
    type: Required[Literal["prompt_embeds"]]


class VideoURL(TypedDict, total=False):
    url: Required[str]


class ChatCompletionContentPartVideoParam(TypedDict, total=False):
    video_url: Required[VideoURL]
    type: Required[Literal["video_url"]]


class PILImage(BaseModel):
    """An in-memory image (only Python callers can send one; JSON never validates as it)."""

    image_pil: Image.Image
    model_config = ConfigDict(arbitrary_types_allowed=True)


class CustomChatCompletionContentPILImageParam(TypedDict, total=False):
    image_pil: PILImage | None
    uuid: str | None


class CustomChatCompletionContentSimpleImageParam(TypedDict, total=False):
    image_url: str | None
    uuid: str | None


class CustomChatCompletionContentSimpleAudioParam(TypedDict, total=False):
    audio_url: str | None


class CustomChatCompletionContentSimpleVideoParam(TypedDict, total=False):
    video_url: str | None
    uuid: str | None


class CustomThinkCompletionContentParam(TypedDict, total=False):
    thinking: Required[str]
    closed: bool
    type: Required[Literal["thinking"]]


class CustomChatCompletionContentToolReferenceParam(TypedDict, total=False):
    name: str
    type: Literal["tool_reference"]


ChatCompletionContentPartParam: TypeAlias = (
    OpenAIChatCompletionContentPartParam
    | ChatCompletionContentPartAudioParam
    | ChatCompletionContentPartInputAudioParam
    | ChatCompletionContentPartVideoParam
    | ChatCompletionContentPartRefusalParam
    | CustomChatCompletionContentPILImageParam
    | CustomChatCompletionContentSimpleImageParam
    | ChatCompletionContentPartImageEmbedsParam
    | ChatCompletionContentPartAudioEmbedsParam
    | ChatCompletionContentPartVideoEmbedsParam
    | ChatCompletionContentPartPromptEmbedsParam
    | CustomChatCompletionContentSimpleAudioParam
    | CustomChatCompletionContentSimpleVideoParam
    | CustomChatCompletionContentToolReferenceParam
    | str
    | CustomThinkCompletionContentParam
)


# --- messages ------------------------------------------------------------------------------------


class CustomChatCompletionMessageParam(TypedDict, total=False):
    """vLLM's catch-all message: any role, plus the fields vLLM adds."""

    role: Required[str]
    content: str | list[ChatCompletionContentPartParam]
    name: str
    tool_call_id: str | None
    tool_calls: list[ChatCompletionMessageToolCallParam] | None
    reasoning: str | None
    tools: list[ChatCompletionFunctionToolParam] | None
    task: str | None


class Role(str, Enum):
    """openai-harmony's author roles (a harmony ``Message`` is the union's last member)."""

    USER = "user"
    ASSISTANT = "assistant"
    SYSTEM = "system"
    DEVELOPER = "developer"
    TOOL = "tool"

    @classmethod
    def _missing_(cls, value: object) -> "Role":
        raise ValueError(f"Unknown role: {value!r}")


class Author(BaseModel):
    role: Role
    name: Optional[str] = None


class Content(BaseModel):
    pass


class Message(BaseModel):
    """openai-harmony's message shape: vLLM accepts it, then cannot render it as a chat."""

    author: Author
    content: list[Content] = Field(default_factory=list)
    channel: Optional[str] = None
    recipient: Optional[str] = None
    content_type: Optional[str] = None


ChatCompletionMessageParam: TypeAlias = OpenAIChatCompletionMessageParam | CustomChatCompletionMessageParam | Message


# --- tools ---------------------------------------------------------------------------------------


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        # Declared fields only; strict and defer_loading only when set (vLLM's dump).
        data = {k: v for k, v in handler(self).items() if k in type(self).model_fields}
        for optional in ("strict", "defer_loading"):
            if data.get(optional) is None:
                data.pop(optional, None)
        return data


class ChatCompletionToolsParam(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"] = "function"
    function: FunctionDefinition
    defer_loading: bool | None = None

    @model_validator(mode="after")
    def _propagate_defer_loading(self) -> "ChatCompletionToolsParam":
        if self.defer_loading is not None and self.function.defer_loading is None:
            self.function.defer_loading = self.defer_loading
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any) -> dict[str, Any]:
        data = {k: v for k, v in handler(self).items() if k in type(self).model_fields}
        if self.defer_loading is None:
            data.pop("defer_loading", None)
        return data


EMPTY_TOOLS_MESSAGE = str(EmptyToolsError())
"""vLLM's refusal of an empty ``tools`` list, its parameter named."""


class ChatCompletionNamedFunction(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str


class ChatCompletionNamedToolChoiceParam(BaseModel):
    model_config = ConfigDict(extra="allow")

    function: ChatCompletionNamedFunction
    type: Literal["function"] = "function"

    @model_validator(mode="wrap")
    @classmethod
    def _wrapped(cls, data: Any, handler: Any) -> Any:
        # vLLM's base model wraps validation (it logs extra fields), so pydantic names this union
        # member by the wrapper, a segment vLLM drops from error locations, not by the class.
        return handler(data)


class ChatRequestModel(BaseModel):
    """The fields of vLLM's ``ChatCompletionRequest`` that shape a render, in its field order."""

    model_config = ConfigDict(extra="allow")

    messages: list[ChatCompletionMessageParam]
    tools: list[ChatCompletionToolsParam] | None = None
    tool_choice: Literal["none"] | Literal["auto"] | Literal["required"] | ChatCompletionNamedToolChoiceParam | None = (
        "none"
    )
    documents: list[dict[str, str]] | None = None

    @model_validator(mode="after")
    def _materialize_tool_calls(self) -> "ChatRequestModel":
        # OpenAI's assistant type reads tool_calls lazily; vLLM reads them here, inside
        # validation, so a bad tool call is a validation error of the request.
        for msg in self.messages:
            if isinstance(msg, dict):
                tool_calls = msg.get("tool_calls")
                if tool_calls is not None and not isinstance(tool_calls, list):
                    msg["tool_calls"] = list(tool_calls)
        return self


def _prevalidate(body: dict[str, Any]) -> None:
    """vLLM's "before" validators, run outside pydantic as their errors escape it there.

    Messages: ``tool_calls`` that are not a list become ``list(tool_calls)`` (a non-iterable is
    refused with the TypeError's text), ``reasoning_content`` becomes ``reasoning``. An empty
    ``tools`` list is refused.
    """
    messages = body.get("messages")
    if isinstance(messages, list):
        for msg in messages:
            if not isinstance(msg, dict):
                continue
            tool_calls = msg.get("tool_calls")
            if tool_calls is not None and not isinstance(tool_calls, list):
                if not isinstance(tool_calls, Iterable):
                    raise NotIterableError(type(tool_calls).__name__)
                msg["tool_calls"] = list(tool_calls)
            reasoning_content = msg.pop("reasoning_content", None)
            if reasoning_content is not None and msg.get("reasoning") is None:
                msg["reasoning"] = reasoning_content
    if body.get("tools") == []:
        raise EmptyToolsError()


# --- the validated request -----------------------------------------------------------------------


@dataclass(frozen=True)
class ValidatedChatRequest:
    """A chat request after vLLM's request validation."""

    messages: list[Any]
    """The messages as vLLM's model rebuilt them: dicts (a content list may still be a lazy
    iterator, read by ``content_parts``), or a harmony ``Message``, which parsing refuses."""

    tools: list[dict[str, Any]] | None
    """Tool definitions as vLLM dumps them, or None."""

    documents: list[dict[str, str]] | None
    """Documents, or None."""

    tool_choice: Any = "none"
    """``tool_choice`` after vLLM's defaulting ("auto" when left out with tools): "none", "auto",
    "required", a named function as a dict, or None."""


def validate_chat_request(
    messages: Any, tools: Any = None, documents: Any = None, tool_choice: Any = UNSET
) -> ValidatedChatRequest:
    """Validate a chat's messages, tools, ``tool_choice`` (``UNSET``: not sent) and documents as
    vLLM's request model does.

    Raises ``ChatRequestValidationError`` (or ``EmptyToolsError``) with vLLM's message, and
    ``RequestNestingError`` for input nested too deeply to walk (a 400, never a crash).
    """
    # Plain chats (string contents, known keys, no tools) come back rebuilt without pydantic, equal
    # to what the full path returns (fast_request.py); a tools list validated before is not
    # validated again (known_tools.py); everything else, errors included, goes the full path.
    fast = fast_validate(messages, tools, documents, tool_choice)
    if fast is not None:
        return ValidatedChatRequest(fast[0], None, None, fast[1])
    if tools is not None:
        known = _validate_with_known_tools(messages, tools, documents, tool_choice)
        if known is not None:
            return known
    return _validate_full(messages, tools, documents, tool_choice)


def _validate_tools_alone(tools: list[Any]) -> list[dict[str, Any]]:
    # No message and tool_choice "none": nothing but the tools can fail or shape the result.
    dumped = _validate_full([], tools, None, "none").tools
    if dumped is None:  # cannot happen for the non-empty list sent; not kept if it did
        raise ValueError("tools validated to None")
    return dumped


KNOWN_TOOLS = KnownTools(_validate_tools_alone)
"""This process's validated tool lists (``known_tools.py``)."""

# tool_choice values the request model takes as they are when tools are given (a named function
# is rebuilt by pydantic and checked against the tools: the full path).
_PLAIN_CHOICES = frozenset({"none", "auto", "required"})


def _validate_with_known_tools(
    messages: Any, tools: Any, documents: Any, tool_choice: Any
) -> ValidatedChatRequest | None:
    """The full validation's result for a request whose ``tools`` list validated before: the
    messages and documents validated without it, the list from ``KNOWN_TOOLS``. The request model
    validates each field on its own, and only ``tool_choice`` reads the tools. None when the list,
    the ``tool_choice`` or anything else is not one this can prove equal, or anything is refused:
    the full path then decides and words the errors."""
    plain_choice = (
        tool_choice is UNSET or tool_choice is None or type(tool_choice) is str and tool_choice in _PLAIN_CHOICES
    )
    key = tools_key(tools) if plain_choice else None
    validated_tools = None if key is None else KNOWN_TOOLS.validated(key)
    if validated_tools is None:
        return None
    try:
        fast = fast_validate(messages, None, documents, UNSET)
        rest = _validate_full(messages, None, documents) if fast is None else ValidatedChatRequest(fast[0], None, None)
    except Exception:  # noqa: BLE001 (refused: the full path words it with the tools' errors too)
        return None
    # With a non-empty list: "auto" when not sent, else as sent (each of these is valid).
    choice = effective_tool_choice(validated_tools, tool_choice)
    return ValidatedChatRequest(rest.messages, validated_tools, rest.documents, choice)


def _validate_full(
    messages: Any, tools: Any = None, documents: Any = None, tool_choice: Any = UNSET
) -> ValidatedChatRequest:
    """The full validation, vLLM's request model run on a copy of the request."""
    check_request_depth(messages, tools, documents)
    try:
        return _validate(messages, tools, documents, tool_choice)
    except RecursionError:  # a backstop: check_request_depth keeps validation far from the limit
        raise RequestRecursionError() from None


def check_request_depth(messages: Any, tools: Any = None, documents: Any = None) -> None:
    """Refuse messages, tools or documents nested deeper than ``MAX_NESTING_DEPTH`` (counting the
    field itself as level 1), and tool-call ``arguments`` JSON text that would parse deeper, with
    a ``RequestNestingError`` naming the field; iterative, so it cannot itself recurse too deep."""
    if isinstance(messages, (list, tuple)):
        if nesting_depth(messages, MAX_NESTING_DEPTH) is not None:  # one walk; name the message after
            for i, message in enumerate(messages):
                check_depth(message, f"messages[{i}]", start=1)
        for i, message in enumerate(messages):
            for j, call in enumerate(_tool_calls(message)):
                function = call.get("function") if isinstance(call, Mapping) else None
                arguments = function.get("arguments") if isinstance(function, Mapping) else None
                if isinstance(arguments, str):
                    if json_text_depth(arguments, MAX_NESTING_DEPTH - ARGUMENTS_LEVEL) is not None:
                        raise nesting_error(f"messages[{i}].tool_calls[{j}].function.arguments")
    else:
        check_depth(messages, "messages")
    check_depth(tools, "tools")
    check_depth(documents, "documents")


def _tool_calls(message: Any) -> list[Any]:
    calls = message.get("tool_calls") if isinstance(message, Mapping) else None
    return list(calls) if isinstance(calls, (list, tuple)) else []


def _validate(messages: Any, tools: Any, documents: Any, tool_choice: Any = UNSET) -> ValidatedChatRequest:
    body: dict[str, Any] = {"messages": json_copy(messages)}
    if tools is not None:
        body["tools"] = json_copy(tools)
    if documents is not None:
        body["documents"] = json_copy(documents)
    _prevalidate(body)
    # vLLM's check_tool_usage, a "before" validator: on the tools as sent, after the empty-list check.
    body["tool_choice"] = effective_tool_choice(body.get("tools"), tool_choice)
    try:
        model = ChatRequestModel.model_validate(body, from_attributes=True)  # as FastAPI validates bodies
    except ValidationError as e:
        raise ChatRequestValidationError(format_validation_error(e)) from None
    dumped_tools = None if model.tools is None else [t.model_dump() for t in model.tools]
    choice = model.tool_choice
    if isinstance(choice, BaseModel):
        choice = choice.model_dump()
    return ValidatedChatRequest(list(model.messages), dumped_tools, model.documents, choice)


def content_parts(content: Iterable[Any]) -> list[Any]:
    """A message's content parts, reading a lazily validated list (vLLM reads them while parsing;
    a part that fails is reported with pydantic's own text)."""
    try:
        return list(content)
    except ValidationError as e:
        raise ChatRequestValidationError(sanitize_message(str(e))) from None
