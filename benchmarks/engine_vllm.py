"""Generation on vLLM's engine: our ``chat`` ensemble (``LLM_ENGINE=vllm``) against ``vllm serve`` alone.

Same model folder, same dtype and context length, same machine, one load generator (this file),
same requests: chat conversations, ``max_tokens`` 64 with ``ignore_eos`` (every answer is 64
tokens), greedy. Each target runs alone (the other stopped, so neither's idle processes take the
cores), in alternating rounds; medians over rounds. Per concurrency level it records the time to
first token (first piece of text) and output tokens per second over the whole window, and checks
that both answered the same text.

    python -m benchmarks.engine_vllm [--quick]    -> build/bench/engine_vllm.json

``make bench`` runs it when vLLM's environment exists (``make engine-vllm``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
OURS_PORT = 19400
VLLM_PORT = 19410
MAX_TOKENS = 64
MAX_MODEL_LEN = 2048
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Write a haiku about the sea."},
    ],
    [
        {"role": "user", "content": "Count to five."},
        {"role": "assistant", "content": "1, 2, 3, 4, 5."},
        {"role": "user", "content": "Now count backwards from ten."},
    ],
    [{"role": "user", "content": "Explain what a CPU cache is in two sentences."}],
    [{"role": "user", "content": "List three fruits and their colours."}],
    [{"role": "user", "content": "Translate 'good morning' into French, Spanish and German."}],
    [{"role": "user", "content": "What is 17 times 23?"}],
    [{"role": "user", "content": "Give me a short motivational quote."}],
]

Ask = Callable[[list[dict[str, str]]], tuple[float, str]]  # -> (seconds to first text, whole text)


def log(msg: str) -> None:
    print(f"[engine_vllm {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the two targets ---------------------------------------------------------------------------


def ours_settings(model_dir: str) -> Any:
    from launcher import cli as launch

    return replace(
        launch.Settings(),
        openai_port=0,
        model_dir=model_dir,
        llm_engine="vllm",
        models="chat",
        build_dir=str(BUILD / "bench" / "engine-vllm"),
        http_port=OURS_PORT,
        grpc_port=OURS_PORT + 1,
        metrics_port=OURS_PORT + 2,
        startup_timeout_s=600,
    )


def ask_ours(messages: list[dict[str, str]]) -> tuple[float, str]:
    from client import RendererClient

    t0 = time.perf_counter()
    first, text = None, []
    with RendererClient(f"127.0.0.1:{OURS_PORT + 1}", "grpc", timeout_s=600) as c:
        for piece in c.generate(
            "chat", messages=messages, max_tokens=MAX_TOKENS, stream=True, sampling_params={"ignore_eos": True}
        ):
            if piece.text and first is None:
                first = time.perf_counter() - t0
            text.append(piece.text)
    return first or 0.0, "".join(text)


class VllmServe:
    """``vllm serve`` from vLLM's environment, the same engine settings as ours."""

    def __init__(self, model_dir: str, dtype: str) -> None:
        self.model_dir, self.dtype = model_dir, dtype
        self.proc: subprocess.Popen | None = None
        self.log = BUILD / "bench" / "vllm-serve.log"

    def start(self, timeout_s: float = 600) -> None:
        from model_builders.vllm_env import PYTHON

        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(
            os.environ,
            HF_HUB_OFFLINE="1",
            VLLM_CPU_KVCACHE_SPACE="1",
            VLLM_TARGET_DEVICE="cpu",
            TOKENIZERS_PARALLELISM="false",
        )
        cmd = [
            str(PYTHON),
            str(ROOT / "benchmarks" / "vllm_launcher.py"),
            "serve",
            self.model_dir,
            "--host",
            "127.0.0.1",
            "--port",
            str(VLLM_PORT),
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--dtype",
            self.dtype,
            "--enforce-eager",
            "--served-model-name",
            "m",
            "--disable-log-stats",
        ]
        with open(self.log, "ab") as f:
            self.proc = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{VLLM_PORT}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"vllm serve not ready after {timeout_s} s; see {self.log}")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pass
        try:  # its engine-core processes too, whatever the API server left
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def ask_vllm(messages: list[dict[str, str]]) -> tuple[float, str]:
    body = json.dumps(
        {
            "model": "m",
            "messages": messages,
            "max_tokens": MAX_TOKENS,
            "stream": True,
            "temperature": 0.0,
            "ignore_eos": True,
        }
    )
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", VLLM_PORT, timeout=600)
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"vllm serve answered {resp.status}: {resp.read()[:300]!r}")
    first, text = None, []
    for line in resp:
        line = line.strip()
        if not line.startswith(b"data:") or line == b"data: [DONE]":
            continue
        for choice in json.loads(line[5:]).get("choices", []):
            piece = (choice.get("delta") or {}).get("content") or ""
            if piece and first is None:
                first = time.perf_counter() - t0
            text.append(piece)
    conn.close()
    return first or 0.0, "".join(text)


