"""Where ``mm_process`` works: the ``IMAGE_DEVICE`` / ``IMAGE_DECODE_DEVICE`` settings, and JPEG
decoding on a device.

``IMAGE_DEVICE`` (``auto``, ``cpu``, ``cuda``) is where images are resized, rescaled, normalized
and patched. ``cpu`` is the numba path. ``cuda`` is what vLLM runs with
``mm_processor_kwargs={"device": "cuda"}``: transformers' torchvision-based processors move the
uint8 image to the device and resize, rescale, normalize and patch it there
(``TorchvisionBackend.process_image`` / ``resize`` / ``rescale_and_normalize``). ``auto`` is
``cuda`` where the stage's instance is ``KIND_GPU``, else ``cpu``.

``IMAGE_DECODE_DEVICE`` (``cpu``, ``cuda``) is where JPEG images are decoded: ``cpu`` is Pillow, as
vLLM decodes; ``cuda`` is nvJPEG through ``torchvision.io.decode_jpeg(..., device=...)`` (opt-in:
its pixels may differ from Pillow's by a few grey levels, and with them the content hash). PNG and
every other format stay with Pillow. torchvision is imported lazily, and only when the setting asks
for it: a stage without it refuses to load (``ImageDecoderUnavailableError``) rather than falling
back silently.

Inside the processor a device is a torch device string: ``cpu`` (the numba path), ``cuda[:N]``, or
``cpu:0``, the device path's torch code on the CPU (what ``make test`` and the check's rehearsal run
so that every branch but the device itself is covered here).

Kept light: the launcher imports this module to resolve the setting (torch loads only in the
functions that need it).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..errors import (
    DecodeDeviceNeedsFastError,
    DecodeDeviceNeedsGPUError,
    DeviceChoiceError,
    DeviceFormatError,
    GPUInstanceRequiredError,
    ImageDecoderUnavailableError,
)

IMAGE_DEVICES = ("auto", "cpu", "cuda")
"""``IMAGE_DEVICE`` values."""

DECODE_DEVICES = ("cpu", "cuda")
"""``IMAGE_DECODE_DEVICE`` values."""

_DEVICE = re.compile(r"cpu(:0)?|cuda(:\d+)?")


def resolve_image_device(setting: str, instance_kind: str) -> str:
    """``IMAGE_DEVICE`` for an ``mm_process`` instance of ``instance_kind`` (``KIND_GPU`` /
    ``KIND_CPU``): ``auto`` follows the kind; ``cuda`` needs a GPU instance (a CPU instance is given
    no device by Triton, so it would take one behind the scheduler's back)."""
    if setting not in IMAGE_DEVICES:
        raise DeviceChoiceError("IMAGE_DEVICE", setting, IMAGE_DEVICES)
    if setting == "auto":
        return "cuda" if instance_kind == "KIND_GPU" else "cpu"
    if setting == "cuda" and instance_kind != "KIND_GPU":
        raise GPUInstanceRequiredError(setting, instance_kind)
    return setting


def check_device(device: str) -> None:
    """A processor's device: ``cpu``, ``cpu:0`` (the torch path on the CPU) or ``cuda[:N]``."""
    if not isinstance(device, str) or not _DEVICE.fullmatch(device):
        raise DeviceFormatError(device)


def on_torch(device: str) -> bool:
    """Whether ``device`` runs the torch code (every device but the numba path's plain ``cpu``)."""
    return device != "cpu"


def check_decode_setting(decode_device: str, device: str) -> None:
    """``IMAGE_DECODE_DEVICE`` against the processing device: a known value, and decoding on a
    device only where the pixels are processed on one (else they would only come back). What the
    launcher can check before anything starts."""
    if decode_device not in DECODE_DEVICES:
        raise DeviceChoiceError("IMAGE_DECODE_DEVICE", decode_device, DECODE_DEVICES)
    if decode_device != "cpu" and not on_torch(device):
        raise DecodeDeviceNeedsGPUError(decode_device, device)


def check_decode_device(decode_device: str, device: str, image_processor: str) -> str | None:
    """The device JPEG images are decoded on (None: Pillow on the CPU), after refusing what cannot
    run: ``check_decode_setting``'s refusals, device decoding with the PIL resize (it needs the
    pixels on the host), and device decoding without torchvision."""
    check_decode_setting(decode_device, device)
    if decode_device == "cpu":
        return None
    if image_processor != "fast":
        raise DecodeDeviceNeedsFastError(decode_device, image_processor)
    jpeg_decoder()  # refuses now, at load, rather than at the first JPEG
    return device


def jpeg_decoder() -> Callable[..., Any]:
    """``torchvision.io.decode_jpeg``, imported on first use (torchvision is optional)."""
    try:
        from torchvision.io import decode_jpeg
    except Exception as e:  # noqa: BLE001 (ImportError, or a torchvision built for another torch)
        raise ImageDecoderUnavailableError(e) from None
    return decode_jpeg


# PIL's ``ImageOps.exif_transpose``: EXIF Orientation -> the transpose it applies.
_EXIF_METHODS = {
    2: "FLIP_LEFT_RIGHT",
    3: "ROTATE_180",
    4: "FLIP_TOP_BOTTOM",
    5: "TRANSPOSE",
    6: "ROTATE_270",
    7: "TRANSVERSE",
    8: "ROTATE_90",
}


def orient(chw: Any, orientation: int) -> Any:
    """A (C, H, W) tensor turned upright as ``ImageOps.exif_transpose`` turns a Pillow image for
    ``orientation``: each transpose a pure permutation of pixels, so exact on any device.
    (torchvision's own ``apply_exif_orientation`` runs on the CPU only.)"""
    import torch

    method = _EXIF_METHODS.get(orientation)
    if method is None:
        return chw
    if method == "FLIP_LEFT_RIGHT":
        out = chw.flip(-1)
    elif method == "FLIP_TOP_BOTTOM":
        out = chw.flip(-2)
    elif method == "ROTATE_180":
        out = chw.flip(-2, -1)
    elif method == "ROTATE_90":  # Pillow's ROTATE_90 is counter-clockwise, as torch.rot90's k=1
        out = torch.rot90(chw, 1, dims=(-2, -1))
    elif method == "ROTATE_270":
        out = torch.rot90(chw, -1, dims=(-2, -1))
    elif method == "TRANSPOSE":  # across the main diagonal
        out = chw.transpose(-2, -1)
    else:  # TRANSVERSE: across the other diagonal
        out = chw.transpose(-2, -1).flip(-2, -1)
    return out.contiguous()


def decode_jpeg_on(data: bytes, device: str, orientation: int) -> Any:
    """JPEG bytes decoded to RGB on ``device`` (nvJPEG on a CUDA device; libjpeg on ``cpu:0``) and
    turned upright: a (3, H, W) uint8 tensor there. Raises what torchvision raises."""
    import torch

    decode_jpeg = jpeg_decoder()
    from torchvision.io import ImageReadMode

    raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # decode_jpeg takes a CPU tensor
    target = torch.device(device)
    chw = decode_jpeg(raw, mode=ImageReadMode.RGB, device=target if target.type == "cuda" else "cpu")
    return orient(chw, orientation)
