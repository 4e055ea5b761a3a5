"""Item identity: content hashes, user uuids, and vLLM's uuid consistency checks.

The content hash is BLAKE2b-256 over the decoded RGB pixels (after the HF-style conversion), the
mode ("RGB"), the size, and the processor settings that decide the output (the model's
preprocessor config plus per-request ``mm_processor_kwargs``). It does not see the encoding: the
same pixels as PNG, BMP or lossless WebP hash the same, and it changes whenever the processed
tensor could. A caller's ``uuid`` replaces the content hash (as in vLLM); with per-request
processor kwargs the uuid is hashed together with them, so one uuid processed two ways never
shares a cache entry.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import MultiModalUUIDError, MultiModalUUIDLengthError

_VERSION = b"renderer.multimodal.v1\0"
# The index keys hash megabytes per request (a data URL's text, the encoded bytes); OpenSSL's SHA-256
# runs on the CPU's SHA extensions, which server CPUs have: about twice as fast as BLAKE2b over a
# 1.09 MB data URL here (docs/PERFORMANCE.md, "Images off the JSON path"; BLAKE2b was 48% of
# mm_process's execute on a hit, by py-spy). The content hash, the identity clients see in mm_hashes, stays BLAKE2b.


def _settings_bytes(settings: Mapping[str, Any]) -> bytes:
    return json.dumps(settings, sort_keys=True, separators=(",", ":"), default=list).encode()


def content_hash(rgb: np.ndarray, settings: Mapping[str, Any]) -> str:
    """Hex digest of an (H, W, 3) uint8 image together with the processing settings."""
    h = hashlib.blake2b(digest_size=32)
    h.update(_VERSION)
    h.update(_settings_bytes(settings))
    h.update(b"\0RGB\0%d\0%d\0" % (rgb.shape[0], rgb.shape[1]))
    h.update(memoryview(np.ascontiguousarray(rgb)).cast("B"))
    return h.hexdigest()


def bytes_key(data: bytes, settings: Mapping[str, Any]) -> str:
    """Digest of encoded bytes + settings: an index to a content hash, never an identity itself."""
    h = hashlib.sha256()
    h.update(_VERSION)
    h.update(b"bytes\0")
    h.update(_settings_bytes(settings))
    h.update(data)
    return h.hexdigest()


def source_key(url: str, settings: Mapping[str, Any]) -> str:
    """Digest of a data URL's text + settings: like ``bytes_key``, an index to a content hash, so a
    URL sent before finds its entry without base64 decoding (the text names the bytes exactly)."""
    h = hashlib.sha256()
    h.update(_VERSION)
    h.update(b"source\0")
    h.update(_settings_bytes(settings))
    h.update(url.encode("utf-8", "surrogatepass"))  # any str a request can carry
    return h.hexdigest()


def uuid_key(uuid: str, request_kwargs: Mapping[str, Any]) -> str:
    """The identity of a uuid-named item: the uuid itself, or hashed with per-request kwargs."""
    if not request_kwargs:
        return uuid
    h = hashlib.blake2b(digest_size=32)
    h.update(_VERSION)
    h.update(b"uuid\0" + uuid.encode() + b"\0")
    h.update(_settings_bytes(request_kwargs))
    return h.hexdigest()


def validate_mm_uuids(
    mm_data: Mapping[str, Any],
    mm_uuids: Mapping[str, Any] | None,
) -> None:
    """vLLM's checks of ``multi_modal_uuids`` against ``multi_modal_data``, with its messages.

    ``mm_data[m]`` is a list of items (an item None means "only the uuid is given"), a single
    item, or None / empty ("only uuids"); ``mm_uuids[m]`` a list (or one string) of uuids or None.
    """
    uuids = dict(mm_uuids or {})
    for m, items in mm_data.items():
        data_empty = items is None or (isinstance(items, (list, tuple)) and len(items) == 0)
        if m not in uuids or uuids[m] is None:
            if data_empty:
                raise MultiModalUUIDError(m)
            seq = items if isinstance(items, (list, tuple)) else [items]
            for i, item in enumerate(seq):
                if item is None:
                    raise MultiModalUUIDError(m, i)
            continue
        u = uuids[m]
        u_list: Sequence[Any] = [u] if isinstance(u, str) else list(u)
        if data_empty:
            continue  # only uuids: every item must come from the cache
        d_list: Sequence[Any] = items if isinstance(items, (list, tuple)) else [items]
        if len(u_list) != len(d_list):
            raise MultiModalUUIDLengthError(m, len(u_list), len(d_list))
        for i, (item, uid) in enumerate(zip(d_list, u_list)):
            if item is None and uid is None:
                raise MultiModalUUIDError(m, i)
