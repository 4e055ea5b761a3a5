"""vLLM's request normalization and validation of chats, without a server: every request vLLM
0.32 rendered or refused in ``tests/fixtures/vllm/chat.json`` renders (or is refused) here the
same, and each rule has a test of its own.

The fixture comes from vLLM itself (``tests/fixtures/vllm/make_chat.py``), so a normalization bug
cannot pass on both sides as it could against transformers fed with this project's conversation.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import pytest

from renderer.chat import (
    UNTRUSTED_TEMPLATE_MESSAGE,
    ChatParams,
    ChatRenderer,
    ChatTemplateSource,
    developer_to_system,
    parse_messages,
    validate_chat_request,
)
from renderer.errors import (
    ChatRequestValidationError,
    ChatTemplateRenderError,
    ChatTemplateSyntaxError,
    ContentPartError,
    EmptyToolsError,
    InvalidMessagesError,
    InvalidParamsError,
    RenderError,
    ToolCallError,
    UntrustedChatTemplateError,
)
from renderer.tokenizer import EncodeOptions, Tokenizer

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())
CASES = FIXTURE["cases"]
HI = [{"role": "user", "content": "Hi"}]
ECHO = "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"


@pytest.fixture(scope="module")
def renderers(model_dir) -> dict[tuple[str, bool], ChatRenderer]:
    """(template name, trusted) -> renderer, for every template the fixture covers."""
    from model_builders.reference_tokenizers import build
    from renderer.chat_stage import ChatStage

    build(ROOT / "build" / "models" / "tokenizers")  # the tokenizer folders the fixture names
    out = {}
    for name, folder in FIXTURE["templates"].items():
        served = ChatStage.from_model_dir(ROOT / folder).chat  # media rules as the server sets them
        for trust in (False, True):
            out[name, trust] = ChatRenderer.from_model_dir(
                ROOT / folder,
                image_placeholder=served.image_placeholder,
                mm_limits=served.mm_limits,
                trust_request_chat_template=trust,
            )
    return out


@pytest.fixture(scope="module")
def tokenizers(renderers) -> dict[str, Tokenizer]:
    from transformers import AutoTokenizer

    return {
        name: Tokenizer(AutoTokenizer.from_pretrained(ROOT / folder)) for name, folder in FIXTURE["templates"].items()
    }


@pytest.fixture(scope="module")
def trusted() -> ChatRenderer:
    """A renderer with no model template that trusts request templates."""
    return ChatRenderer(ChatTemplateSource(), trust_request_chat_template=True)


def render(renderer: ChatRenderer, messages, params: dict | None = None, **kw):
    return renderer.render_messages(copy.deepcopy(messages), ChatParams.from_request({**(params or {}), **kw}))


# --- every request vLLM answered --------------------------------------------------------------


def test_fixture_is_broad():
    """The recorded set covers every template, both outcomes, and each issue-14 rule."""
    assert len(CASES) >= 300
    assert set(FIXTURE["templates"]) == {c["template"] for c in CASES}
    assert sum(c["status"] == 400 for c in CASES) >= 60
    ids = {c["id"].split("@")[0] for c in CASES}
    for needed in (
        "reasoning_content_history",
        "tool_call_extra_keys_odd_order",
        "tools_extra_keys_dropped",
        "developer_and_system",
        "request_template_untrusted",
        "kwargs_template_untrusted",
        "template_division_by_zero",
        "user_content_null",
        "documents_non_string_value",
        "tool_call_arguments_object",
        "prefill_assistant",
        "no_generation_prompt",
    ):
        assert needed in ids
    assert FIXTURE["vllm"].startswith("0.32")


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_renders_as_vllm(case, renderers, tokenizers):
    renderer = renderers[case["template"], bool(case["trust"])]
    messages = copy.deepcopy(case["messages"])
    try:
        out = renderer.render_messages(messages, ChatParams.from_request(copy.deepcopy(case["chat_params"])))
        ids = tokenizers[case["template"]].encode_batch([out.prompt], EncodeOptions(False, None, "left"))[0].ids
        if out.mm_items:
            # vLLM's render expands each image's placeholder (its processor runs in the front end):
            # the multimodal stage's part, in process too.
            ids = processors(case["template"]).process(ids, list(out.mm_items)).input_ids
    except RenderError as e:
        # vLLM answers a few of these 501 (data URLs it does not implement) or 500 (Pillow's
        # decompression-bomb guard); a client error here, with the same words.
        assert case["status"] >= 400, f"vLLM rendered this; we refused it: {e}"
        if not case["message_names_model"]:
            assert str(e) == case["message"]
        return
    assert case["status"] == 200, f"vLLM refused this ({case['message']!r}); we rendered it"
    assert messages == case["messages"], "the request's messages must not be mutated"
    if case["prompt"] is not None:
        assert out.prompt == case["prompt"]
    assert ids == case["token_ids"]


@functools.cache
def processors(template: str):  # noqa: ANN201
    from renderer.multimodal import MultiModalProcessor

    return MultiModalProcessor.from_model_dir(ROOT / FIXTURE["templates"][template], cache_bytes=0)


# --- 1. reasoning_content ---------------------------------------------------------------------


def test_reasoning_content_is_renamed_reasoning(trusted):
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "r"}]
    out = render(trusted, msgs, chat_template=ECHO)
    assert out.conversation[1] == {"role": "assistant", "content": "a", "reasoning": "r", "reasoning_content": "r"}
    # reasoning wins when both are set; a null reasoning_content is no reasoning
    msgs[1]["reasoning"] = "kept"
    assert render(trusted, msgs, chat_template=ECHO).conversation[1]["reasoning"] == "kept"
    msgs[1] = {"role": "assistant", "content": "a", "reasoning_content": None}
    assert "reasoning" not in render(trusted, msgs, chat_template=ECHO).conversation[1]


def test_reasoning_only_on_assistant_messages(trusted):
    out = render(trusted, [{"role": "user", "content": "q", "reasoning_content": "r"}], chat_template=ECHO)
    assert out.conversation == [{"role": "user", "content": "q"}]


def test_qwen3_history_shows_its_reasoning(renderers):
    qwen = renderers["qwen3", False]
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "reasoning_content": "because"}]
    assert "<think>\nbecause\n</think>\n\na" in render(qwen, msgs, add_generation_prompt=False).prompt


# --- 2. vLLM's request models -------------------------------------------------------------------


def test_tool_calls_come_out_in_vllms_field_order(trusted):
    call = {
        "type": "function",
        "extra": 1,
        "function": {"x": 2, "arguments": '{"b": 1, "a": 2}', "name": "f"},
        "id": "c1",
    }
    out = render(
        trusted,
        [{"role": "user", "content": "q"}, {"role": "assistant", "tool_calls": [call]}],
        chat_template="{{ messages[1].tool_calls | tojson }}",
    )
    # OpenAI's type declares id, function, type (function: arguments, name); other keys follow.
    assert out.prompt == (
        '[{"id": "c1", "function": {"arguments": {"b": 1, "a": 2}, "name": "f", "x": 2}, '
        '"type": "function", "extra": 1}]'
    )


def test_tools_dumped_as_vllm_dumps_them():
    request = validate_chat_request(
        HI,
        [
            {"extra": 1, "function": {"x": 1, "parameters": {"z": 1, "a": 2}, "name": "f", "strict": True}},
            {"type": "function", "defer_loading": True, "function": {"name": "g", "description": "d"}},
        ],
    )
    assert request.tools == [
        {
            "type": "function",
            "function": {"name": "f", "description": None, "parameters": {"z": 1, "a": 2}, "strict": True},
        },
        {
            "type": "function",
            "function": {"name": "g", "description": "d", "parameters": None, "defer_loading": True},
            "defer_loading": True,
        },
    ]


def test_messages_keep_declared_keys_first_then_extras():
    [msg] = validate_chat_request([{"extra": [1], "name": "ann", "role": "user", "content": "hi"}]).messages
    assert list(msg) == ["content", "role", "name", "extra"]


@pytest.mark.parametrize(
    "messages, error, start",
    [
        (
            [{"role": "user", "content": None}],
            ChatRequestValidationError,
            "19 validation errors:\n  {'type': 'string_type', "
            "'loc': 'body.messages.0.ChatCompletionDeveloperMessageParam.content'",
        ),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}],
                },
            ],
            ChatRequestValidationError,
            "3 validation errors:\n  {'type': 'string_type', "
            "'loc': 'body.0.ChatCompletionMessageFunctionToolCallParam.function', 'msg': 'Input should be a valid string', "
            "'input': '<dict of 1 items>'}",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": 5}]}],
            ChatRequestValidationError,
            "7 validation errors for ValidatorIterator\n0.ChatCompletionContentPartTextParam.text\n"
            "  Input should be a valid string [type=string_type, input_value=5, input_type=int]",
        ),
        ([{"role": "assistant", "tool_calls": 5}], ChatRequestValidationError, "'int' object is not iterable"),
        ([{"author": {"role": "user"}}], ChatRequestValidationError, "'Message' object is not subscriptable"),
        (
            "not a list",
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'list_type', 'loc': 'body.messages'",
        ),
        (
            [{"role": "user", "content": [{"type": "text", "text": "x", "uuid": "u"}]}],
            ContentPartError,
            "Missing 'type' field in multimodal part. (parameter=type)",
        ),
        (
            [
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "f", "input": "x"}}],
                }
            ],
            ToolCallError,
            "chat completions only support assistant tool_calls of type 'function'. (parameter=tool_calls)",
        ),
        (
            [],
            InvalidMessagesError,
            "Cannot apply chat template to an empty conversation. Provide at least one message.",
        ),
    ],
)
def test_refused_as_vllm_refuses(messages, error, start, trusted):
    with pytest.raises(error) as e:
        trusted.render_messages(messages, ChatParams(chat_template=ECHO))
    assert str(e.value).startswith(start)


@pytest.mark.parametrize(
    "params, error, message",
    [
        (
            {"tools": []},
            EmptyToolsError,
            "`tools` must not be an empty array. Either provide at least one tool or omit "
            "the field entirely. (parameter=tools)",
        ),
        (
            {"tools": [{"function": {"description": "d"}}]},
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'missing', 'loc': 'body.tools.0.function.name', 'msg': 'Field required', "
            "'input': '<dict of 1 items>'}",
        ),
        (
            {"documents": [{"title": "A", "text": 1}]},
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'string_type', 'loc': 'body.documents.0.text', 'msg': 'Input should be a valid "
            "string', 'input': '1'}",
        ),
        (
            {"documents": ["plain"]},
            ChatRequestValidationError,
            "1 validation error:\n  {'type': 'dict_type', 'loc': 'body.documents.0', 'msg': 'Input should be a valid "
            "dictionary', 'input': 'plain'}",
        ),
    ],
)
def test_tools_and_documents_validated(params, error, message, trusted):
    with pytest.raises(error) as e:
        render(trusted, HI, params, chat_template=ECHO)
    assert str(e.value) == message


def test_validation_does_not_touch_the_request():
    msgs = [
        {
            "role": "assistant",
            "content": "a",
            "reasoning_content": "r",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        }
    ]
    before = copy.deepcopy(msgs)
    validate_chat_request(msgs)
    assert msgs == before


# --- 3. the developer role ----------------------------------------------------------------------


def test_developer_becomes_system_and_systems_merge():
    conv = [
        {"role": "user", "content": "u"},
        {"role": "system", "content": "s"},
        {"role": "developer", "content": "d", "tools": [{"x": 1}]},
        {"role": "system", "content": ""},
    ]
    assert developer_to_system(conv, "{{ messages }}") == [
        {"role": "system", "content": "s\n\nd"},
        {"role": "user", "content": "u"},
    ]
    # a template that names the role gets the messages unchanged
    assert developer_to_system(conv, "{% if m.role == 'developer' %}{% endif %}") is conv
    # without developer messages nothing merges, even scattered system messages
    plain = [{"role": "user", "content": "u"}, {"role": "system", "content": "s"}]
    assert developer_to_system(plain, "{{ messages }}") is plain


def test_developer_parts_merge_as_text():
    conv = parse_messages(
        validate_chat_request(
            [
                {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": "u"},
            ]
        ).messages,
        "openai",
    ).conversation
    # a lone system message first stays as it is, parts and all
    assert developer_to_system(conv, "")[0] == {"role": "system", "content": conv[0]["content"]}
    merged = developer_to_system([*conv, {"role": "system", "content": [{"type": "text", "text": "c"}]}], "")
    assert merged[0] == {"role": "system", "content": "a\nb\n\nc"}


def test_developer_on_a_real_template(renderers):
    mistral = renderers["mistral", False]
    # Mistral's template refuses a leading developer message; vLLM hands it a system message.
    out = render(mistral, [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Hi"}])
    assert out.conversation[0] == {"role": "system", "content": [{"type": "text", "text": "Be brief."}]}
    assert "Be brief." in out.prompt


# --- 4. request templates -------------------------------------------------------------------------


@pytest.mark.parametrize("params", [{"chat_template": ECHO}, {"chat_template_kwargs": {"chat_template": ECHO}}])
def test_request_templates_refused_unless_trusted(params, renderers):
    untrusted = renderers["smollm2", False]
    with pytest.raises(UntrustedChatTemplateError) as e:
        render(untrusted, HI, params)
    assert (
        str(e.value)
        == UNTRUSTED_TEMPLATE_MESSAGE
        == (
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template."
        )
    )
    assert render(renderers["smollm2", True], HI, params).prompt == '{"role": "user", "content": "Hi"}\n'


def test_trusted_templates_still_run_in_the_sandbox(renderers):
    from renderer.errors import ChatTemplateLimitError, ChatTemplateSecurityError

    trusted = renderers["smollm2", True]
    with pytest.raises(ChatTemplateSecurityError):
        render(trusted, HI, chat_template="{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateLimitError):
        render(trusted, HI, chat_template="{{ 'x' * 10**10 }}")


def test_model_template_needs_no_trust(renderers):
    assert render(renderers["smollm2", False], HI).prompt.endswith("<|im_start|>assistant\n")


def test_kwargs_template_yields_to_request_template_and_tokenize_is_ignored(trusted):
    out = render(trusted, HI, chat_template="R", chat_template_kwargs={"chat_template": "K", "tokenize": True})
    assert out.prompt == "R"


# --- 5. error wording -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "template, error, message",
    [
        ("{{ raise_exception('No system messages.') }}", ChatTemplateRenderError, "No system messages."),
        ("{{ 1 / 0 }}", ChatTemplateRenderError, "division by zero"),
        ("{{ messages[0].content + 1 }}", ChatTemplateRenderError, 'can only concatenate str (not "int") to str'),
        ("{{ nothing.there }}", ChatTemplateRenderError, "'nothing' is undefined"),
        ("{% for x in %}", ChatTemplateSyntaxError, "Expected an expression, got 'end of statement block'"),
        (
            "{{ messages | nosuchfilter }}",
            ChatTemplateSyntaxError,
            "No filter named 'nosuchfilter'.\n  File \"<introspection>\", line 1",
        ),
    ],
)
def test_template_errors_carry_only_the_templates_message(template, error, message, trusted):
    with pytest.raises(error) as e:
        render(trusted, HI, chat_template=template)
    assert str(e.value) == message


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"messages": []}, "jinja2.environment.Template.render() got multiple values for keyword argument 'messages'"),
        ({"conversation": []}, "safe_apply_chat_template() got multiple values for argument 'conversation'"),
        (
            {"return_assistant_tokens_mask": True},
            "`return_assistant_tokens_mask=True` requires `return_dict=True` and `tokenize=True`",
        ),
    ],
)
def test_kwargs_vllm_cannot_pass_on(kwargs, message, trusted):
    with pytest.raises(InvalidParamsError) as e:
        render(trusted, HI, chat_template=ECHO, chat_template_kwargs=kwargs)
    assert str(e.value) == message


def _nested(depth: int) -> dict:
    value: object = "x"
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[return-value]


@pytest.mark.parametrize(
    "messages, tools",
    [
        (
            [{"role": "user", "content": "hi"}],
            [{"type": "function", "function": {"name": "f", "parameters": _nested(5000)}}],
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "a", "extra": _nested(5000)}]}], None),
    ],
    ids=["tools", "content_part"],
)
def test_input_nested_past_the_recursion_limit_is_a_named_400(messages, tools):
    from renderer.chat.request import validate_chat_request
    from renderer.errors import RenderError, RequestNestingError

    with pytest.raises(RequestNestingError, match=r"(tools|messages\[0\]) is nested more than 1000 levels deep") as e:
        validate_chat_request(messages, tools)
    assert isinstance(e.value, RenderError)
