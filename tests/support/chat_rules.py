"""Chats vLLM refuses (with its messages), hostile chats it renders, and transformers' own rendering: shared
by the in-process chat tests (``tests/unit/test_chat_*.py``) and the live ones
(``tests/live/test_render_chat_live.py``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any
from pathlib import Path

from renderer.chat import (
    ChatParams,
    ChatRenderer,
    resolve_chat_template,
    resolve_template_kwargs,
    validate_chat_request,
)
from renderer.errors import (
    ChatRequestValidationError,
    ChatTemplateLimitError,
    ChatTemplateRenderError,
    ChatTemplateSecurityError,
    ChatTemplateSyntaxError,
    ContentPartError,
    FieldTypeError,
    GenerationPromptConflictError,
    InvalidMessagesError,
    UnknownFieldError,
)


# (case id, template) pairs vLLM itself refuses (tests/fixtures/vllm/chat.json): no rendering to
# compare with transformers; tests/unit/test_chat_templates.py checks the refusal.
HI = [{"role": "user", "content": "Hi"}]

VLLM_REFUSED = {
    tuple(c["id"].split("@"))
    for c in json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "chat.json").read_text())["cases"]
    if c["status"] != 200
}

# (messages, error type, the start of vLLM's message); the whole messages are in
# tests/fixtures/vllm/chat.json and checked by tests/unit/test_chat_templates.py.
BAD_MESSAGES = [
    ([], InvalidMessagesError, "Cannot apply chat template to an empty conversation. Provide at least one message."),
    (
        {"role": "user"},
        ChatRequestValidationError,
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages', 'msg': 'Input should be a valid list'",
    ),
    (None, ChatRequestValidationError, "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages'"),
    (
        ["hi"],
        ChatRequestValidationError,
        "8 validation errors:\n  {'type': 'dict_type', "
        "'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam', 'msg': 'Input should be a valid dictionary'",
    ),
    (
        [{"content": "x"}],
        ChatRequestValidationError,
        "11 validation errors:\n  {'type': 'missing', "
        "'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.role', 'msg': 'Field required'",
    ),
    (
        [{"role": 3, "content": "x"}],
        ChatRequestValidationError,
        "11 validation errors:\n  {'type': 'literal_error', "
        "'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.role'",
    ),
    (
        [{"role": "user", "content": 5}],
        ChatRequestValidationError,
        "22 validation errors:\n  {'type': 'string_type', "
        "'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.content'",
    ),
    ([{"role": "user", "content": None}], ChatRequestValidationError, "19 validation errors:\n"),
    (
        [{"role": "user", "content": [3]}],
        ChatRequestValidationError,
        "4 validation errors for ValidatorIterator\n"
        "0.ChatCompletionContentPartTextParam\n  Input should be a valid dictionary",
    ),
    (
        [{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": "x"}}]}],
        ContentPartError,
        "Unsupported chat content part type for this renderer: 'audio_url'.",
    ),
    (
        [{"role": "user", "content": [{"type": "text", "text": "x", "uuid": "u"}]}],
        ContentPartError,
        "Missing 'type' field in multimodal part. (parameter=type)",
    ),
    (
        [{"role": "user", "content": [{"type": "text", "text": 5}]}],
        ChatRequestValidationError,
        "7 validation errors for ValidatorIterator\n0.ChatCompletionContentPartTextParam.text\n",
    ),
    (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
        ChatRequestValidationError,
        "7 validation errors for ValidatorIterator\n0.ChatCompletionContentPartTextParam.text\n",
    ),
    (
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": None}, "uuid": None}, "x"]}],
        ContentPartError,
        "1 validation error for ChatCompletionContentPartImageParam\nimage_url.url\n"
        "  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]",
    ),
    (
        [{"role": "user", "content": [{"type": "image_embeds", "image_embeds": None}]}],
        ContentPartError,
        "multi_modal_data['image'][0] is empty but multi_modal_uuids['image'][0] is missing.",
    ),
    (
        [{"role": "assistant", "tool_calls": {"id": 1}}],
        ChatRequestValidationError,
        "2 validation errors:\n  {'type': 'dict_type', 'loc': 'body.0.ChatCompletionMessageFunctionToolCallParam'",
    ),
    ([{"role": "assistant", "tool_calls": 5}], ChatRequestValidationError, "'int' object is not iterable"),
    (
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}]}],
        InvalidMessagesError,
        "chat completions only support assistant tool_calls of type 'function'. (parameter=tool_calls)",
    ),
    (
        [{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"arguments": "{}"}}]}],
        ChatRequestValidationError,
        "3 validation errors:\n  {'type': 'missing', "
        "'loc': 'body.0.ChatCompletionMessageFunctionToolCallParam.function.name'",
    ),
    (
        [{"role": "tool", "tool_call_id": 5, "content": "x"}],
        ChatRequestValidationError,
        "10 validation errors:\n"
        "  {'type': 'literal_error', 'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.role'",
    ),
    ([{"role": "user", "name": 5, "content": "x"}], ChatRequestValidationError, "14 validation errors:\n"),
]

BAD_PARAMS = [
    ("not a dict", FieldTypeError, "request.chat_params must be a JSON object, got str 'not a dict'."),
    (
        {"bogus": 1, "temperature": 2},
        UnknownFieldError,
        "Unknown field(s) in chat_params: bogus, temperature. "
        "Allowed fields: add_generation_prompt, chat_template, chat_template_content_format, chat_template_kwargs, "
        "continue_final_message, documents, media_io_kwargs, mm_processor_kwargs, tool_choice, tools.",
    ),
    (
        {"add_generation_prompt": "yes"},
        FieldTypeError,
        "chat_params.add_generation_prompt must be a boolean, got str 'yes'.",
    ),
    ({"continue_final_message": 1}, FieldTypeError, "chat_params.continue_final_message must be a boolean, got int 1."),
    ({"chat_template": 5}, FieldTypeError, "chat_params.chat_template must be a string or null, got int 5."),
    (
        {"chat_template_kwargs": []},
        FieldTypeError,
        "chat_params.chat_template_kwargs must be a JSON object or null, got list [].",
    ),
    (
        {"chat_template_content_format": "xml"},
        FieldTypeError,
        "chat_params.chat_template_content_format must be one of 'auto', 'string', 'openai', got str 'xml'.",
    ),
    ({"media_io_kwargs": 1}, FieldTypeError, "chat_params.media_io_kwargs must be a JSON object or null, got int 1."),
    (
        {"mm_processor_kwargs": "x"},
        FieldTypeError,
        "chat_params.mm_processor_kwargs must be a JSON object or null, got str 'x'.",
    ),
    (
        {"continue_final_message": True, "add_generation_prompt": True},
        GenerationPromptConflictError,
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.",
    ),
    (
        {"continue_final_message": True},
        GenerationPromptConflictError,
        "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you "
        "want the model to continue the final message, and add_generation_prompt when you want to add a header "
        "that will prompt it to start a new assistant message instead.",
    ),
]

# --- sandbox ---------------------------------------------------------------------------------------

HOSTILE = [
    (
        "{{ ''.__class__.__mro__ }}",
        ChatTemplateSecurityError,
        "access to attribute '__class__' of 'str' object is unsafe.",
    ),
    (
        "{{ messages.__class__.__subclasses__() }}",
        ChatTemplateSecurityError,
        "access to attribute '__class__' of 'list' object is unsafe.",
    ),
    (
        "{{ raise_exception.__globals__['os'] }}",
        ChatTemplateSecurityError,
        "access to attribute '__globals__' of 'function' object is unsafe.",
    ),
    ("{{ dict.__init__.__globals__ }}", ChatTemplateSecurityError, None),
    ("{{ cycler.__init__.__globals__.os }}", ChatTemplateSecurityError, None),
    (
        "{% set ns = namespace(_x=1) %}",
        ChatTemplateSecurityError,
        "Chat templates cannot store underscore-prefixed attributes",
    ),
    ("{{ messages.append(1) }}", ChatTemplateSecurityError, None),
    (
        "{% for i in range(10**9) %}x{% endfor %}",
        ChatTemplateLimitError,
        "Chat template called range() with 1000000000 items; the limit is 100000.",
    ),
    (
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        ChatTemplateLimitError,
        "Chat template ran more than 1000000 loop iterations.",
    ),
    (
        "{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}",
        ChatTemplateLimitError,
        "Chat template ran more than 1000000 loop iterations.",
    ),
    (
        "{{ 'x' * 10**10 }}",
        ChatTemplateLimitError,
        "Chat template tried to build a repeated str of length 10000000000; the limit is 8000000.",
    ),
    ("{{ [1] * 10**9 }}", ChatTemplateLimitError, "repeated list"),
    (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        ChatTemplateLimitError,
        "concatenated string",
    ),
    (
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        ChatTemplateLimitError,
        "the limit is 8000000",
    ),
    (
        "{% for i in range(100000) %}{% for j in range(9) %}{{ 'y' * 1000 }}{% endfor %}{% endfor %}",
        ChatTemplateLimitError,
        "Rendered chat template exceeds 8000000 characters.",
    ),
    ("{{ 'x' | center(10**9) }}", ChatTemplateLimitError, "padded string"),
    ("{{ 'x'.ljust(10**9) }}", ChatTemplateLimitError, "padded string"),
    ("{{ ('x' * 1000000).replace('x', 'yy' * 100) }}", ChatTemplateLimitError, "replaced string"),
    ("{{ range(10000) | join('x' * 1000000) }}", ChatTemplateLimitError, "joined string"),
    ("{{ '%999999999d' % 1 }}", ChatTemplateLimitError, "format string pads"),
    ("{{ '{:>999999999}'.format(1) }}", ChatTemplateLimitError, "format string pads"),
    # In a request template's worker its address-space cap may fire before the size check.
    ("{{ '{0:{1}}'.format(1, '>999999999') }}", ChatTemplateLimitError, "limit"),
    ("{{ '%(a)999999999s' | format(a=1) }}", ChatTemplateLimitError, "format string pads"),
    ("{{ '%.999999999f' % 1 }}", ChatTemplateLimitError, "format string pads"),
    ("{{ 10 ** (10 ** 7) }}", ChatTemplateLimitError, "bits"),
    ("{{ [1] | batch(10**9, 0) | list }}", ChatTemplateLimitError, "batch"),
    ("{{ lipsum(10**8) }}", ChatTemplateLimitError, "lorem ipsum"),
    (
        "{{ [1] | tojson(indent=10**8) }}",
        ChatTemplateLimitError,
        "Chat template asked tojson for an indent of 100000000; the limit is 1000.",
    ),
    (
        "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
        ChatTemplateLimitError,
        "Chat template recursion is too deep.",
    ),
    ("{% for x in %}", ChatTemplateSyntaxError, "Expected an expression, got 'end of statement block'"),
    ("{{ x | nosuchfilter }}", ChatTemplateSyntaxError, "No filter named 'nosuchfilter'."),
    ("{{ 1 / 0 }}", ChatTemplateRenderError, "division by zero"),
    ("{{ messages[0].content.nope() }}", ChatTemplateRenderError, "'str object' has no attribute 'nope'"),
]


def hf_apply(hf, renderer: ChatRenderer, rendered, params: ChatParams, *, tokenize: bool):
    """transformers' ``apply_chat_template`` on the renderer's own parse (its conversation, resolved
    template and kwargs, validated tools): the last step alone, for chats transformers cannot take
    as sent (``sent_as_is``); not an oracle of the parse, which vLLM's recorded answers are."""
    request = validate_chat_request(HI, params.tools, params.documents)
    template = resolve_chat_template(renderer.source, params.request_template, request.tools)
    kwargs = resolve_template_kwargs(template, params.template_kwargs(request.documents))
    return hf.apply_chat_template(
        rendered.conversation,
        tools=request.tools,
        chat_template=template,
        tokenize=tokenize,
        return_dict=False,
        **kwargs,
    )


