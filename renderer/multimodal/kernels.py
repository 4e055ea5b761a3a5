"""Per-pixel kernels: uint8 RGB to normalized float32, fused with each family's layout.

Exactness: HF's PIL-based ("slow") image processors rescale (``float64(x) * factor`` cast to float32) and then
normalize (``(x - mean) / std`` in float32). A uint8 input has only 256 values per channel, so
``build_lut`` runs exactly those numpy operations once on ``arange(256)`` and the kernels only
gather from the table: the output is bit-identical to HF's for the same resized pixels. The
torchvision-based ("fast") processors fuse the two steps; ``build_lut_fast`` tabulates theirs.

The kernels are numba-compiled (``nopython``, ``nogil`` so threads overlap, ``cache=True`` so a
restarted server skips compilation; if the package directory is not writable they compile without
the on-disk cache). Without numba (``NUMBA_AVAILABLE`` False) the same functions run as numpy
fancy-indexing and reshapes: identical results, a few times slower and more memory. A torch twin
(``*_tensor``, from host pixels ``*_torch``) does the same on a device for ``device="cuda"``.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Sequence

import numpy as np

log = logging.getLogger(__name__)

try:  # numba is a pinned requirement; the fallback keeps the package importable without it
    import numba as _numba

    NUMBA_AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only where numba is missing
    _numba = None
    NUMBA_AVAILABLE = False


def _jit(fn: Callable[..., Any]) -> Callable[..., Any]:
    if not NUMBA_AVAILABLE:
        return fn
    try:
        return _numba.njit(cache=True, nogil=True)(fn)
    except Exception:  # noqa: BLE001 (read-only install: no cache locator; compile in memory instead)
        log.warning("numba on-disk cache unavailable for %s; compiling without it", fn.__name__)
        return _numba.njit(cache=False, nogil=True)(fn)


def build_lut(
    do_rescale: bool,
    rescale_factor: float,
    do_normalize: bool,
    image_mean: Sequence[float],
    image_std: Sequence[float],
) -> np.ndarray:
    """(3, 256) float32 table: value of channel c for input byte v, computed as HF computes it."""
    x = np.tile(np.arange(256, dtype=np.uint8), (3, 1))  # (C, 256), channel-first like HF
    if do_rescale:
        v = (x.astype(np.float64) * rescale_factor).astype(np.float32)
    else:
        v = x.astype(np.float32)
    if do_normalize:
        mean = np.array(image_mean, dtype=np.float32)
        std = np.array(image_std, dtype=np.float32)
        v = ((v.T - mean) / std).T  # the exact expression of transformers' normalize()
    return np.ascontiguousarray(v, dtype=np.float32)


def build_lut_fast(
    do_rescale: bool,
    rescale_factor: float,
    do_normalize: bool,
    image_mean: Sequence[float],
    image_std: Sequence[float],
) -> np.ndarray:
    """(3, 256) float32 table of the torchvision-backed processors' values: with both steps on they
    fold the rescale into mean and std (``mean / factor``, ``std / factor`` as float32 tensors) and
    compute ``(float32(x) - mean') / std'``; one step alone is ``x * factor`` or ``(x - mean) / std``.
    Run with torch's own operators on every byte value, so the table holds exactly their results."""
    import torch

    x = torch.arange(256, dtype=torch.uint8).expand(3, 1, 256)  # (C, 1, 256): a 1 x 256 image per channel
    if do_normalize:
        mean, std = torch.tensor(image_mean), torch.tensor(image_std)
        if do_rescale:
            mean, std = mean * (1.0 / rescale_factor), std * (1.0 / rescale_factor)
        v = x.to(torch.float32).sub_(mean.view(-1, 1, 1)).div_(std.view(-1, 1, 1))
    elif do_rescale:
        v = x * rescale_factor
    else:
        v = x.to(torch.float32)
    return np.ascontiguousarray(v.reshape(3, 256).numpy(), dtype=np.float32)


@_jit
def _normalize_chw_nb(img: np.ndarray, lut: np.ndarray, out: np.ndarray) -> None:
    h, w, c = img.shape
    for ch in range(c):
        row = lut[ch]
        for y in range(h):
            for x in range(w):
                out[ch, y, x] = row[img[y, x, ch]]


@_jit
def _patchify_qwen_nb(img: np.ndarray, lut: np.ndarray, patch: int, merge: int, temporal: int, out: np.ndarray) -> None:
    h, w, c = img.shape
    gh = h // patch
    gw = w // patch
    bh_n = gh // merge
    bw_n = gw // merge
    pp = patch * patch
    for bh in range(bh_n):
        for bw in range(bw_n):
            for mh in range(merge):
                for mw in range(merge):
                    r = ((bh * bw_n + bw) * merge + mh) * merge + mw
                    y0 = (bh * merge + mh) * patch
                    x0 = (bw * merge + mw) * patch
                    for ch in range(c):
                        row = lut[ch]
                        for t in range(temporal):
                            base = (ch * temporal + t) * pp
                            for py in range(patch):
                                for px in range(patch):
                                    out[r, base + py * patch + px] = row[img[y0 + py, x0 + px, ch]]


def normalize_chw(img: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 -> (3, H, W) through the table, in its dtype (Pixtral's ``pixel_values`` item)."""
    h, w, c = img.shape
    if not NUMBA_AVAILABLE:
        return np.ascontiguousarray(lut[np.arange(c)[:, None, None], np.moveaxis(img, -1, 0)])
    out = np.empty((c, h, w), dtype=lut.dtype)
    _normalize_chw_nb(np.ascontiguousarray(img), lut, out)
    return out


def patchify_qwen(img: np.ndarray, lut: np.ndarray, patch: int, merge: int, temporal: int) -> np.ndarray:
    """(H, W, 3) uint8 -> (grid_h*grid_w, 3*temporal*patch*patch) in the table's dtype (float32, or
    uint8 for the identity table of ``raw_pixels``), Qwen2-VL's layout.

    Rows are ordered (block_h, block_w, merge_h, merge_w), columns (channel, temporal, patch_h,
    patch_w); a still image repeats its frame over the temporal axis, as the HF processor does.
    """
    h, w, c = img.shape
    gh, gw = h // patch, w // patch
    if not NUMBA_AVAILABLE:
        chw = normalize_chw(img, lut)
        p = chw.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch)
        p = p.transpose(1, 4, 2, 5, 0, 3, 6)[:, :, :, :, :, None]
        p = np.broadcast_to(p, (*p.shape[:5], temporal, patch, patch))
        return np.ascontiguousarray(p.reshape(gh * gw, c * temporal * patch * patch))
    out = np.empty((gh * gw, c * temporal * patch * patch), dtype=lut.dtype)
    _patchify_qwen_nb(np.ascontiguousarray(img), lut, patch, merge, temporal, out)
    return out


# --- torch twins for the device path (same table, same layout) ---------------------------------
# On a device the pixels are a (3, H, W) uint8 tensor there (uploaded, or decoded there); the
# table is gathered per byte as on the CPU, so the values are the CPU table's bit for bit.


def upload_chw(img: np.ndarray, device: str) -> Any:
    """(H, W, 3) uint8 pixels as a (3, H, W) contiguous uint8 tensor on ``device``: the layout
    transformers' ``process_image`` moves to the device (uint8, 1 byte a value over the bus; made
    channel-first there, where the copy is cheap)."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a read-only buffer: only read, then copied
        t = torch.from_numpy(img)
    return t.to(device).permute(2, 0, 1).contiguous()


def lut_tensor(lut: np.ndarray, device: str) -> Any:
    """The (3, 256) table on ``device``, flattened for the gather."""
    import torch

    return torch.from_numpy(lut).to(device).reshape(-1)


def normalize_chw_tensor(chw: Any, table: Any) -> Any:
    """(3, H, W) uint8 tensor -> (3, H, W) float32 through the flattened table, on its device."""
    import torch

    offsets = torch.arange(chw.shape[0], device=chw.device).view(-1, 1, 1) * 256
    return table[chw.long() + offsets]


def patchify_qwen_tensor(chw: Any, table: Any, patch: int, merge: int, temporal: int) -> Any:
    """(3, H, W) uint8 tensor -> Qwen2-VL's (grid_h*grid_w, 3*temporal*patch*patch) float32."""
    p = normalize_chw_tensor(chw, table)
    c, h, w = p.shape
    gh, gw = h // patch, w // patch
    p = p.reshape(c, gh // merge, merge, patch, gw // merge, merge, patch)
    p = p.permute(1, 4, 2, 5, 0, 3, 6).unsqueeze(5).expand(-1, -1, -1, -1, -1, temporal, -1, -1)
    return p.reshape(gh * gw, c * temporal * patch * patch).contiguous()


def normalize_chw_torch(img: np.ndarray, lut: np.ndarray, device: str) -> Any:
    """``normalize_chw`` on ``device`` from host pixels."""
    return normalize_chw_tensor(upload_chw(img, device), lut_tensor(lut, device))


def patchify_qwen_torch(img: np.ndarray, lut: np.ndarray, patch: int, merge: int, temporal: int, device: str) -> Any:
    """``patchify_qwen`` on ``device`` from host pixels."""
    return patchify_qwen_tensor(upload_chw(img, device), lut_tensor(lut, device), patch, merge, temporal)


def warmup() -> None:
    """Compile (or load from cache) every kernel once so the first request does not pay for it."""
    lut = build_lut(True, 1 / 255, True, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    img = np.zeros((28, 28, 3), dtype=np.uint8)
    normalize_chw(img, lut)
    patchify_qwen(img, lut, 14, 2, 2)
