"""The image fixture recorded from vLLM (``tests/fixtures/vllm/make_images.py``) and its tolerance, read
once for the in-process and the live image tests; see ``tests/unit/test_mm_vllm_fixtures.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from renderer.multimodal.families import OPENAI_CLIP_STD


ROOT = Path(__file__).resolve().parents[2]

FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "images.npz"

PIXEL_ATOL = 1 / 255 / min(OPENAI_CLIP_STD)
"""One grey level after normalization: 0.0150, the largest step of both tiny models' (CLIP) tables."""

MAX_FRACTION_OFF = 0.01

PLACEHOLDER = {"qwen2_vl": 151655, "pixtral": 10}


def _load() -> tuple[dict, dict]:
    data = np.load(FIXTURE)
    meta = json.loads(bytes(data["meta"]).decode())
    return meta, {k: data[k] for k in data.files}


META, ARRAYS = _load()

CASES = {c["key"]: c for c in META["cases"]}


def reference_pixels(case: dict) -> np.ndarray:
    """The recorded ``pixel_values`` in our layout (Qwen2-VL's temporal copies restored)."""
    idx, table = ARRAYS[case["key"] + "/idx"], ARRAYS[case["key"] + "/table"]
    axis = case["channel_axis"]
    flat = np.take_along_axis(table, idx.reshape(len(table), -1).astype(np.int64), 1)
    pv = np.moveaxis(flat.reshape(idx.shape), 0, axis)
    if case["family"] == "qwen2_vl":
        t = case["temporal_patch_size"]
        n, c, dim = pv.shape
        pv = np.broadcast_to(pv[:, :, None, :], (n, c, t, dim)).reshape(n, c * t * dim)
    return pv
