"""``summary.json``: the run's figures as ratios and bests, from ``results.json``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchmarks import head_to_head as h2h
from benchmarks.layout import HTTP_PORT, MAIN_INPUTS, PEER_PORT, VLLM_RS_PORT


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


def _image_floor_summary(floor: dict[str, Any] | None) -> dict[str, Any]:
    """The image floor (``benchmarks.image_floor``): its hit over the in-process hit on the image
    where it is least (nothing built as this ensemble can show less there), and ours over it."""
    rows = (floor or {}).get("rows") or []
    if not rows:
        return {"mm_hit_floor_vs_inprocess_best": None, "mm_hit_served_vs_floor_worst": None}
    return {
        "mm_hit_floor_vs_inprocess_best": min(r["floor_over_inprocess"] for r in rows),
        "mm_hit_served_vs_floor_worst": max(r["ours_over_floor"] for r in rows),
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


@dataclass(frozen=True)
class _Bests:
    """One model's best rows on each side of the run (None where that side has none or did not run)."""

    ours: dict[str, Any] | None
    ours_json: dict[str, Any] | None
    peer: dict[str, Any] | None
    peer_fastokens: dict[str, Any] | None


def _ran(side: dict[str, Any]) -> bool:
    """Whether a peer's part of the run ran (else it was skipped or failed)."""
    return side.get("status") == "ran"


def _rps(row: dict[str, Any] | None) -> float | None:
    """A row's requests/s, None for no row."""
    return row["requests_per_s"] if row else None


def _run_header(res: dict[str, Any]) -> dict[str, Any]:
    """The run itself: when, where, with which perf_analyzer and server settings."""
    return {
        "quick": res["quick"],
        "started": res["started"],
        "elapsed_s": _r(res.get("elapsed_s"), 0),
        "machine": res["machine"],
        "perf_analyzer": res["perf_analyzer"],
        "settings": {
            **res["settings"],
            "inputs": MAIN_INPUTS,
            "ports": {
                "http": HTTP_PORT,
                "grpc": HTTP_PORT + 1,
                "metrics": HTTP_PORT + 2,
                "peer": PEER_PORT,
                "vllm_rs": VLLM_RS_PORT,
            },
        },
    }


def _model_bests(res: dict[str, Any], model: str, name: str) -> _Bests:
    """One model's best row per side: ours by perf_analyzer, ours as JSON over HTTP, each peer."""
    peer, pfk = res.get("peer") or {}, res.get("peer_fastokens") or {}

    def best_of(side: dict[str, Any]) -> dict[str, Any] | None:
        rows = side.get("sweep", []) + side.get("loadgen", [])
        return _best([r for r in rows if r.get("input") == name]) if _ran(side) else None

    json_rows = res["openai_sweep"] + res["loadgen"]
    return _Bests(
        ours=_best([r for r in res["sweep"] if r["model"] == model]),
        ours_json=_best([r for r in json_rows if r.get("model", model) == model and r.get("input") == name]),
        peer=best_of(peer),
        peer_fastokens=best_of(pfk),
    )


