"""Request-supplied chat templates, parsed, compiled and rendered in a separate worker process.

A template sent with a request is untrusted code. The in-process sandbox (``sandbox.py``) keeps it
away from Python internals, but its resource bounds are best effort: one C-level operation can run
for minutes, allocate gigabytes or overflow the C stack and kill the process. So a request's
template never touches the ``chat_render`` stub beyond a size check: its content-format analysis,
kwargs analysis, compilation and rendering (``apply_chat_template``, ``continue_final_message``
included) run in one worker process per ``ChatRenderer``. The worker is a fresh interpreter (never
a fork of the stub, which has threads) under limits the kernel enforces, set before it reads a job:

* ``RLIMIT_AS`` (address space): an allocation past it is a ``MemoryError`` in the worker;
* ``RLIMIT_CPU``, its soft limit raised before each job to the CPU used so far plus the budget:
  past it the kernel sends SIGXCPU, which kills the worker;
* ``RLIMIT_CORE`` 0, and ``PR_SET_PDEATHSIG`` = SIGKILL: the worker dies with the process that
  started it, and exits at EOF on its socket;
* a wall-clock deadline per job, kept by the parent: past it the worker is SIGKILLed, reaped and
  replaced.

The protocol is length-prefixed JSON both ways over a socket pair (nothing the worker sends is
unpickled; ``MSG_NOSIGNAL`` means a dead worker cannot SIGPIPE the stub). The worker answers
``{"text"}`` or ``{"content_format"}``, or ``{"error", "message"}``; the parent re-raises only the
``RenderError`` classes of ``renderer/errors/``, by name. Anything else (a worker that died,
overran, ran out of memory or answered nonsense) is a named ``ChatTemplateWorkerError``. The
worker is replaced after any limit error, and after a job that leaves its RSS above
``recycle_rss_mb``, so memory a template made it take goes back to the system.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from .. import errors
from .. import stage_params as sp
from ..errors import (
    ChatTemplateLimitError,
    ChatTemplateResourceError,
    ChatTemplateSizeError,
    ChatTemplateTimeoutError,
    ChatTemplateWorkerCrashError,
    ChatTemplateWorkerError,
    RenderDataNestingError,
    RenderError,
)
from ..model_info import config_number
from ..template_defaults import DEFAULT_MAX_BYTES, DEFAULT_MEMORY_MB, DEFAULT_RECYCLE_RSS_MB, DEFAULT_TIMEOUT_S
from .apply import apply_chat_template, resolve_template_kwargs
from .content_format import detect_content_format
from .sandbox import TemplateLimits

ROOT = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024
EXIT_OUT_OF_MEMORY = 3
"""The worker's exit status when even its error reply does not fit in its address space."""

_HEADER = struct.Struct(">I")
_PR_SET_PDEATHSIG = 1
_SMALL_REPLY_BYTES = 4096
_MAX_REMEMBERED_FORMATS = 256
# Parents of "renderer" and "renderer.chat" as bare namespaces: the worker then imports only the
# modules it renders with, not renderer.chat's package (its request validation pulls in openai:
# 1.3 s and ~40 MB more per worker).
_BOOTSTRAP = """\
import sys, types
for name in ("renderer", "renderer.chat"):
    package = types.ModuleType(name)
    package.__path__ = [sys.argv[1] + "/" + name.replace(".", "/")]
    sys.modules[name] = package
from renderer.chat.template_worker import worker_main
worker_main(sys.argv[2])
"""
# Environment the worker keeps (strftime_now reads TZ); nothing else of the server's, secrets included.
_ENV_KEEP = ("PATH", "TZ", "LANG", "LC_ALL")

_KNOWN_ERRORS: dict[str, type[RenderError]] = {
    name: cls for name, cls in vars(errors).items() if isinstance(cls, type) and issubclass(cls, RenderError)
}


class TemplateWorkerStartError(RuntimeError):
    """The worker process could not be started: a server fault, not a bad request."""


