"""The plain-chat lane served against the same server without it, both up, alternating rounds.

``make bench`` compares runs minutes or hours apart, and on a shared machine the spread between
runs of the same code is as large as one change's effect. This serves ``render_chat`` twice at
once: the repository as it is, and a copy whose ``chat_render`` turns the plain-chat lane off
after its warmup (``renderer/chat/plain_lane.py``; every chat then takes the full path, as before
the lane). perf_analyzer drives each on chat_mix, the two runs of a concurrency level back to back and their
order reversed every other round, recording each process's CPU per request
(``benchmarks.instances.measure``); the ratio of each such pair, whose runs share a stretch of the
machine's load, is reported beside the medians.

    python -m benchmarks.lane_ab [--rounds 4] [--concurrency 1,8,16] [--protocol grpc] [--against REV]
                                 [--model render_completion]

``--against REV``: the second server is instead a copy whose stage adapters
(``model_repository/*/1/model.py``) are git revision REV's, with this tree's ``renderer/`` and
``triton_io/``: a change to what the adapters do per request, served against the adapters before it.
``--model render_completion`` drives ``render_completion`` on completion_mix instead (with ``--against``:
a change to ``tokenize``'s adapter).

Writes ``benchmarks/results/lane_ab.json``: each variant's runs and medians.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.instances import measure, medians_of
from benchmarks.layout import MAIN_INPUTS, ROOT, WORK

OUT = ROOT / "benchmarks" / "results" / "lane_ab.json"
BASE_PORT = 19800
VARIANTS = ("lane", "no lane")

# Appended to the copy's chat_render model.py: the same adapter, the lane dropped once built.
LANE_OFF = """

_initialize_with_lane = TritonPythonModel.initialize


def _initialize_without_lane(self, args):  # benchmarks/lane_ab.py: every chat on the full path
    _initialize_with_lane(self, args)
    self.stage.chat._plain_lane = None


TritonPythonModel.initialize = _initialize_without_lane
"""


def repository_without_lane(dst: Path) -> Path:
    """A copy of ``model_repository/`` whose ``chat_render`` serves every chat on the full path."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "model_repository", dst, ignore=shutil.ignore_patterns("__pycache__"))
    model = dst / "chat_render" / "1" / "model.py"
    model.write_text(model.read_text() + LANE_OFF)
    return dst


def repository_with_adapters_of(rev: str, dst: Path) -> Path:
    """A copy of ``model_repository/`` whose adapters (``*/1/model.py``) are revision ``rev``'s."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(ROOT / "model_repository", dst, ignore=shutil.ignore_patterns("__pycache__"))
    return write_adapters_of(rev, dst)


def write_adapters_of(rev: str, repo: Path) -> Path:
    """Replace each adapter (``*/1/model.py``) of the repository at ``repo`` (a copy, or one the
    launcher rendered) with revision ``rev``'s, where that revision has it; returns ``repo``."""
    for model in repo.glob("*/1/model.py"):
        path = model.relative_to(repo)
        old = subprocess.run(
            ["git", "show", f"{rev}:model_repository/{path.as_posix()}"], cwd=ROOT, capture_output=True, text=True
        )
        if old.returncode == 0:
            model.write_text(old.stdout)
    return repo


def start(variant: str, index: int, against: str | None, model: str) -> Any:
    from benchmarks.run import start_render_chat

    if index == 0:
        templates = ROOT / "model_repository"
    elif against:
        templates = repository_with_adapters_of(against, WORK / "lane-ab-templates")
    else:
        templates = repository_without_lane(WORK / "lane-ab-templates")
    return start_render_chat(f"lane-ab-{index}", BASE_PORT + 10 * index, templates, models=model)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--concurrency", default="1,8,16")
    ap.add_argument("--protocol", choices=["http", "grpc"], default="grpc")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--against", default=None, help="serve this git revision's adapters as the second variant")
    ap.add_argument("--model", choices=["render_chat", "render_completion"], default="render_chat")
    a = ap.parse_args(argv)
    variants = ("this tree", a.against) if a.against else VARIANTS

    from launcher import cli as launch

    concurrencies = [int(c) for c in a.concurrency.split(",")]
    WORK.mkdir(parents=True, exist_ok=True)
    servers: dict[str, Any] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        for i, variant in enumerate(variants):
            servers[variant] = start(variant, i, a.against, a.model)
        for r in range(a.rounds):
            # Each level's two runs back to back (the machine's load drifts within a round).
            for c in concurrencies:
                for variant in variants if r % 2 == 0 else variants[::-1]:
                    m = measure(servers[variant], a.model, c, a.protocol)
                    runs.setdefault(f"{variant} c={c}", []).append(m)
                    print(
                        f"round {r + 1} {variant:<7} c={c}: {m['requests_per_s']} req/s, p50 {m['p50_ms']:.2f} ms, "
                        f"CPU us/request {m['cpu_us_per_request']}",
                        flush=True,
                    )
    finally:
        for s in servers.values():
            launch.stop(s)
    medians = medians_of(runs)
    # The first variant over the second within each round: a pair shares a stretch of the machine's load.
    first, second = variants
    paired = {
        c: [
            on["requests_per_s"] / off["requests_per_s"]
            for on, off in zip(runs[f"{first} c={c}"], runs[f"{second} c={c}"])
        ]
        for c in concurrencies
    }
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.lane_ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "model": a.model,
        "variants": list(variants),
        "input": MAIN_INPUTS[a.model],
        "protocol": a.protocol,
        "runs": runs,
        "medians": medians,
        "paired_throughput_ratio": {f"c={c}": [round(x, 3) for x in xs] for c, xs in paired.items()},
        "median_paired_throughput_ratio": {f"c={c}": round(statistics.median(xs), 3) for c, xs in paired.items()},
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    for c in concurrencies:
        on, off = medians[f"{first} c={c}"], medians[f"{second} c={c}"]
        cpu = {
            m: (on["cpu_us_per_request"].get(m), off["cpu_us_per_request"].get(m)) for m in ("chat_render", "tokenize")
        }
        print(
            f"c={c}: {first} {on['requests_per_s']} req/s p50 {on['p50_ms']:.2f} ms, {second} {off['requests_per_s']} "
            f"req/s p50 {off['p50_ms']:.2f} ms; paired throughput ratio {statistics.median(paired[c]):.3f}x; "
            f"CPU us per chat ({first} vs {second}): {cpu}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
