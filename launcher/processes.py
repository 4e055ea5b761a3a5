"""The processes a build folder runs, found and ended: tritonserver by its pid file and command
line, its process group (stubs, vLLM's engine processes), its /dev/shm regions, and the watchdog
and HTTP front started beside it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Mapping

from launcher.edge import INFER_CHECK_PATH
from launcher.server import server_env
from launcher.settings import ROOT, Settings
from launcher.watchdog import alive, server_ready


def is_ready(s: Settings) -> bool:
    return server_ready(s.http_url)


def pid_from(pid_file: Path, marks: list[bytes]) -> int | None:
    """The live process a pid file names, if its command line carries every mark: a stale pid
    file may name a pid the system has since given to another process."""
    try:
        pid = int(pid_file.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        return None
    if not alive(pid) or not all(m in cmdline for m in marks):
        return None
    return pid


def running_pid(s: Settings) -> int | None:
    """The pid of the server this build folder started, if it still runs (only a tritonserver
    serving this very repository counts)."""
    return pid_from(s.pid_file, [f"--model-repository={s.repository}".encode()])


def supervisor_pid(s: Settings) -> int | None:
    """The supervisor of this build folder, if it runs (the background one ``start`` started,
    or a ``serve`` launcher)."""
    pid = pid_from(s.supervisor_pid_file, [])
    if pid is None:
        return None
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    background = b"launcher.supervisor" in cmdline and f"--settings={s.settings_file}".encode() in cmdline
    return pid if background or {b"launcher", b"launcher.cli"} & set(cmdline) else None


def wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reap(pid)
        if not alive(pid):
            return True
        time.sleep(0.1)
    return False


def terminate(pid: int, timeout_s: float) -> bool:
    """SIGTERM, then wait; whether the process is gone."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    return wait_gone(pid, timeout_s)


def reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def start_watchdog(s: Settings, server_pid: int, token: str) -> subprocess.Popen:
    """Beside the server: reloads a model whose stub died (launcher/watchdog.py says why)."""
    env = {**server_env(), "WATCHDOG_TOKEN": token}
    with open(s.watchdog_log_file, "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "launcher.watchdog",
                "--server-pid",
                str(server_pid),
                "--http-url",
                s.triton_http_url,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(ROOT),
        )


def start_front(s: Settings, follow_pid: int) -> subprocess.Popen | None:
    """Beside the server: the OpenAI- and vLLM-compatible HTTP front, unless ``OPENAI_PORT`` is
    0. It exits with ``follow_pid``: the supervisor, so it outlives a server restart."""
    if not s.openai_port:
        return None
    cmd = [
        sys.executable,
        "-m",
        "openai_front",
        "--host",
        s.inner.host,
        "--port",
        str(s.inner.front),
        "--triton",
        f"{s.inner.host}:{s.inner.grpc}",
        "--model-dir",
        str(s.resolved_model_dir),
        "--max-model-len",
        str(s.max_model_len),
        "--max-body-bytes",
        str(s.max_input_bytes),
        "--server-pid",
        str(follow_pid),
        # The gRPC streams' proxy the edge routes ModelStreamInfer to (0: none, without the edge).
        "--grpc-port",
        str(s.inner.front_grpc),
    ]
    if s.served_model_name:
        cmd += ["--served-model-name", s.served_model_name]
    if s.edge:
        cmd += ["--infer-check-path", INFER_CHECK_PATH]
    with open(s.build / "openai_front.log", "ab") as log:
        proc = subprocess.Popen(
            cmd, env=server_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT)
        )
    s.front_pid_file.write_text(str(proc.pid))
    print(f"OpenAI-compatible front on http://{s.host}:{s.openai_port}/v1", flush=True)
    return proc


def stop_front(s: Settings) -> None:
    pid = pid_from(s.front_pid_file, [b"openai_front"])  # only the front this folder started
    if pid is not None and not terminate(pid, 5.0):
        os.kill(pid, signal.SIGKILL)
    s.front_pid_file.unlink(missing_ok=True)


SHM_DIR = Path("/dev/shm")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    return list(group_cpu_ticks(pgid))


def group_cpu_ticks(pgid: int) -> dict[int, int]:
    """CPU time (user and system, in clock ticks) of each live process of a process group."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields and fields[0] != "Z" and int(fields[2]) == pgid:
            out[int(entry.name)] = int(fields[11]) + int(fields[12])
    return out


def kill_group(pgid: int, timeout_s: float = 10.0) -> bool:
    """SIGKILL a process group and wait until none of it runs; whether it is gone."""
    deadline = time.monotonic() + timeout_s
    while group_members(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        reap_orphans({})
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def clean_regions(prefix: str, shm_dir: Path | None = None) -> list[str]:
    """Unlink the /dev/shm regions whose name starts with ``prefix``; the names removed."""
    removed = []
    for region in (shm_dir or SHM_DIR).glob(prefix + "*"):
        region.unlink(missing_ok=True)
        removed.append(region.name)
    return removed


def reap_orphans(children: Mapping[int, subprocess.Popen]) -> None:
    """As PID 1 (the container) the supervisor adopts the stubs of a dead server: reap them.

    Our own children are left to their ``Popen`` (peeked at with WNOWAIT, then polled), so their
    exit status is not lost. Anywhere else orphans go to the host's init, and nothing is done.
    """
    if os.getpid() != 1:
        return
    while True:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return
        if info is None:
            return
        if info.si_pid in children:
            children[info.si_pid].poll()
        else:
            os.waitpid(info.si_pid, 0)


def end_process(proc: subprocess.Popen | None, timeout_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout_s``."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
