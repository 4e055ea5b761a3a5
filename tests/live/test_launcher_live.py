"""A real server started and stopped by the launcher leaves no /dev/shm region behind, and stops
within its exit timeout: nothing reloads a model while the server unloads them."""

from __future__ import annotations

import glob
import os
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from launcher import cli as launch


@pytest.mark.live
def test_start_stop_leaves_no_shared_memory(tmp_path, model_dir):
    """SIGTERM lets the Python backend unlink its /dev/shm regions; a second server on other
    ports shows it without touching the session's server. Its regions carry its build folder's
    prefix, so other servers starting meanwhile do not count."""
    s = replace(
        launch.Settings(),
        build_dir=str(tmp_path),
        model_dir=str(model_dir),
        http_port=ports.port("launcher"),
        grpc_port=ports.port("launcher") + 1,
        metrics_port=ports.port("launcher") + 2,
    )
    try:
        assert launch.start(s) == 0
        mine = set(glob.glob(f"/dev/shm/{s.shm_prefix}*"))
        assert mine, "the server created no shared-memory regions: nothing was checked"
        pid = int(Path(s.pid_file).read_text())
    finally:
        launch.stop(s)
    assert not launch.is_ready(s)
    assert not (mine & set(glob.glob("/dev/shm/triton_python_backend_shm_region_*")))
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert not os.path.exists(s.pid_file)
    # The watchdog ends before the server: a model unloading is not a stub crash to reload, and a
    # reloaded model would hold tritonserver up until its exit timeout.
    assert "reloading" not in s.watchdog_log_file.read_text()
    assert "Exit timeout expired" not in s.log_file.read_text()
