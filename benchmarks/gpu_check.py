"""``make gpu-check``: the multimodal stage on a CUDA device against its CPU path, equal and timed.

``mm_process`` with ``KIND_GPU`` runs ``MultiModalProcessor(device="cuda")`` (the families' torch
kernels on the device); with ``KIND_CPU`` it runs the numba kernels. This script runs both, in one
process, on the same images and prompts for each family, and checks:

- every output tensor but ``pixel_values`` is equal, and so are the prompt ids and content hashes;
- ``pixel_values`` agree within ``tests/mm_images.DEVICE_PARITY_ATOL`` (the tolerance the CPU
  torch-twin test holds in ``make test``);

then times a cold process (cache off) and a cache hit on each path. Figures go to a JSON file
(``--out``; ``$OUT/gpu_check.json`` on the device machine, so it comes back). Exit status: 0 when
every check passed, 1 when one failed, 2 when there is no CUDA device (nothing was compared).

It needs torch, numpy, pillow, transformers (numba optional), the renderer's own imports (pydantic and
openai, through ``renderer.chat``; a device machine without them gets them as carried wheels, see
docs/PERFORMANCE.md, "GPU") and the tiny model folders, built beforehand where the project's venv is
(``python -m model_builders.vlm_model``) and carried along: it builds nothing and starts no server.

    python -m benchmarks.gpu_check [--models-dir build/models] [--out FILE] [--repeat 5]
    python -m benchmarks.gpu_check --device cpu:0     # the same torch code on the CPU (a rehearsal)
    python -m benchmarks.gpu_check --prepare .gpu-check  # the folders without weights (28 MB), to carry

On a lent device machine (docs/PERFORMANCE.md, "GPU"): ``--prepare .gpu-check`` here, then run
``PYTHONPATH=. python3 -m benchmarks.gpu_check --models-dir .gpu-check`` there with ``.gpu-check``
carried (the processor reads only the configs and ``tokenizer.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
FAMILIES = ("qwen2_vl", "pixtral")
# A spread of shapes and modes: the parity images, plus a large photo-sized one for the timing.
TIMING_IMAGES = ("rgb_640x480", "odd_1025x1023", "big_4000x3000")


def _median_ms(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 3)


def _prompt(processor: Any, n: int) -> list[int]:
    """A prompt with ``n`` image placeholders: the token the family expands (vLLM's target)."""
    return [1] + [processor.family.placeholder_token_id, 2] * n


def _compare(family: str, cpu: Any, dev: Any, atol: float) -> dict[str, Any]:
    import numpy as np

    pv_dev = dev.pixel_values.detach().cpu().numpy()
    diff = float(np.max(np.abs(pv_dev - cpu.pixel_values))) if cpu.pixel_values.size else 0.0
    others_equal = all(
        np.array_equal(np.asarray(v.cpu() if hasattr(v, "cpu") else v), cpu.tensors()[k])
        for k, v in dev.tensors().items()
        if k != "pixel_values"
    )
    return {
        "family": family,
        "pixel_values_shape": list(cpu.pixel_values.shape),
        "pixel_values_max_abs_diff": diff,
        "pixel_values_within_atol": diff <= atol,
        "other_tensors_equal": others_equal,
        "ids_and_hashes_equal": dev.input_ids == cpu.input_ids and dev.hashes == cpu.hashes,
    }


def run(models_dir: Path, device: str, repeat: int) -> dict[str, Any]:
    import torch

    from renderer.chat.messages import MultiModalItem
    from renderer.multimodal import MultiModalProcessor
    from tests.support.mm_images import DEVICE_PARITY_ATOL, PARITY_IMAGES, data_url, png

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def items(names: tuple[str, ...] | list[str]) -> list[MultiModalItem]:
        return [MultiModalItem("image", "image_url", data_url(png(n)), None, 0, i) for i, n in enumerate(names)]

    out: dict[str, Any] = {"checks": [], "timings": []}
    for family in FAMILIES:
        model_dir = models_dir / f"tiny-{family}"
        cpu = MultiModalProcessor.from_model_dir(model_dir, cache_bytes=0)
        dev = MultiModalProcessor.from_model_dir(model_dir, cache_bytes=0)
        dev.device = device  # "cuda[:N]", or "cpu:0" for the torch code on the CPU (see --device)
        for names in [[n] for n in PARITY_IMAGES] + [PARITY_IMAGES]:
            prompt = _prompt(cpu, len(names))
            check = _compare(
                family, cpu.process(prompt, items(names)), dev.process(prompt, items(names)), DEVICE_PARITY_ATOL
            )
            out["checks"].append({"images": list(names), **check})
        warm_cpu = MultiModalProcessor.from_model_dir(model_dir, cache_bytes=256 << 20)
        warm_dev = MultiModalProcessor.from_model_dir(model_dir, cache_bytes=256 << 20)
        warm_dev.device = device
        for name in TIMING_IMAGES:
            prompt, its = _prompt(cpu, 1), items([name])
            row = {"family": family, "image": name}
            for label, proc, warm in (("cpu", cpu, warm_cpu), ("device", dev, warm_dev)):
                row[f"{label}_miss_ms"] = _median_ms(lambda p=proc: p.process(prompt, its), repeat, sync)
                row[f"{label}_hit_ms"] = _median_ms(lambda p=warm: p.process(prompt, its), repeat, sync)
            row["device_miss_speedup"] = round(row["cpu_miss_ms"] / row["device_miss_ms"], 3)
            out["timings"].append(row)
    out["passed"] = all(
        c["pixel_values_within_atol"] and c["other_tensors_equal"] and c["ids_and_hashes_equal"] for c in out["checks"]
    )
    out["tolerance_atol"] = DEVICE_PARITY_ATOL
    return out


def prepare(models_dir: Path, dst: Path) -> None:
    """Copy each family's folder without its weights: what the processor reads, small enough to carry."""
    import shutil

    for family in FAMILIES:
        src, out = models_dir / f"tiny-{family}", dst / f"tiny-{family}"
        out.mkdir(parents=True, exist_ok=True)
        for f in src.iterdir():
            if f.is_file() and f.suffix != ".safetensors":
                shutil.copy2(f, out / f.name)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", type=Path, default=ROOT / "build" / "models")
    default_out = Path(os.environ["OUT"]) / "gpu_check.json" if os.environ.get("OUT") else None
    ap.add_argument("--out", type=Path, default=default_out or ROOT / "benchmarks" / "results" / "gpu_check.json")
    ap.add_argument("--device", default="cuda", help="cuda[:N], or cpu:0 to rehearse the torch path on the CPU")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--prepare", type=Path, help="write weightless copies of the model folders here and exit")
    a = ap.parse_args(argv)
    if a.prepare:
        prepare(a.models_dir, a.prepare)
        print(f"gpu-check: model folders without weights in {a.prepare}")
        return 0

    import torch

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"gpu-check: torch {torch.__version__} sees no CUDA device; nothing compared", file=sys.stderr)
        return 2
    missing = [f for f in FAMILIES if not (a.models_dir / f"tiny-{f}" / "config.json").is_file()]
    if missing:
        print(
            f"gpu-check: no model folder for {missing} under {a.models_dir} (python -m model_builders.vlm_model)",
            file=sys.stderr,
        )
        return 2
    started = time.time()
    result = run(a.models_dir, a.device, a.repeat)
    result["environment"] = {
        "device": a.device,
        "device_name": torch.cuda.get_device_name(0) if a.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "elapsed_s": round(time.time() - started, 1),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["timings"]:
        print(
            f"{row['family']:9} {row['image']:15} miss cpu {row['cpu_miss_ms']:8.2f} ms  device {row['device_miss_ms']:8.2f} ms"
            f"  hit cpu {row['cpu_hit_ms']:6.2f} ms  device {row['device_hit_ms']:6.2f} ms"
        )
    worst = max(c["pixel_values_max_abs_diff"] for c in result["checks"])
    print(f"gpu-check: {'passed' if result['passed'] else 'FAILED'}; max |diff| {worst:.3g}; wrote {a.out}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
