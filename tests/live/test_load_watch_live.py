"""A stub that dies while its model loads fails the start at once.

Triton 2.51 leaves such a model LOADING for ever, and the launcher used to wait out its whole
start-up timeout (180 s). The test SIGKILLs the first ``chat_render`` stub of a starting server and
requires ``launch.start`` to fail within 30 s, naming the model, with nothing of the server left.
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


def test_a_stub_dead_while_loading_fails_the_start_at_once(model_dir, capsys):
    from benchmarks.mixed_traffic import settings
    from launcher import cli as launch
    from launcher.processes import group_members
    from launcher.watchdog import stubs_of

    s = replace(settings(ROOT / "build" / "test-load-watch", PORT), models="render_chat", openai_port=0)
    result: dict[str, int] = {}
    starter = threading.Thread(target=lambda: result.update(rc=launch.start(s)))
    started = time.monotonic()
    starter.start()
    killed = None
    server = None
    while killed is None and time.monotonic() - started < 120 and starter.is_alive():
        server = launch.running_pid(s)
        stub = next((p for p, st in stubs_of(server).items() if st.model == "chat_render"), None) if server else None
        if stub is not None:
            os.kill(stub, signal.SIGKILL)
            killed = time.monotonic()
        time.sleep(0.02)
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