def _model_figures(res: dict[str, Any], model: str, name: str, b: _Bests) -> dict[str, Any]:
    """One model's ratios against vLLM, the floor and the in-process baselines, in summary.json's order."""
    peer, pfk = res.get("peer") or {}, res.get("peer_fastokens") or {}
    key = model.removeprefix("render_")
    ours, theirs = _rps(b.ours), _rps(b.peer)
    reason = None if _ran(peer) else f"peer {peer.get('status')}: {peer.get('reason', '')}".strip()
    s: dict[str, Any] = {}
    s[f"render_{key}_vs_vllm"] = _ratio(ours, theirs)
    s[f"render_{key}_vs_vllm_note"] = reason or (
        "our best (perf_analyzer, any protocol/concurrency) over vLLM render server's best "
        "(perf_analyzer openai kind or the load generator, any concurrency), same inputs"
    )
    s[f"render_{key}_vs_vllm_fastokens"] = _ratio(ours, _rps(b.peer_fastokens))
    s[f"render_{key}_vs_vllm_fastokens_note"] = (
        "our best over the best of vLLM's render server run with VLLM_USE_FASTOKENS=1, the text encoding "
        "engine our tokenize stage picks"
        if _ran(pfk)
        else f"peer with fastokens {pfk.get('status', 'not run')}"
    )
    floor_rows = [r for r in res.get("floor", []) if r.get("model") == model]
    floor = _best([r for r in floor_rows if _is_loadgen(r) is False])
    s[f"render_{key}_floor"] = _desc(floor)
    s[f"render_{key}_of_floor"] = _ratio(ours, _rps(floor))
    s[f"render_{key}_vs_floor"] = s[f"render_{key}_of_floor"]
    # The same ratios with the Python load generator driving both sides (what a Python client gets).
    ours_lg = _best([r for r in res["loadgen"] if r.get("input") == name])
    floor_lg = _best([r for r in floor_rows if _is_loadgen(r)])
    s[f"render_{key}_vs_floor_loadgen"] = _ratio(_rps(ours_lg), _rps(floor_lg))
    peer_lg = _best([r for r in peer.get("loadgen", []) if r.get("input") == name]) if _ran(peer) else None
    s[f"render_{key}_vs_vllm_loadgen"] = _ratio(_rps(ours_lg), _rps(peer_lg))
    s[f"render_{key}_floor_vs_vllm"] = _ratio(_rps(floor), theirs)
    s[f"render_{key}_vs_vllm_same_client"] = _ratio(_rps(b.ours_json), theirs)
    baseline = "transformers tokenizer(batch" if key == "completion" else "transformers apply_chat_template"
    s[f"render_{key}_vs_inprocess"] = _ratio(ours, _inproc(res, name, baseline))
    s[f"render_{key}_vs_inprocess_note"] = f"our best over in-process '{baseline}...' on one core, one process ({name})"
    s[f"render_{key}_vs_vllm_inprocess"] = _ratio(ours, _inproc(res, name, "vLLM renderer in process"))
    return s


def _best_throughput(res: dict[str, Any], bests: dict[str, _Bests]) -> dict[str, Any]:
    """Each side's best row per model, and every in-process baseline's requests/s."""
    peer_ran, pfk_ran = _ran(res.get("peer") or {}), _ran(res.get("peer_fastokens") or {})
    return {
        "ours": {m: _desc(bests[m].ours) for m in MODELS},
        "ours_json_over_http": {m: _desc(bests[m].ours_json) for m in MODELS},
        "peer": {m: _desc(bests[m].peer) for m in MODELS} if peer_ran else None,
        "peer_fastokens": {m: _desc(bests[m].peer_fastokens) for m in MODELS} if pfk_ran else None,
        "inprocess": {
            r["input"] + ": " + r["baseline"]: round(r["requests_per_s"], 1)
            for r in (res.get("inprocess") or {}).get("rows", [])
        },
    }


def _p50_c1(res: dict[str, Any]) -> dict[str, Any]:
    """p50 at concurrency 1 of the sequential sweeps: ours by protocol, each peer's JSON over HTTP."""
    peer, pfk = res.get("peer") or {}, res.get("peer_fastokens") or {}
    p50: dict[str, Any] = {"ours": {}, "peer": {} if _ran(peer) else None, "peer_fastokens": {} if _ran(pfk) else None}
    for r in _ok(res["sweep"] + res["openai_sweep"]):
        if r["concurrency"] == 1:
            p50["ours"][f"{r['model']} {r['protocol'] if r['protocol'] != 'openai' else 'http-json'}"] = _r(r["p50_ms"])
    for key, run in (("peer", peer), ("peer_fastokens", pfk)):
        if _ran(run):
            p50[key] = {
                f"{r['model']} http-json": _r(r["p50_ms"]) for r in _ok(run.get("sweep", [])) if r["concurrency"] == 1
            }
    return p50


