"""The model's template on minijinja (renderer/chat/compiled_template.py) against the Jinja sandbox.

``CHAT_TEMPLATE_ENGINE=auto`` serves plain chats on the model's own template from minijinja where
the load-time checks pass. These tests hold the two engines to the same prompt or the same error
on every chat vLLM recorded, on generated plain chats near the edges (every code point, unknown
roles, names) and on generated tool chats, and check the refusals (constructs whose meaning may
differ, message reads that cannot be proven to need only constant keys, requests that are not
plain) and that the compiled path is really taken where it should be.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renderer.chat import compiled_template
from renderer.chat.params import ChatParams
from renderer.chat.renderer import ChatRenderer
from renderer.chat.sandbox import TemplateLimits
from renderer.chat.template import ChatTemplateSource
from renderer.errors import ChatTemplateRenderError, RenderError

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "vllm" / "chat.json").read_text())
DEFAULT_MODEL = ROOT / "build" / "models" / "smollm2-135m-instruct"

# Templates inside the whitelist: a role check that raises, names, loop fields, slices, `in` lists.
STRICT_ROLES = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('Unknown role: ' + message['role']) }}{% endif %}"
    "{% if loop.first and message['role'] == 'system' %}<<SYS>>{{ message['content'] }}<</SYS>>\n"
    "{% else %}[{{ loop.index }}/{{ loop.length }}] {{ message['role'] }}"
    "{% if message['name'] is defined %} ({{ message['name'] }}){% endif %}: {{ message['content'] }}\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}[{{ messages[-1]['role'] }}] assistant:{% endif %}"
)
PRINTS_MESSAGES = "{% for m in messages[1:] %}{{ m }}\n{% endfor %}{{ messages[0] }}{{ tools }}{{ bos_token }}"
# Reads tools and tool calls: tool chats stay in Jinja (no cut can be proven to render the same).
READS_TOOLS = (
    "{% if tools %}[{{ tools[0]['function']['name'] }}]{% endif %}"
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}"
    "{% if m['tool_calls'] is defined %} calls {{ m['tool_calls'][0]['function']['name'] }}{% endif %}\n{% endfor %}"
)


def _renderer(template: str | None = None, engine: str = "auto", **kwargs: Any) -> ChatRenderer:
    if template is None:
        return ChatRenderer.from_model_dir(DEFAULT_MODEL, template_engine=engine, **kwargs)
    source = ChatTemplateSource(tokenizer_template=template, special_tokens={"bos_token": "<s>"})
    return ChatRenderer(source, template_engine=engine, **kwargs)


def _outcome(renderer: ChatRenderer, messages: Any, params: ChatParams) -> tuple[str, str]:
    try:
        return "prompt", renderer.render_messages(messages, params).prompt
    except RenderError as e:
        return type(e).__name__, str(e)


@pytest.fixture
def compiled_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """One entry per request minijinja was asked for: True where it answered."""
    calls: list[bool] = []
    real = compiled_template.CompiledChatTemplate.render

    def spy(self: Any, conversation: Any, agp: bool) -> str | None:
        out = real(self, conversation, agp)
        calls.append(out is not None)
        return out

    monkeypatch.setattr(compiled_template.CompiledChatTemplate, "render", spy)
    return calls


def test_the_default_models_template_renders_on_minijinja():
    compiled, choice = _renderer().engine()
    assert compiled is not None and choice.engine == "minijinja", choice
    assert "every load-time probe" in choice.reason


@pytest.mark.parametrize("template", [STRICT_ROLES, PRINTS_MESSAGES], ids=["strict_roles", "prints_messages"])
def test_whitelisted_templates_render_on_minijinja(template):
    assert _renderer(template).engine()[1].engine == "minijinja"


def test_the_setting_jinja2_keeps_every_chat_in_the_sandbox(compiled_calls):
    renderer = _renderer(engine="jinja2")
    assert renderer.engine() == (None, compiled_template.EngineChoice("jinja2", "CHAT_TEMPLATE_ENGINE=jinja2"))
    renderer.render_messages([{"role": "user", "content": "Hi"}], ChatParams())
    assert compiled_calls == []
    with pytest.raises(ValueError, match="template_engine must be one of"):
        _renderer(engine="minijinja")


@pytest.mark.parametrize(
    ("template", "construct"),
    [
        ("{{ messages[0]['content'] | trim }}", "a Filter node"),
        ("{{ messages[0]['content'].strip() }}", "a call other than raise_exception"),
        ("{{ messages | tojson }}", "a Filter node"),
        ("{% generation %}{{ messages[0]['content'] }}{% endgeneration %}", "node"),
        ("{% macro m(x) %}{{ x }}{% endmacro %}{{ m(messages[0]['content']) }}", "a Macro node"),
        ("{% set ns = namespace(a=1) %}{{ ns.a }}", "a call other than raise_exception"),
        ("{{ '%s!' % messages[0]['content'] }}", "a Mod node"),
        ("{{ 1.5 }}", "the constant 1.5"),
        ("{% if messages | length < 2 %}x{% endif %}", "a Filter node"),
        ("{% if loop_count < 2 %}x{% endif %}", "the comparison 'lt'"),
        ("{% for m in messages %}{{ loop.cycle('a', 'b') }}{% endfor %}", "a call other than raise_exception"),
        ("{% for m in messages %}{{ loop.previtem }}{% endfor %}", "loop.previtem"),
        ("{% for m in messages recursive %}{{ m }}{% endfor %}", "a recursive for loop"),
        ("{% set a, b = 1, 2 %}{{ a }}", "an assignment to something other than a name"),
        ("{{ messages[0]['content'] is upper }}", "the test 'upper'"),
        ("{{ raise_exception(message='x') }}", "raise_exception with keyword arguments"),
    ],
)
def test_constructs_whose_meaning_may_differ_keep_the_template_in_jinja(template, construct):
    compiled, choice = _renderer(template).engine()
    assert compiled is None and choice.engine == "jinja2"
    assert choice.reason.startswith("the template uses") and construct in choice.reason, choice.reason


def test_a_template_minijinja_never_renders_keeps_jinja():
    # Inside the whitelist, but it fails on every probe: nothing proves the engines equal.
    compiled, choice = _renderer("{{ raise_exception('never') }}").engine()
    assert compiled is None and choice.reason == "minijinja rendered none of the probe conversations"


def test_a_probe_rendered_differently_rules_minijinja_out(monkeypatch):
    """The probe's own logic (the two engines agree on everything the whitelist admits, so a
    disagreement is made here): one probe conversation rendered otherwise by Jinja."""
    real = compiled_template.apply_chat_template
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

    def off_by_one(source: str, conversation: Any, **kw: Any) -> str:
        out = real(source, conversation, **kw)
        return out + "!" if conversation[0]["content"] == "Hello!" else out

    monkeypatch.setattr(compiled_template, "apply_chat_template", off_by_one)
    compiled_template._choose.cache_clear()
    compiled, choice = compiled_template.choose("auto", template, {}, TemplateLimits())
    assert compiled is None and choice.reason == "minijinja renders differently on a probe conversation"

    def refuses_one(source: str, conversation: Any, **kw: Any) -> str:
        if conversation[0]["content"] == "Hello!":
            raise ChatTemplateRenderError("refused")
        return real(source, conversation, **kw)

    monkeypatch.setattr(compiled_template, "apply_chat_template", refuses_one)
    compiled_template._choose.cache_clear()
    compiled, choice = compiled_template.choose("auto", template, {}, TemplateLimits())
    assert compiled is None and choice.reason == "minijinja does not fail where Jinja fails on a probe conversation"
    compiled_template._choose.cache_clear()


def _fixture_cases() -> list[dict[str, Any]]:
    return [c for c in FIXTURE["cases"] if c["trust"] is None]


def test_vllm_recorded_chats_render_the_same_on_either_engine(compiled_calls):
    """Every chat vLLM rendered or refused (tests/fixtures/vllm/chat.json), on each recorded
    model: the same prompt, or the same error, with minijinja allowed as with it off; and the
    recorded prompt itself where vLLM rendered one."""
    from model_builders.reference_tokenizers import build
    from renderer.chat_stage import ChatStage

    build(ROOT / "build" / "models" / "tokenizers")  # the tokenizer folders the fixture names
    renderers: dict[str, tuple[ChatRenderer, ChatRenderer]] = {}
    for case in _fixture_cases():
        name = case["template"]
        if name not in renderers:
            path = ROOT / FIXTURE["templates"][name]
            served = ChatStage.from_model_dir(path).chat  # media rules as the server sets them
            renderers[name] = tuple(  # type: ignore[assignment]
                ChatRenderer.from_model_dir(
                    path, image_placeholder=served.image_placeholder, mm_limits=served.mm_limits, template_engine=e
                )
                for e in ("auto", "jinja2")
            )
        auto, jinja = renderers[name]
        try:
            params = ChatParams.from_request(case["chat_params"])
        except RenderError:
            continue  # refused before any template: nothing of this module's runs
        got = _outcome(auto, case["messages"], params)
        assert got == _outcome(jinja, case["messages"], params), case["id"]
        if got[0] == "prompt" and case["status"] == 200 and case.get("prompt") is not None:
            # (test_chat_normalize holds every case to vLLM; image chats need their items here.)
            assert got == ("prompt", case["prompt"]), case["id"]
    assert sum(compiled_calls) >= 20, "plain chats on the default model's template must take minijinja"


_ROLES = st.sampled_from(["system", "user", "assistant", "developer", "tool", "narrator"])
# Any code point, surrogates included (JSON can carry a lone one; minijinja must not see it).
_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=24)


@st.composite
def _plain_chats(draw: st.DrawFn) -> list[dict[str, Any]]:
    chat = []
    for _ in range(draw(st.integers(1, 5))):
        message = {"role": draw(_ROLES), "content": draw(_TEXT)}
        if draw(st.booleans()):
            message["name"] = draw(_TEXT)
        chat.append(message)
    return chat


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chat=_plain_chats(), agp=st.booleans(), which=st.sampled_from(["default", "strict", "prints"]))
def test_generated_plain_chats_render_the_same_on_either_engine(chat, agp, which):
    template = {"default": None, "strict": STRICT_ROLES, "prints": PRINTS_MESSAGES}[which]
    params = ChatParams(add_generation_prompt=agp)
    assert _outcome(_renderer(template), chat, params) == _outcome(_renderer(template, "jinja2"), chat, params)


_JSON_SCALAR = st.none() | st.booleans() | st.integers(-5, 5) | _TEXT


@st.composite
def _tool_chats(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Chats with tool calls (arguments valid JSON or not), tool results, null or missing
    contents and keys vLLM keeps, sent with tools or without."""
    chat = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["plain", "calls", "result", "extra"]))
        role = draw(_ROLES)
        message: dict[str, Any] = {"role": role, "content": draw(_TEXT)}
        if kind == "calls":
            arguments = draw(st.sampled_from(['{"x": 1}', "{}", "not json", '{"nested": {"a": [1, null]}}']))
            call = {"id": draw(_TEXT), "type": "function", "function": {"name": draw(_TEXT), "arguments": arguments}}
            message = {"role": "assistant", "tool_calls": [call] * draw(st.integers(1, 2))}
            if draw(st.booleans()):
                message["content"] = draw(st.none() | _TEXT)
        elif kind == "result":
            message = {"role": "tool", "content": draw(_TEXT), "tool_call_id": draw(_TEXT)}
        elif kind == "extra":
            message[draw(st.sampled_from(["reasoning", "x_custom", "tool_call_id"]))] = draw(_JSON_SCALAR)
        if draw(st.booleans()):
            message["name"] = draw(_TEXT)
        chat.append(message)
    params: dict[str, Any] = {"add_generation_prompt": draw(st.booleans())}
    if draw(st.booleans()):
        params["tools"] = TOOLS
        params["tool_choice"] = draw(st.sampled_from(["none", "auto", "required"]))
    return chat, params


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_tool_chats(), which=st.sampled_from(["default", "strict", "reads_tools"]))
def test_generated_tool_chats_render_the_same_on_either_engine(case, which):
    chat, raw = case
    template = {"default": None, "strict": STRICT_ROLES, "reads_tools": READS_TOOLS}[which]
    params = ChatParams.from_request(raw)
    assert _outcome(_renderer(template), chat, params) == _outcome(_renderer(template, "jinja2"), chat, params)


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
TOOL_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}


