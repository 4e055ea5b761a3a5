"""Bookkeeping of the vLLM-engine benchmark (benchmarks/engine_vllm.py), with no server: medians
over rounds, ratios in the direction the report states, failed rows left out, and a text
mismatch between the two targets reported."""

from __future__ import annotations

from benchmarks.engine_vllm import summarize
from benchmarks.report import engine_summary


def row(target, conc, tps, ttft, rnd, texts=None, errors=()):
    return {
        "target": target,
        "concurrency": conc,
        "output_tokens_per_s": tps,
        "ttft_p50_ms": ttft,
        "round": rnd,
        "errors": list(errors),
        "texts": texts or {"0": "Paris."},
    }


def test_medians_and_ratios():
    rows = [
        row("ours", 1, 10.0, 300.0, 0),
        row("ours", 1, 12.0, 280.0, 1),
        row("ours", 1, 1.0, 9e9, 2, errors=["x"]),
        row("vllm", 1, 11.0, 250.0, 0),
        row("vllm", 1, 11.0, 230.0, 1),
    ]
    s = summarize(rows)
    c1 = s["by_concurrency"]["1"]
    assert c1["ours_tokens_per_s"] == 11.0 and c1["ours_ttft_p50_ms"] == 290.0  # the failed row is not a median input
    assert c1["tokens_per_s_ratio"] == round(11.0 / 11.0, 3)
    assert c1["ttft_ratio"] == round(240.0 / 290.0, 3)  # vLLM's over ours: below 1 means ours is slower
    assert s["same_text"] is True
    assert engine_summary({"engine_vllm": {"summary": s}})["chat_vllm_engine_ttft_vs_vllm_serve"] == {"1": 0.828}


def test_a_different_answer_is_reported():
    rows = [row("ours", 1, 10.0, 300.0, 0, texts={"0": "Paris."}), row("vllm", 1, 11.0, 250.0, 0, texts={"0": "Lyon."})]
    assert summarize(rows)["same_text"] is False


def test_a_target_that_never_ran_gives_no_ratio():
    s = summarize([row("ours", 4, 10.0, 300.0, 0)])
    assert s["by_concurrency"]["4"]["tokens_per_s_ratio"] is None
    assert engine_summary({})["chat_vllm_engine_tokens_per_s_vs_vllm_serve"] is None
