"""Request-supplied chat templates against a live server that trusts them
(``TRUST_REQUEST_CHAT_TEMPLATE=true``): each attack class is a named 400, a normal request sent
meanwhile is served in time, no ``chat_render`` stub dies or grows, and no worker process outlives
the server. The worker itself is unit-tested in tests/unit/test_template_worker.py; here the sandbox
keeps its default bounds, so an attack may be stopped by either (the message says which).

Ports: the ``untrusted_templates`` block of ``tests/support/ports.py`` (HTTP; gRPC and metrics the
next two).
``.venv/bin/python -m pytest tests/live/test_untrusted_templates_live.py -s`` prints the figures quoted
in docs/RELIABILITY.md.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import ports
from template_attacks import COMPILE_MAX_BYTES, CPU_ATTACKS, NESTED_TUPLE, SLOW_COMPILE

from client import RendererClient, RequestError
from launcher.watchdog import alive, stubs_of

pytestmark = pytest.mark.live

PORT = ports.port("untrusted_templates")
INSTANCES = 2
DEADLINE_S = 2.0  # REQUEST_TEMPLATE_TIMEOUT_S's default, which the server runs with
# Killing and replacing a worker, answering, and the client's own work, on 2 shared busy cores.
MARGIN_S = 1.5
RSS_BOUND_MB = 30
"""Most a chat_render stub's resident memory may grow over the whole burst. Measured here: a few
MB (the stubs never hold a request template's values; before the worker, 1-1.6 GB)."""

TIME = r"took longer than 2 seconds|more than \d+ seconds of CPU time"
MEMORY = r"needed more memory than its limit of 512 MiB|ran out of memory|the limit is 8000000"
# Under the default bounds the sandbox may refuse an attack itself, by time or size.
SANDBOX = r"took longer than 2 seconds|the limit is 8000000|exceeds 8000000 characters"
ATTACKS: dict[str, tuple[str, str]] = {
    "macro recursion": (CPU_ATTACKS["macro recursion, each level doubling"], TIME),
    "sort and unique chain": (CPU_ATTACKS["sort and unique statements on a large list"], TIME),
    "sum(start=()) quadratic": (
        "{{ dict.fromkeys(range(100000), 0).items()|list|sum(start=())|length }}",
        TIME,
    ),
    "lipsum": ("{{ lipsum(80000)|length }}", f"{TIME}|{SANDBOX}"),
    "urlize": ("{{ ('www.example.com ' * 470000)|urlize|length }}", f"{TIME}|{SANDBOX}"),
    # Over the 8M-character output cap: a machine fast enough to finish inside the deadline gets the cap.
    "wordwrap": ("{{ ('a ' * 6000000)|wordwrap(1)|length }}", f"{TIME}|{SANDBOX}"),
    "slow compile under a raised byte limit": (SLOW_COMPILE, TIME),
    "over the byte limit": (
        "{{ 'x' }}" * 120000,
        rf"Chat template is 1080000 bytes; a template sent with a request may have at most {COMPILE_MAX_BYTES} bytes\.$",
    ),
    "format width from an argument": ("{{ '%*s'|format(1000000000, 'x') }}", f"{MEMORY}|pads"),
    "% width from an argument": ("{{ '%*s' % (1000000000, 'x') }}", f"{MEMORY}|pads"),
    "str.format nested width": ("{{ '{:>{w}}'.format('x', w=1000000000) }}", f"{MEMORY}|pads"),
    "join(attribute=)": (
        "{% set big = [{'a': 'x' * 8000000}] * 100 %}{{ big|join(attribute='a')|length }}",
        MEMORY,
    ),
    "~ doubling": (
        "{% set ns = namespace(s='x' * 8000000) %}"
        "{% for i in range(8) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        MEMORY,
    ),
    "block set doubling": (
        "{% set s0 = 'x' * 8000000 %}"
        + "".join(f"{{% set s{i + 1} %}}{{{{ s{i} }}}}{{{{ s{i} }}}}{{% endset %}}" for i in range(8))
        + "{{ s8|length }}",
        f"{MEMORY}|block of template output",
    ),
    "nested tuple hashed": (NESTED_TUPLE, rf"crashed its render worker \(killed by signal 11 \(SIGSEGV\)\)|{TIME}"),
}
NORMAL = [{"role": "user", "content": "What is 2 + 2?"}]
WORKER_MODULE = b"renderer.chat.template_worker"
SEEN_WORKERS: set[int] = set()  # every worker pid of this module's server, checked after its stop


def chat_render_stubs(server_pid: int) -> list[int]:
    return sorted(pid for pid, stub in stubs_of(server_pid).items() if stub.model == "chat_render")


def workers_of(parents: list[int]) -> dict[int, list[int]]:
    """Live template workers by parent pid."""
    out: dict[int, list[int]] = {p: [] for p in parents}
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = stat_path.read_text()
            cmdline = (stat_path.parent / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[1]) in out and WORKER_MODULE in cmdline:
            out[int(fields[1])].append(int(stat_path.parent.name))
    return out


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.fixture(scope="module")
def untrusted_server(server_settings, tmp_path_factory):
    from launcher import cli as launch

    s = replace(
        server_settings,
        openai_port=0,
        build_dir=str(tmp_path_factory.mktemp("untrusted-templates")),
        models="render_chat",
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
        tokenize_instances=1,
        chat_render_instances=INSTANCES,
        # No batching window: each attack goes to the instance that is free (the normal request
        # is not batched behind one).
        max_queue_delay_us=0,
        trust_request_chat_template=True,
        # Raised from 64 KiB, under which compiling is bounded by the size check alone, so that a
        # template compiling past the deadline on any machine fits (test_template_worker.COMPILE_MAX_BYTES).
        request_template_max_bytes=COMPILE_MAX_BYTES,
    )
    launch.stop(s)
    assert launch.start(s) == 0, f"server did not start; see {s.log_file}"
    yield s
    launch.stop(s)


def normal_ids(hf_tokenizer) -> list[int]:
    text = hf_tokenizer.apply_chat_template(NORMAL, add_generation_prompt=True, tokenize=False)
    return hf_tokenizer(text, add_special_tokens=False).input_ids


def test_attacks_are_named_400s_and_normal_requests_are_served(untrusted_server, hf_tokenizer):
    s = untrusted_server
    server_pid = int(Path(s.pid_file).read_text())
    stubs = chat_render_stubs(server_pid)
    assert len(stubs) == INSTANCES
    workers = workers_of(stubs)
    assert all(len(w) == 1 for w in workers.values()), f"one worker per stub, started at warmup: {workers}"
    SEEN_WORKERS.update(p for w in workers.values() for p in w)
    expected_ids = normal_ids(hf_tokenizer)

    def timed_normal(c: RendererClient) -> float:
        start = time.monotonic()
        assert c.render_chat(NORMAL).input_ids == expected_ids
        return time.monotonic() - start

    with RendererClient(f"{s.host}:{s.http_port}", "http", timeout_s=60) as c:
        for _ in range(3):
            timed_normal(c)  # warm both instances and the client
        usual = statistics.median(timed_normal(c) for _ in range(10))
    rss_before = {p: rss_mb(p) for p in stubs}

    outcomes: dict[str, tuple[float, RequestError | None]] = {}
    normal_times: list[float] = []

    def send_attack(name: str) -> None:
        with RendererClient(f"{s.host}:{s.http_port}", "http", timeout_s=60) as c:
            start = time.monotonic()
            try:
                c.render_chat([{"role": "user", "content": "hi"}], chat_params={"chat_template": ATTACKS[name][0]})
                outcomes[name] = (time.monotonic() - start, None)
            except RequestError as e:
                outcomes[name] = (time.monotonic() - start, e)

    names = list(ATTACKS)
    with RendererClient(f"{s.host}:{s.http_port}", "http", timeout_s=60) as c:
        # Waves of one attack per instance, each sent while the previous one's are done.
        for i in range(0, len(names), INSTANCES):
            threads = [threading.Thread(target=send_attack, args=(n,)) for n in names[i : i + INSTANCES]]
            for t in threads:
                t.start()
                time.sleep(0.1)  # arrive apart: the batcher gives each a free instance
            time.sleep(0.2)
            normal_times.append(timed_normal(c))  # every instance is busy with an attack
            for t in threads:
                t.join()
            SEEN_WORKERS.update(p for w in workers_of(stubs).values() for p in w)

    print(f"\nnormal request: usual {usual * 1000:.0f} ms; during attacks max {max(normal_times):.2f} s")
    for name in names:
        elapsed, error = outcomes[name]
        print(f"{name}: {elapsed:.2f} s: {error.message if error else 'rendered'}")
    for name in names:
        elapsed, error = outcomes[name]
        assert error is not None, f"{name}: rendered"
        assert (error.status, error.kind) == ("400", "client"), f"{name}: {error!r}"
        assert re.search(ATTACKS[name][1], error.message), f"{name}: {error.message}"
        assert elapsed < DEADLINE_S + MARGIN_S, f"{name}: answered after {elapsed:.2f} s"
    assert max(normal_times) < usual + DEADLINE_S + MARGIN_S, normal_times

    assert chat_render_stubs(server_pid) == stubs, "a chat_render stub died or was replaced"
    workers_after = workers_of(stubs)
    assert all(len(w) == 1 for w in workers_after.values()), workers_after
    rss_after = {p: rss_mb(p) for p in stubs}
    growth = {p: rss_after[p] - rss_before[p] for p in stubs}
    print(f"chat_render stubs' RSS: before {rss_before}, after {rss_after} (MB)")
    assert max(growth.values()) < RSS_BOUND_MB, growth
    with RendererClient(f"{s.host}:{s.http_port}", "http") as c:
        assert c.is_ready()
        assert (
            c.render_chat(NORMAL, chat_params={"chat_template": "{{ messages[0].content }}"}).rendered_prompt
            == (NORMAL[0]["content"])
        )


def test_no_worker_outlives_the_server(untrusted_server):
    from launcher import cli as launch

    server_pid = int(Path(untrusted_server.pid_file).read_text())
    stubs = chat_render_stubs(server_pid)
    live = [p for w in workers_of(stubs).values() for p in w]
    assert live, "no worker to check"
    SEEN_WORKERS.update(live)
    launch.stop(untrusted_server)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in SEEN_WORKERS):
        time.sleep(0.1)
    assert not [p for p in SEEN_WORKERS if alive(p)], "a template worker outlived the server"