@pytest.mark.parametrize(
    ("template", "messages", "params"),
    [
        pytest.param(None, [{"role": "user", "content": "a\ud800b"}], {}, id="lone_surrogate"),
        pytest.param(READS_TOOLS, [{"role": "user", "content": "hi"}], {"tools": TOOLS}, id="tools_read"),
        pytest.param(PRINTS_MESSAGES, [{"role": "user", "content": "hi"}], {"tools": TOOLS}, id="tools_printed"),
        pytest.param(
            READS_TOOLS,
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}],
            {},
            id="tool_calls_read",
        ),
        pytest.param(
            None,
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}],
            {"continue_final_message": True, "add_generation_prompt": False},
            id="continue_final_message",
        ),
        pytest.param(
            None,
            [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            {"chat_template_content_format": "openai"},
            id="content_parts_kept",
        ),
    ],
)
def test_requests_that_are_not_plain_render_in_jinja(compiled_calls, template, messages, params):
    p = ChatParams.from_request(params)
    got = _outcome(_renderer(template), messages, p)
    assert got == _outcome(_renderer(template, engine="jinja2"), messages, p)
    assert compiled_calls == [], "minijinja must not be asked"


@pytest.mark.parametrize(
    ("template", "keys"),
    [
        pytest.param(None, {"role", "content"}, id="default_model"),
        pytest.param(STRICT_ROLES, {"role", "content", "name"}, id="strict_roles"),
        pytest.param(
            "{% for m in messages[1:] %}{{ m.content }}{% endfor %}{{ messages[0].role }}",
            {"content", "role"},
            id="attributes_and_slices",
        ),
        pytest.param(
            "{% for m in messages if m['role'] != 'tool' %}{{ loop.length }}{% endfor %}", {"role"}, id="loop_filter"
        ),
        pytest.param(PRINTS_MESSAGES, None, id="prints_messages"),
        pytest.param(READS_TOOLS, None, id="reads_tools"),
        pytest.param("{% for m in messages %}{{ m['tool_calls'] }}{% endfor %}", None, id="another_key"),
        pytest.param("{% for m in messages %}{{ m['items'] }}{% endfor %}", None, id="a_dict_method_name"),
        pytest.param("{% for m in messages %}{{ m[m['role']] }}{% endfor %}", None, id="a_computed_key"),
        pytest.param("{% for m in messages %}{% if 'name' in m %}x{% endif %}{% endfor %}", None, id="a_key_tested"),
        pytest.param("{% for m in messages %}{{ m is defined }}{% endfor %}", None, id="a_message_tested"),
        pytest.param("{% set first = messages[0] %}{{ first['content'] }}", None, id="a_message_assigned"),
        pytest.param("{{ raise_exception(messages) }}", None, id="messages_passed"),
        pytest.param(
            "{% for m in messages %}{% for k in m %}{{ k }}{% endfor %}{% endfor %}", None, id="keys_iterated"
        ),
        pytest.param(
            "{% for m in ['a'] %}{{ m }}{% endfor %}{% for m in messages %}{{ m['content'] }}{% endfor %}",
            None,
            id="a_message_name_bound_to_something_else",
        ),
        pytest.param("{% set messages = [] %}{{ messages }}", None, id="messages_rebound"),
        pytest.param(
            "{{ documents }}{% for m in messages %}{{ m['content'] }}{% endfor %}", None, id="names_documents"
        ),
    ],
)
def test_message_keys_are_proved_only_for_constant_reads(template, keys):
    from renderer.chat.sandbox import ENV

    source = template if template is not None else _renderer().engine()[0].source
    ast = ENV.parse(source)
    assert compiled_template.unsupported_construct(ast) is None
    assert compiled_template.message_keys(ast) == (None if keys is None else frozenset(keys))


