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


def signal_first_stub(s, model: str, sig: int, starter: threading.Thread) -> tuple[float | None, int | None]:
    """Send ``sig`` to the first stub of ``model`` seen while the server starts: (when, the server's pid)."""
    from launcher import cli as launch
    from launcher.watchdog import stubs_of

    started = time.monotonic()
    server = None
    while time.monotonic() - started < 120 and starter.is_alive():
        server = launch.running_pid(s)
        stub = next((p for p, st in stubs_of(server).items() if st.model == model), None) if server else None
        if stub is not None:
            os.kill(stub, sig)
            return time.monotonic(), server
        time.sleep(0.02)
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


def test_a_start_that_hangs_is_started_again(model_dir):
    from benchmarks.mixed_traffic import settings
    from client import RendererClient
    from launcher import cli as launch

    s = replace(
        settings(ROOT / "build" / "test-load-watch-hang", PORT + 5),
        models="render_chat",
        openai_port=0,
        load_stall_s=5.0,
    )
    result: dict[str, int] = {}
    starter = threading.Thread(target=lambda: result.update(rc=launch.start(s)))
    starter.start()
    stopped, first = signal_first_stub(s, "chat_render", signal.SIGSTOP, starter)
    try:
        assert stopped is not None, "no chat_render stub was seen while the server loaded"
        starter.join(timeout=120)
        assert not starter.is_alive() and result.get("rc") == 0, result
        state = launch.supervisor_state(s)
        assert state.restarts == 1 and state.last_exit == "the start hung while chat_render loaded", state
        assert launch.running_pid(s) not in (None, first)
        assert "the start hung: chat_render still loading" in s.supervisor_log_file.read_text(errors="replace")
        with RendererClient(f"{s.host}:{s.http_port}") as c:
            assert c.render_chat([{"role": "user", "content": "hi"}]).input_ids
    finally:
        launch.stop(s)