# --- the load generator ------------------------------------------------------------------------


def closed_loop(ask: Ask, concurrency: int, requests: int) -> dict[str, Any]:
    """``requests`` conversations through ``concurrency`` workers, each starting its next as soon
    as its last finished."""
    todo = list(range(requests))
    lock = threading.Lock()
    ttft: list[float] = []
    texts: dict[int, str] = {}
    errors: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            try:
                t, text = ask(CONVERSATIONS[i % len(CONVERSATIONS)])
                with lock:
                    ttft.append(t)
                    texts[i] = text
            except Exception as e:  # noqa: BLE001 - recorded, fails the row
                with lock:
                    errors.append(str(e)[:300])

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {
        "concurrency": concurrency,
        "requests": requests,
        "errors": errors,
        "wall_s": round(wall, 3),
        "output_tokens_per_s": round(len(texts) * MAX_TOKENS / wall, 2),
        "ttft_p50_ms": round(statistics.median(ttft) * 1000, 1) if ttft else None,
        "texts": {str(k): v for k, v in sorted(texts.items())},
    }


def measure(name: str, ask: Ask, levels: list[tuple[int, int]]) -> list[dict[str, Any]]:
    ask(CONVERSATIONS[0])  # warm-up
    rows = []
    for conc, n in levels:
        row = closed_loop(ask, conc, n)
        log(
            f"  {name:5} c={conc}: {row['output_tokens_per_s']:7.1f} tok/s, TTFT p50 {row['ttft_p50_ms']} ms"
            + (f", {len(row['errors'])} errors" if row["errors"] else "")
        )
        rows.append({"target": name, **row})
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    from launcher import cli as launch
    from launcher import repository

    model_dir = str(BUILD / "models" / "smollm2-135m-instruct")
    settings = ours_settings(model_dir)
    dtype = repository.template_vars(settings)["vllm_dtype"]
    levels = [(1, 4), (4, 8)] if quick else [(1, 8), (4, 16)]
    rounds = 1 if quick else 2
    rows: list[dict[str, Any]] = []
    for rnd in range(rounds):
        order = ["ours", "vllm"] if rnd % 2 == 0 else ["vllm", "ours"]
        for target in order:
            log(f"round {rnd + 1}: starting {target}")
            if target == "ours":
                if launch.start(settings) != 0:
                    raise SystemExit(f"our server did not start; see {settings.log_file}")
                try:
                    rows += [{**r, "round": rnd} for r in measure("ours", ask_ours, levels)]
                finally:
                    launch.stop(settings)
            else:
                srv = VllmServe(model_dir, dtype)
                srv.start()
                try:
                    rows += [{**r, "round": rnd} for r in measure("vllm", ask_vllm, levels)]
                finally:
                    srv.stop()
    return {
        "model": Path(model_dir).name,
        "dtype": dtype,
        "max_tokens": MAX_TOKENS,
        "levels": levels,
        "rounds": rounds,
        "rows": rows,
        "summary": summarize(rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over rounds per target and concurrency; ratios ours / vllm (TTFT: vllm / ours, so
    above 1 is better for both); whether both answered every conversation with the same text."""
    out: dict[str, Any] = {"by_concurrency": {}}
    same = True
    for conc in sorted({r["concurrency"] for r in rows}):

        def med(target: str, key: str) -> float | None:
            vals = [
                r[key]
                for r in rows
                if r["target"] == target and r["concurrency"] == conc and not r["errors"] and r[key] is not None
            ]
            return statistics.median(vals) if vals else None

        ours_tps, vllm_tps = med("ours", "output_tokens_per_s"), med("vllm", "output_tokens_per_s")
        ours_ttft, vllm_ttft = med("ours", "ttft_p50_ms"), med("vllm", "ttft_p50_ms")
        out["by_concurrency"][str(conc)] = {
            "ours_tokens_per_s": ours_tps,
            "vllm_tokens_per_s": vllm_tps,
            "tokens_per_s_ratio": round(ours_tps / vllm_tps, 3) if ours_tps and vllm_tps else None,
            "ours_ttft_p50_ms": ours_ttft,
            "vllm_ttft_p50_ms": vllm_ttft,
            "ttft_ratio": round(vllm_ttft / ours_ttft, 3) if ours_ttft and vllm_ttft else None,
        }
        texts = {(r["target"], k): v for r in rows if r["concurrency"] == conc for k, v in r["texts"].items()}
        for (target, k), v in texts.items():
            if target == "ours" and texts.get(("vllm", k)) not in (None, v):
                same = False
    out["same_text"] = same
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(BUILD / "bench" / "engine_vllm.json"))
    a = ap.parse_args(argv)
    res = run(a.quick)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1, ensure_ascii=False))
    print(json.dumps(res["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
