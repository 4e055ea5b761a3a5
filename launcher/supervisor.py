"""Keep tritonserver running: restart it when it dies, and leave nothing behind when it stops.

``python -m launcher start`` runs this module in the background; ``serve`` (``make serve``,
the container) runs the same ``Supervisor`` in the launcher's own process. It starts tritonserver
in a process group of its own, one watchdog per server (``launcher/watchdog.py`` reloads models
whose stub died) and the HTTP front (which follows the supervisor, so it outlives a restart).

When tritonserver exits without being asked to (docs/RELIABILITY.md records a SIGSEGV in the
Python backend), the supervisor logs the exit code or signal, kills what is left of the server's
process group (stubs, vLLM's engine processes), unlinks the group's /dev/shm regions (every
server of a build folder uses one region-name prefix, ``Settings.shm_prefix``), and starts the
server again after a backoff (1 s, 2 s, 4 s ... capped). Restarts are counted in
``BUILD_DIR/supervisor.json`` and logged. A first server that exits on its own before it was
ever ready (an exit code, not a signal) failed to start: a bad setting or a model that does not
load, which a restart would only repeat; the supervisor gives up, so it fails fast. So does a first
server with a model whose stub died while it loaded, which 2.51 would wait for forever
(``launcher/load_watch.py``). A start that hangs, every stub alive (Triton waiting for a loading
model's stub to exit, or the whole server idle while a model loads), is ended and started again,
first or not.

SIGTERM, SIGINT or SIGHUP stop it: a ready server gets SIGTERM (the Python backend then frees
its regions) and the exit timeout; a server still loading models would act on SIGTERM only once
loading ends, so it is killed at once. Either way the group is killed and its regions unlinked.

    python -m launcher.supervisor --tritonserver=BIN --settings=FILE

The server binary is named in the arguments so that a process listing (and the test suite's
guard against unit tests starting servers) sees what this process runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Mapping, Sequence

from launcher.edge import quit_edge, start_edge
from launcher.server import exit_timeout_s, server_command, server_env
from launcher.load_watch import LoadWatch, log_tail, stub_died
from launcher.processes import (
    clean_regions,
    end_process,
    kill_group,
    reap_orphans,
    start_front,
    start_watchdog,
)
from launcher.repository import python_models
from launcher.settings import Settings
from launcher.watchdog import server_ready

log = logging.getLogger("launcher.supervisor")


@dataclass(frozen=True)
class Backoff:
    """Delays between restarts: doubling from ``first_s`` up to ``cap_s``."""

    first_s: float = 1.0
    """Delay before the first restart after a healthy run."""

    cap_s: float = 30.0
    """Longest delay, so a server that keeps crashing is retried at this pace."""

    healthy_s: float = 60.0
    """A server that stayed ready this long counts as healthy: the next crash starts from
    ``first_s`` again."""

    def delay(self, consecutive_failures: int) -> float:
        """The wait before restart number ``consecutive_failures`` (1-based) in a row."""
        return min(self.cap_s, self.first_s * 2 ** max(0, consecutive_failures - 1))


@dataclass(frozen=True)
class SupervisorState:
    """What ``BUILD_DIR/supervisor.json`` says; ``python -m launcher status`` prints it."""

    supervisor_pid: int
    """The supervising process (the launcher itself under ``serve``)."""

    server_pid: int | None
    """The current tritonserver, None between a crash and its restart."""

    watchdog_pid: int | None
    """The current server's watchdog."""

    restarts: int
    """How often tritonserver was started again after exiting unexpectedly."""

    last_exit: str | None
    """Why the last server exited unexpectedly ("killed by signal 11 (SIGSEGV)", "exit code 1")."""

    ready: bool
    """Whether the current server has answered ready."""

    running: bool
    """False once the supervisor has stopped."""

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)  # atomic: a reader never sees half a file

    @classmethod
    def read(cls, path: Path) -> "SupervisorState | None":
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


@dataclass(frozen=True)
class Exited:
    """How one server run ended."""

    returncode: int
    """Popen's: negative for a signal."""

    ready_s: float | None
    """How long it was ready before it exited; None if it never was."""

    reason: str | None = None
    """Why the supervisor ended a server that had not exited (a stub dead while its model loaded)."""

    hung: bool = False
    """The supervisor ended a start that hung: another start may well load, so even a first
    server is started again."""


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "unknown"
        return f"killed by signal {-returncode} ({name})"
    return f"exit code {returncode}"


