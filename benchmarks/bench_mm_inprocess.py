"""In-process timings of the multimodal stage against the HF ``*ImageProcessorPil`` classes.

    python -m benchmarks.bench_mm_inprocess [--repeat 5]

For each family and image size: our ``MultiModalProcessor.process`` with the cache off (decode +
resize + kernels + expansion), the same with a warm cache (hash only), and HF's PIL image
processor on an already-decoded image (resize + rescale + normalize + layout). Builds the tiny
model folders under ``build/models`` if missing.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ms(fn, repeat: int) -> float:  # noqa: ANN001
    fn()  # warm-up (numba cache load, Pillow plugin import)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)

    from PIL import Image
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from renderer.chat.messages import MultiModalItem
    from renderer.multimodal import MultiModalProcessor
    from serving import vlm_model
    from tests.mm_images import data_url, encode, rgb

    models = ROOT / "build" / "models"
    dirs = {f: vlm_model.build(models / f"tiny-{f}", family=f) for f in ("qwen2_vl", "pixtral")}
    sizes = [(640, 480), (1280, 720), (4000, 3000)]
    print(f"{'family':9} {'size':>10} {'ours cold ms':>13} {'ours warm ms':>13} {'HF PIL ms':>10}")
    for fam, d in dirs.items():
        cold = MultiModalProcessor.from_model_dir(d, cache_bytes=0)
        warm = MultiModalProcessor.from_model_dir(d)
        if fam == "qwen2_vl":
            f = cold.family
            hf = Qwen2VLImageProcessorPil(min_pixels=f.min_pixels, max_pixels=f.max_pixels)
            prompt = [1, 151652, 151655, 151653, 2]
        else:
            hf = PixtralImageProcessorPil()
            prompt = [1, 10, 2]
        for w, h in sizes:
            png = encode(rgb(w, h, block=8 if w * h > 4_000_000 else 1))
            items = [MultiModalItem("image", "image_url", data_url(png), None, 0, 0)]
            t_cold = _ms(lambda: cold.process(prompt, items), a.repeat)
            warm.process(prompt, items)
            t_warm = _ms(lambda: warm.process(prompt, items), a.repeat)
            pil = Image.open(io.BytesIO(png))
            pil.load()
            t_hf = _ms(lambda: hf(images=[pil], return_tensors="np"), a.repeat)
            print(f"{fam:9} {f'{w}x{h}':>10} {t_cold:13.1f} {t_warm:13.1f} {t_hf:10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
