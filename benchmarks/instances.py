"""Instance counts of ``tokenize`` / ``chat_render`` measured against each other, all servers up.

``make bench``'s scaling rows restart the server for each configuration, minutes apart, so on a
shared machine they compare stretches of its load as much as configurations. This serves the
ensembles once per configuration, all at once (an idle server takes no CPU), and runs perf_analyzer
against each in alternating rounds (the order reversed every other round), at concurrency 1 and
at a throughput concurrency, recording each process's CPU per request (``utime + stime`` from
``/proc`` over the requests Triton counted): the figures behind the default instance counts
(``launcher.settings.default_instances``, docs/PERFORMANCE.md).

    python -m benchmarks.instances [--configs 2/3,2/1,1/1] [--model render_chat] [--rounds 3]

A configuration is ``<tokenize>/<chat_render>``; ``0/0`` is the default sizing. Writes
``benchmarks/results/instances.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import make_inputs
from benchmarks import perf_analyzer as pa
from benchmarks.cpu_cost import cpu_seconds, processes
from benchmarks.layout import MAIN_INPUTS, ROOT, WORK
from benchmarks.overload_signal import scrape

OUT = ROOT / "benchmarks" / "results" / "instances.json"
BASE_PORT = 19700
WINDOW = ["--measurement-mode", "count_windows", "--stability-percentage", "50", "--max-trials", "3"]


def start(config: str, index: int) -> Any:
    """A render-only server with ``config``'s instance counts, on its own ports and folder."""
    from benchmarks.run import server_settings
    from launcher import cli as launch

    tokenize, chat_render = (int(n) for n in config.split("/"))
    port = BASE_PORT + 10 * index
    s = server_settings(
        models="render_chat,render_completion",
        build_dir=str(WORK / f"instances-{tokenize}-{chat_render}"),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        tokenize_instances=tokenize,
        chat_render_instances=chat_render,
    )
    launch.stop(s)
    if launch.start(s) != 0:
        raise RuntimeError(f"{config}: server did not start; see {s.log_file}")
    return s


def measure(s: Any, model: str, concurrency: int, protocol: str) -> dict[str, Any]:
    """One perf_analyzer run, with each process's CPU per request over it."""
    from launcher.processes import running_pid

    procs = processes(running_pid(s))
    before = scrape(s.metrics_port)
    cpu0 = {k: sum(cpu_seconds(p) for p in pids) for k, pids in procs.items()}
    url = f"127.0.0.1:{s.http_port if protocol == 'http' else s.grpc_port}"
    count = ["--measurement-request-count", "1500" if concurrency > 1 else "600"]
    row = pa.run(model, url, protocol, make_inputs.path_of(MAIN_INPUTS[model]), concurrency, window=WINDOW + count)
    cpu1 = {k: sum(cpu_seconds(p) for p in pids) for k, pids in procs.items()}
    n = scrape(s.metrics_port).get(("nv_inference_request_success", model), 0) - before.get(
        ("nv_inference_request_success", model), 0
    )
    return {
        "requests_per_s": round(row.throughput, 1),
        "p50_ms": row.p50_ms,
        "cpu_us_per_request": {k: round((cpu1[k] - cpu0[k]) / n * 1e6) for k in procs} if n else {},
    }


def medians_of(runs: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per key, the medians over its ``measure`` runs: throughput, p50, each process's CPU per request."""
    return {
        key: {
            "requests_per_s": statistics.median(m["requests_per_s"] for m in ms),
            "p50_ms": statistics.median(m["p50_ms"] for m in ms),
            "cpu_us_per_request": {
                proc: statistics.median(m["cpu_us_per_request"].get(proc, 0) for m in ms)
                for proc in ms[0]["cpu_us_per_request"]
            },
        }
        for key, ms in runs.items()
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="2/3,2/1,1/1", help="tokenize/chat_render counts; 0/0 is the default")
    ap.add_argument("--model", action="append", choices=sorted(MAIN_INPUTS), help="repeatable; default both")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--protocol", choices=["http", "grpc"], default="http")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from launcher import cli as launch

    configs = a.configs.split(",")
    models = a.model or sorted(MAIN_INPUTS)
    concurrencies = [int(c) for c in a.concurrency.split(",")]
    WORK.mkdir(parents=True, exist_ok=True)
    servers: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for i, config in enumerate(configs):
            servers[config] = start(config, i)
        for r in range(a.rounds):
            for config in configs if r % 2 == 0 else configs[::-1]:
                s = servers[config]
                for model in models:
                    for c in concurrencies:
                        m = measure(s, model, c, a.protocol)
                        runs.setdefault(f"{config} {model} c={c}", []).append(m)
                        print(
                            f"round {r + 1} {config} ({s.resolved_tokenize_instances}/"
                            f"{s.resolved_chat_render_instances}) {model} c={c}: {m['requests_per_s']} req/s, "
                            f"p50 {m['p50_ms']:.2f} ms, CPU us/request {m['cpu_us_per_request']}",
                            flush=True,
                        )
    finally:
        for s in servers.values():
            launch.stop(s)
    medians = medians_of(runs)
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.instances " + " ".join(argv if argv is not None else sys.argv[1:]),
        "protocol": a.protocol,
        "resolved": {c: [s.resolved_tokenize_instances, s.resolved_chat_render_instances] for c, s in servers.items()},
        "runs": runs,
        "medians": medians,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    for key, m in medians.items():
        print(f"median {key}: {m['requests_per_s']} req/s, p50 {m['p50_ms']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
