"""Chat requests: the messages, the chat template (found, compiled, rendered, sandboxed, in its
render worker) and ``tool_choice``.
"""

from __future__ import annotations

from .base import RenderError
from .params import InvalidParamsError, ParamsNestingError


class ChatError(RenderError):
    """A chat request (messages, chat params or chat template) the renderer refuses."""


class InvalidMessagesError(ChatError):
    """``messages`` is not a non-empty list of well-formed OpenAI chat messages."""


# transformers' own wording, which vLLM returns when add_generation_prompt was left at its default.
_TRANSFORMERS_CONFLICT = (
    "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message "
    "when you want the model to continue the final message, and add_generation_prompt when you want "
    "to add a header that will prompt it to start a new assistant message instead."
)


class EmptyConversationError(InvalidMessagesError):
    """A conversation with no message left to render (transformers' words, as vLLM answers them)."""

    def __init__(self) -> None:
        super().__init__("Cannot apply chat template to an empty conversation. Provide at least one message.")


class EmptyMessagesError(InvalidMessagesError):
    """``messages`` is absent or blank: there is no chat to render."""

    def __init__(self) -> None:
        super().__init__("messages is empty: send a JSON array of chat messages.")


class MediaItemsEntryError(InvalidMessagesError):
    """An ``mm_items`` element (the chat stage's hand-over of a message's media) that is not a JSON object."""

    def __init__(self) -> None:
        super().__init__("mm_items entries must be JSON objects.")


class MediaItemsDataError(InvalidMessagesError):
    """An ``mm_items`` element that refers to its ``mm_data`` element where none was sent."""

    def __init__(self) -> None:
        super().__init__("An mm_items entry refers to mm_data, but no mm_data element was sent for it.")


class MediaItemsCountError(InvalidMessagesError):
    """``mm_data`` and ``mm_items`` not in step: one data element per item."""

    def __init__(self, data: int, items: int) -> None:
        super().__init__(f"mm_data has {data} elements for {items} mm_items entries.")


class ContentPartError(InvalidMessagesError):
    """A content part is missing its type, has an unsupported type or malformed fields. The
    group: each way is a subclass that words its own message."""


class ContentPartShapeError(ContentPartError):
    """Part ``part`` of message ``message``'s content is neither a string nor an object."""

    def __init__(self, message: int, part: int) -> None:
        super().__init__(f"messages[{message}].content[{part}] must be a string or a content part object.")


class TextPartJoinError(ContentPartError):
    """A text to join (item ``index``) that is not a string: Python's words, as vLLM's join fails."""

    def __init__(self, index: int, kind: str) -> None:
        super().__init__(f"sequence item {index}: expected str instance, {kind} found")


class UnrenderedPartTypeError(ContentPartError):
    """A part type vLLM parses (audio, video, PIL images, prompt embeddings) that this renderer
    does not render; ``supported`` are the ones it does."""

    def __init__(self, part_type: str, supported: list[str] | tuple[str, ...]) -> None:
        super().__init__(
            f"Unsupported chat content part type for this renderer: {part_type!r}. "
            f"Supported types: {', '.join(supported)}."
        )


class UnknownPartTypeError(ContentPartError):
    """A part type vLLM does not know (vLLM's words, naming the type)."""

    def __init__(self, part_type: str, supported: list[str]) -> None:
        super().__init__(
            f"Unsupported chat content part type: {part_type!r}. Supported types: {', '.join(supported)}.",
            parameter="type",
            value=part_type,
        )


