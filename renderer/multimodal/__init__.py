"""Multimodal stage: media loading with limits, Qwen2-VL / Pixtral image processing (numba
kernels), placeholder expansion, item identity and a byte-bounded processor cache.

Entry point: ``MultiModalProcessor.from_model_dir(dir, limits=..., cache_bytes=...)`` then
``process(prompt_ids, items, mm_processor_kwargs, media_io_kwargs)``.
"""

from .cache import CacheStats, ProcessorCache
from .identity import content_hash, uuid_key, validate_mm_uuids
from .media import LoadedImage, MediaLimits, load_image
from .processor import (
    MultiModalOutput,
    MultiModalProcessor,
    PlaceholderRange,
    items_from_mm_data,
)
from .registry import detect_family, load_family

__all__ = [
    "CacheStats",
    "LoadedImage",
    "MediaLimits",
    "MultiModalOutput",
    "MultiModalProcessor",
    "PlaceholderRange",
    "ProcessorCache",
    "content_hash",
    "detect_family",
    "items_from_mm_data",
    "load_family",
    "load_image",
    "uuid_key",
    "validate_mm_uuids",
]
