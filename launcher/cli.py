"""Fill the model repository templates and run a real ``tritonserver`` on them.

``python -m launcher serve``  foreground (what ``make serve`` and the container run)
``python -m launcher start``  background, waits until ready (tests and benchmarks)
``python -m launcher stop``   stops the server, its stubs, watchdog and front; frees /dev/shm
``python -m launcher status`` readiness, and the supervisor's restart count
``python -m launcher render`` only write the generated repository

``serve`` and ``start`` run tritonserver under a supervisor (``launcher/supervisor.py``) that
starts it again when it dies.

Every deployment choice is an environment variable (see ``Settings``); the same launcher is the
container entrypoint, so a Kubernetes ConfigMap sets the same names.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time

from launcher import repository
from launcher.edge import nginx_binary, stop_edge, with_inner_ports
from launcher.processes import (
    clean_regions,
    is_ready,
    kill_group,
    reap,
    running_pid,
    stop_front,
    supervisor_pid,
    terminate,
    wait_gone,
)
from launcher.server import ensure_python_stub, exit_timeout_s, server_command, server_env, tritonserver_binary
from launcher.settings import ROOT, Settings
from launcher.supervisor import Supervisor, handle_stop_signals, supervisor_state


def prepare(s: Settings) -> None:
    """Everything a server start needs: the model folders and the rendered repository, and the
    Python stub for this venv's Python beside the backend."""
    repository.prepare(s)
    ensure_python_stub(s.triton_home)
    if s.edge:
        nginx_binary()  # missing: said now, not by a supervisor in the background


def start(s: Settings) -> int:
    if supervisor_pid(s) is not None:
        print(f"tritonserver already supervised (supervisor pid {supervisor_pid(s)}); waiting for it")
        return _wait_ready(s, None)
    if running_pid(s) is not None and is_ready(s):
        print(f"tritonserver already running (pid {running_pid(s)}) at {s.http_url}")
        return 0
    prepare(s)
    s = with_inner_ports(s)
    s.build.mkdir(parents=True, exist_ok=True)
    s.settings_file.write_text(s.to_json())
    cmd = [
        sys.executable,
        "-m",
        "launcher.supervisor",
        f"--tritonserver={tritonserver_binary(s.triton_home)}",
        f"--settings={s.settings_file}",
    ]
    with open(s.supervisor_log_file, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=str(ROOT))
    # Written here too, not only by the supervisor: a `stop` right after this must find it.
    s.supervisor_pid_file.write_text(str(proc.pid))
    return _wait_ready(s, proc)


def _wait_ready(s: Settings, proc: subprocess.Popen | None) -> int:
    deadline = time.monotonic() + s.startup_timeout_s
    while time.monotonic() < deadline:
        if (proc.poll() is not None) if proc else supervisor_pid(s) is None:
            print("tritonserver did not start; last lines of its log and the supervisor's:", file=sys.stderr)
            for path in (s.log_file, s.supervisor_log_file):
                lines = path.read_text(errors="replace").splitlines() if path.exists() else []
                print("\n".join(lines[-30:]), file=sys.stderr)
            return 1
        if is_ready(s):
            print(f"tritonserver ready (pid {running_pid(s)}) at {s.http_url}, grpc {s.host}:{s.grpc_port}")
            return 0
        time.sleep(0.5)
    print(f"tritonserver not ready after {s.startup_timeout_s}s; see {s.log_file}", file=sys.stderr)
    stop(s)
    return 1


def stop(s: Settings, timeout_s: float = 60.0) -> int:
    """Stop whatever this build folder runs, at any moment (models still loading included):
    no server, stub, watchdog or front process and no /dev/shm region of the server remains."""

    sup = supervisor_pid(s)
    if sup is not None:
        os.kill(sup, signal.SIGTERM)  # it stops the server (SIGTERM first when ready) and the rest
        if not wait_gone(sup, timeout_s):
            os.kill(sup, signal.SIGKILL)
        reap(sup)
    # What a supervisor killed hard (or a server started without one) leaves is ended here.
    stop_front(s)
    stop_edge(s)
    pid = running_pid(s)
    if pid is not None:
        if sup is None:
            terminate(pid, exit_timeout_s(s) + 5)  # SIGTERM: the backend unlinks its regions
        # The process group also holds what the stubs started (vLLM's engine-core processes).
        kill_group(pid)
        reap(pid)
    clean_regions(s.shm_prefix)
    for f in (s.pid_file, s.supervisor_pid_file):
        f.unlink(missing_ok=True)
    return 0


def serve(s: Settings) -> int:
    """Foreground: this process supervises tritonserver (its output goes to ours) until SIGTERM
    or Ctrl-C; in the container it is PID 1, which the kubelet signals."""

    prepare(s)
    s = with_inner_ports(s)
    s.build.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    cmd = server_command(s, token)
    print("$ " + " ".join(c if token not in c else c.replace(token, "***") for c in cmd), flush=True)
    sup = Supervisor(s, cmd, server_env(s), token)
    handle_stop_signals(sup)
    return sup.run()


def status(s: Settings) -> int:
    ready = is_ready(s)
    state = supervisor_state(s)
    line = "ready" if ready else "not ready"
    if state is not None and state.running:
        line += f" (tritonserver pid {state.server_pid}, restarts {state.restarts}"
        line += f", last exit: {state.last_exit})" if state.last_exit else ")"
    print(line)
    return 0 if ready else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["serve", "start", "stop", "render", "status"])
    args = parser.parse_args(argv)
    s = Settings.from_env()
    if args.action == "serve":
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s supervisor %(levelname)s %(message)s")
        return serve(s)
    if args.action == "start":
        return start(s)
    if args.action == "stop":
        return stop(s)
    if args.action == "render":
        prepare(s)
        print(s.repository)
        return 0
    return status(s)


if __name__ == "__main__":
    sys.exit(main())
