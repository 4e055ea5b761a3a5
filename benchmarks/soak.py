"""Soak: perf_analyzer saturating ``render_chat`` and ``render_completion`` for minutes, while a
second client mixes in invalid requests and spot-checks ids against transformers.

    python -m benchmarks.soak [--seconds 180]      (writes benchmarks/results/soak.json)

perf_analyzer stops at its first failed request, so it carries the valid load (any error it
saw would fail the run); the invalid share comes from the mixer thread, which expects a 400 for
each and a correct answer for each spot check. Server + stub memory is sampled throughout.
Loopback only; bounded in time.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks import make_inputs, perf_analyzer

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PORT = 19400


def tree_rss_mb(root_pid: int) -> float:
    pids, frontier = {root_pid}, [root_pid]
    while frontier:
        p = frontier.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            kids = []
        for k in map(int, kids):
            if k not in pids:
                pids.add(k)
                frontier.append(k)
    total = 0
    for p in pids:
        try:
            total += int(
                next(ln for ln in Path(f"/proc/{p}/status").read_text().splitlines() if ln.startswith("VmRSS")).split()[
                    1
                ]
            )
        except (OSError, StopIteration):
            pass
    return total / 1024


INVALID = [
    ("render_completion", {"prompt": None, "tokenize_params": '{"truncate_prompt_tokens": "x"}'}),
    ("render_completion", {"prompt_token_ids": [1, -5]}),
    ("render_completion", {"prompt": "x", "tokenize_params": "{not json"}),
    ("render_chat", {"messages": '[{"role": "user", "content": null}]'}),
    (
        "render_chat",
        {
            "messages": '[{"role": "user", "content": "hi"}]',
            "chat_params": '{"chat_template": "{{ \'\'.__class__.__mro__ }}"}',
        },
    ),
    ("render_chat", {"messages": "[]"}),
]


def mixer(s: Any, stop: threading.Event, stats: dict, hf: Any) -> None:
    import numpy as np

    from client import RendererClient, RequestError

    rng = random.Random(7)
    with RendererClient(f"127.0.0.1:{s.http_port}") as c:
        while not stop.is_set():
            if rng.random() < 0.7:
                model, fields = rng.choice(INVALID)
                tensors = {}
                for k, v in fields.items():
                    if v is None:
                        continue
                    tensors[k] = (
                        np.array([v], np.int32) if isinstance(v, list) else np.array([[v.encode()]], dtype=object)
                    )
                try:
                    c.infer(model, tensors)
                    stats["invalid_accepted"] += 1
                except RequestError as e:
                    stats["invalid_400" if e.is_client_error else "invalid_other"] += 1
            else:
                text = " ".join(
                    rng.choice(["alpha", "beta", "中文", "🦩", "gamma"]) for _ in range(rng.randrange(1, 30))
                )
                try:
                    ok = c.render_completion(text).input_ids == hf(text).input_ids
                    msgs = [{"role": "user", "content": text}]
                    chat = c.render_chat(msgs)
                    ok &= chat.input_ids == hf.apply_chat_template(
                        msgs, tokenize=True, add_generation_prompt=True, return_dict=False
                    )
                    stats["spot_ok" if ok else "spot_wrong"] += 1
                except RequestError as e:
                    stats["spot_error"] += 1
                    stats.setdefault("spot_error_examples", []).append(e.message[:200])


def main(argv: list[str] | None = None) -> int:
    """The soak: our server under two perf_analyzer loads, the mixer and a memory sampler at once; 0 where all held."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args(argv)
    from transformers import AutoTokenizer

    from launcher import cli as launch

    perf_analyzer.install(quiet=True)
    make_inputs.write()
    s = _soak_settings()
    hf = AutoTokenizer.from_pretrained(s.resolved_model_dir)
    if launch.start(s) != 0:
        return 1
    pid = int(s.pid_file.read_text())
    stats = {k: 0 for k in ("invalid_400", "invalid_other", "invalid_accepted", "spot_ok", "spot_wrong", "spot_error")}
    mem: list[tuple[float, float]] = []
    stop = threading.Event()
    t0 = time.monotonic()
    pa_runs: dict[str, dict] = {}
    try:
        mix = threading.Thread(target=mixer, args=(s, stop, stats, hf))
        mix.start()
        sampler = threading.Thread(target=_sample_memory, args=(pid, t0, mem, stop))
        sampler.start()
        procs = _start_perf_analyzers(s, a.concurrency // 2, a.seconds)
        pa_runs.update(_collect_perf_analyzers(procs, a.seconds))
    finally:
        stop.set()
        mix.join()
        sampler.join()
        ready = launch.is_ready(s)
        launch.stop(s)
    result = _soak_result(a.seconds, a.concurrency // 2, pa_runs, stats, ready, mem)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "rss_samples"}, indent=1))
    return 0 if _held(pa_runs, ready, stats) else 1


def _soak_settings() -> Any:
    """Our server for the soak: both render ensembles on the soak's own ports and build folder."""
    from launcher import cli as launch

    return replace(
        launch.Settings.from_env(),
        openai_port=0,
        build_dir=str(ROOT / "build" / "soak-server"),
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
        models="render_chat,render_completion",
    )


def _sample_memory(pid: int, t0: float, mem: list[tuple[float, float]], stop: threading.Event) -> None:
    """Every 5 s until ``stop``: (seconds since ``t0``, the server's process tree RSS in MB) into ``mem``."""
    while not stop.is_set():
        mem.append((round(time.monotonic() - t0, 1), round(tree_rss_mb(pid), 1)))
        stop.wait(5)


def _start_perf_analyzers(s: Any, concurrency: int, seconds: int) -> dict[str, subprocess.Popen]:
    """perf_analyzer on render_chat over gRPC and render_completion over HTTP, each one run of ``seconds``."""
    procs = {}
    for model, inputs, proto, port in (
        ("render_chat", "chat_mix", "grpc", s.grpc_port),
        ("render_completion", "completion_mix", "http", s.http_port),
    ):
        cmd = [
            str(perf_analyzer.binary()),
            "-m",
            model,
            "-u",
            f"127.0.0.1:{port}",
            "-i",
            proto,
            "--input-data",
            str(make_inputs.path_of(inputs)),
            "--concurrency-range",
            f"{concurrency}:{concurrency}",
            "--measurement-mode",
            "time_windows",
            # Three windows that always count as stable: one run of the whole duration.
            "--measurement-interval",
            str(seconds * 1000 // 3),
            "--stability-percentage",
            "999",
            "--max-trials",
            "3",
        ]
        procs[model] = subprocess.Popen(
            cmd, env=perf_analyzer.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return procs


def _collect_perf_analyzers(procs: dict[str, subprocess.Popen], seconds: int) -> dict[str, dict]:
    """Each perf_analyzer's exit status, throughput line, request count and first error lines."""
    pa_runs = {}
    for model, p in procs.items():
        out, _ = p.communicate(timeout=seconds * 3 + 120)
        lines = out.splitlines()
        pa_runs[model] = {
            "returncode": p.returncode,
            "summary": next((ln.strip() for ln in reversed(lines) if "throughput:" in ln), None),
            "requests": next(
                (ln.split(":")[1].strip() for ln in reversed(lines) if "Successful request count" in ln), None
            ),
            "errors_reported": [ln for ln in lines if "rror" in ln or "ailed" in ln][:5],
        }
    return pa_runs


def _soak_result(
    seconds: int,
    concurrency: int,
    pa_runs: dict[str, dict],
    stats: dict[str, Any],
    ready: bool,
    mem: list[tuple[float, float]],
) -> dict[str, Any]:
    """``soak.json``: the loads, the mixer's tally, whether the server was still ready, its memory over time."""
    return {
        "seconds": seconds,
        "concurrency_per_model": concurrency,
        "perf_analyzer": pa_runs,
        "mixer": stats,
        "server_ready_at_end": ready,
        "rss_mb_start": mem[0][1] if mem else None,
        "rss_mb_end": mem[-1][1] if mem else None,
        "rss_mb_max": max((m for _, m in mem), default=None),
        "rss_samples": mem,
    }


def _held(pa_runs: dict[str, dict], ready: bool, stats: dict[str, Any]) -> bool:
    """Whether the soak held: both loads finished, the server stayed ready, and no wrong or accepted-invalid answer."""
    return (
        all(r["returncode"] == 0 for r in pa_runs.values())
        and ready
        and stats["invalid_other"] == 0
        and stats["invalid_accepted"] == 0
        and stats["spot_wrong"] == 0
        and stats["spot_error"] == 0
    )


if __name__ == "__main__":
    raise SystemExit(main())