def test_tool_chats_on_a_template_that_reads_neither_render_on_minijinja(compiled_calls):
    """The default model's template reads each message's role and content only: a chat with tools,
    tool calls and tool results renders on minijinja, cut to those keys, with Jinja's prompt."""
    messages = [
        {"role": "user", "content": "weather?", "name": "ann"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"t": 21}'},
    ]
    params = ChatParams.from_request({"tools": TOOLS, "tool_choice": "auto"})
    got = _outcome(_renderer(), messages, params)
    assert got[0] == "prompt" and got == _outcome(_renderer(engine="jinja2"), messages, params)
    assert compiled_calls == [True]


def test_content_parts_flattened_to_a_string_render_on_minijinja(compiled_calls):
    """The "string" content format joins text parts before the template: the conversation it
    sees is plain, so minijinja serves it, with the same prompt."""
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]}]
    got = _outcome(_renderer(), messages, ChatParams())
    assert got == _outcome(_renderer(engine="jinja2"), messages, ChatParams()) and got[0] == "prompt"
    assert compiled_calls == [True]


def test_a_template_kwarg_the_template_reads_renders_in_jinja(compiled_calls):
    template = "{{ messages[0]['content'] }}|{{ x }}"
    params = ChatParams.from_request({"chat_template_kwargs": {"x": "from the request"}})
    messages = [{"role": "user", "content": "hi"}]
    got = _outcome(_renderer(template), messages, params)
    assert got == ("prompt", "hi|from the request") == _outcome(_renderer(template, "jinja2"), messages, params)
    assert compiled_calls == []


