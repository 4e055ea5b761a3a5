"""Loading images from what a request carries, within limits.

Sources, in order of trust:

* ``data:`` URLs (``data:image/png;base64,...``) and raw bytes: always accepted.
* ``file:`` URLs and local paths: only under ``MediaLimits.allowed_local_dir`` (vLLM's
  ``--allowed-local-media-path``); the path is resolved first, so ``..`` and symlinks that leave
  the directory are refused.
* ``http(s):`` URLs: refused unless the host is in ``MediaLimits.allowed_hosts`` (vLLM's
  ``--allowed-media-domains``); an allow-listed URL is fetched with ``urllib`` under the byte cap.

Guards: encoded size (``max_bytes``, checked on the base64 length before decoding), the pixel
count declared in the image header (``max_pixels``, checked before any pixel is decoded, so a
decompression bomb costs only its header), Pillow's own ``DecompressionBombError``, truncated or
non-image data. Every refusal is a named ``MediaLoadError`` subclass. Only the Pillow formats
vLLM opens are opened (``ALLOWED_IMAGE_FORMATS``): PostScript, PDF and the like are refused by
name before any plugin of theirs runs.

Orientation follows vLLM: an EXIF Orientation tag is applied (``ImageOps.exif_transpose``) before
anything else sees the pixels, so a portrait phone photo is processed, and hashed, upright.

Colour handling follows the Hugging Face image processors (``transformers.image_transforms.
convert_to_rgb``): an image with an alpha band or a ``transparency`` entry (palette PNGs, GIFs)
is converted to RGBA and alpha-composited onto opaque white; any other mode (L, P, CMYK, I;16,
...) is ``convert("RGB")``. vLLM's own loader pastes RGBA onto white with the alpha as mask,
which can differ from compositing by one grey level on semi-transparent pixels; we match HF
because the processed tensors are compared with HF's processors.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping
from urllib.parse import unquote, urlparse

import numpy as np

from .. import stage_params as sp
from ..errors import (
    Base64DigitError,
    DataURLEncodingError,
    DataURLSeparatorError,
    EmptyImageError,
    ImageBombError,
    ImageDecodeError,
    ImageDecoderUnavailableError,
    ImageFormatError,
    ImageTooLargeError,
    LocalMediaDisabledError,
    MediaFetchError,
    MediaFileMissingError,
    MediaHostError,
    MediaIOImageModeError,
    MediaIOKwargsTypeError,
    MediaIOModalityError,
    MediaIOOptionError,
    MediaIOOptionsTypeError,
    MediaLoadError,
    MediaPathOutsideError,
    MediaSchemeError,
    MediaSourceTypeError,
    MediaTooLargeError,
    MultiModalLimitError,
)
from ..media_defaults import (
    DEFAULT_FETCH_TIMEOUT_S,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ITEMS_PER_PROMPT,
    DEFAULT_MAX_PIXELS,
)
from ..model_info import config_number

if TYPE_CHECKING:
    from PIL import Image


@dataclass(frozen=True)
class MediaLimits:
    """What the multimodal stage accepts per item and per prompt."""

    max_bytes: int = DEFAULT_MAX_BYTES
    """Largest encoded item in bytes (the decoded bytes of a data URL, a file, a download)."""

    max_pixels: int = DEFAULT_MAX_PIXELS
    """Largest width x height an image header may declare."""

    max_items: Mapping[str, int] = field(default_factory=lambda: {"image": DEFAULT_MAX_ITEMS_PER_PROMPT})
    """Most items per prompt, by modality (vLLM's ``--limit-mm-per-prompt``)."""

    allowed_local_dir: str | None = None
    """Directory local paths and ``file:`` URLs must resolve under; None refuses them all."""

    allowed_hosts: tuple[str, ...] = ()
    """Hosts ``http(s)`` URLs may name (exact, case-insensitive); empty refuses every URL."""

    fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S
    """Timeout of one allow-listed download."""

    @classmethod
    def from_config(cls, params: Mapping[str, str]) -> "MediaLimits":
        """From a model config's parameters (what the launcher writes from its settings); an
        absent or empty parameter keeps its default."""

        return cls(
            max_bytes=config_number(params, sp.MAX_IMAGE_BYTES, int, DEFAULT_MAX_BYTES),
            max_pixels=config_number(params, sp.MAX_IMAGE_PIXELS, int, DEFAULT_MAX_PIXELS),
            max_items={"image": config_number(params, sp.LIMIT_MM_PER_PROMPT, int, DEFAULT_MAX_ITEMS_PER_PROMPT)},
            allowed_local_dir=params.get(sp.MEDIA_DIR) or None,
            allowed_hosts=tuple(h.strip() for h in params.get(sp.MEDIA_HOSTS, "").split(",") if h.strip()),
            fetch_timeout_s=config_number(params, sp.MEDIA_FETCH_TIMEOUT_S, float, DEFAULT_FETCH_TIMEOUT_S),
        )

    def limit_for(self, modality: str) -> int:
        return int(self.max_items.get(modality, 0))


def check_item_count(modality: str, count: int, limits: MediaLimits) -> None:
    """vLLM's per-prompt limit check, with its message."""
    limit = limits.limit_for(modality)
    if count > limit:
        raise MultiModalLimitError(limit, modality)


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image, converted to RGB the way the HF image processors do."""

    rgb: np.ndarray
    """Pixels, uint8, shape (height, width, 3), C-contiguous and read-only."""

    source_mode: str
    """Pillow mode of the decoded image before conversion ("RGBA", "P", "L", ...)."""

    source_format: str | None
    """Pillow format name ("PNG", "JPEG", "BMP", ...)."""

    pixels: Any = None
    """The same pixels as a (3, H, W) uint8 torch tensor on the device they were decoded on
    (``IMAGE_DECODE_DEVICE``), for the device path to process in place; None when decoded by
    Pillow. ``rgb`` is always there too: the content hash is taken on the host."""

    @property
    def height(self) -> int:
        return int(self.rgb.shape[0])

    @property
    def width(self) -> int:
        return int(self.rgb.shape[1])


# vLLM's ImageMediaIO takes these per-modality options; only RGB output is meaningful for the
# processors here, so "image_mode" is accepted when it asks for RGB.
_MEDIA_IO_KEYS = {"image": {"image_mode"}}


def check_media_io_kwargs(media_io_kwargs: Mapping[str, Any] | None) -> None:
    """Refuse media IO options we would otherwise silently ignore."""
    if not media_io_kwargs:
        return
    if not isinstance(media_io_kwargs, Mapping):
        raise MediaIOKwargsTypeError(type(media_io_kwargs).__name__)
    for modality, opts in media_io_kwargs.items():
        if modality not in _MEDIA_IO_KEYS:
            raise MediaIOModalityError(modality, set(_MEDIA_IO_KEYS))
        if not isinstance(opts, Mapping):
            raise MediaIOOptionsTypeError(modality)
        unknown = set(opts) - _MEDIA_IO_KEYS[modality]
        if unknown:
            raise MediaIOOptionError(modality, unknown)
        mode = opts.get("image_mode", "RGB")
        if mode != "RGB":
            raise MediaIOImageModeError(modality, mode)


def load_image(source: str | bytes, limits: MediaLimits, decode_on: str | None = None) -> LoadedImage:
    """Load one image from a data URL, ``file:`` URL / local path, allow-listed URL or raw bytes."""
    return decode_image(read_media_bytes(source, limits), limits, decode_on)


def read_media_bytes(source: str | bytes, limits: MediaLimits) -> bytes:
    """The encoded bytes an image source refers to, after every source and size check."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        _check_size(len(data), limits)
        return data
    if not isinstance(source, str):
        raise MediaSourceTypeError(type(source).__name__)
    if source.startswith("data:"):
        return _decode_data_url(source, limits)
    scheme = urlparse(source).scheme.lower()
    if scheme in ("http", "https"):
        return _fetch_http(source, limits)
    if scheme == "file":
        return _read_local(unquote(urlparse(source).path), limits)
    if scheme == "" or (len(scheme) == 1 and os.name == "nt"):
        return _read_local(source, limits)
    raise MediaSchemeError(scheme, local_files=bool(limits.allowed_local_dir), hosts=bool(limits.allowed_hosts))


def may_be_data_url_within_limit(source: Any, limits: MediaLimits) -> bool:
    """Whether ``source`` is a data URL short enough that its payload could be within the byte
    limit: every URL ``read_media_bytes`` accepts passes, so a cheap bound before hashing it."""
    return isinstance(source, str) and source.startswith("data:") and (len(source) - 5) * 3 // 4 <= limits.max_bytes + 3


def _check_size(n: int, limits: MediaLimits) -> None:
    if n > limits.max_bytes:
        raise MediaTooLargeError(n, limits.max_bytes)


def _decode_data_url(url: str, limits: MediaLimits) -> bytes:
    # vLLM's reading of RFC 2397 (its MediaConnector): the last parameter must be exactly
    # "base64"; the media type is not checked (the bytes say what they are); its messages.
    spec, sep, payload = url[len("data:") :].partition(",")
    if not sep:
        raise DataURLSeparatorError(url)
    _, sep, encoding = spec.rpartition(";")
    if not sep or encoding != "base64":
        raise DataURLEncodingError()
    # Base64 inflates by 4/3: refuse on the encoded length before allocating the decoded bytes.
    if len(payload) * 3 // 4 > limits.max_bytes + 3:
        raise MediaTooLargeError(len(payload) * 3 // 4, limits.max_bytes, approximate=True)
    try:
        # Strict, whitespace included, as vLLM decodes (pybase64, validate=True), which answers
        # every malformed input with this one message.
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise Base64DigitError() from None
    _check_size(len(data), limits)
    return data


def _read_local(path: str, limits: MediaLimits) -> bytes:
    if not limits.allowed_local_dir:
        raise LocalMediaDisabledError()
    root = Path(limits.allowed_local_dir).resolve()
    p = Path(path)
    candidate = p if p.is_absolute() else root / p
    # resolve() follows every symlink and collapses "..": the result must stay under root.
    resolved = candidate.resolve()
    if resolved != root and root not in resolved.parents:
        raise MediaPathOutsideError(path)
    if not resolved.is_file():
        raise MediaFileMissingError(path)
    size = resolved.stat().st_size
    _check_size(size, limits)
    with open(resolved, "rb") as f:
        data = f.read(limits.max_bytes + 1)  # the file may have grown since stat
    _check_size(len(data), limits)
    return data


def _fetch_http(url: str, limits: MediaLimits) -> bytes:
    host = (urlparse(url).hostname or "").lower()
    allowed = {h.lower() for h in limits.allowed_hosts}
    if host not in allowed:
        raise MediaHostError(host or url, any_allowed=bool(allowed))
    import urllib.request

    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:  # a redirect could leave the allow-list
            return None

    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=limits.fetch_timeout_s) as resp:  # noqa: S310 - allow-listed host
            length = resp.headers.get("Content-Length")
            if length is not None and length.isdigit():
                _check_size(int(length), limits)
            data = resp.read(limits.max_bytes + 1)
    except MediaLoadError:
        raise
    except Exception as e:  # noqa: BLE001 (network errors of every kind become one client error)
        raise MediaFetchError(url, e) from None
    _check_size(len(data), limits)
    return data


# The Pillow formats vLLM 0.32 opens images with (vllm/multimodal/image.py); the rest of Pillow's
# (EPS and PDF through Ghostscript, among others) are refused.
ALLOWED_IMAGE_FORMATS = (
    "BLP", "BMP", "CUR", "DCX", "DDS", "DIB", "FITS", "FLI", "FTEX", "GBR", "GIF", "ICNS", "ICO", "IM", "IMT",
    "IPTC", "JPEG", "JPEG2000", "MCIDAS", "MSP", "PCD", "PCX", "PIXAR", "PNG", "PPM", "PSD", "QOI", "SGI",
    "SPIDER", "SUN", "TGA", "TIFF", "WEBP", "XBM", "XPM", "XVTHUMB",
)  # fmt: skip
_EXIF_ORIENTATION = 0x0112


def decode_image(data: bytes, limits: MediaLimits, decode_on: str | None = None) -> LoadedImage:
    """Decode image bytes, checking the header's pixel count before decoding pixels. Failures
    carry vLLM's words (``Failed to load image: `` and Pillow's message, its memory address
    dropped as vLLM's error handler drops it).

    ``decode_on`` (a torch device, ``IMAGE_DECODE_DEVICE``): a complete three-component JPEG is
    decoded there by torchvision (``devices.decode_jpeg_on``), EXIF orientation applied to the
    tensor; anything else, and any JPEG torchvision fails on, goes to Pillow, whose refusal then
    carries vLLM's words."""
    from PIL import Image

    try:
        img = Image.open(io.BytesIO(data), formats=ALLOWED_IMAGE_FORMATS)  # lazy: reads the header only
    except Image.DecompressionBombError as e:
        # vLLM lets this one through as a 500 with Pillow's words; a client error here.
        raise ImageBombError(_sanitized(e)) from None
    except Image.UnidentifiedImageError as e:  # not an image, or a format vLLM does not open
        raise ImageFormatError(_sanitized(e)) from None
    except Exception as e:  # noqa: BLE001 (each format plugin raises its own kinds)
        raise ImageDecodeError(_sanitized(e)) from None
    width, height = img.size
    if width < 1 or height < 1:
        raise EmptyImageError(width, height)
    if width * height > limits.max_pixels:
        raise ImageTooLargeError(width, height, limits.max_pixels)
    fmt = img.format
    if decode_on is not None and fmt == "JPEG" and img.mode == "RGB" and _ends_complete(data):
        on_device = _decode_jpeg_on(data, decode_on, _orientation(img))
        if on_device is not None:
            return on_device
    try:
        img = _upright(img)
        img.load()
    except Image.DecompressionBombError as e:
        raise ImageBombError(_sanitized(e)) from None
    except Exception as e:  # noqa: BLE001 (truncated streams raise OSError, corrupt ones assorted errors)
        raise ImageDecodeError(_sanitized(e)) from None
    mode = img.mode
    rgb = to_rgb_array(img)
    return LoadedImage(rgb=rgb, source_mode=mode, source_format=fmt)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")


def _sanitized(e: BaseException) -> str:
    """An exception's message without object addresses (``<_io.BytesIO object at 0x..>``), as vLLM
    sanitizes the messages it returns."""
    return _ADDRESS.sub(">", str(e))


def _orientation(img: "Image.Image") -> int:
    """The EXIF Orientation tag from the header Pillow read (1, upright, when absent or unreadable)."""
    try:
        orientation = img.getexif().get(_EXIF_ORIENTATION, 1)
    except Exception:  # noqa: BLE001 (a malformed EXIF block: vLLM ignores it too)
        return 1
    return orientation if isinstance(orientation, int) else 1


def _ends_complete(data: bytes) -> bool:
    """Whether JPEG bytes end with the end-of-image marker: a truncated file, which Pillow refuses
    ("image file is truncated"), goes to Pillow rather than to a decoder that may fill it in."""
    return data.rstrip(b"\0")[-2:] == b"\xff\xd9"


def _decode_jpeg_on(data: bytes, device: str, orientation: int) -> LoadedImage | None:
    """The JPEG decoded on ``device`` and made upright; None where torchvision fails on it (Pillow
    then decodes it, or refuses it in vLLM's words)."""
    from . import devices

    try:
        chw = devices.decode_jpeg_on(data, device, orientation)
    except ImageDecoderUnavailableError:
        raise  # a deployment error (the processor refuses it at load): never hidden by Pillow
    except (RuntimeError, ValueError):  # nvJPEG's and libjpeg's refusals of the data
        return None
    # The host copy the content hash reads (vLLM's identity is a hash of these pixels).
    # Made (H, W, 3)-contiguous where the pixels are (on a GPU, fast), then one copy to the host.
    rgb = chw.permute(1, 2, 0).contiguous().cpu().numpy()
    rgb.flags.writeable = False
    return LoadedImage(rgb=rgb, source_mode="RGB", source_format="JPEG", pixels=chw)


def _upright(img: "Image.Image") -> "Image.Image":
    """vLLM's orientation rule: the EXIF Orientation tag applied, as ``ImageOps.exif_transpose``
    does. Images without a tag (or with 1, upright) skip it: the transpose would only copy."""
    from PIL import ImageOps

    orientation = _orientation(img)
    if orientation == 1:
        return img
    try:
        return ImageOps.exif_transpose(img)
    except Exception:  # noqa: BLE001 (vLLM suppresses every transpose failure and keeps the image)
        return img


def to_rgb_array(img: "Image.Image") -> np.ndarray:
    """HF's ``convert_to_rgb``: transparency composited onto white, then an (H, W, 3) uint8 array."""
    from PIL import Image

    has_alpha = "A" in img.getbands() or img.info.get("transparency") is not None
    if has_alpha:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        rgb_img = Image.alpha_composite(background, rgba).convert("RGB")
    else:
        rgb_img = img if img.mode == "RGB" else img.convert("RGB")
    arr = np.ascontiguousarray(np.asarray(rgb_img, dtype=np.uint8))
    arr.flags.writeable = False
    return arr
