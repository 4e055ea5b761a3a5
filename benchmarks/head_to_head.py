"""Ours and vLLM's render server up at the same time, measured in alternating rounds.

The sweeps of ``benchmarks.run`` measure our server, then (minutes later, with ours stopped) the
peer. On a shared 2-core machine the background load drifts over minutes, so two sequential sweeps
can land in different stretches of it, and a ratio of their figures carries that drift (compare the
two columns of the Targets table in ``docs/PERFORMANCE.md``). Here every target is already up and
idle while another is driven; each round measures every target once per case, the order reversed every
other round, and the summary compares medians over rounds. Idle servers cost nothing: a Triton
stub and vLLM's API server both block waiting for requests.

A target is a name and a ``measure(model, input_name, concurrency) -> row`` callable (a
``benchmarks.run.pa_row`` closure); this module knows rounds and medians, not servers.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable

Measure = Callable[[str, str, int], dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Target:
    """One server and driver in the head-to-head."""

    name: str
    """Label in the results: ``ours grpc``, ``ours http``, ``vllm``, ``vllm fastokens``."""
    side: str
    """``ours``, ``peer`` or ``peer_fastokens``: which bests and p50s the row counts towards."""
    measure: Measure
    """Runs one short measurement and returns a ``pa_row`` dict (``requests_per_s``, ``p50_ms`` or ``error``)."""
    concurrencies: tuple[int, ...] = ()
    """The cases' concurrency levels this target is measured at; empty: all of them (the load
    generator's own CPU shares the cores, so it is not driven at every level perf_analyzer is)."""

    def runs_at(self, concurrency: int) -> bool:
        return not self.concurrencies or concurrency in self.concurrencies


@dataclasses.dataclass(frozen=True)
class Case:
    """One ensemble, input mix and concurrency level."""

    model: str
    input_name: str
    concurrency: int


def run(
    targets: list[Target], cases: list[Case], rounds: int, progress: Callable[[str], None] = lambda _msg: None
) -> dict[str, Any]:
    """Measure every (case, target) once per round, alternating the target order; return rows with medians."""
    samples: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    errors: list[str] = []
    for rnd in range(rounds):
        order = targets if rnd % 2 == 0 else targets[::-1]
        for case in cases:
            for t in order:
                if not t.runs_at(case.concurrency):
                    continue
                row = t.measure(case.model, case.input_name, case.concurrency)
                if row.get("error") or row.get("requests_per_s") is None:
                    # perf_analyzer's reason is its last line; the line before it is the command.
                    lines = [ln for ln in str(row.get("error")).splitlines() if ln.strip()] or ["no result"]
                    errors.append(f"round {rnd} {t.name} {case.model} c={case.concurrency}: {lines[-1][:300]}")
                    continue
                samples.setdefault((case.model, case.concurrency, t.name), []).append(row)
        progress(f"head-to-head round {rnd + 1}/{rounds} done")
    rows = []
    for case in cases:
        for t in targets:
            if not t.runs_at(case.concurrency):
                continue
            got = samples.get((case.model, case.concurrency, t.name), [])
            rows.append(
                {
                    "model": case.model,
                    "input": case.input_name,
                    "concurrency": case.concurrency,
                    "target": t.name,
                    "side": t.side,
                    "rounds": len(got),
                    "requests_per_s": round(statistics.median(r["requests_per_s"] for r in got), 1) if got else None,
                    "p50_ms": round(statistics.median(r["p50_ms"] for r in got), 3) if got else None,
                    "samples": [[round(r["requests_per_s"], 1), round(r["p50_ms"], 3)] for r in got],
                }
            )
    return {"rounds": rounds, "rows": rows, "errors": errors}


def best(rows: list[dict[str, Any]], model: str, side: str, target: str | None = None) -> dict[str, Any] | None:
    """The row of ``side`` (of its ``target`` alone, if given) with the highest median throughput for ``model``."""
    mine = [
        r
        for r in rows
        if r["model"] == model and r["side"] == side and target in (None, r["target"]) and r["requests_per_s"]
    ]
    return max(mine, key=lambda r: r["requests_per_s"]) if mine else None


def p50_c1(rows: list[dict[str, Any]], model: str, side: str) -> dict[str, Any] | None:
    """The row of ``side`` with the lowest median p50 at concurrency 1 for ``model``."""
    mine = [r for r in rows if r["model"] == model and r["side"] == side and r["concurrency"] == 1 and r["p50_ms"]]
    return min(mine, key=lambda r: r["p50_ms"]) if mine else None
