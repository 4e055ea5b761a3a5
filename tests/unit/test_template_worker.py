"""The worker process that renders request-supplied chat templates (renderer/chat/template_worker.py).

Unit tests (no server): each spawns worker processes only. The attacks run with the in-process
sandbox's bounds switched off (``RELAXED``), so what stops them is the worker's: the wall-clock
deadline, ``RLIMIT_CPU``, ``RLIMIT_AS`` and the process boundary (a C-stack crash kills the worker,
not the caller). ``tests/live/test_untrusted_templates_live.py`` sends the same classes to a server
with its default bounds.
"""

from __future__ import annotations

import gc
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

from launcher.watchdog import alive
from renderer.chat import ChatParams, ChatRenderer, ChatTemplateSource, TemplateLimits
from renderer.chat import apply as apply_module
from renderer.chat import content_format as content_format_module
from renderer.chat.template_worker import RequestTemplateLimits, TemplateWorker
from renderer.errors import (
    ChatTemplateRenderError,
    ChatTemplateResourceError,
    ChatTemplateSizeError,
    ChatTemplateSyntaxError,
    ChatTemplateTimeoutError,
    ChatTemplateWorkerCrashError,
    ContinueFinalMessageError,
)
from template_attacks import COMPILE_MAX_BYTES, CPU_ATTACKS, NESTED_TUPLE


ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 1.0
# Killing, reaping and answering after the deadline, on 2 shared and busy cores.
MARGIN_S = 1.5
RELAXED = TemplateLimits(
    max_output_chars=10**12, max_range=10**9, max_loop_iterations=10**12, max_seconds=math.inf, max_int_bits=10**12
)
"""The in-process sandbox's bounds, all off: only the worker's own limits remain."""

NORMAL_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there, ünïcode ✓"}]
HI = [{"role": "user", "content": "hi"}]

MEMORY_ATTACKS = {
    "format filter, width from an argument": "{{ '%*s'|format(2000000000, 'x') }}",
    "% operator, width from an argument": "{{ '%*s' % (2000000000, 'x') }}",
    "str.format, nested width": "{{ '{:>{w}}'.format('x', w=2000000000) }}",
    "join(attribute=)": "{% set big = [{'a': 'x' * 8000000}] * 200 %}{{ big|join(attribute='a')|length }}",
    "~ doubling": "{% set ns = namespace(s='x' * 8000000) %}"
    "{% for i in range(9) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "block set doubling": "{% set s0 = 'x' * 8000000 %}"
    + "".join(f"{{% set s{i + 1} %}}{{{{ s{i} }}}}{{{{ s{i} }}}}{{% endset %}}" for i in range(9))
    + "{{ s9|length }}",
}


def exists(pid: int) -> bool:
    """Any process entry at all, a zombie included (one its parent has not reaped)."""
    return Path(f"/proc/{pid}").exists()


