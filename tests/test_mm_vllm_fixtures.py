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
import json
from pathlib import Path

import numpy as np
import pytest

from model_builders import vlm_model
from renderer.chat.messages import MultiModalItem
from renderer.multimodal import MultiModalProcessor
from renderer.multimodal.families import OPENAI_CLIP_STD

ROOT = Path(__file__).resolve().parent.parent
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


@pytest.fixture(scope="session", autouse=True)
def offline_tokenizers() -> None:
    from model_builders.reference_tokenizers import build

    build(ROOT / "build" / "models" / "tokenizers")


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("vlm-fixtures")
    return {fam: vlm_model.build(base / fam, family=fam) for fam in ("qwen2_vl", "pixtral")}


def ours(case: dict, model_dir: Path, image_processor: str = "fast"):
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
    proc = MultiModalProcessor.from_model_dir(model_dir, cache_bytes=0, image_processor=image_processor)
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


# --- live: the same images through render_chat on the default settings ---------------------------


@pytest.fixture(scope="module")
def qwen_server(server, model_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory):
    """A ``render_chat`` server for the tiny Qwen2-VL with the default image processor (fast),
    trusting per-request ``mm_processor_kwargs`` (one case sets ``max_pixels``)."""
    from chat_servers import start_chat_server

    from launcher import cli as launch

    s = start_chat_server(
        server,
        "qwen2_vl",
        model_dirs["qwen2_vl"],
        tmp_path_factory.mktemp("fixture-qwen"),
        trust_request_mm_kwargs=True,
    )
    assert s.image_processor == "fast"
    yield s
    launch.stop(s)


@pytest.mark.live
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_images_match_vllms_processor(qwen_server, protocol: str) -> None:
    """Each Qwen2-VL case's image in a chat through ``render_chat`` (chat_render, tokenize,
    mm_process as deployed): the served grid and placeholder run are exact and the pixels within
    the tolerance above, as in process."""
    from client import RendererClient

    port = qwen_server.grpc_port if protocol == "grpc" else qwen_server.http_port
    client = RendererClient(f"127.0.0.1:{port}", protocol=protocol)
    try:
        for case in (c for c in CASES.values() if c["family"] == "qwen2_vl"):
            data = ARRAYS["bytes/" + case["image"]].tobytes()
            url = "data:image/png;base64," + base64.b64encode(data).decode()
            messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
            kwargs = case["mm_processor_kwargs"]
            out = client.render_chat(messages, chat_params={"mm_processor_kwargs": kwargs} if kwargs else None)
            assert out.outputs["image_grid_thw"].tolist() == [case["grid"]], case["key"]
            assert out.input_ids.count(PLACEHOLDER["qwen2_vl"]) == case["placeholder_tokens"], case["key"]
            diff = np.abs(out.outputs["pixel_values"].astype(np.float64) - reference_pixels(case))
            assert diff.max() <= PIXEL_ATOL + 1e-6, (case["key"], diff.max())
            assert (diff > 1e-6).mean() <= MAX_FRACTION_OFF, case["key"]
    finally:
        client.close()
