"""In-process speed of mm_process's two image processors (``IMAGE_PROCESSOR=fast|slow``).

Runs ``MultiModalProcessor.process`` (cache off) on the photographs of the vLLM image fixture
(tests/fixtures/vllm/images.npz), per family, and prints the median time per image of each
processor. Usage (after any ``make test`` built the tiny models):

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.image_processor [repeats]
"""

from __future__ import annotations

import base64
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from renderer.chat.messages import MultiModalItem
from renderer.multimodal import MultiModalProcessor

ROOT = Path(__file__).resolve().parent.parent
MODELS = {
    "qwen2_vl": ROOT / "build" / "models" / "tiny-qwen2_vl",
    "pixtral": ROOT / "build" / "models" / "tiny-pixtral",
}
PROMPTS = {"qwen2_vl": [151652, 151655, 151653], "pixtral": [1, 10]}


def main(argv: list[str]) -> int:
    repeats = int(argv[0]) if argv else 20
    data = np.load(ROOT / "tests" / "fixtures" / "vllm" / "images.npz")
    images = {k.split("/", 1)[1]: data[k].tobytes() for k in data.files if k.startswith("bytes/")}
    print(f"{'family':9} {'image':28} {'fast ms':>8} {'slow ms':>8} {'slow/fast':>9}")
    for fam, model in MODELS.items():
        procs = {
            p: MultiModalProcessor.from_model_dir(model, cache_bytes=0, image_processor=p) for p in ("fast", "slow")
        }
        for p in procs.values():
            p.warmup()
        for name, raw in images.items():
            item = [
                MultiModalItem(
                    "image", "image_url", "data:image/png;base64," + base64.b64encode(raw).decode(), None, 0, 0
                )
            ]
            ms = {}
            for label, proc in procs.items():
                proc.process(PROMPTS[fam], item)
                runs = []
                for _ in range(repeats):
                    t = time.perf_counter()
                    proc.process(PROMPTS[fam], item)
                    runs.append((time.perf_counter() - t) * 1e3)
                ms[label] = statistics.median(runs)
            print(f"{fam:9} {name:28} {ms['fast']:8.2f} {ms['slow']:8.2f} {ms['slow'] / ms['fast']:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
