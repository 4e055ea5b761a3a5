"""Where a served ``render_chat`` spends its time, per model, against the Triton floor.

Serves ``render_chat`` twice at once, as it is and as the floor (``benchmarks/floor``: both stages
replaced by stand-ins that do no rendering work), and drives each with perf_analyzer in
alternating rounds on chat_mix. Around each run it reads Triton's own statistics
(``/v2/models/stats``) and reports, per model and request, the time in queue, reading inputs
(``compute_input``), executing (``compute_infer``: the stub's ``execute`` and the backend's
round trip to it) and writing outputs (``compute_output``), in microseconds; and the share of
the machine's CPU time the hypervisor gave to other guests while the run wanted it (``steal``,
from ``/proc/stat``): a cause of the spread between runs that a run can see (other guests' use of
the shared caches and memory is another, which it cannot).

    python -m benchmarks.stage_split [--rounds 4] [--concurrency 1] [--protocol grpc]

Writes ``benchmarks/results/stage_split.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks import make_inputs
from benchmarks import perf_analyzer as pa
from benchmarks.floor_split import start
from benchmarks.layout import ROOT, WORK

OUT = ROOT / "benchmarks" / "results" / "stage_split.json"
VARIANTS = {"ours": 0, "floor": 3}
"""Variant (``benchmarks.floor_split.VARIANTS``) -> its port slot there."""
PARTS = ("queue", "compute_input", "compute_infer", "compute_output")


def model_stats(http_port: int) -> dict[str, dict[str, tuple[int, int]]]:
    """Per model: (count, total ns) of each part, and of successful requests."""
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/stats", timeout=10) as r:
        body = json.load(r)
    out = {}
    for m in body["model_stats"]:
        s = m["inference_stats"]
        out[m["name"]] = {k: (int(s[k]["count"]), int(s[k]["ns"])) for k in ("success", *PARTS)}
    return out


def cpu_times() -> list[int]:
    """The machine's ``cpu`` line of ``/proc/stat`` (user nice system idle iowait irq softirq steal ...)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def per_request(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, float]]:
    out = {}
    for model, parts in after.items():
        n = parts["success"][0] - before[model]["success"][0]
        if n:
            out[model] = {k: round((parts[k][1] - before[model][k][1]) / n / 1000, 1) for k in PARTS}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--protocol", choices=["http", "grpc"], default="grpc")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from launcher import cli as launch

    WORK.mkdir(parents=True, exist_ok=True)
    data = make_inputs.path_of("chat_mix")
    servers: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    try:
        for variant, slot in VARIANTS.items():
            servers[variant] = start(variant, slot)
        order = list(VARIANTS)
        for r in range(a.rounds):
            for variant in order if r % 2 == 0 else order[::-1]:
                s = servers[variant]
                url = f"127.0.0.1:{s.http_port if a.protocol == 'http' else s.grpc_port}"
                stats0, cpu0 = model_stats(s.http_port), cpu_times()
                row = pa.run("render_chat", url, a.protocol, data, a.concurrency)
                stats1, cpu1 = model_stats(s.http_port), cpu_times()
                spent = [y - x for x, y in zip(cpu0, cpu1)]
                steal = 100 * spent[7] / sum(spent) if len(spent) > 7 and sum(spent) else 0.0
                run = {
                    "requests_per_s": round(row.throughput, 1),
                    "p50_ms": row.p50_ms,
                    "steal_pct": round(steal, 1),
                    "us_per_request": per_request(stats0, stats1),
                }
                runs[variant].append(run)
                print(f"round {r + 1} {variant:<5} {json.dumps(run)}", flush=True)
    finally:
        for s in servers.values():
            launch.stop(s)
    medians: dict[str, Any] = {}
    for variant, rs in runs.items():
        models = rs[0]["us_per_request"]
        medians[variant] = {
            "requests_per_s": statistics.median(x["requests_per_s"] for x in rs),
            "p50_ms": statistics.median(x["p50_ms"] for x in rs),
            "steal_pct": statistics.median(x["steal_pct"] for x in rs),
            "us_per_request": {
                m: {k: statistics.median(x["us_per_request"][m][k] for x in rs) for k in PARTS} for m in models
            },
        }
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.stage_split " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": "render_chat",
        "input": "chat_mix",
        "protocol": a.protocol,
        "concurrency": a.concurrency,
        "runs": runs,
        "medians": medians,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    for variant, m in medians.items():
        print(f"{variant}: {m['requests_per_s']} req/s, p50 {m['p50_ms']} ms, steal {m['steal_pct']}%")
        for model, parts in m["us_per_request"].items():
            print(f"  {model:<12} " + "  ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