_SCALING_KEYS = (
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


def _scaling(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The scaling rows cut to their settings and figures (``auto`` backend unless a row says otherwise)."""
    return [
        {"tokenizer_backend": "auto", **{k: _r(v) for k, v in r.items() if k in _SCALING_KEYS}}
        for r in res.get("scaling", [])
    ]


def _client_cpu(res: dict[str, Any]) -> dict[str, Any]:
    """The load generator's own CPU per request, by driver, input and concurrency, on every side."""
    peer, pfk = res.get("peer") or {}, res.get("peer_fastokens") or {}
    lg = [
        r
        for r in res["loadgen"] + peer.get("loadgen", []) + pfk.get("loadgen", []) + _rs(res).get("loadgen", [])
        if r.get("client_cpu_us_per_request")
    ]
    return {f"{r['driver']} {r['input']} c={r['concurrency']}": _r(r["client_cpu_us_per_request"], 0) for r in lg}


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    """``summary.json``: the run's figures, section by section in the order the file lists them."""
    s = _run_header(res)
    bests = {model: _model_bests(res, model, name) for model, name in MAIN_INPUTS.items()}
    for model, name in MAIN_INPUTS.items():
        s.update(_model_figures(res, model, name, bests[model]))
    s.update(_mm_summary(res.get("mm")))
    s.update(_image_floor_summary(res.get("image_floor")))
    s["best_throughput"] = _best_throughput(res, bests)
    s["p50_ms_c1"] = _p50_c1(res)
    s.update(head_to_head_summary(res))
    s["ids_equal"] = ids_summary(res)
    s["vllm_rs"] = vllm_rs_summary(res, s)
    s["streaming"] = res.get("streaming")
    s["scaling"] = _scaling(res)
    s["loadgen_client_cpu_us_per_request"] = _client_cpu(res)
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
            "method": "our server, the floor and the peers up at once; each round measures every target once per case, the "
            "order reversed every other round; figures are medians over rounds",
            "rows": [{k: v for k, v in r.items() if k != "samples"} for r in rows],
        }
    }
    sides = ("ours", "floor", "peer", "peer_fastokens", "vllm_rs")
    p50: dict[str, Any] = {side + drv: {} for drv in ("", "_loadgen") for side in sides}
    for model in MODELS:
        key = model.removeprefix("render_")
        # Each driver against itself: perf_analyzer's rows, then the load generator's (sides ending in
        # _loadgen). The floor runs perf_analyzer over gRPC only: ours over gRPC against it.
        for drv in ("", "_loadgen"):
            for side, name in (
                ("peer", "vs_vllm"),
                ("peer_fastokens", "vs_vllm_fastokens"),
                ("vllm_rs", "vs_vllm_rs"),
                ("floor", "vs_floor"),
            ):
                grpc_only = "ours grpc" if side + drv == "floor" else None
                ours = h2h.best(rows, model, "ours" + drv, target=grpc_only)
                theirs = h2h.best(rows, model, side + drv)
                out[f"render_{key}_{name}{drv}_interleaved"] = _ratio(
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
    rows = _rs(res).get("verify", []) + _rs(res).get("loadgen", [])
    if rows:
        out["vllm_rs_vs_ours"] = _tally(rows)
    if res.get("loadgen"):
        out["triton_generate_vs_our_grpc"] = _tally(res["loadgen"])
    for name, checks in ((res.get("inprocess") or {}).get("checks") or {}).items():
        for k, v in checks.items():
            agg = out.setdefault(k, {"checked": 0, "mismatched": 0})
            agg["checked"] += v["checked"]
            agg["mismatched"] += v["mismatched"]
    return out


def _rs(res: dict[str, Any]) -> dict[str, Any]:
    """vllm-rs's results when it ran, else {}."""
    rs = res.get("vllm_rs") or {}
    return rs if rs.get("status") == "ran" else {}


def _pss(fp: dict[str, Any] | None) -> float | None:
    return (fp or {}).get("total_mb")


def _our_render_server(res: dict[str, Any]) -> dict[str, Any]:
    """Our render-only server's footprint row (``benchmarks.footprint``), {} when it was not measured."""
    servers = (res.get("footprint") or {}).get("servers") or []
    return next((r for r in servers if r.get("server") == "render"), {})


def _beside(figure: str, better: str, ours: float | None, vllm: float | None, rs: float | None) -> dict[str, Any]:
    """One figure of ours, vLLM Python's and vllm-rs's, and each of the first two over vllm-rs's."""
    return {
        "figure": figure,
        "better": better,
        "ours": _r(ours),
        "vllm": _r(vllm),
        "vllm_rs": _r(rs),
        "ours_over_vllm_rs": _ratio(ours, rs),
        "vllm_over_vllm_rs": _ratio(vllm, rs),
    }


def _rs_figures(res: dict[str, Any], s: dict[str, Any]) -> list[dict[str, Any]]:
    """vllm-rs beside ours and vLLM Python's: best throughput and p50 at c=1 (sweeps and, where it
    ran, head-to-head medians), PSS after load and start-to-ready."""
    rs, rows = _rs(res), (res.get("head_to_head") or {}).get("rows") or []
    best, p50 = s["best_throughput"], s["p50_ms_c1"]
    out = []
    for model, name in MAIN_INPUTS.items():
        # A load generator row with wrong answers in it is no speed (the head-to-head's rule too).
        rs_rows = [
            r for r in rs.get("sweep", []) + rs.get("loadgen", []) if not (r.get("errors") or r.get("mismatched"))
        ]
        rs_best = _best([r for r in rs_rows if r.get("input") == name])
        ours_p50 = [v for k, v in p50["ours"].items() if k.startswith(model + " ")]
        rs_p50 = [r["p50_ms"] for r in _ok(rs.get("sweep", [])) if r["model"] == model and r["concurrency"] == 1]
        out.append(
            _beside(
                f"{model} req/s, best of the sweeps",
                "higher",
                ((best["ours"] or {}).get(model) or {}).get("requests_per_s"),
                ((best["peer"] or {}).get(model) or {}).get("requests_per_s"),
                rs_best and rs_best["requests_per_s"],
            )
        )
        out.append(
            _beside(
                f"{model} p50 ms at c=1, sweeps",
                "lower",
                min(ours_p50, default=None),
                (p50["peer"] or {}).get(f"{model} http-json"),
                min(rs_p50, default=None),
            )
        )
        if rows:
            hb = {side: h2h.best(rows, model, side) for side in ("ours", "peer", "vllm_rs")}
            hp = {side: h2h.p50_c1(rows, model, side) for side in ("ours", "peer", "vllm_rs")}
            out.append(
                _beside(
                    f"{model} req/s, head-to-head median", "higher", *(r and r["requests_per_s"] for r in hb.values())
                )
            )
            out.append(
                _beside(
                    f"{model} p50 ms at c=1, head-to-head median", "lower", *(r and r["p50_ms"] for r in hp.values())
                )
            )
    ours_fp, peer = _our_render_server(res), res.get("peer") or {}
    out.append(
        _beside(
            "PSS MB after load",
            "lower",
            _pss(ours_fp.get("after_load")),
            _pss(peer.get("footprint_after_load")),
            _pss(rs.get("footprint_after_load")),
        )
    )
    out.append(_beside("start to ready s", "lower", ours_fp.get("start_s"), peer.get("startup_s"), rs.get("startup_s")))
    return out


def vllm_rs_summary(res: dict[str, Any], s: dict[str, Any]) -> dict[str, Any]:
    """vLLM's Rust render server: its version, its figures beside ours and vLLM Python's (as ratios),
    and how often its answers differ from vLLM Python's: on the bench inputs (against our ids, which
    the Python peer's own check compares with vLLM's) and on vLLM's recorded chat corpus."""
    rs = res.get("vllm_rs") or {}
    if rs.get("status") != "ran":
        return {"status": rs.get("status", "not run"), "reason": rs.get("reason", "")}
    corpus = rs.get("corpus") or {}
    per_template = {
        name: {k: v for k, v in t.items() if k != "differing_cases"} for name, t in corpus.get("templates", {}).items()
    }
    return {
        "status": "ran",
        "version": rs.get("version"),
        "command": rs.get("command"),
        "figures": _rs_figures(res, s),
        "bench_inputs_vs_ours": {
            **_tally(rs.get("verify", [])),
            "per_input": {r["input"]: _tally([r]) for r in rs.get("verify", []) if "input" in r},
            "first_errors": [e for r in rs.get("verify", []) for e in r.get("first_errors", [])][:5],
        },
        "bench_inputs_python_peer_vs_ours": (s["ids_equal"] or {}).get("vllm_render_server_vs_ours"),
        "timed_without": rs.get("left_out") or {},
        "corpus": {
            "corpus": corpus.get("corpus"),
            "recorded_by": corpus.get("recorded_by"),
            "not_replayed": corpus.get("not_replayed"),
            "total": corpus.get("total"),
            "templates": per_template,
        },
    }