def wait_gone(pid: int, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not alive(pid):
            return True
        time.sleep(0.02)
    return not alive(pid)


@pytest.fixture(scope="module")
def in_process() -> ChatRenderer:
    """The normal template as a model's own: rendered in process, the reference text."""
    return ChatRenderer(ChatTemplateSource(NORMAL_TEMPLATE, special_tokens={"bos_token": "<s>"}))


def make_renderer(timeout_s: float = DEADLINE_S, limits: TemplateLimits = RELAXED, **worker: object) -> ChatRenderer:
    renderer = ChatRenderer(
        ChatTemplateSource(
            {"default": NORMAL_TEMPLATE, "tool_use": NORMAL_TEMPLATE + "[tools]"}, special_tokens={"bos_token": "<s>"}
        ),
        limits=limits,
        trust_request_chat_template=True,
        request_template_limits=RequestTemplateLimits(timeout_s=timeout_s, **worker),  # type: ignore[arg-type]
    )
    assert renderer.warmup()
    return renderer


@pytest.fixture(scope="module")
def relaxed() -> Iterator[ChatRenderer]:
    renderer = make_renderer(max_bytes=COMPILE_MAX_BYTES)
    yield renderer
    renderer.close()


# Memory attacks must meet the address-space cap, not the clock: building a few hundred MB takes
# over a second on busy shared cores (a 1 s deadline sometimes answered "took longer" instead).
MEMORY_DEADLINE_S = 10.0


@pytest.fixture(scope="module")
def roomy() -> Iterator[ChatRenderer]:
    """The relaxed sandbox with a deadline memory attacks cannot reach first."""
    renderer = make_renderer(timeout_s=MEMORY_DEADLINE_S)
    yield renderer
    renderer.close()


def worker_of(renderer: ChatRenderer) -> TemplateWorker:
    assert renderer.template_worker is not None
    return renderer.template_worker


def attack(renderer: ChatRenderer, template: str, expected: type[Exception], deadline_s: float) -> Exception:
    """Send ``template``; check the named error comes within the deadline plus the margin, the
    worker was replaced (the old one killed and reaped) and a normal render right after gives
    the in-process text."""
    worker = worker_of(renderer)
    old = worker.pid
    assert old is not None and alive(old)
    start = time.monotonic()
    with pytest.raises(expected) as e:
        renderer.render_messages(HI, ChatParams(chat_template=template))
    elapsed = time.monotonic() - start
    print(f"{type(e.value).__name__} after {elapsed:.2f} s: {e.value}")
    assert elapsed < deadline_s + MARGIN_S, f"answered after {elapsed:.2f} s"
    assert worker.pid != old and not exists(old), "the worker was not replaced and reaped"
    return e.value


def check_normal_render(renderer: ChatRenderer, in_process: ChatRenderer) -> None:
    expected = in_process.render_messages(CHAT, ChatParams()).prompt
    assert renderer.render_messages(CHAT, ChatParams(chat_template=NORMAL_TEMPLATE)).prompt == expected


@pytest.mark.parametrize("name", list(CPU_ATTACKS))
def test_cpu_attack_is_stopped_at_the_deadline(name, relaxed, in_process):
    attack(relaxed, CPU_ATTACKS[name], ChatTemplateTimeoutError, DEADLINE_S)
    check_normal_render(relaxed, in_process)


@pytest.mark.parametrize("name", list(MEMORY_ATTACKS))
def test_memory_bomb_hits_the_address_space_cap(name, roomy, in_process):
    error = attack(roomy, MEMORY_ATTACKS[name], ChatTemplateResourceError, MEMORY_DEADLINE_S)
    assert str(error) == "Chat template needed more memory than its limit of 512 MiB."
    check_normal_render(roomy, in_process)


def test_c_stack_overflow_crashes_only_the_worker(in_process):
    # Building the nesting alone takes about a second here: a deadline that leaves it time.
    renderer = make_renderer(timeout_s=10.0)
    try:
        error = attack(renderer, NESTED_TUPLE, ChatTemplateWorkerCrashError, 10.0)
        assert "killed by signal 11 (SIGSEGV)" in str(error)
        check_normal_render(renderer, in_process)
    finally:
        renderer.close()


def test_cpu_limit_kills_a_worker_the_deadline_has_not(in_process):
    # A deadline far away: RLIMIT_CPU (1 s) is what stops the render, by SIGXCPU.
    renderer = make_renderer(timeout_s=30.0, cpu_s=1)
    try:
        # Two CPU seconds at most, but the cores are shared: a wall-clock hang guard only.
        error = attack(renderer, CPU_ATTACKS["macro recursion, each level doubling"], ChatTemplateTimeoutError, 8.0)
        assert str(error) == "Chat template used more than 1 seconds of CPU time; its worker was stopped."
        check_normal_render(renderer, in_process)
    finally:
        renderer.close()


def test_template_over_the_byte_limit_is_refused_before_parsing():
    renderer = make_renderer()  # the default limit, 64 KiB
    try:
        worker = worker_of(renderer)
        pid, replacements = worker.pid, worker.replacements
        huge = "{{ 'x' }}" * (8 * 1024 * 1024 // 9)  # 8 MiB: about 70 s of compiling here
        for params in (ChatParams(chat_template=huge), ChatParams(chat_template_kwargs={"chat_template": huge})):
            start = time.monotonic()
            with pytest.raises(ChatTemplateSizeError) as e:
                renderer.render_messages(HI, params)
            assert time.monotonic() - start < 0.5
            assert str(e.value) == (
                f"Chat template is {len(huge)} bytes; a template sent with a request may have at most 65536 bytes."
            )
        assert (worker.pid, worker.replacements) == (pid, replacements), "the worker saw the template"
        # The limit counts UTF-8 bytes, not characters: 16,385 four-byte characters are 65,540 bytes.
        with pytest.raises(ChatTemplateSizeError, match="Chat template is 65540 bytes"):
            renderer.render_messages(HI, ChatParams(chat_template="😀" * 16385))
        assert renderer.render_messages(HI, ChatParams(chat_template="😀" * 16384)).prompt == "😀" * 16384
    finally:
        renderer.close()


def test_request_templates_are_never_parsed_in_process(relaxed, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a template was parsed or compiled in the calling process")

    for module, name in ((apply_module, "compile_template"), (apply_module, "parse_template")):
        monkeypatch.setattr(module, name, refuse)
    monkeypatch.setattr(content_format_module, "parse_template", refuse)
    apply_module.template_variables.cache_clear()
    content_format_module.detect_content_format.cache_clear()
    template = "{% for m in messages %}{% for p in m.content %}[{{ p.text }}]{% endfor %}{% endfor %}{{ extra }}"
    params = ChatParams(chat_template=template, chat_template_kwargs={"extra": "!", "unused": 1})
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    rendered = relaxed.render_messages(parts, params)
    # The worker detected the "openai" content format and kept the kwarg the template uses.
    assert (rendered.prompt, rendered.content_format) == ("[a][b]!", "openai")
    # The model's own template is parsed in process: the patch is in force.
    with pytest.raises(AssertionError, match="parsed or compiled in the calling process"):
        relaxed.render_messages(HI, ChatParams(chat_template_content_format="string"))


def test_worker_renders_exactly_as_in_process():
    """Texts and errors, continue_final_message, tools and documents included, are the same as
    the in-process render of the same template as the model's own."""
    template = (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}|{% endfor %}"
        "{% if tools %}T{{ tools|tojson }}{% endif %}{% if documents %}D{{ documents|length }}{% endif %}"
        "{{ flag }}{% if add_generation_prompt %}>{% endif %}"
    )
    cases = [
        (CHAT, ChatParams()),
        (CHAT, ChatParams(chat_template_kwargs={"flag": "F", "other": 1})),
        (
            CHAT + [{"role": "assistant", "content": "Sure, "}],
            ChatParams(add_generation_prompt=False, continue_final_message=True),
        ),
        (CHAT, ChatParams(tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}])),
        (CHAT, ChatParams(documents=[{"title": "t", "text": "x"}])),
    ]
    own = ChatRenderer(ChatTemplateSource(template))
    renderer = make_renderer(timeout_s=5.0, limits=TemplateLimits())
    try:
        for messages, params in cases:
            expected = own.render_messages(messages, params)
            got = renderer.render_messages(messages, replace(params, chat_template=template))
            assert (got.prompt, got.conversation, got.content_format) == (
                expected.prompt,
                expected.conversation,
                expected.content_format,
            )
        final = ChatParams(add_generation_prompt=False, continue_final_message=True)
        for bad, params, error in (
            ("{{ raise_exception('No system messages, please.') }}", ChatParams(), ChatTemplateRenderError),
            ("{% for x in %}", ChatParams(), ChatTemplateSyntaxError),
            ("{{ 1 / 0 }}", ChatParams(), ChatTemplateRenderError),
            ("the final message's key is not here", final, ContinueFinalMessageError),
            ("{% for m in messages %}{{ m.content[:2] }}{% endfor %}", final, ContinueFinalMessageError),
        ):
            with pytest.raises(error) as in_proc:
                ChatRenderer(ChatTemplateSource(bad)).render_messages(CHAT, params)
            with pytest.raises(error) as in_worker:
                renderer.render_messages(CHAT, replace(params, chat_template=bad))
            assert str(in_worker.value) == str(in_proc.value)
    finally:
        renderer.close()


