"""Hostile templates, the model's or a request's: refused quickly with a named 400 and never a
500, a crash or gigabytes. The in-process sandbox's bounds on time, output, calls, filters, bytes,
block assignments, widths taken from arguments and ``sum``; sizes checked before a value is
built; templates that fail to parse or compile; memory that returns after a refusal; and the
guards never changing what a template renders. Unit tests: no server (the live twin is
tests/live/test_stub_crash_cleanup_live.py; the worker that renders a request's template is
tests/unit/test_template_worker.py)."""

from __future__ import annotations

import gc
import time
import tracemalloc

import pytest
from chat_rules import HI, HOSTILE

from renderer.chat import ChatParams, ChatRenderer, ChatTemplateSource, TemplateLimits, compile_template
from renderer.chat.apply import template_variables
from renderer.chat.sandbox import ENV, compile_error, parse_template
from renderer.errors import (
    ChatTemplateLimitError,
    ChatTemplateLiteralError,
    ChatTemplateNestingError,
    ChatTemplateSecurityError,
    RenderError,
)


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


LOWER_HI = [{"role": "user", "content": "hi"}]


def render(template: str, **limits: float) -> str:
    """Render ``template`` as a model's own template: in process, in the sandbox (a request's
    template renders in a worker process, tested with it)."""
    renderer = ChatRenderer(ChatTemplateSource(tokenizer_template=template), limits=TemplateLimits(**limits))
    return renderer.render_messages(LOWER_HI, ChatParams(add_generation_prompt=False)).prompt


class _Raw:
    def __init__(self, text: str) -> None:
        self.text = text


COMPILE_CASES = [
    ("{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}", ChatTemplateNestingError, "nested too deeply to parse or compile"),
    ("{{ " + "[" * 5000 + "]" * 5000 + " }}", ChatTemplateNestingError, "nested too deeply to parse or compile"),
    (
        "{% if true %}" * 120 + "x" + "{% endif %}" * 120,
        ChatTemplateNestingError,
        "Python refused its code (too many levels of indentation)",
    ),
    (
        "{% for i in [1] %}" * 30 + "x" + "{% endfor %}" * 30,
        ChatTemplateNestingError,
        "Chat template is nested too deeply",
    ),
    (
        "{{ 1" + "0" * 5000 + " }}",
        ChatTemplateLiteralError,
        "Chat template has an integer literal of 5001 digits; the limit is 4300.",
    ),
]


@pytest.mark.parametrize("template,error,message", COMPILE_CASES, ids=["parens", "brackets", "ifs", "fors", "int"])
def test_compile_failures_are_named_400s(template, error, message, stage):
    for step in (compile_template, parse_template, template_variables):
        step.cache_clear()
    for step in (parse_template, template_variables, compile_template):
        try:
            step(template)
        except error as e:
            assert message in str(e)
        else:
            # A shallower step (the parse) may accept what the compile refuses.
            assert step is not compile_template, f"{step.__name__} compiled {template[:40]!r}"
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        render(template)


def test_out_of_memory_while_compiling_is_named():
    assert isinstance(compile_error(MemoryError()), ChatTemplateNestingError)
    assert "too large or nested too deeply" in str(compile_error(MemoryError()))


SANDBOX_CASES = [
    # widths and precisions from arguments
    ("{{ '%*s' % (10**9, 'x') }}", "format string pads to 1000000000"),
    ("{{ '%-*d' % (10**9, 1) }}", "format string pads to 1000000000"),
    ("{{ '%.*f' % (10**9, 1.5) }}", "format string pads to 1000000000"),
    ("{{ '%*s' | format(10**9, 'x') }}", "format string pads to 1000000000"),
    ("{{ '{:>{w}}'.format('x', w=10**9) }}", "format string pads to 1000000000"),
    ("{{ '{:{}}'.format('x', 10**9) }}", "format string pads to 1000000000"),
    ("{{ '{0:{1}}'.format('x', 10**9) }}", "format string pads to 1000000000"),
    ("{{ '{a:>{w}}'.format_map({'a': 'x', 'w': 10**9}) }}", "format string pads to 1000000000"),
    # bytes
    ("{{ 'x'.encode() * 10**10 }}", "a repeated bytes of length 10000000000"),
    ("{{ 'x'.encode().center(10**9) }}", "padded string"),
    ("{{ 'x'.encode().ljust(10**9) }}", "padded string"),
    ("{{ ('x' * 1000000).encode().replace('x'.encode(), 'yy'.encode() * 100) }}", "replaced string"),
    ("{{ '%*d'.encode() % (10**9, 1) }}", "format string pads"),
    # block assignments double a value with no binop in sight
    (
        "{% set ns = namespace(x='ab') %}{% for i in range(40) %}{% set y %}{{ ns.x }}{{ ns.x }}{% endset %}"
        "{% set ns.x = y %}{% endfor %}",
        "a block of template output of length",
    ),
    # macros too buffer their output
    (
        "{% set s = 'x' * 4000000 %}{% macro m() %}{{ s }}{{ s }}{{ s }}{% endmacro %}{% set y = m() %}",
        "a block of template output of length 12000000",
    ),
    # sum over lists: linear, and size-checked
    ("{{ ([[1] * 1000000] * 20) | sum(start=[]) | length }}", "a summed list of length 9000000"),
    # sizes checked before the value is built (a list of 100 references to a 1,000,000-char string)
    ("{% set b = ['x' * 1000000] * 100 %}{{ b | string }}", "a string of length"),
    ("{% set b = ['x' * 1000000] * 100 %}{{ b ~ '' }}", "a concatenated string of length"),
    ("{% set b = ['x' * 1000000] * 100 %}{{ b | tojson }}", "a JSON text of length"),
    ("{% set b = ['x' * 1000000] * 100 %}{{ '%s' % (b,) }}", "a formatted string of length"),
    ("{% set b = ['x' * 1000000] * 100 %}{{ '%s' | format(b) }}", "a formatted string of length"),
    ("{% set b = [{'a': 'x' * 1000000}] * 100 %}{{ b | join(',', attribute='a') }}", "a joined string of length"),
    ("{% set b = [['x' * 1000000] * 10] * 10 %}{{ b | join(',') }}", "a joined string of length"),
]


