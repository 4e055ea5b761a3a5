"""What a chat render costs in process with warm caches and with cold ones.

A served request runs each stub once, between the other processes, so its code and data are no
longer in the CPU's caches; a loop in process runs them back to back. This times
``ChatStage.render`` (what ``chat_render`` runs per request) over chat_mix, one chat per call,
three ways: back to back, after a 0.5 ms sleep, and after writing a 16 MB array (more than this
machine's per-core L2, half its shared L3). Medians per call, in microseconds.

    python -m benchmarks.render_cold [--calls 600]

``--loop tools --seconds 12`` renders chat_mix's tool chats back to back for that long and
nothing else, for a sampling profiler: ``py-spy record -r 500 -f raw -- .venv/bin/python -m
benchmarks.render_cold --loop tools --seconds 12``.

Writes ``benchmarks/results/render_cold.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.chat_validation import DEFAULT_MODEL
from benchmarks.layout import ROOT

OUT = ROOT / "benchmarks" / "results" / "render_cold.json"
EVICT_BYTES = 16 * 1024 * 1024


def chat_mix() -> list[tuple[str, Any]]:
    """chat_mix as ``chat_render`` receives it: the messages' JSON text and the parsed bag."""
    from benchmarks.make_inputs import path_of

    rows = json.loads(path_of("chat_mix").read_text())["data"]
    out = []
    for r in rows:
        bag = r.get("chat_params", {}).get("content", [None])[0]
        out.append((r["messages"]["content"][0], json.loads(bag) if bag else None))
    return out


def per_call_us(stage: Any, chats: list[tuple[str, Any]], calls: int, between: Any) -> float:
    times = []
    for i in range(calls):
        text, bag = chats[i % len(chats)]
        between()
        t0 = time.perf_counter()
        stage.render(text, bag)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--calls", type=int, default=600)
    ap.add_argument("--loop", choices=["tools"], help="only render the tool chats in a loop (for a profiler)")
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)

    from renderer.chat_stage import ChatStage

    stage = ChatStage.from_model_dir(a.model)
    stage.warmup()
    chats = chat_mix()
    if a.loop:
        tools = [c for c in chats if '"tool' in c[0]]
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            for text, bag in tools:
                stage.render(text, bag)
        return 0
    scratch = np.zeros(EVICT_BYTES // 8)

    def evict() -> None:
        np.add(scratch, 1, out=scratch)

    ways = {
        "back to back": lambda: None,
        "after a 0.5 ms sleep": lambda: time.sleep(0.0005),
        "after 16 MB written": evict,
    }
    per_call_us(stage, chats, len(chats), ways["back to back"])  # warm-up
    result = {way: round(per_call_us(stage, chats, a.calls, fn), 1) for way, fn in ways.items()}
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": "python -m benchmarks.render_cold " + " ".join(argv if argv is not None else sys.argv[1:]),
        "input": "chat_mix",
        "median_us_per_render": result,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    for way, us in result.items():
        print(f"{way:<22} {us:7.1f} us per ChatStage.render")
    return 0


if __name__ == "__main__":
    sys.exit(main())
