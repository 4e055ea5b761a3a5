"""Faults on a live server: a stub killed under load, slow requests beside fast ones, and
shared memory after a clean stop. What each shows is written up in docs/RELIABILITY.md."""

from __future__ import annotations

import glob
import os
import signal
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from client import RendererClient, RequestError
from launcher.watchdog import stubs_of

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

SHM_GLOB = "/dev/shm/triton_python_backend_shm_region_*"
REGIONS: set[str] = set()  # this module's server's regions, checked after its clean stop


def stub_pids(server_pid: int, model: str) -> list[int]:
    return [pid for pid, stub in stubs_of(server_pid).items() if stub.model == model]


def stub_regions(server_pid: int) -> set[str]:
    """The /dev/shm regions of this server's stubs (each stub is told its region's name)."""
    return {f"/dev/shm/{stub.region}" for stub in stubs_of(server_pid).values() if stub.region}


@pytest.fixture(scope="module")
def fault_server(server_settings, tmp_path_factory):
    from launcher import cli as launch

    s = replace(
        server_settings,
        openai_port=0,
        build_dir=str(tmp_path_factory.mktemp("faults")),
        models="render_completion,render_chat",
        http_port=ports.port("faults"),
        grpc_port=ports.port("faults") + 1,
        metrics_port=ports.port("faults") + 2,
        tokenize_instances=1,
        chat_render_instances=2,
    )
    assert launch.start(s) == 0
    pid = int(Path(s.pid_file).read_text())
    REGIONS.update(stub_regions(pid))  # grows as tests see new stubs
    assert REGIONS, "found no stub shared-memory regions: the leak check would check nothing"
    yield s
    REGIONS.update(stub_regions(pid))
    launch.stop(s)
    leaked = REGIONS & set(glob.glob(SHM_GLOB))
    assert not leaked, f"shared-memory regions left after a clean stop: {sorted(leaked)}"


def test_stub_killed_under_load_then_recovers(fault_server, hf_tokenizer):
    s = fault_server
    server_pid = int(Path(s.pid_file).read_text())
    [victim] = stub_pids(server_pid, "tokenize")
    results: list[tuple[float, str]] = []
    stop = threading.Event()

    def load():
        with RendererClient(f"{s.host}:{s.grpc_port}", "grpc", timeout_s=60) as c:
            while not stop.is_set():
                t = time.monotonic()
                try:
                    ok = (
                        c.render_completion("load during a fault").input_ids
                        == hf_tokenizer("load during a fault").input_ids
                    )
                    results.append((t, "ok" if ok else "wrong"))
                except RequestError as e:
                    results.append((t, f"error: {e.status}: {e.message[:160]}"))

    threads = [threading.Thread(target=load) for _ in range(4)]
    [t.start() for t in threads]
    time.sleep(1.0)
    killed_at = time.monotonic()
    os.kill(victim, signal.SIGKILL)
    # Requests fail until the watchdog has reloaded the model (Triton 2.51 restarts no stub).
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if any(t > killed_at + 0.5 and r == "ok" for t, r in results[-20:]):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    stop.set()
    [t.join() for t in threads]

    # Requests in flight at the kill may fail; those finished well before it may not.
    before = [r for t, r in results if t < killed_at - 0.5]
    after_recovery = [r for t, r in results if t > killed_at + 0.5]
    errors = [r for _, r in results if r.startswith("error")]
    print(f"\n{len(results)} requests; errors around the kill: {len(errors)}; first: {errors[:2]}")
    assert before and all(r == "ok" for r in before)
    assert "wrong" not in [r for _, r in results], "a request got wrong ids: something was mixed up"
    assert after_recovery and after_recovery[-1] == "ok", "the model was not reloaded after its stub was killed"
    REGIONS.update(stub_regions(server_pid))  # the replacement stub's region must go at stop too
    new = stub_pids(server_pid, "tokenize")
    assert new and victim not in new, "no replacement stub"
    with RendererClient(f"{s.host}:{s.http_port}") as c:
        assert c.is_ready()


def test_repository_api_needs_the_watchdog_token(fault_server):
    """Explicit model control is on for the watchdog; clients must not be able to unload models."""
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        f"{fault_server.http_url}/v2/repository/models/tokenize/unload", data=b"{}", method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code in (401, 403)
    with RendererClient(f"{fault_server.host}:{fault_server.http_port}") as c:
        assert c.render_completion("still loaded").input_ids


def test_slow_template_does_not_block_fast_requests(fault_server):
    """A request that takes its full template budget occupies one chat_render instance; requests
    sent meanwhile are served by the other, well within the slow one's time."""
    s = fault_server
    slow_template = "{% for i in range(100000) %}{% for j in range(9) %}{% endfor %}{% endfor %}x"
    slow_result: dict[str, object] = {}

    def slow():
        t = time.monotonic()
        with RendererClient(f"{s.host}:{s.http_port}") as c:
            try:
                c.render_chat([{"role": "user", "content": "hi"}], chat_params={"chat_template": slow_template})
                slow_result["outcome"] = "ok"
            except RequestError as e:
                slow_result["outcome"] = e.message
        slow_result["seconds"] = time.monotonic() - t

    th = threading.Thread(target=slow)
    th.start()
    time.sleep(0.2)
    fast = []
    with RendererClient(f"{s.host}:{s.http_port}") as c:
        while th.is_alive() and len(fast) < 50:
            t = time.monotonic()
            assert c.render_chat([{"role": "user", "content": "fast"}]).input_ids
            fast.append(time.monotonic() - t)
    th.join()
    print(f"\nslow request: {slow_result}; fast requests meanwhile: {len(fast)}, slowest {max(fast, default=0):.3f}s")
    assert slow_result["seconds"] > 0.5, "the slow template was not slow: nothing was exercised"
    assert fast, "no fast request was sent while the slow one ran"
    # Generous bound (a fault check, not a speed test): far below the slow request's own time.
    assert max(fast) < max(0.5, float(slow_result["seconds"]) / 2)
