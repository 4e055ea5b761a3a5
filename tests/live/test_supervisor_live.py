"""The supervisor on real tritonservers: a SIGKILLed server comes back, a stop at any moment
leaves nothing behind, and the container entrypoint (``serve``) supervises the same way.

Each test runs its own small server (``render_completion`` only) on its own ports and build
folder, beside whatever session server other tests use. docs/RELIABILITY.md quotes the figures
``-s`` prints.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import fields, replace
from pathlib import Path

import pytest
import ports

from client import RendererClient
from launcher import cli as launch
from launcher.processes import group_members
from launcher.watchdog import alive, stubs_of

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "The supervisor brings the server back"


def small_server(tmp_path: Path, model_dir: Path, port: int, openai_port: int = 0) -> launch.Settings:
    return replace(
        launch.Settings(),
        model_dir=str(model_dir),
        build_dir=str(tmp_path / "build"),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        openai_port=openai_port,
        models="render_completion",
        tokenize_instances=1,
    )


def regions_of(s: launch.Settings) -> set[str]:
    return set(glob.glob(f"/dev/shm/{s.shm_prefix}*"))


def stub_regions(server_pid: int) -> set[str]:
    return {f"/dev/shm/{stub.region}" for stub in stubs_of(server_pid).values() if stub.region}


def wait_for(predicate, timeout_s: float, what: str) -> float:
    """Poll until ``predicate()``; the moment it held."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic()


def restarted(s: launch.Settings, old_pid: int) -> bool:
    state = launch.supervisor_state(s)
    return state is not None and state.server_pid not in (None, old_pid) and launch.is_ready(s)


# gRPC clients share their channels' reconnect backoff (grpc's global subchannel pool): after a
# long outage they may fail fast for a while with this, without reaching the restarted server.
GRPC_BACKOFF = "failed to connect to all addresses"


class Load:
    """Clients sending render_completion over HTTP and gRPC: (start time, protocol, outcome)."""

    def __init__(self, s: launch.Settings, expected: list[int]) -> None:
        self.s, self.expected = s, expected
        self.results: list[tuple[float, str, str]] = []
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(p,)) for p in ("grpc", "grpc", "http", "http")]

    def _run(self, protocol: str) -> None:
        port = self.s.grpc_port if protocol == "grpc" else self.s.http_port
        while not self.done.is_set():
            # A new client after each failure: a connection to the dead server is no use.
            with RendererClient(f"{self.s.host}:{port}", protocol, timeout_s=30) as c:
                while not self.done.is_set():
                    t = time.monotonic()
                    try:
                        ok = c.render_completion(PROMPT).input_ids == self.expected
                    except Exception as e:  # noqa: BLE001 - a dying server fails requests in many ways
                        self.results.append((t, protocol, f"error: {type(e).__name__}: {str(e)[:120]}"))
                        time.sleep(0.05)
                        break
                    self.results.append((t, protocol, "ok" if ok else "wrong"))

    def ok_after(self, t0: float, protocol: str) -> int:
        return sum(t > t0 and p == protocol and r == "ok" for t, p, r in self.results)

    def __enter__(self) -> "Load":
        [t.start() for t in self.threads]
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        [t.join(60) for t in self.threads]


def test_sigkilled_tritonserver_is_restarted_under_load(tmp_path, model_dir, hf_tokenizer, capsys):
    s = small_server(tmp_path, model_dir, ports.port("supervisor"))
    assert launch.start(s) == 0, f"see {s.log_file}"
    try:
        before = launch.supervisor_state(s)
        old_pid, old_watchdog = before.server_pid, before.watchdog_pid
        assert before.restarts == 0 and old_pid == int(s.pid_file.read_text())
        old_regions = stub_regions(old_pid)
        assert old_regions, "the server's stubs have no shared-memory regions: the leak check would check nothing"
        with Load(s, hf_tokenizer(PROMPT).input_ids) as load:
            wait_for(
                lambda: load.ok_after(0, "grpc") >= 10 and load.ok_after(0, "http") >= 10,
                30,
                "requests before the kill",
            )
            killed_at = time.monotonic()
            os.kill(old_pid, signal.SIGKILL)
            ready_at = wait_for(lambda: restarted(s, old_pid), 60, "the restarted server to be ready")
            wait_for(
                lambda: load.ok_after(ready_at, "grpc") >= 10 and load.ok_after(ready_at, "http") >= 10,
                120,
                "correct answers from the restarted server over both protocols",
            )
        results = load.results
        restart_s = ready_at - killed_at
        failed = [(t, r) for t, _, r in results if r.startswith("error")]
        with capsys.disabled():
            print(
                f"\nSIGKILL to ready: {restart_s:.1f} s; {len(results)} requests; failures from "
                f"{failed[0][0] - killed_at:+.1f} s to {failed[-1][0] - killed_at:+.1f} s after the kill; "
                f"first: {failed[0][1]}"
            )
        assert restart_s < 60
        assert "wrong" not in [r for _, _, r in results], "a request got wrong ids"
        # Requests in flight at the kill may fail; those finished well before it may not.
        assert all(r == "ok" for t, _, r in results if t < killed_at - 0.5), "a request failed before the kill"
        late = [r for t, _, r in results if t > ready_at and r != "ok" and GRPC_BACKOFF not in r]
        assert not late, f"the restarted server failed requests: {late[:3]}"

        after = launch.supervisor_state(s)
        assert (after.restarts, after.last_exit) == (1, "killed by signal 9 (SIGKILL)")
        capsys.readouterr()
        assert launch.status(s) == 0
        assert "restarts 1" in capsys.readouterr().out
        assert "killed by signal 9 (SIGKILL)" in s.supervisor_log_file.read_text()
        # Nothing of the dead server is left: no process of its group, no watchdog, no region.
        assert group_members(old_pid) == [] and not alive(old_watchdog)
        assert not old_regions & set(glob.glob("/dev/shm/triton_python_backend_shm_region_*"))
        new_pid = after.server_pid
        assert group_members(new_pid) and stub_regions(new_pid)
    finally:
        launch.stop(s)
    assert group_members(new_pid) == [] and not regions_of(s)
    assert not alive(after.supervisor_pid) and not alive(after.watchdog_pid)