def test_named_template_of_the_tokenizer_renders_in_process():
    renderer = ChatRenderer(
        ChatTemplateSource({"default": NORMAL_TEMPLATE, "tool_use": "tools!"}),
        trust_request_chat_template=True,
    )
    assert renderer.render_messages(HI, ChatParams(chat_template="tool_use")).prompt == "tools!"
    assert worker_of(renderer).pid is None, "a named template of the model's went to the worker"


def test_worker_is_recycled_when_its_memory_stays_high(relaxed, in_process):
    worker = worker_of(relaxed)
    pid = worker.pid
    check_normal_render(relaxed, in_process)  # far under the default 128 MiB: the worker stays
    assert worker.pid == pid
    # A threshold under any worker's resident size: every job now ends with a replacement.
    renderer = make_renderer(recycle_rss_mb=1)
    try:
        worker = worker_of(renderer)
        for _ in range(2):
            pid = worker.pid
            check_normal_render(renderer, in_process)
            assert worker.pid != pid and not exists(pid)
    finally:
        renderer.close()


def test_close_and_collection_leave_no_process():
    worker = TemplateWorker()
    worker.start()
    pid = worker.pid
    assert pid is not None and alive(pid)
    worker.close()
    assert not exists(pid)
    worker.start()  # a closed worker starts again on demand
    pid = worker.pid
    del worker
    gc.collect()
    assert pid is not None and not exists(pid), "collecting the parent-side object left its worker"


