"""Hostile input that must be a named 400 and never a 500, a crash or gigabytes (issue 18):
nesting depth limits on every request field, templates that fail to parse or compile, the
in-process sandbox's bounds on calls, filters, bytes, block assignments, widths taken from
arguments and ``sum``, sizes checked before a value is built, and memory that returns after a
refusal. Unit tests: no server (the live twin is tests/live/test_stub_crash_cleanup_live.py)."""

from __future__ import annotations

import gc
import json
import time
import tracemalloc

import pytest

from renderer.chat import ChatParams, ChatRenderer, ChatTemplateSource, TemplateLimits
from renderer.chat.apply import template_variables
from renderer.chat.sandbox import ENV, compile_error, compile_template, parse_template
from renderer.chat_stage import ChatStage
from renderer.errors import (
    ChatTemplateLimitError,
    ChatTemplateLiteralError,
    ChatTemplateNestingError,
    ChatTemplateSecurityError,
    ParamsNestingError,
    RenderError,
    RequestNestingError,
)
from renderer.params import TokenizeParams
from renderer.json_fields import MAX_NESTING_DEPTH, json_text_depth, nesting_depth, parse_json

HI = [{"role": "user", "content": "hi"}]
LIMIT_MESSAGE = f"is nested more than {MAX_NESTING_DEPTH} levels deep"


def nested(levels: int, leaf: object = "x") -> object:
    """``levels`` objects inside each other around ``leaf``."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.fixture(scope="module")
def stage(model_dir) -> ChatStage:
    """chat_render as deployed by default: the model's own template, request templates refused."""
    return ChatStage.from_model_dir(model_dir)


def render(template: str, **limits: float) -> str:
    """Render ``template`` as a model's own template: in process, in the sandbox (a request's
    template renders in a worker process, tested with it)."""
    renderer = ChatRenderer(ChatTemplateSource(tokenizer_template=template), limits=TemplateLimits(**limits))
    return renderer.render_messages(HI, ChatParams(add_generation_prompt=False)).prompt


# --- nesting depth: the default path (model's template, no request template) --------------------


def deep_requests(levels: int) -> dict[str, tuple[list, dict | None]]:
    """(messages, chat_params) with one field nested ``levels`` deep inside the request."""
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": _dumps(nested(levels))}}
    tool = {"type": "function", "function": {"name": "f", "parameters": nested(levels)}}
    return {
        "tools": (HI, {"tools": [tool], "tool_choice": "none"}),  # vLLM refuses its default "auto" by default
        "documents": (HI, {"documents": [nested(levels)]}),
        "tool_call_arguments": (
            [*HI, {"role": "assistant", "content": "x", "tool_calls": [call]}],
            {"continue_final_message": True, "add_generation_prompt": False},  # deep-copies the chat
        ),
        "chat_template_kwargs_tools": (HI, {"chat_template_kwargs": {"tools": [nested(levels)]}}),
        "chat_template_kwargs_documents": (HI, {"chat_template_kwargs": {"documents": [nested(levels)]}}),
        "content_part": ([{"role": "user", "content": [{"type": "text", "text": "hi", "x": nested(levels)}]}], None),
        "message_key": ([{"role": "user", "content": "hi", "x": nested(levels)}], None),
    }


DEEP_FIELDS = {
    "tools": (ParamsNestingError, "chat_params.tools"),
    "documents": (ParamsNestingError, "chat_params.documents"),
    "tool_call_arguments": (RequestNestingError, "messages[1].tool_calls[0].function.arguments"),
    "chat_template_kwargs_tools": (ParamsNestingError, "chat_params.chat_template_kwargs"),
    "chat_template_kwargs_documents": (ParamsNestingError, "chat_params.chat_template_kwargs"),
    "content_part": (RequestNestingError, "messages"),
    "message_key": (RequestNestingError, "messages"),
}


@pytest.mark.parametrize("field", list(DEEP_FIELDS))
def test_deep_fields_are_named_400s_on_the_default_path(field, stage):
    """Just past the limit (the issue's case was 600 deep: tools, documents and arguments reached
    copy.deepcopy outside the render guard, a RecursionError and a 500) and 100,000 deep: a named
    error naming the field. ``messages`` as its tensor's text, ``chat_params`` as a parsed bag (the bag's tensor
    has its own check, below)."""
    error, name = DEEP_FIELDS[field]
    for levels in (MAX_NESTING_DEPTH + 1, 100_000):
        messages, bag = deep_requests(levels)[field]
        with pytest.raises(error) as e:
            stage.render(_dumps(messages), bag)
        assert str(e.value).startswith(f"{name} {LIMIT_MESSAGE}")
        if field != "tool_call_arguments" and bag is not None:  # the bag as its tensor: refused by its parse
            with pytest.raises(ParamsNestingError, match=f"^chat_params {LIMIT_MESSAGE}"):
                parse_json(_dumps(bag), "chat_params")