def tools_rendered(params: dict | None) -> dict | None:
    """``chat_params`` as vLLM renders a case with tools by default: ``tool_choice`` "none" (vLLM
    refuses its default "auto" without a tool parser; "none" still hands the tools to the template,
    which is what the fixtures were recorded with and what the transformers reference renders)."""
    if params and params.get("tools"):
        return {**params, "tool_choice": "none"}
    return params


def sent_as_is(case: dict) -> bool:
    """Whether vLLM hands this request to the template as the client sent it: every content a
    string, no tool calls and no tools. vLLM joins or keeps content parts by the template's content
    format, maps a developer turn to system for templates that never name it, parses tool calls'
    arguments and hands tools over as its request model dumps them (absent fields as nulls); those
    chats are held to vLLM's own recorded answers instead (tests/live/test_chat_vllm_fixtures_live.py)."""
    return not (case.get("chat_params") or {}).get("tools") and all(
        m.get("role") in ("system", "user", "assistant", "tool")
        and isinstance(m.get("content"), str)
        and "tool_calls" not in m
        for m in case["messages"]
    )


def hf_reference(hf, case: dict, *, tokenize: bool):
    """transformers' ``apply_chat_template`` on the request itself, as a client would call it: the
    messages, tools and documents as sent, the request's template or the model's own, the request's
    switches and kwargs; nothing of the renderer under test."""
    params = dict(case.get("chat_params") or {})
    kwargs = {
        k: v for k, v in (params.get("chat_template_kwargs") or {}).items() if k not in ("chat_template", "tokenize")
    }
    kwargs.setdefault("add_generation_prompt", params.get("add_generation_prompt", True))
    kwargs.setdefault("continue_final_message", params.get("continue_final_message", False))
    return hf.apply_chat_template(
        case["messages"],
        tools=params.get("tools"),
        documents=params.get("documents"),
        chat_template=params.get("chat_template"),
        tokenize=tokenize,
        return_dict=False,
        **kwargs,
    )


@contextlib.contextmanager
def minijinja_calls() -> Iterator[list[bool]]:
    """One entry per request minijinja was asked for, True where it answered: a spy on
    ``CompiledChatTemplate.render`` for the block's length."""
    from unittest import mock

    from renderer.chat import compiled_template

    calls: list[bool] = []
    real = compiled_template.CompiledChatTemplate.render

    def spy(self: Any, conversation: Any, agp: bool) -> str | None:
        out = real(self, conversation, agp)
        calls.append(out is not None)
        return out

    with mock.patch.object(compiled_template.CompiledChatTemplate, "render", spy):
        yield calls