@dataclass(frozen=True)
class RequestTemplateLimits:
    """Bounds on a chat template sent with a request, enforced by its worker process."""

    timeout_s: float = DEFAULT_TIMEOUT_S
    """Wall-clock deadline of a request's template in the worker (analysis, compile and render
    together); past it the worker is killed and the request gets ``ChatTemplateTimeoutError``."""

    memory_mb: int = DEFAULT_MEMORY_MB
    """The worker's address-space cap (``RLIMIT_AS``), in MiB."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """Largest request template, in UTF-8 bytes, checked before anything parses it."""

    recycle_rss_mb: int = DEFAULT_RECYCLE_RSS_MB
    """A job that leaves the worker's resident memory above this (MiB) gets it replaced."""

    start_timeout_s: float = 60.0
    """How long a new worker may take to import its modules and report ready."""

    cpu_s: int = 0
    """CPU seconds one job may use (``RLIMIT_CPU``); 0: one more than ``timeout_s``, rounded up, so
    the deadline normally acts first and the kernel's limit is the backstop."""

    @classmethod
    def from_config(cls, params: Mapping[str, str]) -> "RequestTemplateLimits":
        """From a model config's parameters (what the launcher writes from its settings); an
        absent or empty parameter keeps its default."""

        return cls(
            timeout_s=config_number(params, sp.REQUEST_TEMPLATE_TIMEOUT_S, float, DEFAULT_TIMEOUT_S),
            memory_mb=config_number(params, sp.REQUEST_TEMPLATE_MEMORY_MB, int, DEFAULT_MEMORY_MB),
            max_bytes=config_number(params, sp.REQUEST_TEMPLATE_MAX_BYTES, int, DEFAULT_MAX_BYTES),
        )

    @property
    def cpu_budget_s(self) -> int:
        """CPU seconds one job may use (``cpu_s``, resolved)."""
        return self.cpu_s or math.ceil(self.timeout_s) + 1

    def check_size(self, template: str) -> None:
        """Refuse a template over ``max_bytes`` (before it is parsed anywhere)."""
        # A character is at most 4 bytes: most templates skip the encode.
        if len(template) * 4 <= self.max_bytes:
            return
        size = len(template.encode("utf-8", "surrogatepass"))
        if size > self.max_bytes:
            raise ChatTemplateSizeError(size, self.max_bytes)


@dataclass(frozen=True)
class TemplateAnalysis:
    """What the worker found in a request template before the messages are parsed."""

    content_format: str
    """vLLM's "auto" detection: "openai" if the template loops over content parts, else "string"."""

    seconds: float
    """Time the job took in the worker: it counts against the request's deadline."""


