"""Unit tests of renderer.multimodal (no server): parity with the HF image processors and
mistral-common, placeholder expansion, identity, media limits, the processor cache, and the
tiny vision-language model built at set-up.

Tolerance: with ``image_processor="slow"`` the processed tensors must be bit-identical to
transformers' ``Qwen2VLImageProcessorPil`` / ``PixtralImageProcessorPil`` (max abs diff 0.0); the
``qwen`` / ``pixtral`` fixtures run slow for that reason. The default ("fast", the torchvision-based
processors vLLM runs) is held against vLLM-side recordings in tests/unit/test_mm_vllm_fixtures.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from model_builders import vlm_model
from renderer.chat.messages import MultiModalItem
from renderer.errors import (
    ImageAspectRatioError,
    ImageDecodeError,
    ImageFormatError,
    ImageTooLargeError,
    MediaLoadError,
    MediaTooLargeError,
    MediaURLError,
    MultiModalCacheMissError,
    MultiModalLimitError,
    MultiModalPlaceholderCountError,
    MultiModalProcessorKwargsError,
    MultiModalUUIDError,
    RenderError,
    UnsupportedMultiModalError,
)
from renderer.multimodal import (
    MediaLimits,
    MultiModalProcessor,
    ProcessorCache,
    detect_family,
    items_from_mm_data,
    kernels,
    load_image,
    validate_mm_uuids,
)
from tests.support.mm_images import (
    DEVICE_PARITY_ATOL,
    IMAGES,
    PARITY_IMAGES,
    data_url,
    encode,
    png,
    png_bomb_header,
    rgb,
)

ROOT = Path(__file__).resolve().parents[2]
QWEN_TOK = ROOT / "build" / "models" / "tokenizers" / "qwen3"
TEKKEN_TOK = ROOT / "build" / "models" / "tokenizers" / "mistral-tekken-240911"

IMG_PAD, V_START, V_END = 151655, 151652, 151653
IMG, IMG_BREAK, IMG_END = 10, 12, 13


@pytest.fixture(scope="session", autouse=True)
def offline_tokenizers():
    """The real Qwen3 and tekken tokenizers, built offline from registry packages (cached)."""
    from model_builders.reference_tokenizers import build

    build(ROOT / "build" / "models" / "tokenizers")


# --- fixtures ------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def qwen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vlm_model.build(tmp_path_factory.mktemp("vlm") / "qwen2_vl", family="qwen2_vl")


@pytest.fixture(scope="session")
def pixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return vlm_model.build(tmp_path_factory.mktemp("vlm") / "pixtral", family="pixtral")


@pytest.fixture
def qwen(qwen_dir: Path) -> MultiModalProcessor:
    return MultiModalProcessor.from_model_dir(qwen_dir, cache_bytes=64 << 20, image_processor="slow")


@pytest.fixture
def pixtral(pixtral_dir: Path) -> MultiModalProcessor:
    return MultiModalProcessor.from_model_dir(pixtral_dir, cache_bytes=64 << 20, image_processor="slow")


def item(data: object, uuid: str | None = None, i: int = 0) -> MultiModalItem:
    return MultiModalItem("image", "image_url", data, uuid, 0, i)


def qwen_prompt(n: int) -> list[int]:
    ids = [151644, 872, 198]
    for _ in range(n):
        ids += [V_START, IMG_PAD, V_END, 198]
    return ids + [151645]


def pixtral_prompt(n: int) -> list[int]:
    return [1, 3] + [IMG] * n + [1091, 4]


def decoded(name: str) -> tuple[bytes, Image.Image]:
    data = png(name)
    return data, Image.open(io.BytesIO(data))


# --- parity with the HF image processors ---------------------------------------------------------


@pytest.mark.parametrize("name", list(IMAGES))
def test_qwen2vl_matches_hf_exactly(qwen: MultiModalProcessor, name: str) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    png, pil = decoded(name)
    fam = qwen.family
    hf = Qwen2VLImageProcessorPil(min_pixels=fam.min_pixels, max_pixels=fam.max_pixels)
    ref = hf(images=[pil], return_tensors="np")
    out = qwen.process(qwen_prompt(1), [item(data_url(png))])
    assert out.pixel_values.dtype == np.float32
    assert out.pixel_values.shape == ref["pixel_values"].shape
    assert np.array_equal(out.image_grid_thw, ref["image_grid_thw"])
    assert float(np.abs(out.pixel_values - ref["pixel_values"]).max()) == 0.0


@pytest.mark.parametrize("name", ["rgb_640x480", "big_4000x3000", "wide_2000x20"])
def test_qwen2vl_kwargs_match_hf(qwen: MultiModalProcessor, name: str) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    png, pil = decoded(name)
    kw = {"min_pixels": 28 * 28 * 8, "max_pixels": 28 * 28 * 600}
    ref = Qwen2VLImageProcessorPil(**kw)(images=[pil], return_tensors="np")
    out = qwen.process(qwen_prompt(1), [item(data_url(png))], mm_processor_kwargs=kw)
    assert np.array_equal(out.image_grid_thw, ref["image_grid_thw"])
    assert np.array_equal(out.pixel_values, ref["pixel_values"])


@pytest.mark.parametrize("name", list(IMAGES))
def test_pixtral_matches_hf_exactly(pixtral: MultiModalProcessor, name: str) -> None:
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    png, pil = decoded(name)
    ref = PixtralImageProcessorPil()(images=[pil], return_tensors="np")
    out = pixtral.process(pixtral_prompt(1), [item(data_url(png))])
    assert np.array_equal(out.image_sizes, ref["image_sizes"])
    assert out.pixel_values.shape == ref["pixel_values"].shape
    assert float(np.abs(out.pixel_values - ref["pixel_values"]).max()) == 0.0


def test_pixtral_batch_padding_matches_hf(pixtral: MultiModalProcessor) -> None:
    from transformers.models.pixtral.image_processing_pil_pixtral import PixtralImageProcessorPil

    names = ["rgb_640x480", "tall_20x2000", "tiny_3x5", "rgba_300x200"]
    pngs = [png(n) for n in names]
    ref = PixtralImageProcessorPil()(images=[Image.open(io.BytesIO(p)) for p in pngs], return_tensors="np")
    out = pixtral.process(pixtral_prompt(len(names)), [item(data_url(p), i=i) for i, p in enumerate(pngs)])
    assert np.array_equal(out.image_sizes, ref["image_sizes"])
    assert np.array_equal(out.pixel_values, ref["pixel_values"])


def test_qwen2vl_multi_image_concatenation_matches_hf(qwen: MultiModalProcessor) -> None:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    names = ["rgb_640x480", "gray_L_257x129", "palette_P_transparent_96x64"]
    pngs = [png(n) for n in names]
    fam = qwen.family
    ref = Qwen2VLImageProcessorPil(min_pixels=fam.min_pixels, max_pixels=fam.max_pixels)(
        images=[Image.open(io.BytesIO(p)) for p in pngs], return_tensors="np"
    )
    out = qwen.process(qwen_prompt(3), [item(data_url(p), i=i) for i, p in enumerate(pngs)])
    assert np.array_equal(out.image_grid_thw, ref["image_grid_thw"])
    assert np.array_equal(out.pixel_values, ref["pixel_values"])


def test_kernel_fallbacks_are_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    img = np.asarray(rgb(56 * 3, 28 * 4, seed=42))
    lut = kernels.build_lut(True, 1 / 255, True, (0.48, 0.45, 0.40), (0.26, 0.26, 0.27))
    a = kernels.patchify_qwen(img, lut, 14, 2, 2)
    b = kernels.normalize_chw(img, lut)
    assert kernels.NUMBA_AVAILABLE
    assert np.array_equal(kernels.patchify_qwen_torch(img, lut, 14, 2, 2, "cpu").numpy(), a)
    assert np.array_equal(kernels.normalize_chw_torch(img, lut, "cpu").numpy(), b)
    monkeypatch.setattr(kernels, "NUMBA_AVAILABLE", False)
    assert np.array_equal(kernels.patchify_qwen(img, lut, 14, 2, 2), a)
    assert np.array_equal(kernels.normalize_chw(img, lut), b)


@pytest.mark.parametrize("image_processor", ["fast", "slow"])
@pytest.mark.parametrize("family", ["qwen2_vl", "pixtral"])
def test_torch_path_on_cpu_matches_numba(family: str, image_processor: str, qwen_dir: Path, pixtral_dir: Path) -> None:
    """The torch kernels mm_process runs on a GPU host, run on this host's CPU against the numba
    path: each image alone, then all in one request (concatenation / padding on the torch side)."""
    import torch

    d, prompt = (qwen_dir, qwen_prompt) if family == "qwen2_vl" else (pixtral_dir, pixtral_prompt)
    numba = MultiModalProcessor.from_model_dir(d, cache_bytes=0, image_processor=image_processor)
    # "cpu" is the numba path; any other device the torch code, so "cpu:0" is the GPU code path on the CPU.
    on_torch = MultiModalProcessor.from_model_dir(d, cache_bytes=0, image_processor=image_processor, device="cpu:0")
    cases = [[name] for name in PARITY_IMAGES] + [PARITY_IMAGES]
    for names in cases:
        items = [item(data_url(png(n)), i=i) for i, n in enumerate(names)]
        a = numba.process(prompt(len(names)), items)
        b = on_torch.process(prompt(len(names)), items)
        assert isinstance(b.pixel_values, torch.Tensor) and b.pixel_values.device.type == "cpu", names
        assert isinstance(a.pixel_values, np.ndarray), names
        np.testing.assert_allclose(
            b.pixel_values.numpy(), a.pixel_values, rtol=0, atol=DEVICE_PARITY_ATOL, err_msg=str(names)
        )
        assert b.input_ids == a.input_ids and b.hashes == a.hashes, names
        for k, v in a.tensors().items():
            if k != "pixel_values":
                assert np.array_equal(np.asarray(b.tensors()[k]), v), (names, k)


def _cuda_skip_reason() -> str:
    import torch

    return (
        f"torch {torch.__version__} sees no CUDA device: runs on a host with a CUDA GPU and a CUDA build of "
        "torch (torch.cuda.is_available()); the same torch kernels run on the CPU in "
        "test_torch_path_on_cpu_matches_numba"
    )


def test_fast_lut_is_the_fused_torch_normalize() -> None:
    """build_lut_fast gives, per byte, what the torchvision-backed processors compute: mean and
    std folded with the rescale factor, then (x - mean') / std' in float32 (torch's operators)."""
    import torch

    mean, std = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)
    img = torch.from_numpy(np.asarray(rgb(37, 23, seed=3))).permute(2, 0, 1).contiguous()
    m, s = torch.tensor(mean) * (1.0 / (1 / 255)), torch.tensor(std) * (1.0 / (1 / 255))
    expected = (img.to(torch.float32) - m.view(3, 1, 1)) / s.view(3, 1, 1)
    lut = kernels.build_lut_fast(True, 1 / 255, True, mean, std)
    got = kernels.normalize_chw(img.permute(1, 2, 0).contiguous().numpy(), lut)
    assert np.array_equal(got, expected.numpy())
    slow = kernels.build_lut(True, 1 / 255, True, mean, std)
    assert not np.array_equal(lut, slow) and np.abs(lut - slow).max() < 1e-6  # fused: float32 ulps apart
    assert np.array_equal(
        kernels.build_lut_fast(True, 0.5, False, mean, std)[0], np.arange(256, dtype=np.float32) * 0.5
    )


def test_fast_is_the_default_and_hashes_name_the_processor(qwen_dir: Path) -> None:
    """The cache key (content hash) includes the processor, so a slow result never answers a fast
    request; grids and ids agree, pixels differ only by the resampler."""
    items = [item(data_url(png("odd_333x77")))]
    fast = MultiModalProcessor.from_model_dir(qwen_dir)
    assert fast.family.image_processor == "fast"
    slow = MultiModalProcessor.from_model_dir(qwen_dir, image_processor="slow")
    a, b = fast.process(qwen_prompt(1), items), slow.process(qwen_prompt(1), items)
    assert a.hashes != b.hashes
    assert a.input_ids == b.input_ids and np.array_equal(a.image_grid_thw, b.image_grid_thw)
    assert 0 < np.abs(a.pixel_values - b.pixel_values).max() < 0.2


def test_image_processor_setting_is_checked(qwen_dir: Path, tmp_path: Path) -> None:
    from renderer.errors import UnsupportedImageProcessorError

    with pytest.raises(UnsupportedImageProcessorError, match=r"IMAGE_PROCESSOR must be one of fast, slow, got 'pil'"):
        MultiModalProcessor.from_model_dir(qwen_dir, image_processor="pil")
    box = tmp_path / "box"
    shutil.copytree(qwen_dir, box)
    pp = json.loads((box / "preprocessor_config.json").read_text())
    (box / "preprocessor_config.json").write_text(json.dumps({**pp, "resample": 4}))
    with pytest.raises(UnsupportedImageProcessorError, match=r"resample=4 .* set IMAGE_PROCESSOR=slow"):
        MultiModalProcessor.from_model_dir(box)
    assert MultiModalProcessor.from_model_dir(box, image_processor="slow").family.resample == 4


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason=_cuda_skip_reason())
def test_cuda_path_matches_cpu(qwen_dir: Path, pixtral_dir: Path) -> None:
    """On the device the fast processor resizes there, as vLLM's does with device="cuda":
    torchvision's GPU rule is a float32 interpolate rounded to uint8 where the CPU's is uint8
    fixed-point, so pixels may differ by a grey level (1/255/std, 0.0152 for the CLIP std; two
    allowed); ids, grids and hashes are equal. The device's own oracle, transformers run on the
    same device, is ``make gpu-check``'s (benchmarks/gpu_check.py)."""
    for d, prompt in ((qwen_dir, qwen_prompt(2)), (pixtral_dir, pixtral_prompt(2))):
        items = [item(data_url(png("rgb_640x480"))), item(data_url(png("odd_333x77")), i=1)]
        cpu = MultiModalProcessor.from_model_dir(d).process(prompt, items)
        gpu = MultiModalProcessor.from_model_dir(d, device="cuda").process(prompt, items)
        assert gpu.pixel_values.is_cuda
        assert np.abs(gpu.pixel_values.cpu().numpy() - cpu.pixel_values).max() <= 2 * 0.0152
        assert gpu.input_ids == cpu.input_ids and gpu.hashes == cpu.hashes


