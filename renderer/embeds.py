"""Prompt embeddings from untrusted bytes, loaded without ever running pickled code.

Accepted payloads, raw or base64: ``torch.save`` output (read with ``weights_only=True``, which
refuses arbitrary classes and callables) and safetensors. Sparse tensors are checked for
out-of-bounds indices before they are densified (a crafted one would write outside its
buffer). Then vLLM's rules: (1, n, h) is squeezed to (n, h); the rank must be 2; the hidden size
must be the model's; the dtype must be floating point and is cast to the model's.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import struct
from typing import TYPE_CHECKING

from .errors import (
    EmbedsBase64Error,
    EmbedsDeserializeError,
    EmbedsDtypeError,
    EmbedsEncodingError,
    EmbedsHiddenSizeError,
    EmbedsNonFiniteError,
    EmbedsNotTensorError,
    EmbedsSafetensorsError,
    EmbedsShapeError,
    EmbedsSparseError,
    EmbedsTensorCountError,
)

if TYPE_CHECKING:
    import torch

MAX_REASON_CHARS = 200  # torch's reason is built from the caller's bytes: bounded, not echoed whole
_B64 = re.compile(rb"^[A-Za-z0-9+/\r\n]*={0,2}\s*$")


def decode_payload(raw: bytes) -> bytes:
    """Raw tensor bytes, base64-decoding them when they are base64 text."""
    if raw[:2] == b"PK" or raw[:1] == b"\x80" or _looks_like_safetensors(raw):
        return raw
    if not _B64.match(raw[:4096]) or not _B64.match(raw[-4096:]):
        raise EmbedsEncodingError()
    try:
        return base64.b64decode(raw, validate=False)
    except (binascii.Error, ValueError) as e:
        raise EmbedsBase64Error(e) from None


def _looks_like_safetensors(raw: bytes) -> bool:
    if len(raw) < 10:
        return False
    (n,) = struct.unpack("<Q", raw[:8])
    return 2 <= n <= len(raw) - 8 and raw[8:9] == b"{"


def load_tensor(payload: bytes) -> "torch.Tensor":
    import torch

    if _looks_like_safetensors(payload):
        return _load_safetensors(payload)
    with torch.sparse.check_sparse_tensor_invariants():
        try:
            tensor = torch.load(io.BytesIO(payload), weights_only=True, map_location=torch.device("cpu"))
        except (MemoryError, torch.OutOfMemoryError):
            raise  # the server's condition, not the caller's
        except Exception as e:  # noqa: BLE001 - torch has no single "not a tensor file" error
            raise EmbedsDeserializeError(_reason(e)) from None
        if not isinstance(tensor, torch.Tensor):
            raise EmbedsNotTensorError()
        try:
            return tensor.to_dense()
        except RuntimeError as e:
            raise EmbedsSparseError(_reason(e)) from None


def _load_safetensors(payload: bytes) -> "torch.Tensor":
    from safetensors.torch import load

    try:
        tensors = load(payload)
    except Exception as e:  # noqa: BLE001 - any parse failure is the payload's fault
        raise EmbedsSafetensorsError(_reason(e)) from None
    if len(tensors) != 1:
        raise EmbedsTensorCountError(len(tensors))
    return next(iter(tensors.values()))


def safe_load_prompt_embeds(raw: bytes, *, hidden_size: int | None, dtype: "torch.dtype") -> "torch.Tensor":
    """Bytes from a request -> a (seq_len, hidden_size) tensor in the model's dtype."""
    tensor = load_tensor(decode_payload(raw))
    if tensor.dim() > 2:
        tensor = tensor.squeeze(0)
    if tensor.dim() != 2:
        raise EmbedsShapeError(tuple(tensor.shape))
    if hidden_size is not None and tensor.shape[1] != hidden_size:
        raise EmbedsHiddenSizeError(tensor.shape[1], hidden_size)
    if tensor.dtype != dtype:
        if not tensor.is_floating_point():
            raise EmbedsDtypeError(tensor.dtype, dtype)
        tensor = tensor.to(dtype)
    if not bool(tensor.isfinite().all()):
        raise EmbedsNonFiniteError()
    return tensor


def model_dtype(model_dir: str) -> "torch.dtype":
    """The dtype the model's config declares (what vLLM casts embeds to)."""
    from pathlib import Path

    import torch

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    name = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
    return getattr(torch, str(name).replace("torch.", ""), torch.float32)


def _reason(e: Exception) -> str:
    reason = str(e).strip() or type(e).__name__
    extra = len(reason) - MAX_REASON_CHARS
    return reason if extra <= 0 else f"{reason[:MAX_REASON_CHARS]}... ({extra} more characters truncated)"
