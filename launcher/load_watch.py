"""Stubs that die while their model loads, seen while tritonserver starts.

Triton 2.51 never marks a Python model failed whose stub died during ``initialize`` (seen here:
``Unable to initialize shared memory key ...``, then ``free(): double free detected``; a SIGKILL of
the stub does the same): the model stays LOADING, the server never becomes ready, and the
launcher waited out its whole start-up timeout (180 s). The supervisor asks this watch at each
look while the server is not ready yet; a Python model that is still loading and has had fewer
live stubs than it needs for ``grace_s`` is a failed start, reported at once with the log lines
behind it. What is loading is read from the server's log (Triton's HTTP service, and its
repository index, come up only once the start-up loads end). Under ``serve``, where the server
writes to the launcher's own output, only models whose stub was once seen are watched.

The grace covers the gap between a model's load and its instance stubs' start (and, where
auto-complete is on, the backend's short-lived first stub that reads the config; the launcher turns
it off). Triton logs a model's load when it is queued, so the launcher gives it a loader thread per
model (``--model-load-thread-count``): no model waits, stubless, behind others.

Where Triton does notice (an instance stub found dead during ``initialize``: "Stub process
'<model>_0_0' is not healthy"), it fails the load and, at start-up, exits at once; ``stub_died``
reads the model from its log, so that the supervisor says the same as for a stub the watch saw die.

A start can also hang with every stub alive: seen here in full test runs, after ``tokenize``'s or
vLLM's ``llm`` stub had logged the end of its ``initialize``; the model never reported loaded. Two
such servers, caught hung, showed the cause: Triton 2.51's stub launcher, its one-second health
check missed while the stub initialised (a stub busy on busy cores), gives up on the instance and
waits for the stub process to exit (``StubLauncher::Launch``'s deferred ``WaitForStubProcess``, a
``wait4`` without a limit) while nothing tells the stub to exit; the stub, its ``initialize`` done,
waits for its next command. ``hung_models`` reads it two ways: a loading model's live stub that a
tritonserver thread has waited on for ``grace_s`` (``/proc``'s ``wchan`` and ``syscall``), and, for
any other hang, a process group (tritonserver, the stubs, what they started) all but idle for
``stall_s`` while a Python model is still loading: a load that works uses CPU somewhere. Such a
start is worth another try, unlike a model that fails to load.
"""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from launcher.processes import group_cpu_ticks
from launcher.watchdog import stubs_of

# Longer than a stub takes to appear after its model's load begins, and than the gap between the
# backend's first stub and the instances' (well under a second, on busy shared cores too).
DEFAULT_GRACE_S = 10.0

# What a hung start's whole process group still spends in ``stall_s`` (the stubs' health threads
# wake every 300 ms), far below any work: a loading model burns seconds.
IDLE_CPU_S = 0.2
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


# Triton logs each model it starts to load; the Python backend each instance it starts (one stub
# each: "<model>_<group>_<index>").
_LOAD_BEGUN = re.compile(r'"loading: ([^:"\s]+):\d+"')
_INSTANCE_STARTED = re.compile(r"TRITONBACKEND_ModelInstanceInitialize: (\S+)_\d+_\d+ \(")
_LOADED = re.compile(r"successfully loaded '([^']+)'")
_UNHEALTHY_STUB = re.compile(r"Stub process '(\S+?)_\d+_\d+' is not healthy")


def stub_died(log_text: str) -> str | None:
    """The model whose stub Triton found dead while the model loaded, as its log says; None if none."""
    found = _UNHEALTHY_STUB.search(log_text)
    return found.group(1) if found else None


