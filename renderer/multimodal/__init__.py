"""Multimodal stage: media loading with limits, Qwen2-VL / Pixtral image processing (numba
kernels), placeholder expansion, item identity and a byte-bounded processor cache.

Entry point: ``MultiModalProcessor.from_model_dir(dir, limits=..., cache_bytes=...)`` then
``process(prompt_ids, items, mm_processor_kwargs, media_io_kwargs)``.

The names below load on first use: a stage that imports one submodule (the image tensors'
table, the family detection) must not pay for the processor's imports (the chat message types,
pydantic and openai, PIL, numba), which text-only stubs never use.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "CacheStats": "cache",
    "ProcessorCache": "cache",
    "content_hash": "identity",
    "uuid_key": "identity",
    "validate_mm_uuids": "identity",
    "LoadedImage": "media",
    "MediaLimits": "media",
    "load_image": "media",
    "MultiModalOutput": "processor",
    "MultiModalProcessor": "processor",
    "PlaceholderRange": "processor",
    "items_from_mm_data": "processor",
    "detect_family": "registry",
    "load_family": "registry",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