def test_killed_worker_is_reaped_and_replaced(relaxed, in_process):
    worker = worker_of(relaxed)
    pid = worker.pid
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid, 2.0)  # dead, not yet reaped: the next job finds it so and starts another
    assert exists(pid)
    check_normal_render(relaxed, in_process)
    assert worker.pid != pid and not exists(pid)


def test_worker_exits_when_its_parent_dies():
    """PR_SET_PDEATHSIG: a worker busy with a render (so not reading its socket, and far from its
    CPU limit) dies with the process that started it."""
    script = textwrap.dedent(
        f"""
        import sys, threading
        sys.path.insert(0, {str(ROOT)!r})
        from renderer.chat.sandbox import TemplateLimits
        from renderer.chat.template_worker import RequestTemplateLimits, TemplateWorker
        worker = TemplateWorker(RequestTemplateLimits(timeout_s=120))
        # Started from a thread that ends long before the parent: the worker must outlive it.
        t = threading.Thread(target=worker.start)
        t.start(); t.join()
        print(worker.pid, flush=True)
        worker.render({CPU_ATTACKS["macro recursion, each level doubling"]!r}, {HI!r}, special_tokens={{}},
                      template_kwargs={{}}, tools=None, limits=TemplateLimits(max_seconds=1e9))
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    pid = 0
    try:
        pid = int(parent.stdout.readline())
        time.sleep(1.0)
        assert alive(pid), "the worker died before its parent"
        parent.kill()
        parent.wait()
        assert wait_gone(pid, 3.0), "the worker outlived its parent"
    finally:
        parent.kill()
        parent.wait()
        if pid and alive(pid):
            os.kill(pid, signal.SIGKILL)  # the failure above: leave no process behind


def test_limits_from_config():
    assert RequestTemplateLimits.from_config({}) == RequestTemplateLimits()
    limits = RequestTemplateLimits.from_config(
        {"request_template_timeout_s": "0.5", "request_template_memory_mb": "300", "request_template_max_bytes": " "}
    )
    assert (limits.timeout_s, limits.memory_mb, limits.max_bytes) == (0.5, 300, 65536)
    assert limits.cpu_budget_s == 2