class PartTypeMissingError(ContentPartError):
    """A part object with no ``type`` and no key that tells it (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("Missing 'type' field in multimodal part.", parameter="type")


class PartTypeInvalidError(ContentPartError):
    """A part object whose ``type`` is not a string (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("Invalid 'type' field in multimodal part.", parameter="type")


class PartUUIDMissingError(ContentPartError):
    """An image part with neither data nor a uuid; ``index`` is its place among the request's images
    (vLLM's words)."""

    def __init__(self, index: int) -> None:
        super().__init__(
            f"multi_modal_data['image'][{index}] is empty but multi_modal_uuids['image'][{index}] is missing."
        )


class ImagePartValidationError(ContentPartError):
    """A typed image part that fails OpenAI's image part type; ``detail`` is pydantic's message
    (free-form), as vLLM answers it."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class ToolCallError(InvalidMessagesError):
    """An assistant message's ``tool_calls`` are malformed. The group: each way is a subclass that
    words its own message."""


class ToolCallEntryError(ToolCallError):
    """An assistant ``tool_calls`` entry that is not an object."""

    def __init__(self) -> None:
        super().__init__("assistant tool_calls entries must be objects.", parameter="tool_calls")


class ToolCallTypeError(ToolCallError):
    """An assistant tool call of a type other than ``function``, or without a ``function`` object."""

    def __init__(self) -> None:
        super().__init__(
            "chat completions only support assistant tool_calls of type 'function'.", parameter="tool_calls"
        )


class MultiModalPlaceholderError(InvalidMessagesError):
    """Text holds more media placeholders than the message has media items (vLLM's words)."""

    def __init__(self, placeholder: str) -> None:
        super().__init__(
            f"Found more '{placeholder}' placeholders in input prompt than actual multimodal data items.",
            parameter="messages",
        )


class RequestNestingError(InvalidMessagesError):
    """``messages``, ``tools`` or ``documents`` (the path ``field``) nest deeper than ``limit``."""

    def __init__(self, field: str, limit: int) -> None:
        super().__init__(ParamsNestingError.template.format(field=field, limit=limit))


class RequestRecursionError(RequestNestingError):
    """A chat request that validation recursed too deeply on (the backstop behind the depth check)."""

    def __init__(self) -> None:
        # Its own words: no field or limit was measured.
        InvalidMessagesError.__init__(self, "The chat request is nested too deeply (messages, tools or documents).")


class RenderDataNestingError(RequestNestingError):
    """Chat request data too deeply nested to send to a request template's render worker."""

    def __init__(self) -> None:
        # Its own words: no field or limit was measured.
        InvalidMessagesError.__init__(self, "Chat request data is nested too deeply to render.")


class ChatRequestValidationError(InvalidMessagesError):
    """The chat request fails vLLM's request models (messages, tool calls, content parts, tools,
    documents); ``detail`` is vLLM's message, pydantic's errors included (free-form)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class NotSubscriptableError(ChatRequestValidationError):
    """A message of a type (``kind``, a harmony-shaped message) that passes vLLM's validation and
    fails where vLLM reads it, with Python's words."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"'{kind}' object is not subscriptable")


class NotIterableError(ChatRequestValidationError):
    """``tool_calls`` of a type (``kind``) that is not iterable, failing with Python's words, as vLLM fails."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"'{kind}' object is not iterable")


class GenerationPromptConflictError(InvalidParamsError):
    """``continue_final_message`` and ``add_generation_prompt`` both True: in vLLM's request
    model's words when the request sent both (``sent``), else in transformers' words, which vLLM
    returns when ``add_generation_prompt`` was left at its default."""

    def __init__(self, sent: bool) -> None:
        if sent:
            super().__init__("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        else:
            super().__init__(_TRANSFORMERS_CONFLICT)


class TemplateCallArgumentError(InvalidParamsError):
    """A ``chat_template_kwargs`` key that collides with an argument vLLM passes to ``function``
    itself: Python refuses the call, and vLLM answers with Python's words (``keyword`` when Python
    calls it a keyword argument)."""

    def __init__(self, function: str, name: str, keyword: bool = False) -> None:
        kind = "keyword argument" if keyword else "argument"
        super().__init__(f"{function}() got multiple values for {kind} {name!r}")


class AssistantTokensMaskError(InvalidParamsError):
    """``return_assistant_tokens_mask`` in the template kwargs: vLLM renders with
    ``return_dict=False``, which transformers refuses alongside it (transformers' words)."""

    def __init__(self) -> None:
        super().__init__("`return_assistant_tokens_mask=True` requires `return_dict=True` and `tokenize=True`")


class DocumentsError(InvalidParamsError):
    """``documents`` transformers cannot use: not iterable (``detail`` is then Python's own
    message, free-form, as vLLM answers it) or, without ``detail``, not a list of objects
    (transformers' words)."""

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(
            detail if detail is not None else "Documents should be a list of dicts with 'title' and 'text' keys!"
        )


class ContinueFinalMessageError(ChatError):
    """``continue_final_message`` cannot continue the final message (transformers' checks). The
    group: each way is a subclass that words its own message."""


class ContinueWithGenerationPromptError(ContinueFinalMessageError):
    """``continue_final_message`` with ``add_generation_prompt`` at the template's apply step
    (transformers' words)."""

    def __init__(self) -> None:
        super().__init__(_TRANSFORMERS_CONFLICT)


class FinalMessageTypeError(ContinueFinalMessageError):
    """A final message whose text cannot take the continue tag; ``detail`` is Python's own
    ``TypeError`` message, which vLLM answers with (free-form)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class FinalMessageFieldError(ContinueFinalMessageError):
    """The final message has no ``field`` (the one ``continue_final_message`` names, else
    ``content``) to continue (transformers' words)."""

    def __init__(self, field: str) -> None:
        super().__init__(f'continue_final_message is set but the final message has no "{field}" to continue!')


class ContinueFieldNotInTemplateError(ContinueFinalMessageError):
    """``continue_final_message`` names a field the chat template never reads (transformers' words)."""

    def __init__(self, field: str) -> None:
        super().__init__(
            f'continue_final_message is set to "{field}" but this is not an accepted field in the chat_template'
        )


class NoTextToContinueError(ContinueFinalMessageError):
    """A final message of content parts none of which holds text (transformers' words)."""

    def __init__(self) -> None:
        super().__init__(
            "continue_final_message is set but we could not find any text to continue in the final message!"
        )


class FinalMessageNotRenderedError(ContinueFinalMessageError):
    """The rendered chat does not hold the final message to continue (transformers' words, which
    run its two sentences together as transformers does)."""

    def __init__(self, final: str, rendered: str) -> None:
        super().__init__(
            "continue_final_message is set but the final message does not appear in the chat after "
            "applying the chat template! This can happen if the chat template deletes portions of "
            "the final message. Please verify the chat template and final message in your chat to "
            "ensure they are compatible."
            f"Final message to continue: {final}\nRendered chat:\n{rendered}"
        )


class EmptyToolsError(InvalidParamsError):
    """``tools`` is an empty list (vLLM and OpenAI refuse it: omit the field instead)."""

    def __init__(self) -> None:
        super().__init__(
            "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely.",
            parameter="tools",
        )


class ChatTemplateError(ChatError):
    """The chat template cannot be found, compiled or rendered."""


class ChatTemplateResolutionError(ChatTemplateError):
    """Neither the request, the processor nor the tokenizer supplies a chat template (transformers'
    words, as vLLM answers them)."""

    def __init__(self) -> None:
        super().__init__(
            "As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
            "chat template if the tokenizer does not define one."
        )


class UntrustedChatTemplateError(ChatTemplateError):
    """A request supplied a chat template and the server does not trust request templates (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__(
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template."
        )


class ChatTemplateSyntaxError(ChatTemplateError):
    """The chat template is not valid Jinja; ``detail`` is Jinja's own message, as vLLM returns it
    (free-form)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class ChatTemplateCompileError(ChatTemplateSyntaxError):
    """A chat template Jinja parsed but Python could not compile, for a reason no other class names;
    ``reason`` is the compiler's own message."""

    def __init__(self, reason: object) -> None:
        super().__init__(f"Chat template cannot be compiled: {reason}")


class ChatTemplateNestingError(ChatTemplateSyntaxError):
    """A chat template nests too deeply to parse or compile (Jinja's parser recursion, Python's
    limit of 20 statically nested blocks, its compiler's recursion) or is too large to compile."""

    def __init__(self) -> None:
        super().__init__("Chat template is nested too deeply to parse or compile.")


class ChatTemplateBlocksError(ChatTemplateNestingError):
    """A chat template whose compiled code Python refuses (its limit of statically nested blocks);
    ``reason`` is Python's ``SyntaxError`` message."""

    def __init__(self, reason: str) -> None:
        # Its own words, not the parser recursion's.
        ChatTemplateSyntaxError.__init__(
            self, f"Chat template is nested too deeply to compile: Python refused its code ({reason})."
        )


class ChatTemplateTooLargeError(ChatTemplateNestingError):
    """A chat template whose compilation ran out of memory."""

    def __init__(self) -> None:
        # Its own words, not the parser recursion's.
        ChatTemplateSyntaxError.__init__(self, "Chat template is too large or nested too deeply to compile.")


class ChatTemplateLiteralError(ChatTemplateSyntaxError):
    """A chat template holds an integer literal longer than Python converts (4300 digits)."""

    def __init__(self, digits: int | str, limit: int) -> None:
        super().__init__(f"Chat template has an integer literal of {digits} digits; the limit is {limit}.")


class ChatTemplateRenderError(ChatTemplateError):
    """Rendering failed: the template raised (``raise_exception``) or hit a runtime error;
    ``detail`` is that error's own message (free-form), as vLLM returns it."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)


class ChatTemplateSecurityError(ChatTemplateRenderError):
    """The sandbox refused an operation (attribute walking to Python internals, unsafe calls);
    ``detail`` is Jinja's sandbox message (free-form)."""


class ChatTemplateLimitError(ChatTemplateError):
    """Rendering hit a sandbox bound: range size, loop iterations, output size, time or recursion.
    The group: each bound is a subclass that words its own message."""


class ChatTemplateRecursionError(ChatTemplateLimitError):
    """Rendering recursed deeper than Python allows (a macro calling itself, deep data)."""

    def __init__(self) -> None:
        super().__init__("Chat template recursion is too deep.")


class ChatTemplateLoopError(ChatTemplateLimitError):
    """Rendering ran more loop iterations, all loops together, than ``limit``."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Chat template ran more than {limit} loop iterations.")


class ChatTemplateDeadlineError(ChatTemplateLimitError):
    """Rendering in the server's own process ran past its deadline of ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"Chat template rendering took longer than {seconds:g} seconds.")


class ChatTemplateBuildError(ChatTemplateLimitError):
    """The template built a value (a string, a list; ``what`` says which) longer than the output limit."""

    def __init__(self, what: str, length: int, limit: int) -> None:
        super().__init__(f"Chat template tried to build {what} of length {length}; the limit is {limit}.")


class ChatTemplateOutputError(ChatTemplateLimitError):
    """The rendered text grew past ``limit`` characters."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Rendered chat template exceeds {limit} characters.")


class ChatTemplatePaddingError(ChatTemplateLimitError):
    """A format string whose width or precision (``digits``, as written) is past the output limit."""

    def __init__(self, digits: str, limit: int) -> None:
        super().__init__(f"Chat template format string pads to {digits} characters; the limit is {limit}.")


class ChatTemplateIndentError(ChatTemplateLimitError):
    """``tojson`` asked for an indent wider than ``limit`` (repeated on every line of its output)."""

    def __init__(self, width: int, limit: int) -> None:
        super().__init__(f"Chat template asked tojson for an indent of {width}; the limit is {limit}.")


class ChatTemplateRangeError(ChatTemplateLimitError):
    """``range()`` of more than ``limit`` items."""

    def __init__(self, items: int, limit: int) -> None:
        super().__init__(f"Chat template called range() with {items} items; the limit is {limit}.")


class ChatTemplateCountError(ChatTemplateLimitError):
    """A filter or call (``name``: ``slice``, ``batch``, a repeat) asked for a count past ``limit``."""

    def __init__(self, name: str, count: object, limit: int) -> None:
        super().__init__(f"Chat template called {name} with {count}; the limit is {limit}.")


class ChatTemplateNumberError(ChatTemplateLimitError):
    """A power whose result would have about ``bits`` bits, past ``limit``."""

    def __init__(self, bits: float, limit: int) -> None:
        super().__init__(f"Chat template computed a number of about {bits:.0f} bits; the limit is {limit}.")


# Request-supplied chat templates render in a separate process (renderer/chat/template_worker.py).


class ChatTemplateWorkerError(ChatTemplateLimitError):
    """A request's template failed in its render worker in a way the template's own errors do not
    name; the worker was replaced. ``name`` and ``detail`` are the worker's error's type and message."""

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(f"Chat template failed in its render worker: {name}: {detail[:2000]}")


class ChatTemplateSizeError(ChatTemplateLimitError):
    """A request's template is larger than ``REQUEST_TEMPLATE_MAX_BYTES`` (checked before parsing)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"Chat template is {size} bytes; a template sent with a request may have at most {limit} bytes."
        )


class ChatTemplateTimeoutError(ChatTemplateLimitError):
    """A request's template ran past its wall-clock deadline of ``seconds``, or (``cpu``) its CPU
    limit; the worker was killed."""

    def __init__(self, seconds: float, cpu: bool = False) -> None:
        if cpu:
            super().__init__(f"Chat template used more than {seconds} seconds of CPU time; its worker was stopped.")
        else:
            super().__init__(f"Chat template took longer than {seconds:g} seconds to render; its worker was stopped.")


class ChatTemplateResourceError(ChatTemplateLimitError):
    """A template ran out of memory: for a request's template, its worker's address-space cap
    (``REQUEST_TEMPLATE_MEMORY_MB``, given as ``limit_mb``)."""

    def __init__(self, limit_mb: int | None = None) -> None:
        if limit_mb is None:
            super().__init__("Chat template ran out of memory.")
        else:
            super().__init__(f"Chat template needed more memory than its limit of {limit_mb} MiB.")


class ChatTemplateWorkerCrashError(ChatTemplateWorkerError):
    """A request's template crashed its render worker (a signal such as SIGSEGV from a C-stack
    overflow, or an unexpected exit); ``how`` says which."""

    def __init__(self, how: str) -> None:
        # Its own words, not the worker error's "failed in its render worker".
        ChatTemplateLimitError.__init__(
            self, f"Chat template crashed its render worker ({how}); data nested too deeply can overflow the C stack."
        )


class ToolChoiceError(ChatError):
    """``tool_choice`` is refused: by vLLM's request model (its message ends in
    ``(parameter=tool_choice...)``) or because the server parses no tool calls."""


class ToolChoiceWithoutToolsError(ToolChoiceError):
    """``tool_choice`` other than "none" or null was sent without ``tools``."""

    def __init__(self) -> None:
        super().__init__("When using `tool_choice`, `tools` must be set.", parameter="tool_choice")


class InvalidToolChoiceError(ToolChoiceError):
    """``tool_choice`` is neither "none", "auto", "required" nor a named function, or a named
    function's ``function`` / ``name`` is malformed; vLLM's messages and parameter names. The
    group: each way is a subclass that words its own message."""

    correct_usage = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'
    """The example vLLM appends to a malformed named function."""


class ToolChoiceValueError(InvalidToolChoiceError):
    """``tool_choice`` a string other than "none", "auto" or "required", or not a string at all."""

    def __init__(self, value: object) -> None:
        super().__init__(
            f'Invalid value for `tool_choice`: {value}! Only named tools, "none", "auto" or "required" are supported.',
            parameter="tool_choice",
        )


class ToolChoiceFunctionError(InvalidToolChoiceError):
    """A named ``tool_choice`` whose ``function`` is not an object."""

    def __init__(self, function: object) -> None:
        super().__init__(
            f"Invalid value for `function`: `{function}` in `tool_choice`! {self.correct_usage}",
            parameter="tool_choice.function",
        )


class ToolChoiceNameMissingError(InvalidToolChoiceError):
    """A named ``tool_choice`` whose ``function`` has no ``name``."""

    def __init__(self) -> None:
        super().__init__(
            f"Expected field `name` in `function` in `tool_choice`! {self.correct_usage}",
            parameter="tool_choice.function.name",
        )


class ToolChoiceNameError(InvalidToolChoiceError):
    """A named ``tool_choice`` whose ``name`` is not a non-empty string."""

    def __init__(self, name: object) -> None:
        super().__init__(
            f"Invalid `name` in `function`: `{name}` in `tool_choice`! {self.correct_usage}",
            parameter="tool_choice.function.name",
        )


class UnknownToolChoiceError(ToolChoiceError):
    """The function ``tool_choice`` names is not one of ``tools``."""

    def __init__(self) -> None:
        super().__init__(
            "The tool specified in `tool_choice` does not match any of the specified `tools`",
            parameter="tool_choice",
        )


class ToolParsingUnavailableError(ToolChoiceError):
    """``tool_choice`` needs tool calls parsed from the output and the server parses none.

    vLLM's online renderer answers these with ``param`` null and no ``(parameter=...)`` suffix, so
    the message is left bare (its exact wording) and ``parameter`` is kept beside it."""

    prints_parameter = False

    def __init__(self, message: str) -> None:
        super().__init__(message, parameter="tool_choice")


class AutoToolChoiceDisabledError(ToolParsingUnavailableError):
    """``tool_choice`` "auto" (the default when tools are given) without ``ENABLE_AUTO_TOOL_CHOICE``
    and ``TOOL_CALL_PARSER``."""

    def __init__(self) -> None:
        super().__init__('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set')


class ToolParserRequiredError(ToolParsingUnavailableError):
    """``tool_choice`` "required" or a named function without a tool-call parser in use."""

    def __init__(self, described: str) -> None:
        super().__init__(f"tool_choice={described} requires --tool-call-parser to be set")


class ForcedToolChoiceUnavailableError(ToolChoiceError):
    """``tool_choice`` "required" or a named function, with a tool-call parser in use, on a request
    that generates: vLLM forces the call with structured outputs (a grammar in its sampler), which
    no engine here takes (TensorRT-LLM's ``guided_decoding_*`` inputs are not served)."""

    def __init__(self, described: str) -> None:
        super().__init__(
            f"tool_choice={described} is not served: vLLM forces the call with structured outputs "
            'and this server\'s engines take no guided decoding; send tool_choice "auto"',
            parameter="tool_choice",
        )
