"""Processed images as vLLM 0.32's engine takes them: ``mm_process``'s tensors to a ``MultiModalInput``.

vLLM's engine accepts an image prompt already processed (``vllm.inputs.engine.mm_input``): the
prompt ids with every placeholder run expanded, the processed tensors as ``MultiModalKwargsItems``
(one item per image, laid out by the family's field config, the one vLLM's own processor declares),
each item's identifier (``mm_hashes``: the key of vLLM's encoder cache, so a repeated image skips
its vision encoder) and its ``PlaceholderRange``. vLLM then never decodes, processes or hashes the
image again. What differs per family lives in ``FAMILIES``; the adapter
(``model_repository/llm/1/vllm_engine.py``) stays family-blind.

The normalization contract: the engine normalizes on the device exactly when ``mm_process`` sends
uint8. By default ``mm_process`` hands every engine normalized float32 ``pixel_values``, equal to
transformers' torchvision processor (the one vLLM runs), so the engine starts with
``mm_device_do_normalize=False``, where vLLM's own processor makes exactly these values; fed float32
with it on, vLLM would normalize twice. With ``MM_DEVICE_DO_NORMALIZE`` Qwen2-VL's patches travel as
the resized uint8 pixels (a quarter of the bytes), as vLLM 0.32's own render server sends them by
default, and the engine starts with it on (``engine_args``; ``renderer/multimodal/tensors.py``:
``raw_pixels``). Pixtral (Llava) has no device normalization: float32 either way.

Runs in vLLM's environment (numpy 2, torch, vllm): vLLM is imported where it is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from renderer.errors import EngineImageFamilyError, ImageRunsMismatchError

Items = Callable[[Mapping[str, np.ndarray]], tuple[dict[str, Any], dict[str, Any]]]
"""``images -> (BatchFeature data, field config)``: one family's ``MultiModalKwargsItems`` layout."""


def _qwen2_vl_items(images: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    # vLLM's qwen2_vl.py _create_qwen2vl_field_factory: all images' patches concatenated, split
    # per image by its t*h*w patch count; the grids stay on the CPU (the model reads them there).
    import torch
    from vllm.multimodal.inputs import MultiModalFieldConfig

    thw = torch.from_numpy(np.ascontiguousarray(images["image_grid_thw"], dtype=np.int64)).reshape(-1, 3)
    data = {"pixel_values": torch.from_numpy(np.ascontiguousarray(images["pixel_values"])), "image_grid_thw": thw}
    fields = {
        "pixel_values": MultiModalFieldConfig.flat_from_sizes("image", thw.prod(-1)),
        "image_grid_thw": MultiModalFieldConfig.batched("image", keep_on_cpu=True),
    }
    return data, fields


def _pixtral_items(images: Mapping[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    # vLLM's llava.py PixtralHFMultiModalProcessor: one [3, h, w] tensor per image, cropped to its
    # size (mm_process zero-pads the batch to the largest image, as HF's processor does).
    import torch
    from vllm.multimodal.inputs import MultiModalFieldConfig

    pv = images["pixel_values"]
    sizes = np.asarray(images["image_sizes"], dtype=np.int64).reshape(-1, 2)
    crops = [torch.from_numpy(np.ascontiguousarray(pv[i, :, :h, :w])) for i, (h, w) in enumerate(sizes.tolist())]
    return {"pixel_values": crops}, {"pixel_values": MultiModalFieldConfig.batched("image")}


@dataclass(frozen=True)
class Family:
    """What vLLM's engine needs to know about one image family."""

    items: Items
    """The processed tensors as vLLM's kwargs items."""

    modality_limits: Callable[[int], dict[str, int]]
    """``limit_mm_per_prompt`` for a per-prompt image limit (other modalities this family's vLLM
    model knows are set to 0, so its start-up budgets no video)."""

    engine_args: Mapping[str, Any]
    """Further engine arguments the contract above needs."""

    image_token: str | None
    """The model config attribute naming the token that carries an embedding inside a placeholder
    run with other tokens (Pixtral's ``[IMG]`` between ``[IMG_BREAK]`` / ``[IMG_END]``); None when
    every token of the run is one (Qwen2-VL's ``<|image_pad|>`` run)."""


FAMILIES: dict[str, Family] = {
    "qwen2_vl": Family(
        items=_qwen2_vl_items,
        modality_limits=lambda n: {"image": n, "video": 0},
        engine_args={},
        image_token=None,
    ),
    "pixtral": Family(
        items=_pixtral_items,
        modality_limits=lambda n: {"image": n},
        engine_args={},
        image_token="image_token_index",
    ),
}


def family(name: str) -> Family:
    fam = FAMILIES.get(name)
    if fam is None:
        raise EngineImageFamilyError(name, list(FAMILIES))
    return fam


def engine_args(name: str, max_images: int, mm_device_do_normalize: bool = False) -> dict[str, Any]:
    """The ``AsyncEngineArgs`` an image family's engine starts with (``mm_device_do_normalize``:
    the setting, which decides whether ``mm_process`` sends this family uint8)."""
    from renderer.multimodal.tensors import DEVICE_NORMALIZED_FAMILIES, raw_pixels

    fam = family(name)
    # vLLM never processes here: its processor caches would only hold copies of what arrives.
    args = {"limit_mm_per_prompt": fam.modality_limits(max_images), "mm_processor_cache_gb": 0, **fam.engine_args}
    if name in DEVICE_NORMALIZED_FAMILIES:
        # vLLM's default is on for these; it must be on exactly when the pixels arrive as uint8.
        args["mm_device_do_normalize"] = raw_pixels(name, mm_device_do_normalize)
    return args


def mm_input(
    name: str, input_ids: Sequence[int], images: Mapping[str, np.ndarray], hashes: Sequence[str], image_token_id: int
) -> Any:
    """vLLM's ``MultiModalInput`` for one prompt: ``images`` are the engine's image inputs
    (``renderer.engine_tensors.ENGINE_IMAGE_INPUTS``); ``hashes`` the identities ``mm_identifiers`` carries."""
    import torch
    from transformers import BatchFeature
    from vllm.inputs.engine import mm_input as make
    from vllm.multimodal.inputs import MultiModalKwargsItems, PlaceholderRange

    fam = family(name)
    data, fields = fam.items(images)
    kwargs = MultiModalKwargsItems.from_hf_inputs(BatchFeature(data), fields)
    runs = np.asarray(images["mm_placeholders"], dtype=np.int64).reshape(-1, 2).tolist()
    if len(runs) != len(hashes) or len(runs) != len(kwargs.get("image", ())):
        raise ImageRunsMismatchError(len(runs), len(hashes), len(kwargs.get("image", ())))
    ids = np.asarray(input_ids)
    ranges = []
    for offset, length in runs:
        embed = None
        if fam.image_token is not None:
            embed = torch.from_numpy(ids[offset : offset + length] == image_token_id)
        ranges.append(PlaceholderRange(offset=offset, length=length, is_embed=embed))
    return make(list(input_ids), kwargs, {"image": list(hashes)}, {"image": ranges})