@pytest.mark.parametrize("template,message", SANDBOX_CASES, ids=[t[:50] for t, _ in SANDBOX_CASES])
def test_sandbox_bounds_hold_before_allocating(template, message):
    """Each is refused with a named error, without building the value: the peak traced memory
    stays far below what the value would take (a gigabyte or more for most)."""
    tracemalloc.start()
    try:
        with pytest.raises(ChatTemplateLimitError) as e:
            render(template)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert message in str(e.value)
    assert peak < 120 * 2**20, f"peak {peak / 2**20:.0f} MiB: the value was built before the check"


def test_macro_recursion_reads_the_clock():
    """Each level doubles the work, and no loop or output between calls reads the clock."""
    template = (
        "{% macro f(n) %}{% if n > 0 %}{% set a = f(n - 1) %}{% set b = f(n - 1) %}{% endif %}{% endmacro %}"
        "{% set r = f(40) %}done"
    )
    start = time.monotonic()
    with pytest.raises(ChatTemplateLimitError, match="took longer than 0.2 seconds"):
        render(template, max_seconds=0.2)
    assert time.monotonic() - start < 2.0


def test_a_slow_filter_is_noticed_right_after():
    template = "{% for i in range(3) %}{{ ('a ' * 300000) | wordwrap(5) | length }}{% endfor %}"
    start = time.monotonic()
    with pytest.raises(ChatTemplateLimitError, match="took longer than 0.01 seconds"):
        render(template, max_seconds=0.01)
    assert time.monotonic() - start < 5.0


def test_guarded_filters_keep_their_results():
    template = (
        "{{ [[1], [2, 3], []] | sum(start=[]) }}|{{ [(1,), (2,)] | sum(start=()) }}|{{ [1, 2] | sum }}|"
        "{{ [{'v': [1]}, {'v': [2]}] | sum(attribute='v', start=[0]) }}|{{ '%*d|%-*s|%.*f' % (4, 7, 3, 'a', 2, 1.5) }}|"
        "{{ '{:>{w}}|{:{}}'.format('x', 'y', 3, w=4) }}|{{ [{'a': 'p'}, {'a': 'q'}] | join('-', attribute='a') }}|"
        "{{ [1, 'a'] | string }}|{{ [1, 2] ~ 'x' }}|{% set z %}{{ 'ab' }}{{ 'cd' }}{% endset %}{{ z }}|"
        "{{ 'a%'.encode() }}|{{ '%%|%s' | format(5) }}"
    )
    from transformers.utils.chat_template_utils import _compile_jinja_template

    expected = _compile_jinja_template(template).render(messages=LOWER_HI)
    assert render(template) == expected
    assert expected.startswith("[1, 2, 3]|(1, 2)|3|[0, 1, 2]|   7|a  |1.50|   x|y  |p-q|")


def test_mixed_sum_fails_as_python_does():
    with pytest.raises(RenderError, match='can only concatenate list \\(not "tuple"\\) to list'):
        render("{{ [[1], (2,)] | sum(start=[]) }}")


def test_attribute_checks_are_cached_without_weakening_the_sandbox():
    ENV._safe_attributes.clear()
    for _ in range(2):  # the second round answers from the cache
        assert render("{{ 'a b'.split() }}{{ {'k': 1}.items() | list }}") == "['a', 'b'][('k', 1)]"
        with pytest.raises(ChatTemplateSecurityError):
            render("{{ [1].append(2) }}")
        with pytest.raises(ChatTemplateSecurityError):
            render("{{ {}.update({'a': 1}) }}")
        assert render("{{ ''.__class__ }}{{ messages.__class__ }}") == ""
    assert ENV._safe_attributes[(str, "split")] is True
    assert ENV._safe_attributes[(list, "append")] is False
    assert all(kind in (str, dict, list) for kind, _ in ENV._safe_attributes)


def test_refused_values_do_not_outlive_the_refusal():
    """A burst of refusals, each after building 12 MB of values, with the automatic collector off:
    a macro makes a cycle (the render's context holds the macro, whose closure holds the context
    and the values it reads), and the traceback holds the frames; the refusal must release both."""
    template = "{% set s = 'x' * 6000000 %}{% macro m() %}{{ s }}{% endmacro %}{% set t = s ~ 'y' %}{{ t ~ t }}"
    render("{{ 1 }}")
    gc.collect()
    tracemalloc.start()
    gc.disable()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(20):
            with pytest.raises(ChatTemplateLimitError, match="a concatenated string"):
                render(template)
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        gc.enable()
        tracemalloc.stop()
    assert grown < 16 * 2**20, f"{grown / 2**20:.0f} MiB still held after 20 refusals"
