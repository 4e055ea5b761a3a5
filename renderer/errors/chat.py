"""Chat requests: the messages, the chat template (found, compiled, rendered, sandboxed, in its
render worker) and ``tool_choice``.
"""

from __future__ import annotations

from .base import RenderError
from .params import InvalidParamsError


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


class ContentPartError(InvalidMessagesError):
    """A content part is missing its type, has an unsupported type or malformed fields."""


class ToolCallError(InvalidMessagesError):
    """An assistant message's ``tool_calls`` are malformed."""


class MultiModalPlaceholderError(InvalidMessagesError):
    """Text holds more media placeholders than the message has media items."""


class RequestNestingError(InvalidMessagesError):
    """``messages``, ``tools`` or ``documents`` nest deeper than Python's recursion allows."""


class ChatRequestValidationError(InvalidMessagesError):
    """The chat request fails vLLM's request models (messages, tool calls, content parts, tools,
    documents); the message is vLLM's, pydantic's errors included."""


class GenerationPromptConflictError(InvalidParamsError):
    """``continue_final_message`` and ``add_generation_prompt`` both True: in vLLM's request
    model's words when the request sent both (``sent``), else in transformers' words, which vLLM
    returns when ``add_generation_prompt`` was left at its default."""

    def __init__(self, sent: bool) -> None:
        if sent:
            super().__init__("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
        else:
            super().__init__(_TRANSFORMERS_CONFLICT)


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


class ChatTemplateError(ChatError):
    """The chat template cannot be found, compiled or rendered."""


class ChatTemplateResolutionError(ChatTemplateError):
    """Neither the request, the processor nor the tokenizer supplies a chat template."""


class UntrustedChatTemplateError(ChatTemplateError):
    """A request supplied a chat template and the server does not trust request templates."""


class ChatTemplateSyntaxError(ChatTemplateError):
    """The chat template is not valid Jinja."""


class ChatTemplateNestingError(ChatTemplateSyntaxError):
    """A chat template nests too deeply to parse or compile (Jinja's parser recursion, Python's
    limit of 20 statically nested blocks, its compiler's recursion) or is too large to compile."""


class ChatTemplateLiteralError(ChatTemplateSyntaxError):
    """A chat template holds an integer literal longer than Python converts (4300 digits)."""


class ChatTemplateRenderError(ChatTemplateError):
    """Rendering failed: the template raised (``raise_exception``) or hit a runtime error."""


class ChatTemplateSecurityError(ChatTemplateRenderError):
    """The sandbox refused an operation (attribute walking to Python internals, unsafe calls)."""


class ChatTemplateLimitError(ChatTemplateError):
    """Rendering hit a sandbox bound: range size, loop iterations, output size, time or recursion."""


class ChatTemplateWorkerError(ChatTemplateLimitError):
    """A request's template failed in its render worker in a way the template's own errors do not
    name; the worker was replaced."""


class ChatTemplateSizeError(ChatTemplateLimitError):
    """A request's template is larger than ``REQUEST_TEMPLATE_MAX_BYTES`` (checked before parsing)."""


class ChatTemplateTimeoutError(ChatTemplateLimitError):
    """A request's template ran past its wall-clock deadline or CPU limit; the worker was killed."""


class ChatTemplateResourceError(ChatTemplateLimitError):
    """A template ran out of memory: for a request's template, its worker's address-space cap
    (``REQUEST_TEMPLATE_MEMORY_MB``)."""


class ChatTemplateWorkerCrashError(ChatTemplateWorkerError):
    """A request's template crashed its render worker (a signal such as SIGSEGV from a C-stack
    overflow, or an unexpected exit)."""


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