class TemplateWorker:
    """One worker process that renders request templates, one job at a time (a lock serializes
    callers). Started lazily, or now with ``start``; replaced whenever a job fails it; stopped by
    ``close``, or when this object is collected or the interpreter exits."""

    def __init__(self, limits: RequestTemplateLimits = RequestTemplateLimits()) -> None:
        self.limits = limits
        self._lock = threading.Lock()
        self._process: _Process | None = None
        self._formats: dict[bytes, str] = {}
        self.replacements = 0
        """How many times a worker was replaced after a failed or over-limit job."""

    @property
    def pid(self) -> int | None:
        """The current worker's pid (None before the first start and after ``close``)."""
        process = self._process
        return process.popen.pid if process is not None else None

    def start(self) -> None:
        """Start the worker now and wait until it is ready (so no request pays the start)."""
        with self._lock:
            self._ready_process()

    def close(self) -> None:
        """Kill and reap the worker; a later job starts a new one."""
        with self._lock:
            if self._process is not None:
                self._process.kill()
                self._process = None

    def analyze(self, chat_template: str) -> "TemplateAnalysis":
        """vLLM's "auto" content-format detection of a request template, and how long it took
        (remembered by the template's digest: a client resending its template skips a job)."""
        key = hashlib.sha256(chat_template.encode("utf-8", "surrogatepass")).digest()
        known = self._formats.get(key)
        if known is not None:
            return TemplateAnalysis(known, 0.0)
        reply = self._call({"op": "analyze", "template": chat_template}, _SMALL_REPLY_BYTES, self.limits.timeout_s)
        found = str(reply["content_format"])
        if len(self._formats) >= _MAX_REMEMBERED_FORMATS:
            self._formats.clear()
        self._formats[key] = found
        return TemplateAnalysis(found, float(reply["seconds"]))

    def render(
        self,
        chat_template: str,
        conversation: list[dict[str, Any]],
        *,
        special_tokens: Mapping[str, str],
        template_kwargs: Mapping[str, Any],
        tools: list[dict[str, Any]] | None,
        limits: TemplateLimits,
        timeout_s: float | None = None,
    ) -> str:
        """``resolve_template_kwargs`` then ``apply_chat_template``, in the worker; the same text
        or the same ``RenderError`` as in process, or a ``ChatTemplateWorkerError``.
        ``timeout_s``: what is left of the request's deadline (``limits.timeout_s`` when None)."""
        job = {
            "op": "render",
            "template": chat_template,
            "conversation": conversation,
            "special_tokens": dict(special_tokens),
            "kwargs": dict(template_kwargs),
            "tools": tools,
            "limits": asdict(limits),
        }
        # JSON escapes a character in at most 12 bytes (a surrogate pair), plus the error's words.
        budget = self.limits.timeout_s if timeout_s is None else timeout_s
        return self._call(job, 12 * limits.max_output_chars + 65536, budget)["text"]

    def _call(self, job: dict[str, Any], max_reply: int, timeout_s: float) -> dict[str, Any]:
        if timeout_s <= 0:  # an earlier job of the same request used the whole deadline
            raise self._timed_out()
        try:
            payload = _encode(job)
        except RecursionError:
            raise RenderDataNestingError() from None
        with self._lock:
            process = self._ready_process()
            sent = time.monotonic()
            deadline = sent + timeout_s
            try:
                _send_frame(process.sock, payload, deadline)
                reply = json.loads(_recv_frame(process.sock, deadline, max_reply))
                if not isinstance(reply, dict):
                    raise ValueError("reply is not a JSON object")
            except TimeoutError:
                error: RenderError = self._timed_out()
                self._replace()
                raise error from None
            except (OSError, ValueError) as e:  # died (EOF, reset), or answered nonsense
                error = self._died(e)
                self._replace()
                raise error from None
            if "error" in reply:
                error = self._error(str(reply["error"]), str(reply.get("message", "")))
                if isinstance(error, ChatTemplateLimitError):
                    self._replace()  # whatever it hit may have left memory behind
                raise error
            if int(reply.get("rss_kb", 0)) > self.limits.recycle_rss_mb * 1024:
                self._replace()
            reply["seconds"] = time.monotonic() - sent
            return reply

    def _ready_process(self) -> "_Process":
        process = self._process
        if process is not None and process.popen.poll() is not None:
            process.kill()  # died while idle (killed from outside): reaped above, start another
            process = None
        if process is None:
            process = self._process = _Process(self.limits)
        if not process.ready:
            try:
                hello = json.loads(
                    _recv_frame(process.sock, time.monotonic() + self.limits.start_timeout_s, _SMALL_REPLY_BYTES)
                )
            except (OSError, ValueError) as e:
                process.kill()
                self._process = None
                raise TemplateWorkerStartError(
                    f"chat template worker did not start ({e!r}; exit status {process.popen.returncode})"
                ) from None
            process.ready = True
            process.hello = hello
        return process

    def _replace(self) -> None:
        """Kill and reap the worker and start the next one (it imports while the client reads
        the error)."""
        if self._process is not None:
            self._process.kill()
        self._process = _Process(self.limits)
        self.replacements += 1

    def _timed_out(self) -> ChatTemplateTimeoutError:
        return ChatTemplateTimeoutError(self.limits.timeout_s)

    def _died(self, cause: Exception) -> ChatTemplateWorkerError:
        assert self._process is not None
        status = self._process.reap()
        if status == -signal.SIGXCPU:
            return ChatTemplateTimeoutError(self.limits.cpu_budget_s, cpu=True)
        if status == EXIT_OUT_OF_MEMORY:
            return self._out_of_memory()
        if status is not None and status < 0:
            how = f"killed by signal {-status} ({signal.Signals(-status).name})"
        elif status is not None:
            how = f"exit status {status}"
        else:
            how = f"protocol error: {type(cause).__name__}"
        return ChatTemplateWorkerCrashError(how)

    def _out_of_memory(self) -> ChatTemplateResourceError:
        return ChatTemplateResourceError(self.limits.memory_mb)

    def _error(self, name: str, message: str) -> RenderError:
        if name == "MemoryError":
            return self._out_of_memory()
        cls = _KNOWN_ERRORS.get(name)
        if cls is None:
            return ChatTemplateWorkerError(name, message)
        # Some classes build their message in __init__; this one is already built.
        return cls.__new__(cls, message)