@dataclass
class LoadWatch:
    """The stubs of one starting server, model by model: a Python model whose load has begun
    needs a live stub (the backend's first one, then one per instance it has started)."""

    server_pid: int
    """The tritonserver whose stubs are watched."""

    python_models: frozenset[str] = frozenset()
    """The repository's Python-backend models (only they have stubs)."""

    log_file: Path | None = None
    """The server's log, read from ``log_offset`` on (None: only models whose stub was seen count)."""

    log_offset: int = 0
    """Where this server's part of the log begins (the log is appended across restarts)."""

    grace_s: float = DEFAULT_GRACE_S
    """How long a loading model may lack a stub before its load counts as failed."""

    stall_s: float = 60.0
    """How long the server's process group may stay idle while a Python model loads before the
    start counts as hung (``Settings.load_stall_s``)."""

    _started: Counter = field(default_factory=Counter)
    _begun: set[str] = field(default_factory=set)
    _loaded: set[str] = field(default_factory=set)
    _seen: set[str] = field(default_factory=set)
    _short_since: dict[str, float] = field(default_factory=dict)
    _ticks: dict[int, int] = field(default_factory=dict)
    _idle_since: float | None = None
    _idle_ticks: int = 0
    _awaited_since: dict[str, float] = field(default_factory=dict)
    hang: str = ""
    """How the last hung start showed (``hung_models``), for the log."""

    def _read_log(self) -> None:
        if self.log_file is None or not self.log_file.exists():
            return
        with self.log_file.open("rb") as f:
            f.seek(self.log_offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1  # whole lines only; the rest is read next time
        self.log_offset += end
        text = chunk[:end].decode(errors="replace")
        self._begun.update(m for m in _LOAD_BEGUN.findall(text) if m in self.python_models)
        self._started.update(_INSTANCE_STARTED.findall(text))
        self._loaded.update(_LOADED.findall(text))

    def dead_model(self, now: float | None = None) -> str | None:
        """A Python model still loading (begun, not yet "successfully loaded" in the log) that has
        lacked a stub for ``grace_s``, if any. Triton's HTTP service, and so its repository index,
        is not up before the start-up loads end: the log is what says how far they are."""
        now = time.monotonic() if now is None else now
        self._read_log()
        alive = Counter(stub.model for stub in stubs_of(self.server_pid).values())
        self._seen |= set(alive)
        for model in (self._seen | self._begun | set(self._started)) - self._loaded:
            if alive[model] < max(self._started[model], 1):
                self._short_since.setdefault(model, now)
            else:
                self._short_since.pop(model, None)
        for model in self._loaded:
            self._short_since.pop(model, None)
        overdue = sorted(m for m, t in self._short_since.items() if now - t >= self.grace_s)
        return overdue[0] if overdue else None

    def hung_models(self, now: float | None = None) -> list[str]:
        """The loading Python models whose live stub tritonserver has waited on to exit for
        ``grace_s``; else those still loading (begun, or their stubs seen, and not yet
        "successfully loaded"), if the server's whole process group has used under ``IDLE_CPU_S``
        of CPU for ``stall_s`` while they load; else none."""
        now = time.monotonic() if now is None else now
        self._read_log()
        ticks = group_cpu_ticks(self.server_pid)
        # What each process used since the last look (a new process: all it has used).
        spent = sum(max(0, t - self._ticks.get(pid, 0)) for pid, t in ticks.items())
        self._ticks = ticks
        stubs = stubs_of(self.server_pid)
        self._seen |= {stub.model for stub in stubs.values()}
        loading = sorted((self._seen | self._begun | set(self._started)) - self._loaded)
        awaited = {stubs[pid].model for pid in awaited_by(self.server_pid) if pid in stubs} & set(loading)
        for model in awaited:
            self._awaited_since.setdefault(model, now)
        for model in set(self._awaited_since) - awaited:
            del self._awaited_since[model]
        given_up = sorted(m for m, since in self._awaited_since.items() if now - since >= self.grace_s)
        if given_up:
            self.hang = (
                f"tritonserver has waited {self.grace_s:.0f} s for their live stub to exit (a missed health check)"
            )
            return given_up
        if not loading or self._idle_since is None:
            self._idle_since, self._idle_ticks = now, 0
            return []
        self._idle_ticks += spent
        if self._idle_ticks >= IDLE_CPU_S * TICKS_PER_S:
            self._idle_since, self._idle_ticks = now, 0
            return []
        if now - self._idle_since < self.stall_s:
            return []
        self.hang = f"the server used almost no CPU for {self.stall_s:.0f} s"
        return loading


def awaited_by(server_pid: int) -> set[int]:
    """The processes that a thread of ``server_pid`` is blocked in ``wait4`` on (its ``wchan`` is
    ``do_wait``; the first argument of its syscall is the pid)."""
    out = set()
    for task in Path(f"/proc/{server_pid}/task").glob("*"):
        try:
            if (task / "wchan").read_text().strip() != "do_wait":
                continue
            pid = int((task / "syscall").read_text().split()[1], 16)
        except (OSError, IndexError, ValueError):
            continue
        if pid > 0:
            out.add(pid)
    return out


def log_tail(log_file: Path, lines: int = 30) -> str:
    """The last lines of the server's log (where a dying stub writes its last words)."""
    if not log_file.exists():
        return ""
    return "\n".join(log_file.read_text(errors="replace").splitlines()[-lines:])
