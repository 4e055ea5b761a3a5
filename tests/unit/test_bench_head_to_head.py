"""The bench's head-to-head: alternating rounds, medians, and how targets are judged from them.

No servers here: the measurements are recorded callables, so what is checked is the bookkeeping
that turns rounds into the figures ``summary.json`` and ``docs/PERFORMANCE.md`` report. The live
part (our server and vLLM's up at once) runs in ``make bench`` with the peer installed.
"""

from __future__ import annotations

from typing import Any

from benchmarks import head_to_head as h2h
from benchmarks import report


def _measure(log: list[str], name: str, rates: dict[tuple[str, int], list[float]]) -> h2h.Measure:
    """A fake measurement returning the next rate of a script for (model, concurrency); 0 means failed."""

    def measure(model: str, _input: str, c: int) -> dict[str, Any]:
        log.append(name)
        rate = rates[(model, c)].pop(0)
        if not rate:
            return {"error": "perf_analyzer failed (2): perf_analyzer -m x\nFailed to obtain stable measurement."}
        return {"requests_per_s": rate, "p50_ms": 1000.0 * c / rate}

    return measure


def _script() -> tuple[list[str], list[h2h.Target], list[h2h.Case]]:
    log: list[str] = []
    ours = {("render_chat", 1): [400.0, 500.0, 450.0], ("render_chat", 8): [1200.0, 1000.0, 1100.0]}
    peer = {("render_chat", 1): [250.0, 0.0, 350.0], ("render_chat", 8): [300.0, 320.0, 310.0]}
    targets = [
        h2h.Target("ours grpc", "ours", _measure(log, "ours grpc", ours)),
        h2h.Target("vllm", "peer", _measure(log, "vllm", peer)),
    ]
    cases = [h2h.Case("render_chat", "chat_mix", 1), h2h.Case("render_chat", "chat_mix", 8)]
    return log, targets, cases


def test_rounds_alternate_the_order_of_targets() -> None:
    log, targets, cases = _script()
    h2h.run(targets, cases, rounds=3)
    per_round = [log[i : i + 4] for i in range(0, len(log), 4)]
    assert per_round == [["ours grpc", "vllm"] * 2, ["vllm", "ours grpc"] * 2, ["ours grpc", "vllm"] * 2]


def test_medians_over_rounds_leave_out_failed_measurements() -> None:
    _, targets, cases = _script()
    out = h2h.run(targets, cases, rounds=3)
    rows = {(r["target"], r["concurrency"]): r for r in out["rows"]}
    assert rows[("ours grpc", 1)]["requests_per_s"] == 450.0 and rows[("ours grpc", 1)]["rounds"] == 3
    # The peer's failed second round is not a zero in its median: median of 250 and 350.
    assert rows[("vllm", 1)]["requests_per_s"] == 300.0 and rows[("vllm", 1)]["rounds"] == 2
    assert out["errors"] == ["round 1 vllm render_chat c=1: Failed to obtain stable measurement."]
    assert h2h.best(out["rows"], "render_chat", "ours")["concurrency"] == 8
    assert h2h.p50_c1(out["rows"], "render_chat", "peer")["p50_ms"] == rows[("vllm", 1)]["p50_ms"]


