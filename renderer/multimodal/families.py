"""The two image-processor families: Qwen2-VL and Pixtral, as their HF image processors do.

Each family turns one RGB image into its processed tensor and the token run that replaces the
image's single placeholder token in the prompt:

* Qwen2-VL: ``smart_resize`` to multiples of ``patch_size * merge_size`` within
  [min_pixels, max_pixels], then patches of shape (C * temporal * patch * patch) in
  (block_h, block_w, merge_h, merge_w) order; ``image_grid_thw`` = (1, H/patch, W/patch); the
  prompt's ``<|image_pad|>`` becomes ``grid_t * grid_h * grid_w / merge**2`` of them (vLLM's
  placeholder range covers that run only, not ``<|vision_start|>``/``<|vision_end|>``).
* Pixtral: longest edge scaled down to ``size.longest_edge`` (floor), both sides rounded up to a
  multiple of the patch size; ``pixel_values`` item (3, H, W); the prompt's ``[IMG]`` becomes rows
  of ``[IMG]`` each ended by ``[IMG_BREAK]``, the last by ``[IMG_END]`` (vLLM's range covers the
  whole run, breaks and end included).

Two processors, as transformers has two backends per family (``IMAGE_PROCESSOR``):

* "fast" (default): what vLLM runs on a standard install, where transformers 5's ``AutoProcessor``
  picks the torchvision-based ``Qwen2VLImageProcessor`` / ``PixtralImageProcessor``. Resizing is
  ``torch.nn.functional.interpolate`` on the uint8 image with antialiasing, which is the very
  kernel torchvision's resize dispatches to on a CPU (uint8 in, uint8 out for bicubic, lanczos,
  nearest, and bilinear on AVX2/AVX-512/ARM hosts; elsewhere a float32 pass, clamped for the
  cubic filters, rounded back to uint8). Rescale and normalize are fused as that processor fuses
  them (``(x - mean/factor) / (std/factor)`` in float32; see ``kernels.build_lut_fast``). On a
  device (``IMAGE_DEVICE=cuda``) the uint8 image moves there and is resized, rescaled, normalized
  and patched there, as vLLM's processors do with ``device="cuda"``: torchvision's rule on a GPU is
  a float32 interpolate, clamped for the cubic filters and rounded back to uint8, and LANCZOS
  becomes BICUBIC (transformers' ``TorchvisionBackend.resize`` allows it on the CPU only). So the
  device's pixels are the device's HF processor's, not the CPU's: ``make gpu-check`` holds them
  against transformers run on the same device.
* "slow": the PIL-based ``*ImageProcessorPil``: Pillow's ``Image.resize`` with the filter from
  ``preprocessor_config.json`` (default BICUBIC), exactly what ``PilBackend.resize`` calls
  (``reducing_gap=None``), then rescale and normalize as two steps; bit-identical to HF's. Pillow
  resizes on the CPU whatever the device; only rescale, normalize and patching move to one.

Both give the same sizes, grids and placeholder runs; pixels differ by the resampler (measured in
docs/PERFORMANCE.md, "Image processor: fast vs slow").
"""

from __future__ import annotations

import functools
import math
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import (
    FastResampleError,
    ImageAspectRatioError,
    ImageProcessorSettingError,
    ImageSizeMultipleError,
    ImageTokenMissingError,
    NormalizedOnlyFamilyError,
    ProcessorKwargUnknownError,
    ProcessorKwargValueError,
    ProcessorPixelsOrderError,
    ProcessorSizeKeysError,
)
from ..model_info import read_json_object
from .media import LoadedImage
from .tensors import raw_pixels


def _kernels() -> Any:
    """The numba kernels, imported on first use: numba costs a process about 40 MB, which a
    text model's chat stage (that imports this module to detect the family) never needs."""
    from . import kernels

    return kernels


OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
BICUBIC = 3
IMAGE_PROCESSORS = ("fast", "slow")
"""``IMAGE_PROCESSOR`` values: transformers' torchvision backend ("fast") or its PIL one ("slow")."""

# Pillow filter codes -> interpolate modes, as transformers maps them to torchvision's; Pillow's
# BOX (4) and HAMMING (5) have no tensor equivalent (torchvision refuses them too).
_FAST_MODES = {0: "nearest-exact", 1: "lanczos", 2: "bilinear", 3: "bicubic"}