def test_a_template_error_keeps_jinjas_words(compiled_calls):
    """minijinja fails on the unknown role; the request is rendered in Jinja, whose error it gets."""
    messages = [{"role": "tool", "content": "x"}]
    got = _outcome(_renderer(STRICT_ROLES), messages, ChatParams())
    assert got == ("ChatTemplateRenderError", "Unknown role: tool")
    assert compiled_calls == [False]


def test_an_output_over_the_limit_keeps_jinjas_error(compiled_calls):
    limits = TemplateLimits(max_output_chars=1_000)
    messages = [{"role": "user", "content": "x" * 2_000}]
    got = _outcome(_renderer(limits=limits), messages, ChatParams())
    assert got == _outcome(_renderer(engine="jinja2", limits=limits), messages, ChatParams())
    assert got[0] == "ChatTemplateLimitError" and compiled_calls == [False]


def test_the_choice_does_not_depend_on_what_parsed_the_template_first():
    """The variable analysis (jinja2.meta) constant-folds the shared parse tree in place; the
    whitelist reads a tree of its own, so a folded list of roles does not change the choice."""
    from renderer.chat.apply import template_variables

    template = STRICT_ROLES + "{{ '' }}"  # a source no other test has chosen for yet
    template_variables(template)
    compiled, choice = compiled_template.choose("auto", template, {}, TemplateLimits())
    assert compiled is not None, choice
