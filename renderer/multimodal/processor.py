"""``MultiModalProcessor``: images of a prompt to tensors, expanded ids and placeholder ranges.

One call does, in order (cheap checks first, so a bad request fails before any decoding):

1. validate ``media_io_kwargs`` and ``mm_processor_kwargs``; refuse unsupported modalities and
   ``image_embeds``; apply vLLM's per-prompt item limit and its uuid rule;
2. count the placeholder tokens in the prompt (Qwen2-VL ``<|image_pad|>``, Pixtral ``[IMG]``):
   one per item, else vLLM's "Expected there to be N prompt updates ..." error;
3. per item: with a ``uuid``, look it up in the processor cache (no decoding on a hit; a uuid
   without data must hit); otherwise a data URL's text seen before, then its bytes (limits in
   ``media``) seen before, map straight to their content hash (a hit without base64 or image
   decoding, resp. without image decoding); else decode, hash the pixels
   and look that up; process on a miss (the family's resize + numba kernels);
4. replace each placeholder token by the item's run and record its range (vLLM's
   ``PlaceholderRange`` semantics: offset of the run's first token in the new ids, length of the
   run; Pixtral's run includes its ``[IMG_BREAK]``/``[IMG_END]`` tokens, Qwen2-VL's is the
   ``<|image_pad|>`` run between the vision start/end tokens it keeps);
5. collate the family's tensors (see ``MultiModalOutput``).

The processed tensors travel in the output: the cache only saves work (see ``cache``).
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from .. import stage_params as sp
from ..chat.messages import MultiModalItem
from ..errors import (
    MultiModalCacheMissError,
    MultiModalPlaceholderCountError,
    UnsupportedImageSourceError,
    UnsupportedModalityError,
)
from ..media_defaults import DEFAULT_IMAGE_DECODE_DEVICE, DEFAULT_IMAGE_PROCESSOR
from ..flags import parse_flag
from ..model_info import config_number
from ..params import LengthLimit
from . import devices
from .cache import CacheStats, ProcessorCache
from .families import ImageFamily, PixtralFamily, ProcessedImage
from .identity import bytes_key, content_hash, source_key, uuid_key, validate_mm_uuids
from .media import (
    MediaLimits,
    check_item_count,
    check_media_io_kwargs,
    decode_image,
    load_image,
    may_be_data_url_within_limit,
    read_media_bytes,
)
from .registry import load_family

DEFAULT_CACHE_BYTES = 512 * 1024 * 1024


@dataclass(frozen=True)
class PlaceholderRange:
    """Where one item's tokens sit in the expanded ``input_ids`` (vLLM's ``PlaceholderRange``)."""

    offset: int
    """Index of the first token of the item's run."""

    length: int
    """Number of tokens in the run."""


