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
    """Media that cannot be loaded: bad data URL, bad base64, unreadable or refused source. The
    group: each way is a subclass that words its own message."""


class MediaSourceTypeError(MediaLoadError):
    """An image given as something other than a URL string or bytes."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"An image must be given as a URL string or bytes, got {kind}.")


class DataURLSeparatorError(MediaLoadError):
    """A data URL without the ``,`` between its header and its payload (vLLM's words)."""

    def __init__(self, url: str) -> None:
        super().__init__(f"Invalid data URL {url[:32]!r}: missing ',' separator.")


class DataURLEncodingError(MediaLoadError):
    """A data URL whose last parameter is not ``base64`` (vLLM's words)."""

    def __init__(self) -> None:
        super().__init__("Only base64 data URLs are supported for now.")


class Base64DigitError(MediaLoadError):
    """A data URL payload that is not strict base64: pybase64's one message for every malformed
    input, as vLLM answers it."""

    def __init__(self) -> None:
        super().__init__("Non-base64 digit found")


class MediaFileMissingError(MediaLoadError):
    """A local media path, inside the allowed directory, that names no file."""

    def __init__(self, path: str) -> None:
        super().__init__(f"The file {path!r} does not exist under the allowed media directory.")


class MediaFetchError(MediaLoadError):
    """An allowed http(s) URL that could not be fetched; ``reason`` is the network error's own text."""

    def __init__(self, url: str, reason: object) -> None:
        super().__init__(f"Could not fetch the image from {url!r}: {reason}")


class MediaURLError(MediaLoadError):
    """A media URL whose scheme, host or path is not allowed (no network, outside the media dir).
    The group: each refusal is a subclass that words its own message."""


class MediaSchemeError(MediaURLError):
    """An image URL of a scheme this server does not load; the message lists the ways it does."""

    def __init__(self, scheme: str, local_files: bool, hosts: bool) -> None:
        super().__init__(
            f"Unsupported image URL scheme {scheme!r}: use a data URL (data:image/...;base64,...)"
            + (", a file: URL under the allowed media directory" if local_files else "")
            + (", or an http(s) URL on an allowed host" if hosts else "")
            + "."
        )


class LocalMediaDisabledError(MediaURLError):
    """A local file (a path or a ``file:`` URL) where no allowed media directory is configured."""

    def __init__(self) -> None:
        super().__init__("Loading local files is not allowed: no allowed media directory is configured.")


class MediaPathOutsideError(MediaURLError):
    """A local path that resolves (symlinks and ``..`` followed) outside the allowed media directory."""

    def __init__(self, path: str) -> None:
        super().__init__(f"The file {path!r} is outside the allowed media directory.")


class MediaHostError(MediaURLError):
    """An http(s) URL whose host is not allowed; ``host`` is the URL itself when it names none."""

    def __init__(self, host: str, any_allowed: bool) -> None:
        super().__init__(
            f"Fetching images from {host!r} is not allowed: "
            + ("the host is not in the allowed media hosts." if any_allowed else "no media hosts are allowed.")
        )


class MediaTooLargeError(MediaLoadError):
    """Encoded media larger than the configured byte limit; ``approximate`` when the size is the
    one a base64 payload's length implies, before decoding it."""

    def __init__(self, size: int, limit: int, approximate: bool = False) -> None:
        about = "about " if approximate else ""
        super().__init__(f"The image is {about}{size} bytes, more than the limit of {limit} bytes.")


class ImageDecodeError(MediaLoadError):
    """Bytes that are not an image Pillow can decode, or a truncated image: vLLM's words, then
    Pillow's own message (free-form, its memory addresses dropped) as ``detail``."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"Failed to load image: {detail}")


class ImageFormatError(ImageDecodeError):
    """Image bytes in a format vLLM does not open (its allow-list of Pillow formats); ``detail``
    is Pillow's message."""


class EmptyImageError(ImageDecodeError):
    """An image whose header declares no pixels (a width or height of 0)."""

    def __init__(self, width: int, height: int) -> None:
        # Its own words, not ImageDecodeError's "Failed to load image" over a library's message.
        RenderError.__init__(self, f"The image has an empty size {width}x{height}.")


class ImageTooLargeError(MediaLoadError):
    """An image whose header declares more pixels than allowed (decompression-bomb guard)."""

    def __init__(self, width: int, height: int, limit: int) -> None:
        super().__init__(
            f"Image dimensions {width}x{height} ({width * height} pixels) exceed the maximum of "
            f"{limit} pixels. Set MAX_IMAGE_PIXELS to increase this limit."
        )


class ImageBombError(ImageTooLargeError):
    """An image Pillow itself refuses as a decompression bomb; ``detail`` is Pillow's message
    (free-form, its memory addresses dropped)."""

    def __init__(self, detail: str) -> None:
        # Pillow's words, not ImageTooLargeError's template: Pillow measured the image, not us.
        RenderError.__init__(self, detail)


class ImageAspectRatioError(MultiModalError):
    """An image too elongated for the model's resize rule (Qwen2-VL's smart_resize refuses > 200,
    in transformers' words); ``ratio`` is the longer side over the shorter."""

    def __init__(self, ratio: float) -> None:
        super().__init__(f"absolute aspect ratio must be smaller than 200, got {ratio}")


class MultiModalUUIDError(MultiModalError):
    """``multi_modal_uuids`` inconsistent with ``multi_modal_data`` (vLLM's wording): an empty
    item (or, without ``index``, an empty modality) with no uuid to stand for it."""

    def __init__(self, modality: str, index: int | None = None) -> None:
        at = "" if index is None else f"[{index}]"
        super().__init__(
            f"multi_modal_data[{modality!r}]{at} is empty but multi_modal_uuids[{modality!r}]{at} is missing."
        )


class MultiModalUUIDLengthError(MultiModalUUIDError):
    """``multi_modal_uuids`` for a modality not as long as its ``multi_modal_data`` (vLLM's wording)."""

    def __init__(self, modality: str, uuids: int, items: int) -> None:
        RenderError.__init__(
            self,
            f"If given, multi_modal_uuids[{modality!r}] must have same length as multi_modal_data[{modality!r}], "
            f"but got {uuids} vs {items}.",
        )


class MultiModalCacheMissError(MultiModalError):
    """An item given only by ``uuid`` that the processor cache does not hold."""

    def __init__(self, index: int, uuid: object) -> None:
        super().__init__(
            f"multi_modal_data['image'][{index}] is empty and multi_modal_uuids['image'][{index}]="
            f"{uuid!r} is not in the processor cache (never sent, or evicted); send the "
            "image data with that uuid again."
        )


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