# --- placeholders --------------------------------------------------------------------------------


def _mistral_common_tokens(pil: Image.Image) -> list[int]:
    """mistral-common's own ImageEncoder (the real Tekken tokenizer's) on this image."""
    import mistral_common
    from mistral_common.protocol.instruct.chunk import ImageChunk
    from mistral_common.tokens.tokenizers import image as mc_image
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    path = Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    enc = MistralTokenizer.from_file(str(path)).instruct_tokenizer.image_encoder
    orig = mc_image.transform_image
    mc_image.transform_image = lambda image, size: np.zeros((3, size[1], size[0]), np.float32)  # needs opencv
    try:
        return list(enc(ImageChunk(image=pil)).tokens)
    finally:
        mc_image.transform_image = orig


@pytest.mark.parametrize(
    "name",
    [
        "rgb_640x480",
        "rgba_300x200",
        "one_pixel_1x1",
        "wide_2000x20",
        "tall_20x2000",
        "big_4000x3000",
        "odd_333x77",
        "odd_1025x1023",
    ],
)
def test_pixtral_layout_equals_mistral_common(pixtral: MultiModalProcessor, name: str) -> None:
    png, pil = decoded(name)
    expected = _mistral_common_tokens(pil)
    out = pixtral.process(pixtral_prompt(1), [item(data_url(png))])
    (ph,) = out.placeholders
    run = out.input_ids[ph.offset : ph.offset + ph.length]
    assert run == expected
    assert out.input_ids[:2] == [1, 3] and out.input_ids[ph.offset + ph.length :] == [1091, 4]
    rows, cols = (out.image_sizes[0] // 16).tolist()
    assert ph.length == rows * (cols + 1)


def test_qwen2vl_placeholders(qwen: MultiModalProcessor) -> None:
    names = ["rgb_640x480", "one_pixel_1x1", "wide_2000x20"]
    items = [item(data_url(IMAGES[n]()), i=i) for i, n in enumerate(names)]
    prompt = qwen_prompt(3)
    out = qwen.process(prompt, items)
    counts = [int(np.prod(g)) // 4 for g in out.image_grid_thw]
    assert [p.length for p in out.placeholders] == counts
    assert len(out.input_ids) == len(prompt) + sum(counts) - 3
    for p in out.placeholders:
        assert out.input_ids[p.offset - 1] == V_START
        assert out.input_ids[p.offset : p.offset + p.length] == [IMG_PAD] * p.length
        assert out.input_ids[p.offset + p.length] == V_END
    assert sum(out.image_grid_thw.prod(axis=1)) == out.pixel_values.shape[0]
    assert out.mm_placeholders_array().dtype == np.int32
    assert out.mm_placeholders_array().tolist() == [[p.offset, p.length] for p in out.placeholders]
    assert int(qwen.mm_token_type_ids(out.input_ids).sum()) == sum(counts)


def test_placeholder_strings_and_families(
    qwen: MultiModalProcessor, pixtral: MultiModalProcessor, qwen_dir: Path, pixtral_dir: Path, tmp_path: Path
) -> None:
    assert qwen.placeholder_text == "<|vision_start|><|image_pad|><|vision_end|>"
    assert pixtral.placeholder_text == "[IMG]"
    assert (qwen.placeholder_token_id, pixtral.placeholder_token_id) == (IMG_PAD, IMG)
    assert detect_family(qwen_dir) == "qwen2_vl" and detect_family(pixtral_dir) == "pixtral"
    (tmp_path / "config.json").write_text('{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}')
    assert detect_family(tmp_path) is None
    with pytest.raises(UnsupportedMultiModalError, match="no supported image processor"):
        MultiModalProcessor.from_model_dir(tmp_path)


def test_no_images_gives_empty_tensors(qwen: MultiModalProcessor, pixtral: MultiModalProcessor) -> None:
    out = qwen.process([1, 2, 3], [])
    assert out.input_ids == [1, 2, 3] and out.pixel_values.shape == (0, 1176)
    assert out.image_grid_thw.shape == (0, 3) and out.mm_placeholders_array().shape == (0, 2)
    out = pixtral.process([1, 2], [])
    assert out.pixel_values.shape == (0, 3, 0, 0) and out.image_sizes.shape == (0, 2)


@pytest.mark.parametrize("n_text,n_items", [(0, 1), (2, 1), (1, 2)])
def test_placeholder_count_mismatch(qwen: MultiModalProcessor, n_text: int, n_items: int) -> None:
    items = [item(data_url(png("tiny_3x5")), i=i) for i in range(n_items)]
    with pytest.raises(MultiModalPlaceholderCountError) as e:
        qwen.process(qwen_prompt(n_text), items)
    assert str(e.value).startswith(
        f"Expected there to be {n_items} prompt updates corresponding to {n_items} image items, "
        f"but instead found {n_text} prompt updates! This is likely because you forgot to include input "
        "placeholder tokens (e.g., `<image>`, `<|image_pad|>`) in the prompt."
    )


# --- identity ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "WEBP"])
def test_hash_stable_across_encodings(qwen: MultiModalProcessor, fmt: str) -> None:
    img = IMAGES["odd_333x77"]()
    if fmt == "WEBP" and not _webp_lossless(img):
        pytest.skip("this Pillow writes no lossless WebP (built without libwebp); a Pillow with WebP runs this case")
    urls = [data_url(img, f) for f in ("PNG", fmt)]
    hashes = {qwen.process(qwen_prompt(1), [item(u)]).hashes[0] for u in urls}
    assert len(hashes) == 1
    h = hashes.pop()
    assert len(h) == 64 and int(h, 16) >= 0
    other = rgb(333, 77, seed=99)
    assert qwen.process(qwen_prompt(1), [item(data_url(other))]).hashes[0] != h
    kw = qwen.process(qwen_prompt(1), [item(urls[0])], mm_processor_kwargs={"max_pixels": 28 * 28 * 64})
    assert kw.hashes[0] != h


def _webp_lossless(img: Image.Image) -> bool:
    buf = io.BytesIO()
    try:
        img.save(buf, format="WEBP", lossless=True)
    except Exception:  # noqa: BLE001 (a Pillow without WebP support: not lossless here)
        return False
    return np.array_equal(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")), np.asarray(img))


def test_uuid_overrides_hash_and_resolves_from_cache(qwen: MultiModalProcessor) -> None:
    url = data_url(png("rgb_640x480"))
    first = qwen.process(qwen_prompt(1), [item(url, uuid="img-1")])
    assert first.hashes == ("img-1",) and first.cache_hits == 0
    again = qwen.process(qwen_prompt(1), [item(None, uuid="img-1")])  # only the uuid
    assert again.hashes == ("img-1",) and again.cache_hits == 1
    assert np.array_equal(again.pixel_values, first.pixel_values) and again.input_ids == first.input_ids
    kw = qwen.process(qwen_prompt(1), [item(url, uuid="img-1")], mm_processor_kwargs={"max_pixels": 28 * 28 * 64})
    assert kw.hashes[0] != "img-1" and kw.cache_hits == 0
    with pytest.raises(MultiModalCacheMissError, match=r"multi_modal_uuids\['image'\]\[0\]='never-sent' is not in"):
        qwen.process(qwen_prompt(1), [item(None, uuid="never-sent")])


def test_uuid_error_messages(qwen: MultiModalProcessor) -> None:
    with pytest.raises(MultiModalUUIDError) as e:
        validate_mm_uuids({"image": None}, None)
    assert str(e.value) == "multi_modal_data['image'] is empty but multi_modal_uuids['image'] is missing."
    with pytest.raises(MultiModalUUIDError) as e:
        validate_mm_uuids({"image": ["a", "b"]}, {"image": ["u1"]})
    assert str(e.value) == (
        "If given, multi_modal_uuids['image'] must have same length as multi_modal_data['image'], but got 1 vs 2."
    )
    with pytest.raises(MultiModalUUIDError) as e:
        validate_mm_uuids({"image": ["a", None]}, {"image": ["u1", None]})
    assert str(e.value) == "multi_modal_data['image'][1] is empty but multi_modal_uuids['image'][1] is missing."
    with pytest.raises(MultiModalUUIDError) as e:
        qwen.process(qwen_prompt(2), [item(data_url(png("tiny_3x5"))), item(None, i=1)])
    assert str(e.value) == "multi_modal_data['image'][1] is empty but multi_modal_uuids['image'][1] is missing."
    validate_mm_uuids({"image": None}, {"image": ["u1"]})  # only uuids: fine
    assert [it.uuid for it in items_from_mm_data({"image": None}, {"image": ["u1", "u2"]})] == ["u1", "u2"]


# --- media ---------------------------------------------------------------------------------------


def test_modes_convert_like_hf() -> None:
    from transformers.image_transforms import convert_to_rgb

    for name in ("rgba_300x200", "gray_L_257x129", "palette_P_200x150", "palette_P_transparent_96x64", "la_50x70"):
        png = encode(IMAGES[name]())
        ours = load_image(data_url(png), MediaLimits())
        ref = convert_to_rgb(Image.open(io.BytesIO(png)), return_numpy=True)
        assert ours.rgb.shape == ref.shape and np.array_equal(ours.rgb, ref), name
        assert not ours.rgb.flags.writeable


def test_truncated_png(qwen: MultiModalProcessor) -> None:
    png = encode(IMAGES["rgb_640x480"]())
    with pytest.raises(ImageDecodeError, match="^Failed to load image: image file is truncated"):  # vLLM's words
        qwen.process(qwen_prompt(1), [item(data_url(png[: len(png) // 2]))])


def test_non_image_bytes(qwen: MultiModalProcessor) -> None:
    # vLLM's words for each (tests/fixtures/vllm/chat.json records them from its render app).
    not_an_image = "Failed to load image: cannot identify image file <_io.BytesIO object>"
    with pytest.raises(ImageDecodeError) as e:
        qwen.process(qwen_prompt(1), [item("data:image/png;base64,aGVsbG8gd29ybGQ=")])
    assert str(e.value) == not_an_image
    for bad in ("@@@", "aGVsbG8", "aGVs\nbG8=", "aGVsbG8=="):  # bad digit, padding, whitespace, excess
        with pytest.raises(MediaLoadError) as e:
            load_image("data:image/png;base64," + bad, MediaLimits())
        assert str(e.value) == "Non-base64 digit found", bad
    with pytest.raises(ImageDecodeError) as e:  # the media type is not checked: the bytes are
        load_image("data:text/plain;base64,aGVsbG8=", MediaLimits())
    assert str(e.value) == not_an_image
    assert load_image("data:text/plain;base64," + data_url(encode(rgb(4, 3))).partition(",")[2], MediaLimits())
    for url in ("data:image/png,hello", "data:image/png;base64;x=1,aGVsbG8="):
        with pytest.raises(MediaLoadError) as e:
            load_image(url, MediaLimits())
        assert str(e.value) == "Only base64 data URLs are supported for now."
    with pytest.raises(MediaLoadError) as e:
        load_image("data:image/png;base64", MediaLimits())
    assert str(e.value) == "Invalid data URL 'data:image/png;base64': missing ',' separator."


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_decompression_bomb_header_refused_before_decoding() -> None:
    bomb = png_bomb_header(100_000, 100_000)
    assert len(bomb) < 200
    with pytest.raises(ImageTooLargeError) as e:  # Pillow's own guard fires first, as in vLLM
        load_image(data_url(bomb), MediaLimits())
    assert str(e.value) == (
        "Image size (10000000000 pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack."
    )
    with pytest.raises(ImageTooLargeError) as e:
        load_image(data_url(png_bomb_header(15_000, 11_000)), MediaLimits(max_pixels=100_000_000))
    assert str(e.value) == (
        "Image dimensions 15000x11000 (165000000 pixels) exceed the maximum of 100000000 pixels. "
        "Set MAX_IMAGE_PIXELS to increase this limit."
    )
    with pytest.raises(ImageTooLargeError, match="exceed the maximum of 100 pixels"):
        load_image(data_url(encode(rgb(20, 20))), MediaLimits(max_pixels=100))


def test_limits_default_to_vllms_and_read_the_config() -> None:
    from renderer import media_defaults

    d = MediaLimits()
    assert (d.limit_for("image"), d.max_pixels, d.fetch_timeout_s) == (999, 178_956_970, 5.0)
    assert MediaLimits.from_config({}) == d
    got = MediaLimits.from_config(
        {
            "limit_mm_per_prompt": "3",
            "max_image_bytes": "1000",
            "max_image_pixels": "64",
            "media_fetch_timeout_s": "1.5",
        }
    )
    assert (got.limit_for("image"), got.max_bytes, got.max_pixels, got.fetch_timeout_s) == (3, 1000, 64, 1.5)
    assert media_defaults.DEFAULT_MAX_ITEMS_PER_PROMPT == 999


def test_too_many_items(qwen_dir: Path) -> None:
    p = MultiModalProcessor.from_model_dir(qwen_dir, limits=MediaLimits(max_items={"image": 2}))
    url = data_url(png("tiny_3x5"))
    with pytest.raises(MultiModalLimitError) as e:
        p.process(qwen_prompt(3), [item(url, i=i) for i in range(3)])
    assert str(e.value) == "At most 2 image(s) may be provided in one prompt."
    p.process(qwen_prompt(2), [item(url, i=i) for i in range(2)])


def test_too_many_bytes() -> None:
    png = encode(IMAGES["rgb_640x480"]())
    with pytest.raises(MediaTooLargeError, match="more than the limit of 1000 bytes"):
        load_image(data_url(png), MediaLimits(max_bytes=1000))
    with pytest.raises(MediaTooLargeError):
        load_image(png, MediaLimits(max_bytes=1000))


def test_local_files(tmp_path: Path) -> None:
    media = tmp_path / "media"
    (media / "sub").mkdir(parents=True)
    png = encode(IMAGES["tiny_3x5"]())
    (media / "sub" / "ok.png").write_bytes(png)
    (tmp_path / "secret.png").write_bytes(png)
    os.symlink(tmp_path / "secret.png", media / "link.png")
    limits = MediaLimits(allowed_local_dir=str(media))
    assert load_image(f"file://{media}/sub/ok.png", limits).width == 3
    assert load_image("sub/ok.png", limits).height == 5
    with pytest.raises(MediaURLError, match="outside the allowed media directory"):
        load_image(f"file://{tmp_path}/secret.png", limits)
    with pytest.raises(MediaURLError, match="outside the allowed media directory"):
        load_image(f"file://{media}/sub/../../secret.png", limits)
    with pytest.raises(MediaURLError, match="outside the allowed media directory"):
        load_image("../secret.png", limits)
    with pytest.raises(MediaURLError, match="outside the allowed media directory"):
        load_image(f"file://{media}/link.png", limits)  # symlink escape
    with pytest.raises(MediaURLError, match="no allowed media directory"):
        load_image(f"file://{media}/sub/ok.png", MediaLimits())
    with pytest.raises(MediaLoadError, match="does not exist"):
        load_image(f"file://{media}/missing.png", limits)


def test_http_refused_unless_allow_listed() -> None:
    with pytest.raises(MediaURLError, match="no media hosts are allowed"):
        load_image("https://example.com/cat.png", MediaLimits())
    with pytest.raises(MediaURLError, match="not in the allowed media hosts"):
        load_image("http://evil.example/cat.png", MediaLimits(allowed_hosts=("images.example",)))
    with pytest.raises(MediaURLError, match="Unsupported image URL scheme 'ftp'"):
        load_image("ftp://example.com/cat.png", MediaLimits())


def test_request_kwargs_validation(qwen: MultiModalProcessor, pixtral: MultiModalProcessor) -> None:
    url = data_url(png("tiny_3x5"))
    with pytest.raises(MultiModalProcessorKwargsError, match="Unknown field"):
        qwen.process(qwen_prompt(1), [item(url)], mm_processor_kwargs={"do_resize": False})
    with pytest.raises(MultiModalProcessorKwargsError, match="positive integer"):
        qwen.process(qwen_prompt(1), [item(url)], mm_processor_kwargs={"max_pixels": -5})
    with pytest.raises(MultiModalProcessorKwargsError, match="must not be greater"):
        qwen.process(qwen_prompt(1), [item(url)], mm_processor_kwargs={"min_pixels": 10**6, "max_pixels": 10**5})
    with pytest.raises(MultiModalProcessorKwargsError, match="image_mode"):
        qwen.process(qwen_prompt(1), [item(url)], media_io_kwargs={"image": {"image_mode": "L"}})
    with pytest.raises(MultiModalProcessorKwargsError, match="unsupported modality"):
        qwen.process(qwen_prompt(1), [item(url)], media_io_kwargs={"video": {}})
    qwen.process(qwen_prompt(1), [item(url)], media_io_kwargs={"image": {"image_mode": "RGB"}})
    out = pixtral.process(
        pixtral_prompt(1), [item(data_url(png("rgb_640x480")))], mm_processor_kwargs={"size": {"longest_edge": 256}}
    )
    assert out.image_sizes.tolist() == [[192, 256]]
    with pytest.raises(UnsupportedMultiModalError, match="image_embeds"):
        qwen.process(qwen_prompt(1), [MultiModalItem("image", "image_embeds", "xx", None, 0, 0)])
    with pytest.raises(ImageAspectRatioError, match="absolute aspect ratio must be smaller than 200"):
        qwen.process(qwen_prompt(1), [item(data_url(rgb(1000, 4)))])


def test_every_refusal_is_a_render_error() -> None:
    for cls in (
        ImageDecodeError,
        ImageTooLargeError,
        MediaTooLargeError,
        MediaURLError,
        MultiModalCacheMissError,
        MultiModalPlaceholderCountError,
        MultiModalUUIDError,
        MultiModalProcessorKwargsError,
        UnsupportedMultiModalError,
        ImageAspectRatioError,
        MultiModalLimitError,
    ):
        assert issubclass(cls, RenderError)


# --- cache ---------------------------------------------------------------------------------------


def test_cache_hit_skips_processing(qwen: MultiModalProcessor, monkeypatch: pytest.MonkeyPatch) -> None:
    from renderer.multimodal import processor as proc_mod

    calls, decodes = [], []
    real, real_decode = qwen.family.process, proc_mod.decode_image
    monkeypatch.setattr(qwen.family, "process", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(proc_mod, "decode_image", lambda *a, **k: decodes.append(1) or real_decode(*a, **k))
    url_a, url_b = data_url(png("rgb_640x480")), data_url(png("odd_333x77"))
    first = qwen.process(qwen_prompt(2), [item(url_a), item(url_b, i=1)])
    assert len(calls) == 2 and len(decodes) == 2 and first.cache_hits == 0
    second = qwen.process(qwen_prompt(3), [item(url_b), item(url_a, i=1), item(url_a, i=2)])
    assert len(calls) == 2 and second.cache_hits == 3
    assert len(decodes) == 2  # the same bytes again: no decoding either
    bmp = qwen.process(qwen_prompt(1), [item(data_url(IMAGES["rgb_640x480"](), "BMP"))])
    assert len(decodes) == 3 and len(calls) == 2 and bmp.cache_hits == 1  # new bytes, same pixels
    assert second.hashes == (first.hashes[1], first.hashes[0], first.hashes[0])
    stats = qwen.cache_stats()
    assert stats.misses == 2 and stats.hits == 4 and stats.entries == 2
    assert stats.current_bytes == first.pixel_values.nbytes


def test_data_url_seen_before_hits_without_base64_decoding(
    qwen: MultiModalProcessor, monkeypatch: pytest.MonkeyPatch
) -> None:
    from renderer.multimodal import processor as proc_mod

    reads, decodes = [], []
    real_read, real_decode = proc_mod.read_media_bytes, proc_mod.decode_image
    monkeypatch.setattr(proc_mod, "read_media_bytes", lambda *a, **k: reads.append(1) or real_read(*a, **k))
    monkeypatch.setattr(proc_mod, "decode_image", lambda *a, **k: decodes.append(1) or real_decode(*a, **k))
    url = data_url(png("odd_333x77"))
    first = qwen.process(qwen_prompt(1), [item(url)])
    assert (len(reads), len(decodes), first.cache_hits) == (1, 1, 0)
    again = qwen.process(qwen_prompt(2), [item(url), item(url, i=1)])
    assert (len(reads), len(decodes), again.cache_hits) == (1, 1, 2)  # the text alone finds it
    assert again.hashes == first.hashes * 2 and np.array_equal(
        again.pixel_values[: len(first.pixel_values)], first.pixel_values
    )
    # Other text for the same bytes (another media type): read, not decoded, then known by its text.
    relabelled = "data:image/jpeg;base64," + url.partition(",")[2]
    assert qwen.process(qwen_prompt(1), [item(relabelled)]).hashes == first.hashes
    assert (len(reads), len(decodes)) == (2, 1)
    qwen.process(qwen_prompt(1), [item(relabelled)])
    assert len(reads) == 2
    # Other processor settings are another entry: the text alone is no hit.
    other = qwen.process(qwen_prompt(1), [item(url)], mm_processor_kwargs={"max_pixels": 28 * 28 * 4})
    assert other.hashes != first.hashes and (len(reads), len(decodes)) == (3, 2)
    # Text that was refused once is refused again, with the same words: nothing was recorded for it.
    bad = "data:image/png;base64,@@@@"
    for _ in range(2):
        with pytest.raises(MediaLoadError, match="^Non-base64 digit found$"):
            qwen.process(qwen_prompt(1), [item(bad)])


def test_a_data_url_known_by_text_whose_entry_was_evicted_is_processed_again(qwen_dir: Path) -> None:
    small = MultiModalProcessor.from_model_dir(qwen_dir, cache_bytes=1, image_processor="slow")  # holds nothing
    url = data_url(png("odd_333x77"))
    first, second = (small.process(qwen_prompt(1), [item(url)]) for _ in range(2))
    assert second.cache_hits == 0 and second.hashes == first.hashes
    assert np.array_equal(second.pixel_values, first.pixel_values)


def test_cache_lru_eviction_by_bytes() -> None:
    cache: ProcessorCache[np.ndarray] = ProcessorCache(1000, lambda a: a.nbytes)
    for k in "abc":
        cache.put(k, np.zeros(300, np.uint8))
    assert cache.stats().current_bytes == 900
    assert cache.get("a") is not None  # a is now the most recent: b is the oldest
    cache.put("d", np.zeros(300, np.uint8))
    assert "b" not in cache and all(k in cache for k in "acd")
    cache.put("e", np.zeros(700, np.uint8))  # 1600 bytes: the two oldest (a, c) go
    assert [k for k in "acde" if k in cache] == ["d", "e"] and cache.stats().current_bytes == 1000
    cache.put("huge", np.zeros(5000, np.uint8))  # bigger than the cache: not stored, nothing evicted
    assert "huge" not in cache and "d" in cache and "e" in cache
    assert cache.stats().evictions == 3


def test_cache_thread_safety_under_eviction_pressure() -> None:
    keys = list(range(24)) * 25
    np.random.default_rng(0).shuffle(keys)
    cache: ProcessorCache[np.ndarray] = ProcessorCache(8 * 4000, lambda a: a.nbytes)  # holds ~8 of 24
    calls: dict[int, int] = {}
    lock = threading.Lock()

    def make(k: int) -> np.ndarray:
        with lock:
            calls[k] = calls.get(k, 0) + 1
        return np.full(1000, k, dtype=np.float32)

    def work(k: int) -> tuple[int, np.ndarray, bool]:
        v, hit = cache.get_or_process(k, lambda: make(k))
        return k, v, hit

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(work, keys))
    assert len(results) == len(keys)
    for k, v, _ in results:
        assert v.shape == (1000,) and (v == k).all()
    stats = cache.stats()
    assert stats.hits + stats.misses == len(keys)
    assert stats.misses == sum(calls.values())
    assert stats.current_bytes <= cache.max_bytes and stats.entries <= 8


def test_cache_inflight_dedup_and_errors() -> None:
    cache: ProcessorCache[int] = ProcessorCache(100, lambda v: 1)
    gate = threading.Event()
    calls = []

    def slow() -> int:
        calls.append(1)
        gate.wait(5)
        return 7

    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(cache.get_or_process, "k", slow) for _ in range(4)]
        threading.Timer(0.2, gate.set).start()
        res = [f.result() for f in futs]
    assert len(calls) == 1 and sorted(h for _, h in res) == [False, True, True, True]
    assert all(v == 7 for v, _ in res)

    def boom() -> int:
        raise ValueError("nope")

    with pytest.raises(ValueError):
        cache.get_or_process("bad", boom)
    assert "bad" not in cache
    assert cache.get_or_process("bad", lambda: 3) == (3, False)


def test_processor_concurrent_requests_match_serial(qwen: MultiModalProcessor, qwen_dir: Path) -> None:
    urls = [data_url(IMAGES[n]()) for n in ("rgb_640x480", "odd_333x77", "gray_L_257x129", "tiny_3x5")]
    serial = MultiModalProcessor.from_model_dir(qwen_dir, cache_bytes=0)
    reqs = [[urls[(i + j) % 4] for j in range(1 + i % 3)] for i in range(24)]
    expect = [serial.process(qwen_prompt(len(r)), [item(u, i=j) for j, u in enumerate(r)]) for r in reqs]
    small = MultiModalProcessor.from_model_dir(qwen_dir, cache_bytes=700_000)  # holds 1-2 of 4: evictions
    with ThreadPoolExecutor(6) as ex:
        got = list(ex.map(lambda r: small.process(qwen_prompt(len(r)), [item(u, i=j) for j, u in enumerate(r)]), reqs))
    for e, g in zip(expect, got):
        assert g.input_ids == e.input_ids and g.hashes == e.hashes
        assert np.array_equal(g.pixel_values, e.pixel_values) and np.array_equal(g.image_grid_thw, e.image_grid_thw)
    assert small.cache_stats().evictions > 0


def test_async_twin(qwen: MultiModalProcessor) -> None:
    items = [item(data_url(png("rgb_640x480")))]
    sync = qwen.process(qwen_prompt(1), items)

    async def go() -> list:
        return await asyncio.gather(*(qwen.process_async(qwen_prompt(1), items) for _ in range(4)))

    outs = asyncio.run(go())
    qwen.close()
    assert all(o.input_ids == sync.input_ids and np.array_equal(o.pixel_values, sync.pixel_values) for o in outs)


# --- the tiny vision-language models -------------------------------------------------------------


def _digest(d: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(d.iterdir())}


def test_vlm_model_build_is_deterministic(qwen_dir: Path, tmp_path: Path) -> None:
    again = vlm_model.build(tmp_path / "again")
    assert _digest(again) == _digest(qwen_dir)
    before = (again / "model.safetensors").stat().st_mtime_ns
    vlm_model.build(tmp_path / "again")  # idempotent: kept as is
    assert (again / "model.safetensors").stat().st_mtime_ns == before


def test_qwen2vl_forward_with_our_outputs(qwen_dir: Path, qwen: MultiModalProcessor) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen2VLForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(qwen_dir)
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is this?"}]}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert qwen.placeholder_text in text
    ids = tok(text, add_special_tokens=False)["input_ids"]
    out = qwen.process(ids, [item(data_url(png("rgb_640x480")))])
    model = Qwen2VLForConditionalGeneration.from_pretrained(qwen_dir).eval()
    input_ids = torch.tensor([out.input_ids])
    with torch.no_grad():
        logits = model(
            input_ids=input_ids,
            pixel_values=torch.from_numpy(out.pixel_values),
            image_grid_thw=torch.from_numpy(out.image_grid_thw),
            mm_token_type_ids=torch.from_numpy(qwen.mm_token_type_ids(out.input_ids))[None],
        ).logits
    assert logits.shape == (1, len(out.input_ids), model.config.text_config.vocab_size)
    assert torch.isfinite(logits).all()


def test_pixtral_forward_with_our_outputs(pixtral_dir: Path, pixtral: MultiModalProcessor) -> None:
    import torch
    from transformers import LlavaForConditionalGeneration

    items = [item(data_url(png("odd_333x77"))), item(data_url(png("rgba_300x200")), i=1)]
    out = pixtral.process(pixtral_prompt(2), items)
    model = LlavaForConditionalGeneration.from_pretrained(pixtral_dir).eval()
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor([out.input_ids]),
            pixel_values=torch.from_numpy(out.pixel_values),
            image_sizes=torch.from_numpy(out.image_sizes),
        ).logits
    assert logits.shape[:2] == (1, len(out.input_ids)) and torch.isfinite(logits).all()


def _with_orientation(img: Image.Image, orientation: int, fmt: str) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    img.save(buf, format=fmt, exif=exif.tobytes(), **({"compress_level": 1} if fmt == "PNG" else {"quality": 95}))
    return buf.getvalue()


@pytest.mark.parametrize("orientation", [2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_orientation_is_applied_as_vllm_does(orientation: int, fmt: str) -> None:
    """vLLM opens images upright (``ImageOps.exif_transpose``); a 6 or 8 swaps width and height."""
    from PIL import ImageOps

    data = _with_orientation(rgb(64, 40, seed=orientation), orientation, fmt)
    ours = load_image(data_url(data, fmt), MediaLimits())
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert ours.rgb.shape == upright.shape and np.array_equal(ours.rgb, upright)
    assert ours.rgb.shape[:2] == ((64, 40) if orientation in (5, 6, 7, 8) else (40, 64))


def test_exif_orientation_changes_grid_and_hash(qwen: MultiModalProcessor) -> None:
    """A portrait photo tagged 6 gets the upright grid and placeholder count, and its hash is
    the upright pixels' (the same as the same picture saved upright without a tag)."""
    landscape = rgb(112, 56, seed=3)
    tagged = _with_orientation(landscape, 6, "PNG")
    upright = encode(landscape.transpose(Image.Transpose.ROTATE_270))
    a = qwen.process(qwen_prompt(1), [item(data_url(tagged))])
    b = qwen.process(qwen_prompt(1), [item(data_url(upright))])
    plain = qwen.process(qwen_prompt(1), [item(data_url(encode(landscape)))])
    assert a.hashes == b.hashes and a.input_ids == b.input_ids
    assert a.hashes != plain.hashes and a.image_grid_thw.tolist() != plain.image_grid_thw.tolist()


def test_formats_vllm_does_not_open_are_refused_by_name() -> None:
    eps = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 8 8\n%%EndComments\nshowpage\n"
    with pytest.raises(ImageFormatError) as e:
        load_image(data_url(eps), MediaLimits())
    assert str(e.value) == "Failed to load image: cannot identify image file <_io.BytesIO object>"  # vLLM's
