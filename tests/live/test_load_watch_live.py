"""A stub that dies while its model loads fails the start at once; a start that hangs is started again.

Triton 2.51 leaves such a model LOADING for ever, and the launcher used to wait out its whole
start-up timeout (180 s). The first test SIGKILLs the first ``chat_render`` stub of a starting server
and requires ``launch.start`` to fail within 30 s, naming the model, with nothing of the server left.
The second SIGSTOPs it instead (alive, answering nothing: the hang seen in full test runs) and
requires the supervisor to end that start and serve from a second one.
"""

from __future__ import annotations

from pathlib import Path

import os
import signal
import threading
import time
from dataclasses import replace

import pytest
import ports

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.live

PORT = ports.port("load_watch")


def signal_first_stub(
    s, model: str, sig: int, starter: threading.Thread, after_cpu_s: float = 0.0
) -> tuple[float | None, int | None]:
    """Send ``sig`` to the first stub of ``model`` seen while the server starts, once it has used
    ``after_cpu_s`` of CPU: (when, the server's pid)."""
    from launcher import cli as launch
    from launcher.processes import group_cpu_ticks
    from launcher.watchdog import stubs_of

    started = time.monotonic()
    server = None
    while time.monotonic() - started < 120 and starter.is_alive():
        server = launch.running_pid(s)
        stub = next((p for p, st in stubs_of(server).items() if st.model == model), None) if server else None
        if stub is not None and group_cpu_ticks(server).get(stub, 0) >= after_cpu_s * os.sysconf("SC_CLK_TCK"):
            os.kill(stub, sig)
            return time.monotonic(), server
        time.sleep(0.01)
    return None, server


def test_a_stub_dead_while_loading_fails_the_start_at_once(model_dir, capsys):
    from benchmarks.mixed_traffic import settings
    from launcher import cli as launch
    from launcher.processes import group_members

    s = replace(settings(ROOT / "build" / "test-load-watch", PORT), models="render_chat", openai_port=0)
    result: dict[str, int] = {}
    starter = threading.Thread(target=lambda: result.update(rc=launch.start(s)))
    starter.start()
    killed, server = signal_first_stub(s, "chat_render", signal.SIGKILL, starter)
    try:
        assert killed is not None, "no chat_render stub was seen while the server loaded"
        starter.join(timeout=60)
        failed_after = time.monotonic() - killed
        assert not starter.is_alive() and result.get("rc") == 1, result
        print(f"start failed {failed_after:.1f} s after the stub was killed")
        assert failed_after < 30, f"start took {failed_after:.0f} s to fail"
        supervisor_log = s.supervisor_log_file.read_text(errors="replace")
        assert "the stub of model 'chat_render' died while the model loaded" in supervisor_log
        assert server is not None and not group_members(server), "processes of the dead start are left"
    finally:
        launch.stop(s)


# A stub stopped at once never sends its first message (its health thread's): Triton waits for it
# without a limit, and only the idle rule sees the hang. A stub stopped inside ``initialize`` misses
# a health check: Triton gives up on it and waits for it to exit, the hang caught twice in full test
# runs; the stall is then set far off, so that the wait is what must be seen.
HANGS = {
    "at once": (0.0, 5.0, "the server used almost no CPU for 5 s"),
    "in initialize": (0.25, 300.0, "tritonserver has waited 10 s for their live stub to exit"),
}


@pytest.mark.parametrize("when", HANGS)
def test_a_start_that_hangs_is_started_again(model_dir, when):
    from benchmarks.mixed_traffic import settings
    from client import RendererClient
    from launcher import cli as launch

    after_cpu_s, stall_s, seen_as = HANGS[when]
    s = replace(
        settings(ROOT / "build" / "test-load-watch-hang", PORT + 5),
        models="render_chat",
        openai_port=0,
        load_stall_s=stall_s,
    )
    result: dict[str, int] = {}
    starter = threading.Thread(target=lambda: result.update(rc=launch.start(s)))
    starter.start()
    stopped, first = signal_first_stub(s, "chat_render", signal.SIGSTOP, starter, after_cpu_s)
    try:
        assert stopped is not None, "no chat_render stub was stopped while the server loaded"
        starter.join(timeout=120)
        assert not starter.is_alive() and result.get("rc") == 0, result
        state = launch.supervisor_state(s)
        assert state.restarts == 1 and state.last_exit == "the start hung while chat_render loaded", state
        assert launch.running_pid(s) not in (None, first)
        log = s.supervisor_log_file.read_text(errors="replace")
        assert f"the start hung: chat_render still loading, and {seen_as}" in log, log[-3000:]
        with RendererClient(f"{s.host}:{s.http_port}") as c:
            assert c.render_chat([{"role": "user", "content": "hi"}]).input_ids
    finally:
        launch.stop(s)