@dataclass(frozen=True)
class MultiModalOutput:
    """What the multimodal stage hands on: expanded ids, the family's tensors, item identities.

    Tensor layouts (numpy on CPU; torch tensors on the processor's device for ``device="cuda"``,
    or ``"cpu:0"``, the device path's torch code on the CPU):

    * Qwen2-VL: ``pixel_values`` float32 [total_patches, 3 * temporal_patch_size * patch**2]
      (items concatenated in order, as ``Qwen2VLImageProcessor`` returns them; uint8, the resized
      pixels, with ``mm_device_do_normalize``);
      ``image_grid_thw`` int64 [num_images, 3]; ``image_sizes`` None.
    * Pixtral: ``pixel_values`` float32 [num_images, 3, max_H, max_W], each image at the top-left
      and zero-padded (HF's ``do_pad`` batch; ``pixel_values[i, :, :h, :w]`` is image i);
      ``image_sizes`` int64 [num_images, 2] as (h, w); ``image_grid_thw`` None.
    """

    input_ids: list[int]
    """Prompt ids with every placeholder token replaced by its item's run."""

    pixel_values: Any
    """The family's pixel tensor (see the class docstring); for one image on the CPU, the cache's
    own read-only array (copy it to write to it)."""

    image_grid_thw: np.ndarray | None
    """Qwen2-VL: int64 [num_images, 3] (grid_t, grid_h, grid_w); None for Pixtral."""

    image_sizes: np.ndarray | None
    """Pixtral: int64 [num_images, 2] (height, width) after resizing; None for Qwen2-VL."""

    placeholders: tuple[PlaceholderRange, ...]
    """One range per item, in item order."""

    hashes: tuple[str, ...]
    """One identity per item: the uuid (hashed with per-request kwargs if any) or the content hash."""

    cache_hits: int
    """How many items came from the processor cache."""

    family: str
    """"qwen2_vl" or "pixtral"."""

    def mm_placeholders_array(self) -> np.ndarray:
        """int32 [num_items, 2] (offset, length): the ``mm_placeholders`` tensor."""
        return np.array([(p.offset, p.length) for p in self.placeholders], dtype=np.int32).reshape(-1, 2)

    def tensors(self) -> dict[str, Any]:
        """The family's model inputs by their HF names (``pixel_values`` + grid or sizes)."""
        out: dict[str, Any] = {"pixel_values": self.pixel_values}
        if self.image_grid_thw is not None:
            out["image_grid_thw"] = self.image_grid_thw
        if self.image_sizes is not None:
            out["image_sizes"] = self.image_sizes
        return out