@pytest.mark.parametrize("field", [f for f in DEEP_FIELDS if f != "documents"])  # documents: strings
def test_depth_at_the_limit_renders(field, stage):
    """A depth within the limit renders (vLLM accepts these: its request models take any depth,
    its body parse a body 963 deep), copies and all; the issue's 600 among them."""
    assert MAX_NESTING_DEPTH >= 963  # vLLM 0.32's deepest accepted body (measured with its render app)
    for levels in (600, MAX_NESTING_DEPTH - 10):
        messages, bag = deep_requests(levels)[field]
        assert stage.render(_dumps(messages), bag).rendered.prompt


def test_in_process_callers_get_the_same_limits(stage):
    from renderer.chat.request import validate_chat_request

    with pytest.raises(RequestNestingError, match=rf"^tools is nested more than {MAX_NESTING_DEPTH}"):
        validate_chat_request(HI, [nested(MAX_NESTING_DEPTH + 1)])
    with pytest.raises(RequestNestingError, match=rf"^documents is nested more than {MAX_NESTING_DEPTH}"):
        validate_chat_request(HI, None, [nested(MAX_NESTING_DEPTH + 1)])
    with pytest.raises(RequestNestingError, match=rf"^messages\[0\] is nested more than {MAX_NESTING_DEPTH}"):
        validate_chat_request([{"role": "user", "content": "x", "y": nested(MAX_NESTING_DEPTH)}])
    for field in ("chat_template_kwargs", "media_io_kwargs", "mm_processor_kwargs"):
        with pytest.raises(ParamsNestingError, match=rf"^chat_params\.{field} is nested more than {MAX_NESTING_DEPTH}"):
            ChatParams.from_request({field: nested(MAX_NESTING_DEPTH)})


@pytest.mark.parametrize("name", ["messages", "chat_params", "tokenize_params", "sampling_params"])
def test_json_tensors_refuse_deep_nesting(name):
    """The tensors' own parse: json.loads of 100,000 brackets raises RecursionError; the limit + 1 levels
    parse (past the limit) but are refused before anything walks them recursively."""
    error = RequestNestingError if name == "messages" else ParamsNestingError
    message = f"{name} {LIMIT_MESSAGE}"
    for text in ("[" * 100_000 + "]" * 100_000, '{"a": ' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(error, match=message):
            parse_json(text, name)
    with pytest.raises(error, match=message):
        parse_json("[" * (MAX_NESTING_DEPTH + 1) + "]" * (MAX_NESTING_DEPTH + 1), name)
    assert parse_json("[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH, name)
    # Brackets inside strings are text, not nesting.
    assert parse_json(json.dumps(["[" * 100_000]), name) == ["[" * 100_000]


def test_completion_params_refuse_deep_nesting():
    # A type error's message repr()s the value: 100,000 deep would be a RecursionError there.
    with pytest.raises(ParamsNestingError, match=f"^tokenize_params {LIMIT_MESSAGE}"):
        TokenizeParams(max_total_tokens=10).with_request({"truncate_prompt_tokens": nested(100_000)}, max_model_len=10)


def test_depth_walks_are_iterative_and_exact():
    assert nesting_depth(nested(100_000), 1000) == 1001
    assert nesting_depth(nested(5), 6) is None and nesting_depth(nested(6), 5) == 6
    assert nesting_depth([[], [[[]]]], 3) == 4 and nesting_depth([[], [[[]]]], 4) is None
    assert json_text_depth("[" * 10 + '"]]]]"' + "]" * 10, 10) is None
    assert json_text_depth('{"a": "\\"[[[["}', 1) is None
    assert json_text_depth("[[[", 2) == 3


def _dumps(value: object) -> str:
    # json.dumps recurses: deeper than its limit, build the text by hand.
    return json.dumps(value) if nesting_depth(value, 200) is None else _dumps_deep(value)


def _dumps_deep(value: object) -> str:
    out: list[str] = []
    stack: list[object] = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _Raw):
            out.append(v.text)
        elif isinstance(v, dict):
            stack.append(_Raw("}"))
            for i, (k, x) in reversed(list(enumerate(v.items()))):
                stack.append(x)
                stack.append(_Raw(("," if i else "") + json.dumps(k) + ":"))
            stack.append(_Raw("{"))
        elif isinstance(v, list):
            stack.append(_Raw("]"))
            for i, x in reversed(list(enumerate(v))):
                stack.append(x)
                if i:
                    stack.append(_Raw(","))
            stack.append(_Raw("["))
        else:
            out.append(json.dumps(v))
    return "".join(out)


class _Raw:
    def __init__(self, text: str) -> None:
        self.text = text


# --- templates that fail to parse or compile --------------------------------------------------

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


# --- sandbox bounds -----------------------------------------------------------------------------

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

    expected = _compile_jinja_template(template).render(messages=HI)
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


# --- memory returns -----------------------------------------------------------------------------


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
