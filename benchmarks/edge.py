"""What the edge (launcher/edge.py) costs: one render-only server measured through the edge and on
tritonserver's own loopback ports behind it, with perf_analyzer, in alternating rounds (the order
reversed every other round), at concurrency 1 and 8, over gRPC and HTTP; plus the edge's memory.

    python -m benchmarks.edge [--rounds 3] [--quick]

Part of ``make bench`` (its report's "What the edge costs").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
from typing import Any

from benchmarks import make_inputs
from benchmarks import perf_analyzer as pa
from benchmarks.footprint import footprint
from benchmarks.layout import MAIN_INPUTS, WORK

PORT = 19380
MODEL = "render_chat"
CONCURRENCY = (1, 8)
PROTOCOLS = ("grpc", "http")
WINDOW = ["--measurement-mode", "count_windows", "--stability-percentage", "50", "--max-trials", "10"]


def _count(concurrency: int, quick: bool) -> list[str]:
    n = (300 if concurrency == 1 else 800) if quick else (800 if concurrency == 1 else 2000)
    return ["--measurement-request-count", str(n)]


def run(rounds: int = 3, quick: bool = False) -> dict[str, Any]:
    from benchmarks.servers import server_settings
    from launcher import cli as launch
    from launcher.settings import Settings

    s = server_settings(
        models="render_chat,render_completion",
        build_dir=str(WORK / "edge"),
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
        openai_port=0,
    )
    launch.stop(s)
    if launch.start(s) != 0:
        raise RuntimeError(f"server did not start; see {s.log_file}")
    try:
        inner = Settings.from_json(s.settings_file.read_text()).inner
        urls = {
            ("edge", "grpc"): f"{s.host}:{s.grpc_port}",
            ("edge", "http"): f"{s.host}:{s.http_port}",
            ("direct", "grpc"): f"127.0.0.1:{inner.grpc}",
            ("direct", "http"): f"127.0.0.1:{inner.http}",
        }
        inputs = make_inputs.path_of(MAIN_INPUTS[MODEL])
        runs: dict[str, list[dict[str, float]]] = {}
        for r in range(rounds):
            arms = ("edge", "direct") if r % 2 == 0 else ("direct", "edge")
            for protocol in PROTOCOLS:
                for c in CONCURRENCY:
                    for arm in arms:
                        window = WINDOW + _count(c, quick)
                        row = pa.run(MODEL, urls[(arm, protocol)], protocol, inputs, c, window=window)
                        key = f"{arm} {protocol} c={c}"
                        runs.setdefault(key, []).append({"requests_per_s": row.throughput, "p50_ms": row.p50_ms})
        edge_mb = {
            name: mb
            for name, mb in footprint(int(s.supervisor_pid_file.read_text()))["per_process_mb"].items()
            if name.startswith("nginx")
        }
    finally:
        launch.stop(s)
    medians = {
        key: {m: round(statistics.median(x[m] for x in xs), 3) for m in ("requests_per_s", "p50_ms")}
        for key, xs in runs.items()
    }
    rows = []
    for protocol in PROTOCOLS:
        for c in CONCURRENCY:
            e, d = medians[f"edge {protocol} c={c}"], medians[f"direct {protocol} c={c}"]
            rows.append(
                {
                    "protocol": protocol,
                    "concurrency": c,
                    "edge": e,
                    "direct": d,
                    "throughput_ratio": round(e["requests_per_s"] / d["requests_per_s"], 3),
                    "p50_added_ms": round(e["p50_ms"] - d["p50_ms"], 3),
                }
            )
    return {
        "model": MODEL,
        "rounds": rounds,
        "cpus": len(os.sched_getaffinity(0)),
        "rows": rows,
        "edge_pss_mb": edge_mb,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    with contextlib.redirect_stdout(sys.stderr):  # the launcher's lines; stdout is the JSON alone
        res = run(a.rounds, a.quick)
    print(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
