"""Streaming detokenization cost per token against the position in the output.

    python -m benchmarks.detokenize_stream [--tokens 2000] [--window 200] [--repeat 5] [--skip-naive]
    (writes benchmarks/results/detokenize_stream.json)

Streams ``--tokens`` ids one at a time through ``renderer.detokenizer.IncrementalDetokenizer``
(``push`` then ``next_text``, as the detokenize stage does per engine response) with the default
model's tokenizer (``build/models/smollm2-135m-instruct``), and reports the median time per
token over the first and the last ``--window`` tokens: their ratio is about 1 when the cost per
token does not grow with the length. Twice: without stop strings, and with two stop strings that
never match (so the stop search runs every step and never ends the stream).

In the same run, the naive baseline the incremental detokenizer replaced: each token decodes the
whole output twice (before and after the new id) and sends the difference; its last/first ratio
grows with the length, and ``naive_over_incremental`` is its time per token over the incremental
one's in the last window. ``--skip-naive`` leaves it out, for long runs (it is quadratic: 60,000
tokens would take hours).

The ids are the tokenizer's encoding of this repository's README.md and docs/*.md (English,
code, tables and some non-ASCII), cut to ``--tokens``: a realistic mix of pieces, including ids
that end partway through a UTF-8 character. Single process, no server.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent
MODEL = ROOT / "build" / "models" / "smollm2-135m-instruct"
OUT = ROOT / "benchmarks" / "results" / "detokenize_stream.json"
NEVER_STOPS = ("\x00never-stop\x00", "@@ not in the text @@")


class StreamEndedEarlyError(RuntimeError):
    """The detokenizer finished before every id was streamed: the figures would be for fewer tokens."""


def output_ids(tokenizer: Any, n: int) -> list[int]:
    """``n`` ids of real text: the repository's README.md and docs, in name order."""
    text = "\n\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    ids = tokenizer.for_decoding(text, add_special_tokens=False).input_ids
    if len(ids) < n:
        ids = ids * (n // max(len(ids), 1) + 1)
    return ids[:n]


def per_token_ns(step: Callable[[int], None], ids: Sequence[int]) -> list[int]:
    """Nanoseconds each ``step(id)`` took, in order."""
    out = []
    clock = time.perf_counter_ns
    for i in ids:
        t = clock()
        step(i)
        out.append(clock() - t)
    return out


def incremental(tokenizer: Any, prompt: list[int], ids: Sequence[int], stop: Sequence[str]) -> list[int]:
    from renderer.detokenizer import IncrementalDetokenizer

    d = IncrementalDetokenizer(tokenizer, prompt, stop=stop, max_tokens=len(ids) + 1)

    def step(i: int) -> None:
        d.push([i])
        d.next_text()

    times = per_token_ns(step, ids)
    if d.finish_reason is not None or len(d.output_ids) != len(ids):
        raise StreamEndedEarlyError(f"finished ({d.finish_reason}) after {len(d.output_ids)} of {len(ids)} ids")
    return times


def naive(tokenizer: Any, prompt: list[int], ids: Sequence[int]) -> list[int]:
    """The replaced ``stream_delta``: decode everything before and after the new id, send the difference."""
    seen: list[int] = []

    def step(i: int) -> None:
        before = tokenizer.decode(seen, skip_special_tokens=True)
        seen.append(i)
        now = tokenizer.decode(seen, skip_special_tokens=True)
        _ = now[len(before) :]

    return per_token_ns(step, ids)


def windows(runs: list[list[int]], window: int) -> dict[str, float]:
    """Median µs per token in the first and last ``window`` tokens (median over runs)."""
    first = statistics.median(statistics.median(r[:window]) for r in runs) / 1000
    last = statistics.median(statistics.median(r[-window:]) for r in runs) / 1000
    total = statistics.median(sum(r) for r in runs) / 1e6
    return {
        "first_us_per_token": round(first, 2),
        "last_us_per_token": round(last, 2),
        "last_over_first": round(last / first, 2),
        "total_ms": round(total, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--window", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--skip-naive", action="store_true", help="leave out the quadratic baseline (long runs)")
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    if a.tokens < 2 * a.window:
        ap.error(f"--tokens ({a.tokens}) must be at least twice --window ({a.window})")

    from model_builders.default_model import build
    from renderer.tokenizer import Tokenizer

    tok = Tokenizer.from_pretrained(build(MODEL))
    ids = output_ids(tok, a.tokens)
    prompt = tok.for_decoding("Summarize the project documentation:", add_special_tokens=False).input_ids

    incremental(tok, prompt, ids[: a.window], ())  # warm-up: imports, the tokenizer's caches
    results: dict[str, Any] = {}
    for name, stop in (("incremental", ()), ("incremental_with_stop_strings", NEVER_STOPS)):
        results[name] = windows([incremental(tok, prompt, ids, stop) for _ in range(a.repeat)], a.window)
    if not a.skip_naive:
        naive_runs = [naive(tok, prompt, ids) for _ in range(max(1, a.repeat // 2))]
        results["naive_full_decode"] = windows(naive_runs, a.window)
        results["naive_over_incremental_last_window"] = round(
            results["naive_full_decode"]["last_us_per_token"] / results["incremental"]["last_us_per_token"], 1
        )
    report = {
        "tokens": a.tokens,
        "window": a.window,
        "repeat": a.repeat,
        "model": MODEL.name,
        "ids": "tokenizer encoding of README.md + docs/*.md, first --tokens ids",
        "stop_strings": list(NEVER_STOPS),
        "python": platform.python_version(),
        "machine": platform.machine(),
        **results,
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=1) + "\n")
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
