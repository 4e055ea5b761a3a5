"""``make gpu-check``: ``mm_process`` on a CUDA device (``IMAGE_DEVICE=cuda``, and with
``IMAGE_DECODE_DEVICE=cuda``) against vLLM's own processor on that device and against its CPU path.

What it measures (every part runs with ``--device cpu:0`` too, the device path's
torch code on the CPU, so ``make test`` covers every branch but the device itself):

1. **oracle**: our device path against transformers' torchvision-based ("fast") processor run with
   ``device=<the device>``, what vLLM runs with ``mm_processor_kwargs={"device": "cuda"}``, on the
   same decoded images: ``pixel_values`` within ``ORACLE_ATOL`` (float noise at most; 0.0 where
   both gather the same table), grids/sizes equal. Needs torchvision beside transformers (the
   device machine's image has both); where it is missing the oracle is recorded as unavailable,
   which fails the check on a CUDA device.
   **cpu_path**: the numba CPU path (``IMAGE_DEVICE=cpu``, what ``tests/unit/test_mm_vllm_fixtures.py``
   holds bit-exact to vLLM's recordings) against the same torch code on the CPU: bit-exact for the
   fast processor. **device_vs_cpu**: the device against the CPU path: ids, grids and ``mm_hashes``
   equal (the cache key is the hash of the decoded pixels, device-independent); ``pixel_values``
   differ by the resize's rounding (torchvision resizes uint8 natively on a CPU, in float32 on a
   GPU), reported, not held.
2. **decode**: JPEG decoded on the device (nvJPEG through ``torchvision.io.decode_jpeg``) against
   Pillow's decode: largest and mean pixel difference, share of values off, whether the content
   hash (``mm_hashes``) stays the same, and each EXIF orientation turned upright (the shape must
   match Pillow's and the mean difference stay under ``DECODE_MEAN_ATOL`` grey levels: a wrong
   turn costs tens).
3. **timings**: a JPEG miss and a hit, 640x480 and 4000x3000, on the CPU path, the device path
   (target 1) and the device path decoding on the device (targets 1 + 2), with the speed-ups;
   **stages**: Pillow decode, device decode and content hash alone on the big image.
   **memory**: device memory per cached image (``torch.cuda.memory_allocated`` growth against the
   cache's own accounting).
4. **residency**: where a hit's tensors are (the cached tensor, on the device) and what handing
   them to Triton costs: ``triton_io.tensors.tensor`` copies a device tensor to the host for every
   response, so an engine in the same server gets host tensors; the copy is timed.

Exit status: 0 when every held check passed, 1 when one failed, 2 when there is no CUDA device for
``--device cuda`` (nothing was compared). Figures go to a JSON file (``--out``; ``$OUT/gpu_check.json``
on the device machine, so it comes back); ``benchmarks/report/sections.py`` renders it.

It needs torch, numpy, pillow, transformers (torchvision for the oracle and device decoding; numba
optional), the renderer's own imports (pydantic and openai, through ``renderer.chat``; a device
machine without them gets them as carried wheels, see docs/PERFORMANCE.md, "GPU") and the tiny
model folders, built beforehand where the project's venv is (``python -m model_builders.vlm_model``)
and carried along: it builds nothing and starts no server.

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
# The timed images: a phone-camera-sized JPEG and a small one (tests/support/mm_images.JPEG_SIZES).
TIMING_IMAGES = ("jpeg_640x480", "jpeg_4000x3000")
# Our device path against transformers' on the same device: the same kernels and the same table,
# so equal up to float noise (a float32 ulp near 2 is 2.4e-7).
ORACLE_ATOL = 1e-5
# Device decoding turned upright: a right turn leaves the decoders' rounding (about a grey level
# on average at most); a wrong one moves every pixel (tens).
DECODE_MEAN_ATOL = 2.0
ORIENTATIONS = tuple(range(1, 9))


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


def _np(x: Any) -> Any:
    import numpy as np

    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def _diff(a: Any, b: Any) -> dict[str, Any]:
    """Largest and mean |a - b| and the share of values that differ (a shape mismatch is reported)."""
    import numpy as np

    a, b = _np(a).astype(np.float64), _np(b).astype(np.float64)
    if a.shape != b.shape:
        return {"shape_equal": False, "max_abs_diff": None, "mean_abs_diff": None, "fraction_off": None}
    d = np.abs(a - b)
    return {
        "shape_equal": True,
        "max_abs_diff": float(d.max()) if d.size else 0.0,
        "mean_abs_diff": float(d.mean()) if d.size else 0.0,
        "fraction_off": float((d > 0).mean()) if d.size else 0.0,
    }


class Check:
    """The check's parts, each callable alone (tests/unit/test_gpu_check.py runs them on ``cpu:0``)."""

    def __init__(self, models_dir: Path, device: str, repeat: int = 5) -> None:
        import torch

        self.models_dir, self.device, self.repeat = models_dir, device, repeat
        self.cuda = device.startswith("cuda")
        self._torch = torch

    # --- helpers ---------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.cuda:
            self._torch.cuda.synchronize()

    def processor(self, family: str, device: str, *, cache_bytes: int = 0, decode: bool = False) -> Any:
        from renderer.multimodal import MultiModalProcessor

        return MultiModalProcessor.from_model_dir(
            self.models_dir / f"tiny-{family}",
            cache_bytes=cache_bytes,
            device=device,
            decode_device="cuda" if decode else "cpu",
        )

    @staticmethod
    def items(datas: list[tuple[bytes, str]]) -> list[Any]:
        """Data-URL items of (bytes, format) pairs, in order."""
        from renderer.chat.messages import MultiModalItem
        from tests.support.mm_images import data_url

        return [MultiModalItem("image", "image_url", data_url(d, f), None, 0, i) for i, (d, f) in enumerate(datas)]

    @staticmethod
    def image_bytes(name: str) -> tuple[bytes, str]:
        from tests.support.mm_images import JPEG_SIZES, named_jpeg, png

        return (named_jpeg(name), "JPEG") if name in JPEG_SIZES else (png(name), "PNG")

    # --- target 1: the oracle, the CPU path, the device against the CPU ----------------------------

    def oracle_processor(self, family: str) -> tuple[Any, str | None]:
        """transformers' torchvision-based image processor for the folder, or (None, why not)."""
        try:
            from transformers import AutoImageProcessor

            proc = AutoImageProcessor.from_pretrained(str(self.models_dir / f"tiny-{family}"))
        except Exception as e:  # noqa: BLE001 (no transformers, or no torchvision behind it)
            return None, f"{type(e).__name__}: {e}"
        if getattr(proc, "backend", None) != "torchvision":
            return (
                None,
                f"transformers gave {type(proc).__name__} ({getattr(proc, 'backend', '?')}): torchvision is missing",
            )
        return proc, None

    def oracle(self, images: list[str]) -> dict[str, Any]:
        from PIL import Image

        from renderer.multimodal.media import MediaLimits, decode_image

        out: dict[str, Any] = {"atol": ORACLE_ATOL, "rows": []}
        for family in FAMILIES:
            hf, why = self.oracle_processor(family)
            if hf is None:
                out.update(available=False, reason=why)
                return out
            ours = self.processor(family, self.device)
            for name in images:
                data, fmt = self.image_bytes(name)
                # vLLM hands the processor the decoded, upright RGB image; ours decodes the same way.
                pil = Image.fromarray(decode_image(data, MediaLimits()).rgb, "RGB")
                ref = hf(images=[pil], return_tensors="pt", device=self.device)
                got = ours.process(_prompt(ours, 1), self.items([(data, fmt)]))
                if family == "qwen2_vl":
                    grid_ref, grid_got = _np(ref["image_grid_thw"]).tolist(), got.image_grid_thw.tolist()
                else:
                    grid_ref, grid_got = _np(ref["image_sizes"]).tolist(), got.image_sizes.tolist()
                d = _diff(got.pixel_values, ref["pixel_values"])
                out["rows"].append(
                    {
                        "family": family,
                        "image": name,
                        "oracle_device": str(ref["pixel_values"].device),
                        "ours_device": str(got.pixel_values.device),
                        "grid_equal": grid_ref == grid_got,
                        **d,
                        "within_atol": d["shape_equal"] and d["max_abs_diff"] <= ORACLE_ATOL,
                    }
                )
        out["available"], out["reason"] = True, None
        return out

    def cpu_path(self, images: list[str]) -> dict[str, Any]:
        """The numba CPU path against the device path's torch code on the CPU (``cpu:0``)."""
        rows = []
        for family in FAMILIES:
            cpu, on_torch = self.processor(family, "cpu"), self.processor(family, "cpu:0")
            for name in images:
                data, fmt = self.image_bytes(name)
                a = cpu.process(_prompt(cpu, 1), self.items([(data, fmt)]))
                b = on_torch.process(_prompt(cpu, 1), self.items([(data, fmt)]))
                rows.append({"family": family, "image": name, **_diff(b.pixel_values, a.pixel_values)})
        return {"rows": rows, "bit_exact": all(r["shape_equal"] and r["max_abs_diff"] == 0.0 for r in rows)}

    def device_vs_cpu(self, images: list[str]) -> dict[str, Any]:
        """The device path against the CPU path, each image alone and all in one request."""
        import numpy as np

        rows = []
        for family in FAMILIES:
            cpu, dev = self.processor(family, "cpu"), self.processor(family, self.device)
            for names in [[n] for n in images] + [images]:
                its = self.items([self.image_bytes(n) for n in names])
                a, b = cpu.process(_prompt(cpu, len(names)), its), dev.process(_prompt(cpu, len(names)), its)
                others = all(
                    np.array_equal(_np(v), np.asarray(a.tensors()[k]))
                    for k, v in b.tensors().items()
                    if k != "pixel_values"
                )
                rows.append(
                    {
                        "family": family,
                        "images": names,
                        **_diff(b.pixel_values, a.pixel_values),
                        "ids_grids_hashes_equal": others and b.input_ids == a.input_ids and b.hashes == a.hashes,
                    }
                )
        return {"rows": rows, "ids_grids_hashes_equal": all(r["ids_grids_hashes_equal"] for r in rows)}

    # --- target 2: decoding on the device ------------------------------------------------------------

    def decode(self, names: list[str], orientations: tuple[int, ...] = ORIENTATIONS) -> dict[str, Any]:
        """Each JPEG decoded by Pillow and on the device: pixels, hashes, orientation."""
        from renderer.errors import ImageDecoderUnavailableError
        from renderer.multimodal import devices
        from renderer.multimodal.identity import content_hash
        from renderer.multimodal.media import MediaLimits, decode_image
        from tests.support.mm_images import JPEG_SIZES, jpeg

        try:
            devices.jpeg_decoder()
        except ImageDecoderUnavailableError as e:
            return {"available": False, "reason": str(e), "rows": []}
        cases = [(n, *JPEG_SIZES[n], 1) for n in names] + [(f"jpeg_96x64_o{o}", 96, 64, o) for o in orientations]
        rows = []
        for name, w, h, o in cases:
            data = jpeg(w, h, o)
            pil, dev = decode_image(data, MediaLimits()), decode_image(data, MediaLimits(), self.device)
            d = _diff(dev.rgb, pil.rgb)
            error = None
            if dev.pixels is None:  # torchvision refused it and Pillow decoded it: say why
                try:
                    devices.decode_jpeg_on(data, self.device, o)
                except Exception as e:  # noqa: BLE001 (whatever nvJPEG raised)
                    error = f"{type(e).__name__}: {e}"[:300]
            rows.append(
                {
                    "image": name,
                    "orientation": o,
                    "decoded_on": str(dev.pixels.device) if dev.pixels is not None else "host (Pillow)",
                    "device_error": error,
                    **d,
                    "hash_equal": content_hash(dev.rgb, {}) == content_hash(pil.rgb, {}),
                    "upright": d["shape_equal"] and d["mean_abs_diff"] <= DECODE_MEAN_ATOL,
                }
            )
        return {"available": True, "reason": None, "mean_atol": DECODE_MEAN_ATOL, "rows": rows}

    # --- target 3: speed and memory ------------------------------------------------------------------

    def timings(self, names: tuple[str, ...], decode: bool) -> list[dict[str, Any]]:
        rows = []
        paths = [("cpu", "cpu", False), ("device", self.device, False)] + (
            [("device_decode", self.device, True)] if decode else []
        )
        for family in FAMILIES:
            for name in names:
                data, fmt = self.image_bytes(name)
                row: dict[str, Any] = {"family": family, "image": name}
                for label, device, dec in paths:
                    cold = self.processor(family, device, decode=dec)
                    warm = self.processor(family, device, cache_bytes=256 << 20, decode=dec)
                    prompt, its = _prompt(cold, 1), self.items([(data, fmt)])
                    row[f"{label}_miss_ms"] = _median_ms(lambda p=cold: p.process(prompt, its), self.repeat, self.sync)
                    row[f"{label}_hit_ms"] = _median_ms(lambda p=warm: p.process(prompt, its), self.repeat, self.sync)
                for label, _, _ in paths[1:]:
                    row[f"{label}_miss_speedup"] = round(row["cpu_miss_ms"] / row[f"{label}_miss_ms"], 3)
                rows.append(row)
        return rows

    def stages(self, name: str, decode: bool) -> dict[str, Any]:
        """One miss's parts on ``name``: Pillow decode, device decode, the content hash."""
        from renderer.multimodal.identity import content_hash
        from renderer.multimodal.media import MediaLimits, decode_image

        data, _ = self.image_bytes(name)
        limits = MediaLimits()
        rgb = decode_image(data, limits).rgb
        row: dict[str, Any] = {
            "image": name,
            "pil_decode_ms": _median_ms(lambda: decode_image(data, limits), self.repeat, self.sync),
            "hash_ms": _median_ms(lambda: content_hash(rgb, {}), self.repeat, self.sync),
        }
        if decode:
            row["device_decode_ms"] = _median_ms(
                lambda: decode_image(data, limits, self.device), self.repeat, self.sync
            )
        return row

    def memory(self, name: str) -> list[dict[str, Any]]:
        """Device memory one cached image holds: the allocator's growth and the cache's accounting."""
        rows = []
        data, fmt = self.image_bytes(name)
        for family in FAMILIES:
            proc = self.processor(family, self.device, cache_bytes=1 << 30)
            proc.warmup()  # the table and the kernels' workspaces are the processor's, not the image's
            self.sync()
            before = self._torch.cuda.memory_allocated() if self.cuda else None
            out = proc.process(_prompt(proc, 1), self.items([(data, fmt)]))
            del out  # the response's tensors go; the cached entry stays
            self.sync()
            after = self._torch.cuda.memory_allocated() if self.cuda else None
            rows.append(
                {
                    "family": family,
                    "image": name,
                    "cache_bytes_per_image": proc.cache_stats().current_bytes,
                    "device_allocated_bytes_per_image": None if before is None else after - before,
                }
            )
        return rows

    # --- target 4: where a hit's tensors are -----------------------------------------------------------

    def residency(self, name: str) -> list[dict[str, Any]]:
        rows = []
        data, fmt = self.image_bytes(name)
        for family in FAMILIES:
            proc = self.processor(family, self.device, cache_bytes=256 << 20)
            prompt, its = _prompt(proc, 1), self.items([(data, fmt)])
            miss = proc.process(prompt, its)
            hit = proc.process(prompt, its)
            pv = hit.pixel_values
            rows.append(
                {
                    "family": family,
                    "image": name,
                    "miss_hits": miss.cache_hits,
                    "hit_hits": hit.cache_hits,
                    "hit_hashes_equal": hit.hashes == miss.hashes,
                    "hit_pixel_values_on": str(pv.device) if hasattr(pv, "device") else "host (numpy)",
                    "hit_pixel_values_bytes": int(pv.numel() * pv.element_size())
                    if hasattr(pv, "numel")
                    else int(pv.nbytes),
                    # What the Triton adapter does with a device tensor for each response.
                    "to_host_ms": _median_ms(lambda p=pv: _np(p), self.repeat, self.sync),
                }
            )
        return rows


