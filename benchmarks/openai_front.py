"""genai-perf against the OpenAI-compatible front, beside the same load on Triton's own gRPC.

One server (``chat`` and ``ensemble`` with the stand-in engine, the front on 19403); genai-perf
(NVIDIA's load tool, ``make genai-perf``) runs the same synthetic chat load twice per concurrency:
through the front (``--endpoint-type chat``, OpenAI's streaming chat API) and straight to the
TensorRT-LLM-compatible ``ensemble`` over Triton's gRPC (``--endpoint-type kserve --backend
tensorrtllm``). The ratio of the two is what the HTTP front costs; every request must succeed.

    python -m benchmarks.openai_front [--quick]    -> build/bench/openai_front.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build"))
PORT = 19400
FRONT_PORT = 19403
GENAI_PERF = BUILD / "genai-perf-venv" / "bin" / "genai-perf"
PERF_ANALYZER = BUILD / "perf_analyzer"


def log(msg: str) -> None:
    print(f"[openai_front {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def profile(target: list[str], model_dir: str, concurrency: int, requests: int) -> dict[str, Any]:
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PATH=f"{PERF_ANALYZER / 'bin'}{os.pathsep}{os.environ['PATH']}",
        LD_LIBRARY_PATH=f"{PERF_ANALYZER / 'lib'}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}",
    )
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(GENAI_PERF),
            "profile",
            *target,
            "--tokenizer",
            model_dir,
            "--streaming",
            "--synthetic-input-tokens-mean",
            "64",
            "--synthetic-input-tokens-stddev",
            "0",
            "--output-tokens-mean",
            "16",
            "--output-tokens-stddev",
            "0",
            "--extra-inputs",
            "min_tokens:16",
            "--extra-inputs",
            "temperature:0.0",
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(requests),
            "--random-seed",
            "0",
            "--artifact-dir",
            tmp,
        ]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp)
        if run.returncode != 0:
            return {"concurrency": concurrency, "error": (run.stdout + run.stderr)[-1500:]}
        [summary] = Path(tmp).glob("*/profile_export_genai_perf.json")
        s = json.loads(summary.read_text())
    return {
        "concurrency": concurrency,
        "requests": s["request_count"]["avg"],
        "requests_per_s": round(s["request_throughput"]["avg"], 3),
        "output_tokens_per_s": round(s["output_token_throughput"]["avg"], 2),
        "ttft_p50_ms": round(s["time_to_first_token"]["p50"], 1),
        "request_latency_p50_ms": round(s["request_latency"]["p50"], 1),
    }


def run(quick: bool = False) -> dict[str, Any]:
    from launcher import cli as launch

    if not GENAI_PERF.exists():
        return {"error": f"{GENAI_PERF} missing: make genai-perf"}
    model_dir = str(BUILD / "models" / "smollm2-135m-instruct")
    s = replace(
        launch.Settings(),
        model_dir=model_dir,
        models="chat,ensemble",
        build_dir=str(BUILD / "bench" / "front"),
        http_port=PORT,
        grpc_port=PORT + 1,
        metrics_port=PORT + 2,
        openai_port=FRONT_PORT,
    )
    levels = [(1, 8), (4, 16)] if quick else [(1, 16), (4, 32)]
    rows = []
    if launch.start(s) != 0:
        return {"error": f"server did not start; see {s.log_file}"}
    try:
        front = ["-m", Path(model_dir).name, "--endpoint-type", "chat", "--url", f"127.0.0.1:{FRONT_PORT}"]
        triton = [
            "-m",
            "ensemble",
            "--endpoint-type",
            "kserve",
            "--backend",
            "tensorrtllm",
            "-u",
            f"127.0.0.1:{PORT + 1}",
        ]
        for conc, n in levels:
            for name, target in (("front", front), ("triton", triton)):
                extra = [] if name == "front" else ["--extra-inputs", "exclude_input_in_output:true"]
                row = {"target": name, **profile(target + extra, model_dir, conc, n)}
                log(
                    f"  {name:6} c={conc}: "
                    + (
                        row.get("error", "")[:200]
                        or f"{row['output_tokens_per_s']} tok/s, TTFT p50 {row['ttft_p50_ms']} ms"
                    )
                )
                rows.append(row)
    finally:
        launch.stop(s)
    return {"rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per concurrency: the front's output tokens/s over Triton's own gRPC (1.0 = the front costs nothing)."""
    out = {}
    for conc in sorted({r["concurrency"] for r in rows}):
        f = next((r for r in rows if r["target"] == "front" and r["concurrency"] == conc and "error" not in r), None)
        t = next((r for r in rows if r["target"] == "triton" and r["concurrency"] == conc and "error" not in r), None)
        out[str(conc)] = round(f["output_tokens_per_s"] / t["output_tokens_per_s"], 3) if f and t else None
    return {"front_tokens_per_s_vs_triton_grpc": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(BUILD / "bench" / "openai_front.json"))
    a = ap.parse_args(argv)
    res = run(a.quick)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res.get("summary", res), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
