"""The image tensors each model family hands on, named, typed and shaped once.

``mm_process`` emits them with these dtypes; the launcher writes them into the configs of every
model that carries them (through ``renderer/stage_tensors.py``) and into the image ensembles' outputs
and maps (``launcher/repository.py``: ``family_vars``); ``tests/unit/test_config_contract.py`` checks
what the adapters send against the rendered configs. Layouts are described on ``MultiModalOutput``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..engine_tensors import TensorSpec
from ..errors import UnknownImageFamilyError

FAMILY_IMAGE_TENSORS: dict[str, tuple[TensorSpec, ...]] = {
    "qwen2_vl": (
        TensorSpec("pixel_values", "TYPE_FP32", (-1, -1), doc="All images' flattened patches, in order."),
        TensorSpec("image_grid_thw", "TYPE_INT64", (-1, 3), doc="Each image's (t, h, w) patch grid."),
    ),
    "pixtral": (
        TensorSpec(
            "pixel_values", "TYPE_FP32", (-1, 3, -1, -1), doc="Images zero-padded to the largest, [images, 3, h, w]."
        ),
        TensorSpec("image_sizes", "TYPE_INT64", (-1, 2), doc="Each image's (h, w)."),
    ),
}


DEVICE_NORMALIZED_FAMILIES = frozenset({"qwen2_vl"})
"""The families whose vLLM models normalize images themselves (vLLM's
``supports_mm_device_do_normalize``: qwen2_vl.py and qwen2_5_vl.py; Llava, Pixtral's, does not)."""


def raw_pixels(family: str, mm_device_do_normalize: bool) -> bool:
    """Whether ``family``'s ``pixel_values`` travel as the resized uint8 pixels, for the engine to
    rescale and normalize: vLLM's ``mm_device_do_normalize``, which vLLM turns off (with a warning)
    for a model that cannot normalize on the device, as this does."""
    return mm_device_do_normalize and family in DEVICE_NORMALIZED_FAMILIES


def image_tensors(family: str, raw: bool = False) -> tuple[TensorSpec, ...]:
    """The image tensors of ``family``, in the order the configs list them; ``raw``
    (``raw_pixels``): ``pixel_values`` uint8."""
    specs = FAMILY_IMAGE_TENSORS.get(family)
    if specs is None:
        raise UnknownImageFamilyError(family, list(FAMILY_IMAGE_TENSORS))
    if not raw:
        return specs
    note = " uint8, unrescaled and unnormalized: the engine normalizes them (MM_DEVICE_DO_NORMALIZE)."
    return tuple(replace(t, dtype="TYPE_UINT8", doc=t.doc + note) if t.name == "pixel_values" else t for t in specs)


ITEM_TENSOR_SPECS: tuple[TensorSpec, ...] = (
    TensorSpec(
        "mm_identifiers",
        "TYPE_UINT8",
        (-1, -1),
        doc="Each item's identity (mm_hashes) as bytes (renderer/multimodal/tensors.py says why).",
    ),
    TensorSpec(
        "mm_placeholders", "TYPE_INT32", (-1, 2), doc="Each item's placeholder run in input_ids: (offset, length)."
    ),
)
"""What every image family also hands the engine: each item's identity and placeholder run.

The identities are ``mm_hashes`` (what ``render_chat`` returns), as bytes rather than strings: vLLM's
engine runs in a stub whose numpy 2 cannot take a Triton BYTES input at all (Triton 2.51's stub
builds the array with numpy 1's descriptor layout and reads a zero item size: every byte is the
first one, and the stub dies loading the request), while numeric tensors cross through DLPack."""


def identifiers_array(hashes: Sequence[str]) -> np.ndarray:
    """``mm_identifiers``: uint8 [items, longest], each row an identity's UTF-8 bytes zero-padded
    (identities are hex digests or request uuids: no trailing NUL to lose)."""
    raw = [h.encode() for h in hashes]
    # At least one column: an engine skips an empty tensor, and every item has a row.
    out = np.zeros((len(raw), max([1] + [len(r) for r in raw])), np.uint8)
    for i, r in enumerate(raw):
        out[i, : len(r)] = np.frombuffer(r, np.uint8)
    return out


def identifiers_from_array(arr: np.ndarray) -> list[str]:
    """The identities ``identifiers_array`` packed."""
    return [bytes(row).rstrip(b"\0").decode() for row in np.atleast_2d(np.asarray(arr, np.uint8))]


ITEM_TENSORS = tuple(spec.name for spec in ITEM_TENSOR_SPECS)


def engine_image_inputs(family: str) -> tuple[str, ...]:
    """The tensors ``family``'s images reach an image-taking engine as (``ENGINE_IMAGE_INPUTS``)."""
    return tuple(spec.name for spec in image_tensors(family)) + ITEM_TENSORS