def _res_with(h2h_rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {"head_to_head": {"rounds": 3, "rows": h2h_rows, "errors": [], "window": ["--x"]}}


def _row(model: str, side: str, c: int, rate: float, p50: float) -> dict[str, Any]:
    return {
        "model": model,
        "input": "i",
        "concurrency": c,
        "target": side,
        "side": side,
        "rounds": 3,
        "requests_per_s": rate,
        "p50_ms": p50,
        "samples": [],
    }


def test_summary_ratios_divide_best_medians() -> None:
    rows = [
        _row("render_chat", "ours", 1, 400, 2.0),
        _row("render_chat", "ours", 8, 1200, 6.0),
        _row("render_chat", "peer", 1, 250, 3.9),
        _row("render_chat", "peer", 8, 400, 20.0),
        _row("render_completion", "ours", 8, 2000, 3.0),
        _row("render_completion", "peer", 8, 800, 9.0),
        _row("render_chat", "floor", 1, 700, 1.3),
    ]
    s = report.head_to_head_summary(_res_with(rows))
    assert s["render_chat_vs_vllm_interleaved"] == 3.0
    assert s["render_completion_vs_vllm_interleaved"] == 2.5
    assert s["render_chat_vs_vllm_fastokens_interleaved"] is None  # that peer did not run
    assert s["p50_ms_c1_interleaved"]["peer"]["render_chat"]["p50_ms"] == 3.9
    assert "samples" not in s["head_to_head"]["rows"][0]
    # The floor counts towards neither side's best, only towards what limits the c=1 target.
    assert s["render_chat_floor_p50_c1_of_peer"] == round(1.3 / 3.9, 3)
    assert s["render_completion_floor_p50_c1_of_peer"] is None  # no floor row at c=1 for it


def _targets_table(seq_ratio: float, h2h_ratio: float | None) -> str:
    s: dict[str, Any] = {"p50_ms_c1": {"ours": {}, "peer": {}}}
    for m in ("render_chat", "render_completion"):
        s[f"{m}_vs_vllm"] = seq_ratio
        s[f"{m}_vs_vllm_interleaved"] = h2h_ratio
        s[f"{m}_vs_inprocess"] = 1.0
    return "\n".join(report.targets(s))


def test_a_target_is_met_only_if_both_measurements_say_so() -> None:
    assert "throughput >= 3x vLLM's render server | 3.50 | 3.20 | met" in _targets_table(3.5, 3.2)
    assert "throughput >= 3x vLLM's render server | 3.50 | 2.60 | **not met**" in _targets_table(3.5, 2.6)
    # Without a head-to-head the sequential sweeps alone decide.
    assert "throughput >= 3x vLLM's render server | 3.50 | - | met" in _targets_table(3.5, None)


def test_a_target_is_measured_only_at_its_own_concurrency_levels() -> None:
    """The load generator joins the rounds at its levels only: no measurement and no empty row at the others."""
    log, targets, cases = _script()
    lg = {("render_chat", 1): [300.0, 320.0, 310.0]}
    targets.append(h2h.Target("ours loadgen", "ours_loadgen", _measure(log, "ours loadgen", lg), (1,)))
    out = h2h.run(targets, cases, rounds=3)
    assert log.count("ours loadgen") == 3
    lg_rows = [r for r in out["rows"] if r["target"] == "ours loadgen"]
    assert [(r["concurrency"], r["requests_per_s"]) for r in lg_rows] == [(1, 310.0)]


def test_each_driver_is_judged_against_itself() -> None:
    """perf_analyzer's rows against perf_analyzer's, the load generator's against the load generator's;
    the floor ratio by perf_analyzer is ours over gRPC against the floor's gRPC (the floor runs no HTTP row)."""

    def row(target: str, side: str, c: int, rate: float, p50: float) -> dict[str, Any]:
        return dict(_row("render_chat", side, c, rate, p50), target=target)

    rows = [
        row("ours grpc", "ours", 8, 1000, 6.0),
        row("ours http", "ours", 8, 1300, 5.0),
        row("floor grpc", "floor", 8, 2000, 3.0),
        row("vllm", "peer", 8, 500, 15.0),
        row("ours loadgen", "ours_loadgen", 1, 700, 1.4),
        row("ours loadgen", "ours_loadgen", 8, 900, 8.0),
        row("floor loadgen", "floor_loadgen", 8, 1800, 4.0),
        row("vllm loadgen", "peer_loadgen", 8, 450, 17.0),
        row("vllm fastokens loadgen", "peer_fastokens_loadgen", 1, 600, 1.6),
    ]
    s = report.head_to_head_summary(_res_with(rows))
    assert s["render_chat_vs_vllm_interleaved"] == 2.6  # 1300 / 500: the load generator's rows left out
    assert s["render_chat_vs_vllm_loadgen_interleaved"] == 2.0  # 900 / 450
    assert s["render_chat_vs_floor_interleaved"] == 0.5  # ours grpc 1000 / floor grpc 2000
    assert s["render_chat_vs_floor_loadgen_interleaved"] == 0.5  # 900 / 1800
    p50 = s["p50_ms_c1_interleaved"]
    assert p50["ours_loadgen"]["render_chat"]["p50_ms"] == 1.4
    assert p50["peer_fastokens_loadgen"]["render_chat"]["p50_ms"] == 1.6
    assert p50["ours"]["render_chat"] is None  # perf_analyzer ran no c=1 row here