@dataclass(frozen=True)
class ProcessedImage:
    """One image's processed tensor and the prompt tokens that stand for it."""

    pixel_values: Any
    """Qwen2-VL: float32 (num_patches, C*T*P*P), uint8 with ``raw_pixels``; Pixtral: float32 (3, H,
    W). A read-only numpy array on CPU, a torch tensor on the processor's device otherwise."""

    grid: tuple[int, ...]
    """Qwen2-VL: (grid_t, grid_h, grid_w); Pixtral: (height, width) after resizing."""

    tokens: tuple[int, ...]
    """The token run that replaces the image's placeholder token in the prompt."""

    embed_offset: int
    """Where the placeholder range starts inside ``tokens`` (0 for both families)."""

    nbytes: int
    """Size of ``pixel_values`` in bytes (what the processor cache accounts)."""


def _nbytes(t: Any) -> int:
    if isinstance(t, np.ndarray):
        return int(t.nbytes)
    return int(t.numel() * t.element_size())


def _freeze(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False  # cached and shared between requests: nobody may write to it
    return a


def _resize(img: LoadedImage, height: int, width: int, resample: int) -> np.ndarray:
    if (height, width) == (img.height, img.width):
        return img.rgb  # Pillow's resize to the same size is a copy: skipping it is exact
    from PIL import Image

    out = Image.fromarray(img.rgb).resize((width, height), resample=Image.Resampling(resample))
    return np.ascontiguousarray(np.asarray(out, dtype=np.uint8))


def _native_uint8(mode: str) -> bool:
    """Whether the CPU interpolate kernel takes uint8 for ``mode`` (the path torchvision picks):
    the cubic filters and nearest always; bilinear only where its vectorized uint8 kernel exists."""
    if mode != "bilinear":
        return True
    import torch

    return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512") or platform.machine() in ("aarch64", "arm64")


def _interpolate_uint8(x: Any, height: int, width: int, mode: str) -> Any:
    """torchvision's ``resize_image`` for a (1, 3, H, W) uint8 tensor, on the tensor's device:
    uint8 in and out where its CPU kernel takes uint8 (and for nearest anywhere); else a float32
    pass, clamped for the cubic filters, rounded back to uint8 (every filter but nearest on a GPU)."""
    import torch
    from torch.nn.functional import interpolate

    on_cpu = x.device.type == "cpu"
    if mode == "lanczos" and not on_cpu:
        mode = "bicubic"  # transformers' TorchvisionBackend.resize: LANCZOS only on the CPU
    kw: dict[str, Any] = {"antialias": True, "align_corners": False} if mode != "nearest-exact" else {}
    if mode == "nearest-exact" or (on_cpu and _native_uint8(mode)):
        return interpolate(x, size=(height, width), mode=mode, **kw)
    y = interpolate(x.float(), size=(height, width), mode=mode, **kw)
    if mode in ("bicubic", "lanczos"):
        y = y.clamp_(0, 255)  # cubic lobes overshoot [0, 255]
    return y.round_().to(torch.uint8)


def _resize_fast(img: LoadedImage, height: int, width: int, mode: str) -> np.ndarray:
    if (height, width) == (img.height, img.width):
        return img.rgb  # torchvision hands a same-size image back untouched
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffer: interpolate only reads it
        # (1, 3, H, W) as a channels-last view of the (H, W, 3) pixels: no copy, and the uint8
        # kernel packs to channels-last anyway (same values as torchvision's contiguous CHW).
        x = torch.from_numpy(img.rgb).permute(2, 0, 1).unsqueeze(0)
    y = _interpolate_uint8(x, height, width, mode)
    return np.ascontiguousarray(y[0].permute(1, 2, 0).numpy())


def _resize_fast_on(img: LoadedImage, height: int, width: int, mode: str, device: str) -> Any:
    """The fast resize on ``device``: a (3, H, W) uint8 tensor there. The image goes there as
    transformers sends it (uint8, contiguous channel-first), unless it was decoded there already."""
    chw = img.pixels if img.pixels is not None else _kernels().upload_chw(img.rgb, device)
    if (height, width) == (img.height, img.width):
        return chw
    return _interpolate_uint8(chw.unsqueeze(0), height, width, mode)[0]


def token_id(model_dir: Path, token: str) -> int | None:
    """Id of a special token from the folder's ``tokenizer.json`` (added tokens, then vocab)."""
    path = model_dir / "tokenizer.json"
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return _token_ids(str(path.resolve()), st.st_mtime_ns, st.st_size).get(token)


@functools.lru_cache(maxsize=8)
def _token_ids(path: str, mtime_ns: int, size: int) -> dict[str, int]:
    # Parsing a 10-20 MB tokenizer.json takes a second: once per file version is enough.
    data = read_json_object(Path(path))
    ids: dict[str, int] = {}
    vocab = data.get("model", {}).get("vocab")
    if isinstance(vocab, dict):
        ids.update({k: int(v) for k, v in vocab.items() if k.startswith(("<|", "["))})
    ids.update({t["content"]: int(t["id"]) for t in data.get("added_tokens", []) if "content" in t})
    return ids


def _require_token(model_dir: Path, token: str, configured: Any = None) -> int:
    if isinstance(configured, int):
        return configured
    tid = token_id(model_dir, token)
    if tid is None:
        raise ImageTokenMissingError(model_dir, token)
    return tid


def _pos_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ProcessorKwargValueError(name, value)
    return value


class ImageFamily:
    """Common parts of a family: rescale/normalize settings and the lookup table."""

    name: str = ""
    placeholder_text: str = ""
    placeholder_token_id: int = -1
    allowed_kwargs: frozenset[str] = frozenset()

    def __init__(
        self, pp: Mapping[str, Any], image_processor: str = "fast", mm_device_do_normalize: bool = False
    ) -> None:
        if image_processor not in IMAGE_PROCESSORS:
            raise ImageProcessorSettingError(image_processor, IMAGE_PROCESSORS)
        self.image_processor = image_processor
        self.do_resize = bool(pp.get("do_resize", True))
        self.resample = int(pp.get("resample", BICUBIC))
        self.do_rescale = bool(pp.get("do_rescale", True))
        self.rescale_factor = float(pp.get("rescale_factor", 1 / 255))
        self.do_normalize = bool(pp.get("do_normalize", True))
        self.image_mean = tuple(float(x) for x in pp.get("image_mean", OPENAI_CLIP_MEAN))
        self.image_std = tuple(float(x) for x in pp.get("image_std", OPENAI_CLIP_STD))
        # vLLM's mm_device_do_normalize: the processor runs with do_rescale and do_normalize off
        # (vLLM merges both into its kwargs, so they are part of the settings hashed), and the
        # resized uint8 pixels leave as they are; the engine normalizes them.
        self.raw_pixels = raw_pixels(self.name, mm_device_do_normalize)
        self._config_steps = (self.do_rescale, self.do_normalize)
        if self.raw_pixels:
            self.do_rescale = self.do_normalize = False
        self.fast_mode = _FAST_MODES.get(self.resample) if image_processor == "fast" else None
        self._device_luts: dict[str, Any] = {}
        if image_processor == "fast" and self.do_resize and self.fast_mode is None:
            raise FastResampleError(self.resample)

    @functools.cached_property
    def lut(self) -> np.ndarray:
        """The (3, 256) table of what each byte becomes, built on first use: rescaled and
        normalized float32 (the fast table is computed with torch's operators, which the chat
        stage, reading only the family's placeholder, must not import), or with ``raw_pixels`` the
        uint8 identity, so that the kernels copy the resized pixels as they are."""
        if self.raw_pixels:
            return np.ascontiguousarray(np.tile(np.arange(256, dtype=np.uint8), (3, 1)))
        return self._table(self.do_rescale, self.do_normalize)

    @functools.cached_property
    def normalized_lut(self) -> np.ndarray:
        """The float32 table of the model's own preprocessor config: what ``raw_pixels`` would have
        been without ``mm_device_do_normalize`` (``normalize_raw``)."""
        return self._table(*self._config_steps)

    def _table(self, do_rescale: bool, do_normalize: bool) -> np.ndarray:
        kernels = _kernels()
        build = kernels.build_lut_fast if self.image_processor == "fast" else kernels.build_lut
        return build(do_rescale, self.rescale_factor, do_normalize, self.image_mean, self.image_std)

    @property
    def pixel_dtype(self) -> type:
        """``pixel_values``' dtype: uint8 with ``raw_pixels``, else float32."""
        return np.uint8 if self.raw_pixels else np.float32

    def normalize_raw(self, pixel_values: np.ndarray) -> np.ndarray:
        """``raw_pixels``' uint8 ``pixel_values`` as float32, each byte through ``normalized_lut``:
        bit for bit the tensor the setting off gives (what an engine without device normalization
        needs)."""
        raise NormalizedOnlyFamilyError(self.name)

    def resize(self, img: LoadedImage, height: int, width: int) -> np.ndarray:
        """``img`` resized to (height, width) by this processor's resampler, (H, W, 3) uint8."""
        if self.fast_mode is not None:
            return _resize_fast(img, height, width, self.fast_mode)
        return _resize(img, height, width, self.resample)

    def resize_on(self, img: LoadedImage, height: int, width: int, device: str) -> Any:
        """``img`` resized for the device path: a (3, H, W) uint8 tensor on ``device``. The fast
        processor resizes there; the slow one resizes with Pillow (on the CPU) and uploads."""
        if self.fast_mode is not None:
            return _resize_fast_on(img, height, width, self.fast_mode, device)
        return _kernels().upload_chw(_resize(img, height, width, self.resample), device)

    def lut_on(self, device: str) -> Any:
        """``lut`` on ``device``, flattened for the gather; moved there once per device."""
        table = self._device_luts.get(device)
        if table is None:
            table = self._device_luts[device] = _kernels().lut_tensor(self.lut, device)
        return table

    def base_settings(self) -> dict[str, Any]:
        """Everything that determines the output for a given image (goes into content hashes)."""
        return {
            "family": self.name,
            "image_processor": self.image_processor,
            "do_resize": self.do_resize,
            "resample": self.resample,
            "do_rescale": self.do_rescale,
            "rescale_factor": self.rescale_factor,
            "do_normalize": self.do_normalize,
            "image_mean": self.image_mean,
            "image_std": self.image_std,
        }

    def resolve_kwargs(self, mm_processor_kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
        """Validated per-request overrides, canonical (sorted, defaults dropped)."""
        kw = dict(mm_processor_kwargs or {})
        unknown = set(kw) - self.allowed_kwargs
        if unknown:
            raise ProcessorKwargUnknownError(unknown, self.allowed_kwargs)
        return self._resolve(kw)

    def _resolve(self, kw: dict[str, Any]) -> dict[str, Any]:
        return kw

    def process(self, img: LoadedImage, kwargs: Mapping[str, Any], device: str = "cpu") -> ProcessedImage:
        raise NotImplementedError

    def empty_tensors(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def collate(self, processed: list[ProcessedImage]) -> dict[str, Any]:
        """One request's images as the family's tensors (``pixel_values`` and its grid or sizes
        tensor), on the device the images were processed on. One image on the CPU is its own
        (read-only, cached) array, not a copy of 4 MB or more."""
        raise NotImplementedError


class Qwen2VLFamily(ImageFamily):
    """Qwen2-VL / Qwen2.5-VL images (``Qwen2VLImageProcessor``, or ``...Pil`` when slow)."""

    name = "qwen2_vl"
    placeholder_text = "<|vision_start|><|image_pad|><|vision_end|>"
    allowed_kwargs = frozenset({"min_pixels", "max_pixels", "size"})

    def __init__(
        self,
        model_dir: Path,
        pp: Mapping[str, Any],
        config: Mapping[str, Any],
        image_processor: str = "fast",
        mm_device_do_normalize: bool = False,
    ) -> None:
        super().__init__(pp, image_processor, mm_device_do_normalize)
        size = pp.get("size") or {}
        self.min_pixels = int(pp.get("min_pixels") or size.get("shortest_edge") or 56 * 56)
        self.max_pixels = int(pp.get("max_pixels") or size.get("longest_edge") or 28 * 28 * 1280)
        self.patch_size = int(pp.get("patch_size", 14))
        self.temporal_patch_size = int(pp.get("temporal_patch_size", 2))
        self.merge_size = int(pp.get("merge_size", 2))
        self.image_pad_id = _require_token(model_dir, "<|image_pad|>", config.get("image_token_id"))
        self.vision_start_id = _require_token(model_dir, "<|vision_start|>", config.get("vision_start_token_id"))
        self.vision_end_id = _require_token(model_dir, "<|vision_end|>", config.get("vision_end_token_id"))
        self.placeholder_token_id = self.image_pad_id  # vLLM's PromptReplacement target

    def base_settings(self) -> dict[str, Any]:
        return {
            **super().base_settings(),
            "min_pixels": self.min_pixels,
            "max_pixels": self.max_pixels,
            "patch_size": self.patch_size,
            "temporal_patch_size": self.temporal_patch_size,
            "merge_size": self.merge_size,
        }

    def _resolve(self, kw: dict[str, Any]) -> dict[str, Any]:
        lo, hi = self.min_pixels, self.max_pixels
        if "size" in kw:
            size = kw["size"]
            if not isinstance(size, Mapping) or set(size) - {"shortest_edge", "longest_edge"}:
                raise ProcessorSizeKeysError(("shortest_edge", "longest_edge"))
            lo = _pos_int("size.shortest_edge", size.get("shortest_edge", lo))
            hi = _pos_int("size.longest_edge", size.get("longest_edge", hi))
        if "min_pixels" in kw:
            lo = _pos_int("min_pixels", kw["min_pixels"])
        if "max_pixels" in kw:
            hi = _pos_int("max_pixels", kw["max_pixels"])
        if lo > hi:
            raise ProcessorPixelsOrderError(lo, hi)
        out = {}
        if lo != self.min_pixels:
            out["min_pixels"] = lo
        if hi != self.max_pixels:
            out["max_pixels"] = hi
        return out

    def target_size(self, height: int, width: int, kwargs: Mapping[str, Any]) -> tuple[int, int]:
        if not self.do_resize:
            return height, width
        return smart_resize(
            height,
            width,
            self.patch_size * self.merge_size,
            kwargs.get("min_pixels", self.min_pixels),
            kwargs.get("max_pixels", self.max_pixels),
        )

    def process(self, img: LoadedImage, kwargs: Mapping[str, Any], device: str = "cpu") -> ProcessedImage:
        h, w = self.target_size(img.height, img.width, kwargs)
        factor = self.patch_size * self.merge_size
        if h % factor or w % factor:
            raise ImageSizeMultipleError(w, h, factor)
        shape = (self.patch_size, self.merge_size, self.temporal_patch_size)
        if device == "cpu":
            pv = _freeze(_kernels().patchify_qwen(self.resize(img, h, w), self.lut, *shape))
        else:
            pv = _kernels().patchify_qwen_tensor(self.resize_on(img, h, w, device), self.lut_on(device), *shape)
        gh, gw = h // self.patch_size, w // self.patch_size
        n = gh * gw // (self.merge_size**2)
        return ProcessedImage(pv, (1, gh, gw), (self.image_pad_id,) * n, 0, _nbytes(pv))

    def empty_tensors(self) -> dict[str, np.ndarray]:
        dim = 3 * self.temporal_patch_size * self.patch_size**2
        return {"pixel_values": np.zeros((0, dim), self.pixel_dtype), "image_grid_thw": np.zeros((0, 3), np.int64)}

    def normalize_raw(self, pixel_values: np.ndarray) -> np.ndarray:
        # Columns are (channel, temporal, patch_h, patch_w): each channel's third through its row.
        rows = np.asarray(pixel_values, np.uint8).reshape(len(pixel_values), 3, -1)
        table = self.normalized_lut
        return np.stack([table[c][rows[:, c]] for c in range(3)], axis=1).reshape(len(pixel_values), -1)

    def collate(self, processed: list[ProcessedImage]) -> dict[str, Any]:
        if not processed:
            return self.empty_tensors()
        pvs = [p.pixel_values for p in processed]
        if isinstance(pvs[0], np.ndarray):
            pv = pvs[0] if len(pvs) == 1 else np.concatenate(pvs, axis=0)
        else:
            import torch

            pv = torch.cat(pvs, dim=0)
        return {"pixel_values": pv, "image_grid_thw": np.array([p.grid for p in processed], dtype=np.int64)}


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """transformers' ``smart_resize`` (Qwen2-VL), same arithmetic and the same refusal."""
    if max(height, width) / min(height, width) > 200:
        raise ImageAspectRatioError(max(height, width) / min(height, width))
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class PixtralFamily(ImageFamily):
    """Pixtral images (``PixtralImageProcessor``, or ``...Pil`` when slow; Llava + Pixtral vision
    tower in HF format)."""

    name = "pixtral"
    placeholder_text = "[IMG]"
    allowed_kwargs = frozenset({"size", "longest_edge"})

    def __init__(
        self,
        model_dir: Path,
        pp: Mapping[str, Any],
        config: Mapping[str, Any],
        processor_config: Mapping[str, Any],
        image_processor: str = "fast",
        mm_device_do_normalize: bool = False,
    ) -> None:
        super().__init__(pp, image_processor, mm_device_do_normalize)
        patch = pp.get("patch_size", (config.get("vision_config") or {}).get("patch_size", 16))
        self.patch_h, self.patch_w = (
            (int(patch["height"]), int(patch["width"])) if isinstance(patch, Mapping) else (int(patch), int(patch))
        )
        size = pp.get("size") or {"longest_edge": 1024}
        self.longest_edge = int(size.get("longest_edge") or max(size.get("height", 1024), size.get("width", 1024)))
        self.spatial_merge_size = int(processor_config.get("spatial_merge_size", config.get("spatial_merge_size", 1)))
        self.img_id = _require_token(
            model_dir,
            processor_config.get("image_token", "[IMG]"),
            config.get("image_token_index", config.get("image_token_id")),
        )
        self.break_id = _require_token(model_dir, processor_config.get("image_break_token", "[IMG_BREAK]"))
        self.end_id = _require_token(model_dir, processor_config.get("image_end_token", "[IMG_END]"))
        self.placeholder_token_id = self.img_id

    def base_settings(self) -> dict[str, Any]:
        return {
            **super().base_settings(),
            "patch": (self.patch_h, self.patch_w),
            "longest_edge": self.longest_edge,
            "spatial_merge_size": self.spatial_merge_size,
        }

    def _resolve(self, kw: dict[str, Any]) -> dict[str, Any]:
        edge = self.longest_edge
        if "size" in kw:
            size = kw["size"]
            if not isinstance(size, Mapping) or set(size) != {"longest_edge"}:
                raise ProcessorSizeKeysError(("longest_edge",))
            edge = _pos_int("size.longest_edge", size["longest_edge"])
        if "longest_edge" in kw:
            edge = _pos_int("longest_edge", kw["longest_edge"])
        return {"longest_edge": edge} if edge != self.longest_edge else {}

    def target_size(self, height: int, width: int, kwargs: Mapping[str, Any]) -> tuple[int, int]:
        """HF's ``get_resize_output_image_size`` (floor when shrinking, then ceil to patches)."""
        if not self.do_resize:
            return height, width
        edge = kwargs.get("longest_edge", self.longest_edge)
        ratio = max(height / edge, width / edge)
        if ratio > 1:
            height = int(math.floor(height / ratio))
            width = int(math.floor(width / ratio))
        nh = (height - 1) // self.patch_h + 1
        nw = (width - 1) // self.patch_w + 1
        return nh * self.patch_h, nw * self.patch_w

    def token_grid(self, height: int, width: int) -> tuple[int, int]:
        """(rows, cols) of [IMG] tokens for a resized image (HF's PixtralProcessor)."""
        return (height // (self.patch_h * self.spatial_merge_size), width // (self.patch_w * self.spatial_merge_size))

    def tokens_for(self, height: int, width: int) -> tuple[int, ...]:
        rows, cols = self.token_grid(height, width)
        run = ([self.img_id] * cols + [self.break_id]) * rows
        run[-1] = self.end_id
        return tuple(run)

    def process(self, img: LoadedImage, kwargs: Mapping[str, Any], device: str = "cpu") -> ProcessedImage:
        h, w = self.target_size(img.height, img.width, kwargs)
        if device == "cpu":
            pv = _freeze(_kernels().normalize_chw(self.resize(img, h, w), self.lut))
        else:
            pv = _kernels().normalize_chw_tensor(self.resize_on(img, h, w, device), self.lut_on(device))
        return ProcessedImage(pv, (h, w), self.tokens_for(h, w), 0, _nbytes(pv))

    def empty_tensors(self) -> dict[str, np.ndarray]:
        return {"pixel_values": np.zeros((0, 3, 0, 0), self.pixel_dtype), "image_sizes": np.zeros((0, 2), np.int64)}

    def collate(self, processed: list[ProcessedImage]) -> dict[str, Any]:
        # Images of different sizes in one zero-padded batch, each in its top-left corner.
        if not processed:
            return self.empty_tensors()
        pvs = [p.pixel_values for p in processed]
        sizes = np.array([p.grid for p in processed], dtype=np.int64)
        on_cpu = isinstance(pvs[0], np.ndarray)
        if on_cpu and len(pvs) == 1:
            return {"pixel_values": pvs[0][None], "image_sizes": sizes}
        mh, mw = int(sizes[:, 0].max()), int(sizes[:, 1].max())
        if on_cpu:
            pv = np.zeros((len(pvs), 3, mh, mw), dtype=pvs[0].dtype)
        else:
            import torch

            pv = torch.zeros((len(pvs), 3, mh, mw), dtype=pvs[0].dtype, device=pvs[0].device)
        for j, (x, (h, w)) in enumerate(zip(pvs, sizes)):
            pv[j, :, :h, :w] = x
        return {"pixel_values": pv, "image_sizes": sizes}