def _tritonserver_spawned(s: launch.Settings) -> bool:
    return launch.running_pid(s) is not None


def _stubs_loading(s: launch.Settings) -> bool:
    pid = launch.running_pid(s)
    return pid is not None and bool(stubs_of(pid)) and not launch.is_ready(s)


@pytest.mark.parametrize("moment", [_tritonserver_spawned, _stubs_loading], ids=["spawned", "stubs-loading"])
def test_stop_during_start_up_leaves_nothing(tmp_path, model_dir, moment):
    """`stop` while `start` is still waiting: no server, stub, watchdog, front or region remains."""
    s = replace(
        small_server(tmp_path, model_dir, ports.port("supervisor") + 10, openai_port=ports.port("supervisor") + 13),
        models="render_completion,render_chat",
        chat_render_instances=2,
    )
    started: list[int] = []
    starter = threading.Thread(target=lambda: started.append(launch.start(s)))
    starter.start()
    try:
        wait_for(lambda: moment(s), 120, moment.__name__)
        state = launch.supervisor_state(s)
        server_pid = launch.running_pid(s)
        regions = stub_regions(server_pid) | regions_of(s)
        front_pid = int(s.front_pid_file.read_text())
        members = group_members(server_pid)
        print(f"\nat {moment.__name__}: {len(members)} processes in the server's group, {len(regions)} regions")
        t = time.monotonic()
    finally:
        launch.stop(s)
    stop_s = time.monotonic() - t
    starter.join(60)
    print(f"stop took {stop_s:.1f} s")
    assert started == [1], "start must report the failure"
    assert not launch.is_ready(s)
    assert group_members(server_pid) == [], "a process of the server's group survived the stop"
    for pid in (state.supervisor_pid, state.watchdog_pid, front_pid):
        assert not alive(pid), pid
    assert not regions & set(glob.glob("/dev/shm/*")) and not regions_of(s)
    assert stop_s < 20, "stop waited for loading to finish"


def test_container_entrypoint_supervises_tritonserver(tmp_path, model_dir):
    """docker/entrypoint.sh serve (the container, `make serve`): the launcher stays the entrypoint's
    process and restarts a killed server; the kubelet's SIGTERM then ends everything cleanly."""
    s = small_server(tmp_path, model_dir, ports.port("supervisor") + 20)
    setting_names = {f.name.upper() for f in fields(launch.Settings)}
    env = {k: v for k, v in os.environ.items() if k not in setting_names}
    env.update(
        MODEL_DIR=str(model_dir),
        BUILD_DIR=s.build_dir,
        HTTP_PORT=str(s.http_port),
        GRPC_PORT=str(s.grpc_port),
        METRICS_PORT=str(s.metrics_port),
        OPENAI_PORT="0",
        MODELS=s.models,
        TOKENIZE_INSTANCES="1",
        PYTHON=sys.executable,
    )
    log = open(tmp_path / "entrypoint.log", "wb")
    proc = subprocess.Popen(
        [str(ROOT / "docker" / "entrypoint.sh"), "serve"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for(lambda: launch.is_ready(s) or proc.poll() is not None, 120, "the entrypoint's server")
        state = launch.supervisor_state(s)
        assert state is not None and state.supervisor_pid == proc.pid, "the entrypoint's process supervises"
        old_pid = state.server_pid
        os.kill(old_pid, signal.SIGKILL)
        wait_for(lambda: restarted(s, old_pid), 60, "the restarted server")
        new_pid = launch.supervisor_state(s).server_pid
        assert launch.supervisor_state(s).restarts == 1
        regions = stub_regions(new_pid)
        os.kill(proc.pid, signal.SIGTERM)  # what the kubelet sends
        assert proc.wait(timeout=45) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    assert group_members(old_pid) == [] and group_members(new_pid) == []
    assert regions and not regions & set(glob.glob("/dev/shm/*")) and not regions_of(s)
    assert launch.supervisor_state(s).restarts == 1