def supervisor_state(s: Settings) -> SupervisorState | None:
    """The restart counter and current pids that the supervisor keeps in the build folder."""
    return SupervisorState.read(s.supervisor_state_file)


class Supervisor:
    """Runs tritonserver (``command``) until asked to stop, restarting it when it dies."""

    def __init__(
        self,
        s: Settings,
        command: Sequence[str],
        env: Mapping[str, str],
        token: str,
        backoff: Backoff = Backoff(),
        server_log: Path | None = None,
    ) -> None:
        self.s = s
        self.command = list(command)
        self.env = dict(env)
        self.token = token
        self.backoff = backoff
        self.server_log = server_log  # None: the server writes to our stdout (``serve``)
        self._stop = threading.Event()
        self._state = SupervisorState(os.getpid(), None, None, 0, None, False, True)
        self._edge: subprocess.Popen | None = None

    def request_stop(self, *_: object) -> None:
        """Signal-handler compatible: ends ``run`` (the server is stopped, never restarted)."""
        self._stop.set()

    @property
    def state(self) -> SupervisorState:
        return self._state

    def _update(self, **changes: object) -> None:
        self._state = replace(self._state, **changes)
        self._state.write(self.s.supervisor_state_file)

    def run(self) -> int:
        """0 after a requested stop; the server's exit status if it failed during start-up."""
        self.s.build.mkdir(parents=True, exist_ok=True)
        self.s.supervisor_pid_file.write_text(str(os.getpid()))
        self._update()
        # Regions of a server of this folder killed hard earlier (with its supervisor).
        clean_regions(self.s.shm_prefix)
        front = start_front(self.s, os.getpid())
        # The edge outlives tritonserver's restarts (its clients get a 503 meanwhile).
        self._edge = start_edge(self.s)
        try:
            return self._loop()
        finally:
            end_process(self._edge)
            end_process(front)
            self.s.front_pid_file.unlink(missing_ok=True)
            self.s.supervisor_pid_file.unlink(missing_ok=True)
            self._update(server_pid=None, watchdog_pid=None, ready=False, running=False)

    def _loop(self) -> int:
        failures = 0
        first = True
        while not self._stop.is_set():
            server = self._spawn()
            watchdog = start_watchdog(self.s, server.pid, self.token)
            self._update(server_pid=server.pid, watchdog_pid=watchdog.pid, ready=False)
            exited = self._watch(server, watchdog)
            if exited is None:
                log.info("stopping tritonserver (pid %d) on request", server.pid)
                # The edge first, gracefully: it finishes what is in flight and closes its idle
                # connections to Triton, whose own graceful stop would wait for them to its timeout.
                quit_edge(self._edge, exit_timeout_s(self.s))
                # Ready (perhaps only just, unseen by _watch): SIGTERM first, so it can finish.
                self._bury(server, watchdog, graceful=self._state.ready or server_ready(self.s.triton_http_url))
                return 0
            reason = exited.reason or describe_exit(exited.returncode)
            dead = stub_died(self._this_server_log()) if exited.ready_s is None else None
            if dead is not None and not exited.reason:
                reason = f"the stub of model '{dead}' died while the model loaded ({reason})"
            how = "was ended" if exited.reason else "exited unexpectedly"
            log.warning("tritonserver (pid %d) %s: %s", server.pid, how, reason)
            self._bury(server, watchdog, graceful=False)
            if first and exited.ready_s is None and not exited.hung and (exited.returncode >= 0 or exited.reason):
                log.error(
                    "tritonserver failed to start: not restarting it (see %s)", self.server_log or "its output above"
                )
                return exited.returncode or 1
            first = False
            healthy = exited.ready_s is not None and exited.ready_s >= self.backoff.healthy_s
            failures = 1 if healthy else failures + 1
            delay = self.backoff.delay(failures)
            self._update(
                restarts=self._state.restarts + 1, last_exit=reason, server_pid=None, watchdog_pid=None, ready=False
            )
            log.warning("restart %d of tritonserver in %.0f s", self._state.restarts, delay)
            if self._stop.wait(delay):
                return 0
        return 0

    def _spawn(self) -> subprocess.Popen:
        # Where this run's part of the log begins (the load watch reads it from there).
        self._log_offset = self.server_log.stat().st_size if self.server_log and self.server_log.exists() else 0
        out = open(self.server_log, "ab") if self.server_log else None
        try:
            # A process group of its own: stopping it reaches every stub and what stubs started.
            server = subprocess.Popen(
                self.command,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT if out else None,
                start_new_session=True,
            )
        finally:
            if out:
                out.close()
        self.s.pid_file.write_text(str(server.pid))
        log.info("tritonserver started (pid %d)", server.pid)
        return server

    def _watch(self, server: subprocess.Popen, watchdog: subprocess.Popen) -> Exited | None:
        """Until the server exits (how) or a stop is requested (None)."""
        ready_at: float | None = None
        loads = LoadWatch(
            server.pid, python_models(self.s), self.server_log, self._log_offset, stall_s=self.s.load_stall_s
        )
        next_look = 0.0
        while not self._stop.is_set():
            reap_orphans({server.pid: server, watchdog.pid: watchdog})
            self._keep_edge()
            rc = server.poll()
            if rc is not None:
                return Exited(rc, None if ready_at is None else time.monotonic() - ready_at)
            if ready_at is None and server_ready(self.s.triton_http_url):
                ready_at = time.monotonic()
                self._update(ready=True)
                log.info("tritonserver ready (pid %d)", server.pid)
            if ready_at is None and time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                model = loads.dead_model()
                if model is not None:
                    log.error(
                        "the stub of model '%s' died while the model loaded (Triton 2.51 would wait for it for ever);"
                        " the server log ends:\n%s",
                        model,
                        log_tail(self.server_log) if self.server_log else "(above: the server writes to this output)",
                    )
                    return Exited(1, None, f"the stub of model '{model}' died while the model loaded")
                hung = loads.hung_models()
                if hung:
                    log.error(
                        "the start hung: %s still loading, and %s (Triton 2.51 would wait for ever);"
                        " the server log ends:\n%s",
                        ", ".join(hung),
                        loads.hang,
                        log_tail(self.server_log) if self.server_log else "(above: the server writes to this output)",
                    )
                    return Exited(1, None, f"the start hung while {', '.join(hung)} loaded", hung=True)
            self._stop.wait(0.2)
        return None

    def _keep_edge(self) -> None:
        """Start the edge again if it died: without it no client reaches the server."""
        if self._edge is not None and self._edge.poll() is not None:
            log.warning(
                "the edge (nginx, pid %d) exited (%s); starting it again",
                self._edge.pid,
                describe_exit(self._edge.returncode),
            )
            self._edge = start_edge(self.s)

    def _this_server_log(self) -> str:
        """What the last server wrote to its log (the log is appended across restarts)."""
        if self.server_log is None or not self.server_log.exists():
            return ""
        with self.server_log.open("rb") as f:
            f.seek(self._log_offset)
            return f.read().decode(errors="replace")

    def _bury(self, server: subprocess.Popen, watchdog: subprocess.Popen, graceful: bool) -> None:
        """End the watchdog, the server and its group; unlink the group's regions."""
        # The watchdog first: an unloading model's stubs exit, and a watchdog still running took
        # that for a crash and reloaded the model, which then kept tritonserver up for its whole
        # exit timeout (seen on every stop that raced it: 10-40 s each).
        end_process(watchdog)
        if graceful and server.poll() is None:
            server.terminate()  # the Python backend unlinks its regions on a clean exit
            try:
                server.wait(exit_timeout_s(self.s) + 5)
            except subprocess.TimeoutExpired:
                log.warning("tritonserver (pid %d) did not exit on SIGTERM; killing it", server.pid)
        # Stubs of a server that died (or is still loading) stay behind unless killed, holding
        # their regions; so do vLLM's engine processes.
        if not kill_group(server.pid):
            log.error("processes of tritonserver's group %d survived SIGKILL", server.pid)
        if server.poll() is None:
            server.kill()
        server.wait()
        removed = clean_regions(self.s.shm_prefix)
        if removed:
            log.info("unlinked %d shared-memory regions of tritonserver (pid %d)", len(removed), server.pid)
        self.s.pid_file.unlink(missing_ok=True)


def handle_stop_signals(sup: Supervisor) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, sup.request_stop)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tritonserver", required=True, help="the server binary")
    ap.add_argument("--settings", required=True, type=Path, help="Settings as JSON (launch.start writes it)")
    a = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s supervisor %(levelname)s %(message)s")
    s = Settings.from_json(a.settings.read_text())
    token = secrets.token_hex(16)
    sup = Supervisor(s, server_command(s, token, binary=a.tritonserver), server_env(s), token, server_log=s.log_file)
    handle_stop_signals(sup)  # before any child exists: a stop never finds one unsupervised
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