class MultiModalProcessor:
    """Images for one model family: loading, processing, caching, placeholder expansion."""

    def __init__(
        self,
        family: ImageFamily,
        *,
        limits: MediaLimits | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        device: str = "cpu",
        decode_device: str = DEFAULT_IMAGE_DECODE_DEVICE,
        max_workers: int | None = None,
    ) -> None:
        devices.check_device(device)
        self.family = family
        self.limits = limits or MediaLimits()
        self.device = device
        # Where JPEG images are decoded (None: Pillow); refused here, at load, when it cannot run.
        self.decode_on = devices.check_decode_device(decode_device, device, family.image_processor)
        self.cache: ProcessorCache[ProcessedImage] = ProcessorCache(cache_bytes, lambda p: p.nbytes)
        # Encoded-bytes digest -> content hash: a repeated upload of the same file is a cache hit
        # without decoding it again (about 200 bytes an entry, so ~5,000 entries).
        self._by_bytes: ProcessorCache[str] = ProcessorCache(1 << 20 if cache_bytes else 0, lambda _: 200)
        self._max_workers = max_workers or min(4, os.cpu_count() or 1)
        self._executor: ThreadPoolExecutor | None = None

    @classmethod
    def from_model_dir(
        cls,
        model_dir: str | Path,
        *,
        limits: MediaLimits | None = None,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        device: str = "cpu",
        image_processor: str = DEFAULT_IMAGE_PROCESSOR,
        decode_device: str = DEFAULT_IMAGE_DECODE_DEVICE,
        mm_device_do_normalize: bool = False,
    ) -> "MultiModalProcessor":
        """The processor a model folder's ``config.json`` / ``preprocessor_config.json`` call for,
        resizing and normalizing as ``image_processor`` says ("fast" or "slow", see ``families``),
        on ``device``, decoding JPEG images on ``decode_device`` ("cpu" or "cuda", see ``devices``),
        with uint8 ``pixel_values`` where ``mm_device_do_normalize`` applies (``families``)."""
        family = load_family(model_dir, image_processor, mm_device_do_normalize)
        return cls(family, limits=limits, cache_bytes=cache_bytes, device=device, decode_device=decode_device)

    @classmethod
    def from_config(cls, params: Mapping[str, str]) -> "MultiModalProcessor":
        """From ``mm_process``'s config parameters (what the launcher writes from its settings:
        ``device`` is ``IMAGE_DEVICE`` resolved, ``decode_device`` ``IMAGE_DECODE_DEVICE``); an
        absent or empty parameter keeps its default."""
        return cls.from_model_dir(
            params[sp.MODEL_DIR],
            limits=MediaLimits.from_config(params),
            cache_bytes=config_number(params, sp.CACHE_BYTES, int, DEFAULT_CACHE_BYTES),
            device=params.get(sp.DEVICE) or "cpu",
            image_processor=params.get(sp.IMAGE_PROCESSOR) or DEFAULT_IMAGE_PROCESSOR,
            decode_device=params.get(sp.DECODE_DEVICE) or DEFAULT_IMAGE_DECODE_DEVICE,
            mm_device_do_normalize=parse_flag(params.get(sp.MM_DEVICE_DO_NORMALIZE) or ""),
        )

    # --- what other stages need to know ---------------------------------------------------------

    @property
    def placeholder_text(self) -> str:
        """Text a chat template in "string" content format should see for one image part."""
        return self.family.placeholder_text

    @property
    def placeholder_token_id(self) -> int:
        """The single token that marks an image in the (unexpanded) prompt ids."""
        return self.family.placeholder_token_id

    def cache_stats(self) -> CacheStats:
        return self.cache.stats()

    def mm_token_type_ids(self, input_ids: Sequence[int]) -> np.ndarray:
        """1 where an image feature token sits, else 0 (HF Qwen2-VL's ``mm_token_type_ids``)."""
        fam = self.family
        ids = np.asarray(input_ids, dtype=np.int64)
        if isinstance(fam, PixtralFamily):
            return (ids == fam.img_id).astype(np.int32)
        return (ids == fam.placeholder_token_id).astype(np.int32)

    def warmup(self) -> None:
        from . import kernels

        kernels.warmup()
        self.family.lut  # noqa: B018 - built at load (torch's operators for the fast table), not by a first image
        if devices.on_torch(self.device):
            # The device path once, resize included: the CUDA context, the table's copy and the
            # kernels' first launch belong to loading, not to the first request.
            from .media import LoadedImage

            tiny = np.zeros((37, 41, 3), dtype=np.uint8)
            self.family.process(LoadedImage(tiny, "RGB", None), {}, self.device)

    # --- processing -----------------------------------------------------------------------------

    def process(
        self,
        prompt_ids: Sequence[int],
        items: Sequence[MultiModalItem],
        mm_processor_kwargs: Mapping[str, Any] | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> MultiModalOutput:
        fam = self.family
        check_media_io_kwargs(media_io_kwargs)
        kwargs = fam.resolve_kwargs(mm_processor_kwargs)
        for it in items:
            if it.modality != "image":
                raise UnsupportedModalityError(it.modality)
            if it.source != "image_url":
                raise UnsupportedImageSourceError(it.source, fam.name)
        check_item_count("image", len(items), self.limits)
        validate_mm_uuids({"image": [it.data for it in items]}, {"image": [it.uuid for it in items]})

        ids = list(prompt_ids)
        target = fam.placeholder_token_id
        positions = [i for i, t in enumerate(ids) if t == target]
        if len(positions) != len(items):
            raise MultiModalPlaceholderCountError(len(items), len(positions))

        settings = {**fam.base_settings(), **kwargs}
        processed: list[ProcessedImage] = []
        hashes: list[str] = []
        hits = 0
        for i, it in enumerate(items):
            p, key, hit = self._one(i, it, kwargs, settings)
            processed.append(p)
            hashes.append(key)
            hits += hit

        new_ids: list[int] = []
        ranges: list[PlaceholderRange] = []
        prev = 0
        for pos, p in zip(positions, processed):
            new_ids.extend(ids[prev:pos])
            ranges.append(PlaceholderRange(len(new_ids) + p.embed_offset, len(p.tokens) - p.embed_offset))
            new_ids.extend(p.tokens)
            prev = pos + 1
        new_ids.extend(ids[prev:])

        tensors = self.family.collate(processed)
        return MultiModalOutput(
            input_ids=new_ids,
            pixel_values=tensors["pixel_values"],
            image_grid_thw=tensors.get("image_grid_thw"),
            image_sizes=tensors.get("image_sizes"),
            placeholders=tuple(ranges),
            hashes=tuple(hashes),
            cache_hits=hits,
            family=fam.name,
        )

    def process_tokenized(
        self,
        prompt_ids: Sequence[int],
        token_offsets: Any,
        items: Sequence[MultiModalItem],
        limit: LengthLimit,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> tuple[MultiModalOutput, np.ndarray]:
        """``process`` for a prompt the tokenize step produced, with vLLM's rules after it: the
        context length is checked on the expanded ids (against ``limit``, what tokenize resolved
        for the request), and token offsets survive only without media (they index text the
        expansion no longer matches). Returns (output, offsets)."""
        out = self.process(prompt_ids, items, mm_processor_kwargs, media_io_kwargs)
        limit.check(len(out.input_ids))
        keep = token_offsets is not None and not items
        return out, (np.asarray(token_offsets, np.int32).reshape(-1, 2) if keep else np.zeros((0, 2), np.int32))

    async def process_async(
        self,
        prompt_ids: Sequence[int],
        items: Sequence[MultiModalItem],
        mm_processor_kwargs: Mapping[str, Any] | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> MultiModalOutput:
        """``process`` on a worker thread (kernels release the GIL; the cache is thread-safe)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._max_workers, thread_name_prefix="mm-process")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self.process, prompt_ids, items, mm_processor_kwargs, media_io_kwargs
        )

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def _one(
        self, i: int, it: MultiModalItem, kwargs: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> tuple[ProcessedImage, str, bool]:
        fam, device = self.family, self.device
        if it.uuid is not None:
            key = uuid_key(it.uuid, kwargs)
            if it.data is None:
                cached = self.cache.get(key)
                if cached is None:
                    raise MultiModalCacheMissError(i, it.uuid)
                return cached, key, True
            value, hit = self.cache.get_or_process(
                key, lambda: fam.process(load_image(it.data, self.limits, self.decode_on), kwargs, device)
            )
            return value, key, hit
        # A data URL's text seen before names its bytes exactly: a hit skips the base64 decode too.
        skey = source_key(it.data, settings) if may_be_data_url_within_limit(it.data, self.limits) else None
        hit = self._indexed(skey)
        if hit is not None:
            return hit
        raw = read_media_bytes(it.data, self.limits)
        bkey = bytes_key(raw, settings)
        hit = self._indexed(bkey)
        if hit is not None:
            if skey is not None:
                self._by_bytes.put(skey, hit[1])
            return hit
        img = decode_image(raw, self.limits, self.decode_on)
        key = content_hash(img.rgb, settings)
        self._by_bytes.put(bkey, key)
        if skey is not None:
            self._by_bytes.put(skey, key)
        value, hit = self.cache.get_or_process(key, lambda: fam.process(img, kwargs, device))
        return value, key, hit

    def _indexed(self, index_key: str | None) -> tuple[ProcessedImage, str, bool] | None:
        """The cached entry an index key (``source_key`` / ``bytes_key``) points to, if still held."""
        key = self._by_bytes.get(index_key) if index_key is not None else None
        cached = self.cache.get(key) if key is not None else None
        return None if cached is None else (cached, key, True)


def items_from_mm_data(mm_data: Mapping[str, Any], mm_uuids: Mapping[str, Any] | None = None) -> list[MultiModalItem]:
    """vLLM-style ``multi_modal_data`` / ``multi_modal_uuids`` dicts as ``MultiModalItem``s (checked)."""
    validate_mm_uuids(mm_data, mm_uuids)
    out: list[MultiModalItem] = []
    for m, items in mm_data.items():
        seq = [] if items is None else (list(items) if isinstance(items, (list, tuple)) else [items])
        u = (mm_uuids or {}).get(m)
        uuids = [None] * len(seq) if u is None else ([u] if isinstance(u, str) else list(u))
        if not seq:
            seq = [None] * len(uuids)
        for j, (d, uid) in enumerate(zip(seq, uuids)):
            out.append(MultiModalItem(m, "image_url", d, uid, -1, j))
    return out
