"""Which engine renders the model's template: ``CHAT_TEMPLATE_ENGINE=auto`` serves plain chats
from minijinja (renderer/chat/compiled_template.py) where the load-time checks pass, and keeps
Jinja's sandbox for constructs whose meaning may differ, message reads that cannot be proven to
need only constant keys, and templates a probe conversation renders differently; the setting
``jinja2`` keeps every chat in the sandbox. That minijinja's answers are exactly Jinja's is
tests/unit/test_lane_equivalence.py's."""

from __future__ import annotations

from collections.abc import Iterator

from pathlib import Path
from typing import Any

import pytest
from chat_rules import minijinja_calls
from chat_cases import PRINTS_MESSAGES, READS_TOOLS, STRICT_ROLES

from renderer.chat import compiled_template
from renderer.chat.params import ChatParams
from renderer.chat.renderer import ChatRenderer
from renderer.chat.sandbox import TemplateLimits
from renderer.chat.template import ChatTemplateSource
from renderer.errors import ChatTemplateRenderError


ROOT = Path(__file__).resolve().parents[2]


DEFAULT_MODEL = ROOT / "build" / "models" / "smollm2-135m-instruct"


def _renderer(template: str | None = None, engine: str = "auto", **kwargs: Any) -> ChatRenderer:
    if template is None:
        return ChatRenderer.from_model_dir(DEFAULT_MODEL, template_engine=engine, **kwargs)
    source = ChatTemplateSource(tokenizer_template=template, special_tokens={"bos_token": "<s>"})
    return ChatRenderer(source, template_engine=engine, **kwargs)


@pytest.fixture
def compiled_calls() -> Iterator[list[bool]]:
    """One entry per request minijinja was asked for: True where it answered."""
    with minijinja_calls() as calls:
        yield calls


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


def test_the_choice_does_not_depend_on_what_parsed_the_template_first():
    """The variable analysis (jinja2.meta) constant-folds the shared parse tree in place; the
    whitelist reads a tree of its own, so a folded list of roles does not change the choice."""
    from renderer.chat.apply import template_variables

    template = STRICT_ROLES + "{{ '' }}"  # a source no other test has chosen for yet
    template_variables(template)
    compiled, choice = compiled_template.choose("auto", template, {}, TemplateLimits())
    assert compiled is not None, choice