def run(models_dir: Path, device: str, repeat: int) -> dict[str, Any]:
    from tests.support.mm_images import PARITY_IMAGES

    c = Check(models_dir, device, repeat)
    parity = list(PARITY_IMAGES) + ["jpeg_640x480"]
    out: dict[str, Any] = {"version": 2, "device": device}
    out["oracle"] = c.oracle(parity)
    out["cpu_path"] = c.cpu_path(parity)
    out["device_vs_cpu"] = c.device_vs_cpu(list(PARITY_IMAGES))
    out["decode"] = c.decode([n for n in TIMING_IMAGES])
    decode = out["decode"]["available"]
    out["timings"] = c.timings(TIMING_IMAGES, decode)
    out["stages"] = c.stages(TIMING_IMAGES[-1], decode)
    out["memory"] = c.memory(TIMING_IMAGES[-1])
    out["residency"] = c.residency(TIMING_IMAGES[-1])
    out["held"] = held = {
        # A CUDA run must have its oracle; a rehearsal without torchvision records why it has none.
        "oracle": all(r["within_atol"] and r["grid_equal"] for r in out["oracle"]["rows"])
        and (out["oracle"]["available"] or not c.cuda),
        "cpu_path_bit_exact": out["cpu_path"]["bit_exact"],
        "ids_grids_hashes_equal": out["device_vs_cpu"]["ids_grids_hashes_equal"],
        # Upright, and decoded where asked: a JPEG that fell back to Pillow measured nothing of nvJPEG.
        "decode_upright": all(r["upright"] and r["device_error"] is None for r in out["decode"]["rows"])
        and (decode or not c.cuda),
        "hits": all(r["miss_hits"] == 0 and r["hit_hits"] == 1 and r["hit_hashes_equal"] for r in out["residency"]),
    }
    out["passed"] = all(held.values())
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


def _versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {}
    for name in ("torch", "torchvision", "transformers", "pillow", "numba"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


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
        **_versions(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "elapsed_s": round(time.time() - started, 1),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["timings"]:
        dec = f"  +decode {row['device_decode_miss_ms']:8.2f} ms" if "device_decode_miss_ms" in row else ""
        print(
            f"{row['family']:9} {row['image']:15} miss cpu {row['cpu_miss_ms']:8.2f} ms  device {row['device_miss_ms']:8.2f} ms"
            f"{dec}  hit cpu {row['cpu_hit_ms']:6.2f} ms  device {row['device_hit_ms']:6.2f} ms"
        )
    o = result["oracle"]
    worst = max((r["max_abs_diff"] or 0.0 for r in o["rows"]), default=None)
    print(
        f"gpu-check: {'passed' if result['passed'] else 'FAILED'} {result['held']}; oracle "
        f"{'max |diff| %.3g' % worst if o['available'] else 'unavailable: ' + str(o['reason'])}; wrote {a.out}"
    )
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
