"""How far a perfect ``chat_render`` could take ``render_chat`` towards the Triton floor.

Issue 17's first target asks for ``render_chat`` at 0.75 of the floor (``benchmarks/floor``: both
stages replaced by stand-ins that do no rendering work). This splits the gap between the two real
stages by serving the ``render_chat`` ensemble four ways, all up at once (an idle server takes no
CPU) and measured in alternating rounds with perf_analyzer:

* ``ours``: both stages real;
* ``real tokenize``: ``chat_render`` replaced by its stand-in (a ``chat_render`` that costs
  nothing: the ceiling of any work on chat rendering);
* ``real chat_render``: ``tokenize`` replaced by its stand-in;
* ``floor``: both replaced.

Each variant's median throughput over rounds, over the floor's, is written to
``benchmarks/results/floor_split.json``. If ``real tokenize`` stays under 0.75, no change to
``chat_render`` alone can meet the target.

Run: ``python -m benchmarks.floor_split [--rounds 3] [--concurrency 16] [--protocol http]``.
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
from benchmarks.floor import repository_with_stand_ins
from benchmarks.layout import ROOT, WORK

OUT = ROOT / "benchmarks" / "results" / "floor_split.json"
BASE_PORT = 19400
# Variant -> the stages replaced by their stand-ins in benchmarks/floor.
VARIANTS: dict[str, tuple[str, ...]] = {
    "ours": (),
    "real tokenize": ("chat_render",),
    "real chat_render": ("tokenize",),
    "floor": ("chat_render", "tokenize"),
}


def start(variant: str, index: int) -> Any:
    """Start the variant's server (same settings as ``make bench``'s, own ports and folder)."""
    from benchmarks.run import start_render_chat

    slug = variant.replace(" ", "-")
    repository = repository_with_stand_ins(WORK / f"split-templates-{slug}", VARIANTS[variant])
    return start_render_chat(f"split-{slug}", BASE_PORT + 10 * index, repository)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16, help="the floor's best in make bench (chat_mix)")
    ap.add_argument("--protocol", choices=["http", "grpc"], default="http")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from launcher import cli as launch

    WORK.mkdir(parents=True, exist_ok=True)
    data = make_inputs.path_of("chat_mix")
    servers: dict[str, Any] = {}
    throughput: dict[str, list[float]] = {v: [] for v in VARIANTS}
    try:
        for i, variant in enumerate(VARIANTS):
            servers[variant] = start(variant, i)
        order = list(VARIANTS)
        for r in range(a.rounds):
            for variant in order if r % 2 == 0 else order[::-1]:
                s = servers[variant]
                url = f"127.0.0.1:{s.http_port if a.protocol == 'http' else s.grpc_port}"
                result = pa.run("render_chat", url, a.protocol, data, a.concurrency, log=WORK / "floor_split.log")
                throughput[variant].append(result.throughput)
                print(
                    f"round {r + 1} {variant:<17} {result.throughput:8.1f} req/s  p50 {result.p50_ms:.2f} ms",
                    flush=True,
                )
    finally:
        for s in servers.values():
            launch.stop(s)
    medians = {v: statistics.median(t) for v, t in throughput.items()}
    floor = medians["floor"]
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.floor_split " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": "render_chat",
        "input": "chat_mix",
        "protocol": a.protocol,
        "concurrency": a.concurrency,
        "requests_per_s": throughput,
        "median_requests_per_s": medians,
        "of_floor": {v: round(m / floor, 3) for v, m in medians.items()},
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    for v, ratio in report["of_floor"].items():
        print(f"{v:<17} {medians[v]:8.1f} req/s  {ratio:.3f} of the floor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