class _Process:
    """A started worker, its end of the socket pair, and a finalizer that kills and reaps it."""

    def __init__(self, limits: RequestTemplateLimits) -> None:
        parent_end, child_end = socket.socketpair()
        config = {"parent": os.getpid(), "memory_mb": limits.memory_mb, "cpu_budget_s": limits.cpu_budget_s}
        argv = [worker_python(), "-I", "-c", _BOOTSTRAP, str(ROOT), json.dumps(config)]
        try:
            self.popen = _spawn(
                argv,
                stdin=child_end.fileno(),
                stdout=child_end.fileno(),
                env={k: os.environ[k] for k in _ENV_KEEP if k in os.environ},
                cwd="/",
                close_fds=True,
            )
        except OSError as e:
            parent_end.close()
            raise TemplateWorkerStartError(f"cannot start the chat template worker: {e}") from None
        finally:
            child_end.close()
        self.sock = parent_end
        self.ready = False
        self.hello: dict[str, Any] = {}
        """The worker's ready message: its pid and address-space size after start-up."""
        self.kill = weakref.finalize(self, _kill, self.popen, self.sock)
        """Kill, reap, close the socket (idempotent; also runs on collection and at exit)."""

    def reap(self) -> int | None:
        """The exit status of a worker that broke its socket (killed if it lingers)."""
        try:
            status = self.popen.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            status = None
        self.kill()
        return status


def _kill(popen: subprocess.Popen, sock: socket.socket) -> None:
    sock.close()
    if popen.poll() is None:
        popen.kill()
    popen.wait()


# PR_SET_PDEATHSIG fires when the *thread* that started the child ends: start every worker from
# one thread that lives as long as the process.
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chat-template-worker-spawner")


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    return _SPAWNER.submit(subprocess.Popen, argv, **kwargs).result()


def worker_python() -> str:
    """The interpreter to run the worker with: this environment's ``python3``. An embedding host
    need not set ``sys.executable`` to an interpreter, so ``sys.prefix`` is asked first (in
    Triton 2.51's Python backend stub both name the venv's: ``<venv>/bin/python3``, ``<venv>``)."""
    for candidate in (Path(sys.prefix) / "bin" / "python3", Path(sys.executable)):
        if candidate.name.startswith("python") and candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise TemplateWorkerStartError(f"no python3 interpreter under {sys.prefix} or at {sys.executable!r}")


# --- framing (both sides) ----------------------------------------------------------------------


def _encode(obj: Any) -> bytes:
    # ASCII escapes carry lone surrogates (valid in JSON strings, not in UTF-8) both ways.
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _send_frame(sock: socket.socket, payload: bytes, deadline: float) -> None:
    sock.settimeout(max(deadline - time.monotonic(), 1e-3))
    sock.sendall(_HEADER.pack(len(payload)) + payload, socket.MSG_NOSIGNAL)


