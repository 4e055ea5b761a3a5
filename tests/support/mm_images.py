"""Deterministic test images, generated in memory from a seeded numpy generator.

``IMAGES`` maps a name to a factory returning a fresh ``PIL.Image``; ``encode`` turns one into
bytes of a given format and ``data_url`` into a base64 data URL. Images mix smooth gradients
with seeded noise so resampling filters see both edges and flat areas.
"""

from __future__ import annotations

import base64
import functools
import io
import struct
import zlib
from typing import Callable

import numpy as np
from PIL import Image

SEED = 1234


def _pixels(h: int, w: int, c: int, seed: int, block: int = 1) -> np.ndarray:
    rng = np.random.default_rng(SEED + seed)
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), ((xx + yy) * 7) % 256], -1)
    base = np.concatenate([base] * ((c + 2) // 3), -1)[..., :c]
    # block > 1: noise constant over block x block squares, so big images stay a few MB as PNG
    noise = rng.integers(-40, 41, size=(-(-h // block), -(-w // block), c))
    noise = noise.repeat(block, 0).repeat(block, 1)[:h, :w]
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def rgb(w: int, h: int, seed: int = 0, block: int = 1) -> Image.Image:
    return Image.fromarray(_pixels(h, w, 3, seed, block), "RGB")


def rgba(w: int, h: int, seed: int = 1) -> Image.Image:
    px = _pixels(h, w, 4, seed)
    px[..., 3] = np.linspace(0, 255, w, dtype=np.uint8)[None, :]  # every alpha level, incl. 0 and 255
    return Image.fromarray(px, "RGBA")


def gray(w: int, h: int, seed: int = 2) -> Image.Image:
    return Image.fromarray(_pixels(h, w, 1, seed)[..., 0], "L")


def palette(w: int, h: int, seed: int = 3, transparency: bool = False) -> Image.Image:
    img = rgb(w, h, seed).quantize(colors=64, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    if transparency:
        img.info["transparency"] = 0  # palette index 0 is see-through
    return img


def la(w: int, h: int, seed: int = 4) -> Image.Image:
    px = _pixels(h, w, 2, seed)
    return Image.fromarray(px, "LA")


IMAGES: dict[str, Callable[[], Image.Image]] = {
    "rgb_640x480": lambda: rgb(640, 480),
    "rgba_300x200": lambda: rgba(300, 200),
    "gray_L_257x129": lambda: gray(257, 129),
    "palette_P_200x150": lambda: palette(200, 150),
    "palette_P_transparent_96x64": lambda: palette(96, 64, transparency=True),
    "la_50x70": lambda: la(50, 70),
    "one_pixel_1x1": lambda: rgb(1, 1, 5),
    "wide_2000x20": lambda: rgb(2000, 20, 6),
    "tall_20x2000": lambda: rgb(20, 2000, 7),
    "big_4000x3000": lambda: rgb(4000, 3000, 8, block=8),
    "tiny_3x5": lambda: rgb(3, 5, 9),
    "odd_333x77": lambda: rgb(333, 77, 10),
    "odd_1025x1023": lambda: rgb(1025, 1023, 11),
}


# Parity images (every mode the HF processors convert, and extreme shapes) and the tolerance of
# the device-parity checks: tests/unit/test_mm_unit.py (torch on CPU) and test_multimodal_live.py (CUDA).
PARITY_IMAGES = [
    "rgb_640x480",
    "rgba_300x200",
    "gray_L_257x129",
    "palette_P_200x150",
    "one_pixel_1x1",
    "wide_2000x20",
    "tiny_3x5",
    "odd_333x77",
]
DEVICE_PARITY_ATOL = 1e-5


def encode(img: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    opts = {"PNG": {"compress_level": 1}, "WEBP": {"lossless": True}}.get(fmt, {})
    img.save(buf, format=fmt, **opts)
    return buf.getvalue()


@functools.lru_cache(maxsize=None)
def png(name: str) -> bytes:
    """``IMAGES[name]`` as PNG bytes, encoded once per process."""
    return encode(IMAGES[name]())


def data_url(img_or_bytes: Image.Image | bytes, fmt: str = "PNG") -> str:
    data = img_or_bytes if isinstance(img_or_bytes, bytes) else encode(img_or_bytes, fmt)
    mime = {"PNG": "png", "JPEG": "jpeg", "BMP": "bmp", "WEBP": "webp", "GIF": "gif"}.get(fmt, "png")
    return f"data:image/{mime};base64," + base64.b64encode(data).decode()


def png_bomb_header(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares ``width`` x ``height`` (a decompression-bomb stand-in)."""

    def chunk(tag: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + tag + body + struct.pack(">I", zlib.crc32(tag + body) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\0" * 16)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


# JPEG photos for decoding on a device (benchmarks/gpu_check.py, tests/unit/test_mm_devices.py):
# the gradient-and-noise pixels at quality 90 with 4:2:0 chroma (Pillow's default, what cameras
# write), optionally tagged with an EXIF Orientation so the decoder's result must be turned upright.
JPEG_SIZES: dict[str, tuple[int, int]] = {"jpeg_640x480": (640, 480), "jpeg_4000x3000": (4000, 3000)}


@functools.lru_cache(maxsize=None)
def jpeg(w: int, h: int, orientation: int = 1, seed: int = 12) -> bytes:
    """A ``w`` x ``h`` JPEG (as stored: EXIF ``orientation`` says how to turn it upright)."""
    exif = Image.Exif()
    if orientation != 1:
        exif[0x0112] = orientation
    buf = io.BytesIO()
    rgb(w, h, seed, block=4 if w * h > 1_000_000 else 1).save(buf, format="JPEG", quality=90, exif=exif)
    return buf.getvalue()


def named_jpeg(name: str) -> bytes:
    """``JPEG_SIZES[name]`` as JPEG bytes, upright."""
    return jpeg(*JPEG_SIZES[name])
