"""A real server started and stopped by the launcher leaves no /dev/shm region behind, and stops
within its exit timeout after concurrent traffic through the front: nothing reloads a model while
the server unloads them, and no answered stream is left holding one."""

from __future__ import annotations

import glob
import os
from concurrent.futures import ThreadPoolExecutor
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
        openai_port=ports.port("launcher") + 3,
    )
    try:
        assert launch.start(s) == 0
        mine = set(glob.glob(f"/dev/shm/{s.shm_prefix}*"))
        assert mine, "the server created no shared-memory regions: nothing was checked"
        pid = int(Path(s.pid_file).read_text())
        _front_traffic(s.openai_port)
    finally:
        launch.stop(s)
    assert not launch.is_ready(s)
    assert not (mine & set(glob.glob("/dev/shm/triton_python_backend_shm_region_*")))
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert not os.path.exists(s.pid_file)
    # The watchdog ends before the server: a model unloading is not a stub crash to reload, and a
    # reloaded model would hold tritonserver up until its exit timeout.
    assert "reloading" not in s.watchdog_log_file.read_text()
    # The front lets Triton end each answered stream: a stream cancelled as it ended leaked its
    # request inside Triton under concurrency, so the ensemble never unloaded.
    assert "Exit timeout expired" not in s.log_file.read_text()


def _front_traffic(port: int, requests: int = 80, threads: int = 8) -> None:
    """Chats and completions, streamed and not, from ``threads`` clients at once (fewer threads
    did not show the leak)."""
    import openai

    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0)
    model = client.models.list().data[0].id

    def one(i: int) -> None:
        stream = i % 4 < 2
        if i % 2:
            chunks = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=8, stream=stream
            )
        else:
            chunks = client.completions.create(model=model, prompt=f"hi {i}", max_tokens=8, stream=stream)
        if stream:
            assert list(chunks), "a stream with no chunk"

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(requests)))
