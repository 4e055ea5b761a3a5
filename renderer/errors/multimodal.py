"""Media and multimodal parameters: loading, decoding and size limits, uuids, the processor's
kwargs, and the image settings the multimodal stage loads with.
"""

from __future__ import annotations

from .base import RenderError
from .prompt import PromptError


class UntrustedMultiModalKwargsError(RenderError):
    """A request supplied ``mm_processor_kwargs`` or ``media_io_kwargs`` and the server does not
    trust them (vLLM's ``--trust-request-mm-kwargs``, off by default)."""


class MultiModalLimitError(PromptError):
    """More items of one modality than ``LIMIT_MM_PER_PROMPT`` allows (vLLM's ``--limit-mm-per-prompt``)."""

    def __init__(self, limit: int, modality: str) -> None:
        super().__init__(f"At most {limit} {modality}(s) may be provided in one prompt.")


class MultiModalError(RenderError):
    """A media item or multimodal parameter the multimodal stage refuses."""


class MediaLoadError(MultiModalError):
    """Media that cannot be loaded: bad data URL, bad base64, unreadable or refused source."""


class MediaURLError(MediaLoadError):
    """A media URL whose scheme, host or path is not allowed (no network, outside the media dir)."""


class MediaTooLargeError(MediaLoadError):
    """Encoded media larger than the configured byte limit."""


class ImageDecodeError(MediaLoadError):
    """Bytes that are not an image Pillow can decode, or a truncated image."""


class ImageFormatError(ImageDecodeError):
    """Image bytes in a format vLLM does not open (its allow-list of Pillow formats)."""


class ImageTooLargeError(MediaLoadError):
    """An image whose header declares more pixels than allowed (decompression-bomb guard)."""


class ImageAspectRatioError(MultiModalError):
    """An image too elongated for the model's resize rule (Qwen2-VL's smart_resize refuses > 200)."""


class MultiModalUUIDError(MultiModalError):
    """``multi_modal_uuids`` inconsistent with ``multi_modal_data`` (vLLM's wording)."""


class MultiModalCacheMissError(MultiModalError):
    """An item given only by ``uuid`` that the processor cache does not hold."""


class MultiModalPlaceholderCountError(MultiModalError):
    """The prompt's placeholder tokens do not match the number of media items (vLLM's wording)."""


class MultiModalProcessorKwargsError(MultiModalError):
    """``mm_processor_kwargs`` / ``media_io_kwargs`` with unknown keys or bad values."""


class UnsupportedMultiModalError(MultiModalError):
    """A modality, input kind or model family the multimodal stage does not support."""


class UnsupportedImageProcessorError(UnsupportedMultiModalError):
    """An ``IMAGE_PROCESSOR`` setting that is not "fast" or "slow", or a model whose resampling
    filter the chosen processor cannot run (a deployment error, raised when the stage loads)."""


class ImageDeviceError(UnsupportedMultiModalError):
    """An ``IMAGE_DEVICE`` / ``IMAGE_DECODE_DEVICE`` setting that cannot run here (a deployment
    error, raised when the launcher renders the repository or the stage loads)."""

    def __init__(self, setting: str, value: object, why: str) -> None:
        super().__init__(f"{setting}={value} {why}")


class ImageDecoderUnavailableError(ImageDeviceError):
    """``IMAGE_DECODE_DEVICE=cuda`` where torchvision (its ``decode_jpeg``) cannot be imported."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "IMAGE_DECODE_DEVICE",
            "cuda",
            f"decodes JPEG images with torchvision.io.decode_jpeg, which cannot be imported here ({reason}); "
            "install torchvision beside torch, or set IMAGE_DECODE_DEVICE=cpu (Pillow, as vLLM decodes).",
        )
