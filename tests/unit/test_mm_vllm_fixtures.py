"""Our image processing against what vLLM runs, recorded by ``tests/fixtures/vllm/make_images.py``.

The fixture holds real photographs (scikit-image's public-domain / CC0 data: JPEG, PNG, an alpha
ramp, grayscale, a 7:1 strip, a big downscale, a tiny upscale) as encoded bytes, and for each case
what transformers' torchvision-based ("fast") processor, the one vLLM 0.32 gets from
``AutoProcessor`` wherever torchvision is installed, made of the RGB image vLLM's own loader
decoded: ``pixel_values``, the grid (Qwen2-VL) or size (Pixtral), and the expanded ids of a
one-image prompt.

Exact: grids, sizes, placeholder counts and expanded ids. Tolerance on ``pixel_values``:
``PIXEL_ATOL`` below. Our fast path calls the same torch interpolate kernel torchvision calls and
tabulates the fused normalize with torch's own operators, so on the recording host (torch 2.14.1,
AVX-512) and here (torch 2.13.0) it is bit-identical (max abs diff 0.0, asserted by
``test_fast_path_is_bit_identical_here``); torch's uint8 antialiased kernels differ between CPU
builds (AVX2 vs AVX-512 vs ARM), so the per-element bound is one grey level after normalization
(1/255/std: 0.0150 for the CLIP std), with at most 1% of the elements off at all.
The alpha case follows vLLM's loader (RGBA pasted onto white with the alpha as mask).
"""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pytest

from renderer.chat.messages import MultiModalItem
from renderer.multimodal import MultiModalProcessor
from vllm_images import ARRAYS, CASES, MAX_FRACTION_OFF, META, PIXEL_ATOL, PLACEHOLDER, reference_pixels


ROOT = Path(__file__).resolve().parents[2]


def ours(case: dict, model_dir: Path, image_processor: str = "fast", mm_device_do_normalize: bool = False):
    """Our processor on the case's encoded image, with the prompt the fixture's ids collapse to."""
    fam = case["family"]
    ph = PLACEHOLDER[fam]
    ids = case["expanded_ids"]
    first = ids.index(ph)
    # The run the processor inserted: Qwen2-VL's <|image_pad|> run; Pixtral's [IMG]...[IMG_END].
    end = first + (case["placeholder_tokens"] if fam == "qwen2_vl" else _pixtral_run_length(ids, first))
    prompt = ids[:first] + [ph] + ids[end:]
    data = ARRAYS["bytes/" + case["image"]].tobytes()
    url = "data:image/png;base64," + base64.b64encode(data).decode()
    proc = MultiModalProcessor.from_model_dir(
        model_dir, cache_bytes=0, image_processor=image_processor, mm_device_do_normalize=mm_device_do_normalize
    )
    return proc.process(prompt, [MultiModalItem("image", "image_url", url, None, 0, 0)], case["mm_processor_kwargs"])


def _pixtral_run_length(ids: list[int], first: int) -> int:
    end_id = 13  # [IMG_END] closes the run
    return ids.index(end_id, first) - first + 1


@pytest.mark.parametrize("key", list(CASES))
def test_matches_vllms_processor(key: str, model_dirs: dict[str, Path]) -> None:
    case = CASES[key]
    out = ours(case, model_dirs[case["family"]])
    assert out.input_ids == case["expanded_ids"]
    (rng,) = out.placeholders
    if case["family"] == "qwen2_vl":
        assert out.image_grid_thw.tolist() == [case["grid"]]
        assert rng.length == case["placeholder_tokens"]
    else:
        assert out.image_sizes.tolist() == [case["grid"]]
        assert (
            out.input_ids[rng.offset : rng.offset + rng.length].count(PLACEHOLDER["pixtral"])
            == case["placeholder_tokens"]
        )
    ref = reference_pixels(case)
    got = np.asarray(out.pixel_values)
    got = got[0] if case["family"] == "pixtral" else got
    assert got.shape == ref.shape
    diff = np.abs(got.astype(np.float64) - ref)
    assert diff.max() <= PIXEL_ATOL + 1e-6, (key, diff.max())
    assert (diff > 1e-6).mean() <= MAX_FRACTION_OFF, (key, (diff > 1e-6).mean())


def test_fast_path_is_bit_identical_here(model_dirs: dict[str, Path]) -> None:
    """On a host with the recording host's CPU capability the fast path is exact, not just close."""
    import torch

    if torch.backends.cpu.get_cpu_capability() != META["recorded_with"]["cpu_capability"]:
        pytest.skip(
            f"runs where torch's CPU capability is {META['recorded_with']['cpu_capability']} (the recording "
            f"host's); this host has {torch.backends.cpu.get_cpu_capability()}, where the tolerance test applies"
        )
    for case in CASES.values():
        out = ours(case, model_dirs[case["family"]])
        got = np.asarray(out.pixel_values)
        got = got[0] if case["family"] == "pixtral" else got
        assert np.array_equal(got, reference_pixels(case)), case["key"]