def _recv_frame(sock: socket.socket, deadline: float, max_bytes: int) -> bytes:
    (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, deadline))
    if size > max_bytes:
        raise ValueError(f"reply of {size} bytes; at most {max_bytes} expected")
    return _recv_exact(sock, size, deadline)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("deadline passed")
            sock.settimeout(remaining)
        k = sock.recv_into(view[got:])
        if k == 0:
            raise _SocketClosedError("the other side closed its socket")
        got += k
    return bytes(buf)


class _SocketClosedError(ConnectionError):
    """EOF: the worker died (parent side), or the parent closed the socket (worker side)."""


# --- the worker process -------------------------------------------------------------------------


def worker_main(config_json: str) -> None:
    """The worker's entry point (run by the bootstrap in a fresh interpreter)."""
    config = json.loads(config_json)
    _die_with_parent(int(config["parent"]))
    _set_limit(resource.RLIMIT_CORE, 0)
    sock = _take_channel()
    _set_limit(resource.RLIMIT_AS, int(config["memory_mb"]) * MiB)
    budget = int(config["cpu_budget_s"])
    try:
        sock.sendall(_frame({"ready": True, "pid": os.getpid(), "vsz_kb": _statm_kb(0)}))
        while True:
            try:
                (size,) = _HEADER.unpack(_recv_exact(sock, _HEADER.size, None))
                payload = _recv_exact(sock, size, None)
            except _SocketClosedError:
                return  # the parent is done with us
            _limit_cpu(budget)
            reply = _handle(payload)
            reply["rss_kb"] = _statm_kb(1)
            sock.sendall(_frame(reply))
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)
    except OSError:
        os._exit(0)  # the parent went away


def _frame(obj: Any) -> bytes:
    payload = _encode(obj)
    return _HEADER.pack(len(payload)) + payload


def _handle(payload: bytes) -> dict[str, Any]:
    try:
        job = json.loads(payload)
        del payload
        if job["op"] == "analyze":
            return {"content_format": _analyze(job["template"])}
        return {"text": _render(job)}
    except ChatTemplateResourceError:
        return {"error": "MemoryError", "message": ""}
    except RenderError as e:
        return {"error": type(e).__name__, "message": str(e)}
    except MemoryError:
        return {"error": "MemoryError", "message": ""}
    except Exception as e:  # noqa: BLE001 (named for the parent, which answers a 400 and replaces us)
        return {"error": type(e).__name__, "message": str(e)[:2000]}


def _analyze(chat_template: str) -> str:
    try:
        return detect_content_format(chat_template)
    except MemoryError:
        raise
    except Exception:  # noqa: BLE001 (vLLM falls back to "string"; rendering then names the error)
        return "string"


def _render(job: dict[str, Any]) -> str:
    template = job["template"]
    return apply_chat_template(
        template,
        job["conversation"],
        special_tokens=job["special_tokens"],
        template_kwargs=resolve_template_kwargs(template, job["kwargs"]),
        tools=job["tools"],
        limits=TemplateLimits(**job["limits"]),
    )


def _die_with_parent(parent: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)


def _set_limit(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


def _limit_cpu(budget_s: int) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft = math.ceil(usage.ru_utime + usage.ru_stime) + budget_s
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _take_channel() -> socket.socket:
    """The socket the parent handed over as stdin/stdout, moved off fds 0 and 1 (a stray print
    then goes to stderr, not into the protocol)."""
    fd = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    return socket.socket(fileno=fd)


def _statm_kb(field: int) -> int:
    """``/proc/self/statm`` field in KiB: 0 is the address space (VSZ), 1 the resident set."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[field]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


if __name__ == "__main__":  # ``python -m renderer.chat.template_worker CONFIG`` also works (slower import)
    worker_main(sys.argv[1])
