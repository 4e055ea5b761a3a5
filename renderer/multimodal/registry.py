"""Which image-processor family a model folder needs, from its configuration files.

Order of evidence: ``config.json`` (``model_type``, ``architectures``, and for Llava the vision
tower's ``model_type``), then ``preprocessor_config.json``'s ``image_processor_type`` (a folder
holding only a tokenizer and a preprocessor config also works).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..errors import UnsupportedImageModelError
from ..media_defaults import DEFAULT_IMAGE_PROCESSOR
from ..model_info import read_json_object
from .families import ImageFamily, PixtralFamily, Qwen2VLFamily
from .tensors import raw_pixels

log = logging.getLogger(__name__)

QWEN2_VL_MODEL_TYPES = frozenset({"qwen2_vl", "qwen2_5_vl"})
QWEN2_VL_ARCHITECTURES = frozenset({"Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration"})
PIXTRAL_MODEL_TYPES = frozenset({"pixtral"})
SUPPORTED = ("qwen2_vl", "pixtral")


def detect_family(model_dir: str | Path) -> str | None:
    """ "qwen2_vl", "pixtral", or None when the folder is not a supported vision-language model."""
    d = Path(model_dir)
    config = read_json_object(d / "config.json")
    model_type = config.get("model_type")
    archs = set(config.get("architectures") or ())
    vision_type = (config.get("vision_config") or {}).get("model_type")
    if model_type in QWEN2_VL_MODEL_TYPES or archs & QWEN2_VL_ARCHITECTURES:
        return "qwen2_vl"
    if model_type in PIXTRAL_MODEL_TYPES or (model_type == "llava" and vision_type == "pixtral"):
        return "pixtral"
    ip_type = str(read_json_object(d / "preprocessor_config.json").get("image_processor_type") or "")
    if ip_type.startswith("Qwen2VLImageProcessor"):
        return "qwen2_vl"
    if ip_type.startswith("PixtralImageProcessor"):
        return "pixtral"
    return None


def load_family(
    model_dir: str | Path, image_processor: str = DEFAULT_IMAGE_PROCESSOR, mm_device_do_normalize: bool = False
) -> ImageFamily:
    """The configured family for a model folder, processing as ``image_processor`` ("fast": the
    torchvision-based HF processor vLLM gets on a standard install; "slow": the PIL-based one),
    leaving pixels unnormalized for the engine where ``mm_device_do_normalize`` applies to the
    family; refuses folders no family supports."""
    d = Path(model_dir)
    name = detect_family(d)
    config: dict[str, Any] = read_json_object(d / "config.json")
    pp = read_json_object(d / "preprocessor_config.json")
    if mm_device_do_normalize and name is not None and not raw_pixels(name, True):
        # vLLM forces the setting off, with a warning, for a model that cannot normalize on the device.
        log.warning("MM_DEVICE_DO_NORMALIZE: %s models normalize no images on the device; float32 pixel_values", name)
    if name == "qwen2_vl":
        return Qwen2VLFamily(d, pp, config, image_processor, mm_device_do_normalize)
    if name == "pixtral":
        processor_config = read_json_object(d / "processor_config.json")
        return PixtralFamily(d, pp, config, processor_config, image_processor, mm_device_do_normalize)
    raise UnsupportedImageModelError(d, config.get("model_type"), SUPPORTED)