@pytest.mark.parametrize("key", [k for k in CASES if "{}" in k])
def test_slow_processor_differs_by_resampling_only(key: str, model_dirs: dict[str, Path]) -> None:
    """IMAGE_PROCESSOR=slow (the PIL processors) gives the same grids and ids, pixels within the
    bound the recording measured between transformers' two backends."""
    case = CASES[key]
    out = ours(case, model_dirs[case["family"]], "slow")
    assert out.input_ids == case["expanded_ids"]
    got = np.asarray(out.pixel_values)
    got = got[0] if case["family"] == "pixtral" else got
    diff = np.abs(got.astype(np.float64) - reference_pixels(case))
    assert diff.max() <= case["fast_vs_slow"]["max_abs"] + PIXEL_ATOL + 1e-6


@pytest.mark.parametrize("key", [k for k in CASES if CASES[k]["family"] == "qwen2_vl"])
def test_device_normalize_sends_the_bytes_vllm_normalized(key: str, model_dirs: dict[str, Path]) -> None:
    """MM_DEVICE_DO_NORMALIZE (vLLM's ``mm_device_do_normalize``): Qwen2-VL's ``pixel_values`` are
    the resized uint8 pixels, in the same layout, which the model's own normalization (the table
    of its preprocessor config, strictly increasing per channel, so the bytes are the only ones
    that give it) turns into exactly the float32 of the setting off, and so into vLLM's recording
    within the fixture's tolerance. Same ids and grid; another identity, so no cache entry of one
    form is served for the other."""
    from renderer.multimodal.registry import load_family

    case = CASES[key]
    d = model_dirs["qwen2_vl"]
    raw = ours(case, d, mm_device_do_normalize=True)
    normalized = ours(case, d)
    assert raw.pixel_values.dtype == np.uint8 and normalized.pixel_values.dtype == np.float32
    assert raw.input_ids == normalized.input_ids == case["expanded_ids"]
    assert raw.image_grid_thw.tolist() == [case["grid"]]
    assert raw.hashes != normalized.hashes
    family = load_family(d, mm_device_do_normalize=True)
    assert family.raw_pixels and (np.diff(family.normalized_lut, axis=1) > 0).all()
    back = family.normalize_raw(raw.pixel_values)
    assert back.dtype == np.float32 and np.array_equal(back, normalized.pixel_values)
    diff = np.abs(back.astype(np.float64) - reference_pixels(case))
    assert diff.max() <= PIXEL_ATOL + 1e-6, (key, diff.max())


@pytest.mark.parametrize("key", [k for k in CASES if CASES[k]["family"] == "pixtral"][:2])
def test_device_normalize_leaves_pixtral_float(key: str, model_dirs: dict[str, Path], caplog) -> None:
    """vLLM's Llava (Pixtral's) cannot normalize on the device, and vLLM turns the setting off for
    it, saying so: float32 as without the setting, with the same identity."""
    case = CASES[key]
    d = model_dirs["pixtral"]
    with caplog.at_level("WARNING", logger="renderer.multimodal.registry"):
        on = ours(case, d, mm_device_do_normalize=True)
    assert "MM_DEVICE_DO_NORMALIZE: pixtral models normalize no images on the device" in caplog.text
    off = ours(case, d)
    assert on.pixel_values.dtype == np.float32
    assert np.array_equal(on.pixel_values, off.pixel_values) and on.hashes == off.hashes


_VLLM_NORMALIZES = r"""
import json, sys
from vllm.model_executor.models.registry import ModelRegistry
out = {}
for family, arch in json.loads(sys.argv[1]).items():
    info = ModelRegistry._try_inspect_model_cls(arch)
    out[family] = None if info is None else bool(info.supports_mm_device_do_normalize)
print(json.dumps(out))
"""


def test_device_normalized_families_are_vllms(model_dirs: dict[str, Path]) -> None:
    """``DEVICE_NORMALIZED_FAMILIES`` is what vLLM's own model class says of each family's model
    (``supports_mm_device_do_normalize``, read in vLLM's environment from the architecture the model
    folder names): a family vLLM learns to normalize on the device, or stops, fails here."""
    import json
    import subprocess

    from model_builders.vllm_env import VENV
    from renderer.multimodal.registry import SUPPORTED
    from renderer.multimodal.tensors import DEVICE_NORMALIZED_FAMILIES

    python = VENV / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{python} is absent (make engine-vllm builds it): vLLM's model classes live nowhere else here")
    archs = {f: json.loads((model_dirs[f] / "config.json").read_text())["architectures"][0] for f in SUPPORTED}
    run = subprocess.run(
        [str(python), "-c", _VLLM_NORMALIZES, json.dumps(archs)],
        capture_output=True,
        text=True,
        env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "VLLM_TARGET_DEVICE": "cpu"},
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    said = json.loads(run.stdout.strip().splitlines()[-1])
    assert said == {f: f in DEVICE_NORMALIZED_FAMILIES for f in SUPPORTED}, (archs, said)
