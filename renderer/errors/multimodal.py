"""Media and multimodal parameters: loading, decoding and size limits, uuids, the processor's
kwargs, and the image settings the multimodal stage loads with.
"""

from __future__ import annotations

from .base import RenderError
from .prompt import PromptError


class UntrustedMultiModalKwargsError(RenderError):
    """A request supplied ``mm_processor_kwargs`` or ``media_io_kwargs`` (``name``) and the server
    does not trust them (vLLM's ``--trust-request-mm-kwargs``, off by default); ``what`` is the
    work they change (vLLM's words)."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(
            f"Per-request {name} are disabled by default because they can change multimodal {what} resource "
            "usage. Start the server with --trust-request-mm-kwargs only when clients are trusted.",
            parameter=name,
        )


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
    """The prompt's placeholder tokens (``found`` of them) do not match the number of media items
    (vLLM's wording)."""

    def __init__(self, items: int, found: int) -> None:
        super().__init__(
            f"Expected there to be {items} prompt updates corresponding to {items} image items, but instead "
            f"found {found} prompt updates! This is likely because you forgot to include input "
            "placeholder tokens (e.g., `<image>`, `<|image_pad|>`) in the prompt. If the model has a chat "
            "template, make sure you have applied it before calling `LLM.generate`."
        )


class MultiModalProcessorKwargsError(MultiModalError):
    """``mm_processor_kwargs`` / ``media_io_kwargs`` with unknown keys or bad values. The group:
    each way is a subclass that words its own message."""


class ProcessorKwargValueError(MultiModalProcessorKwargsError):
    """An ``mm_processor_kwargs`` number (``name``, its path) that is not a positive integer."""

    def __init__(self, name: str, value: object) -> None:
        super().__init__(f"mm_processor_kwargs.{name} must be a positive integer, got {value!r}.")


class ProcessorKwargUnknownError(MultiModalProcessorKwargsError):
    """``mm_processor_kwargs`` keys the model's processor does not take; ``allowed`` are the ones it does."""

    def __init__(self, names: set[str] | list[str], allowed: frozenset[str] | list[str]) -> None:
        super().__init__(
            f"Unknown field(s) in mm_processor_kwargs: {', '.join(sorted(names))}. "
            f"Allowed fields: {', '.join(sorted(allowed)) or '(none)'}."
        )


class ProcessorPixelsOrderError(MultiModalProcessorKwargsError):
    """``min_pixels`` above ``max_pixels`` once the request's values and the model's are combined."""

    def __init__(self, min_pixels: int, max_pixels: int) -> None:
        super().__init__(
            f"mm_processor_kwargs: min_pixels ({min_pixels}) must not be greater than max_pixels ({max_pixels})."
        )


class ProcessorSizeKeysError(MultiModalProcessorKwargsError):
    """``mm_processor_kwargs.size`` that is not an object of the keys the model's processor takes
    (``keys``: one, which it must be, or several, of which it takes any)."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        takes = f"only {keys[0]!r}" if len(keys) == 1 else " and/or ".join(repr(k) for k in keys)
        super().__init__(f"mm_processor_kwargs.size must be an object with {takes}.")


class MediaIOKwargsTypeError(MultiModalProcessorKwargsError):
    """``media_io_kwargs`` that is not an object keyed by modality; ``kind`` is its type's name."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"media_io_kwargs must be an object keyed by modality, got {kind}.")


class MediaIOModalityError(MultiModalProcessorKwargsError):
    """``media_io_kwargs`` for a modality this server does not load; ``supported`` are the ones it does."""

    def __init__(self, modality: str, supported: list[str] | set[str]) -> None:
        super().__init__(
            f"media_io_kwargs has unsupported modality {modality!r}; supported: {', '.join(sorted(supported))}."
        )


class MediaIOOptionsTypeError(MultiModalProcessorKwargsError):
    """A modality's ``media_io_kwargs`` that are not an object."""

    def __init__(self, modality: str) -> None:
        super().__init__(f"media_io_kwargs[{modality!r}] must be an object.")


class MediaIOOptionError(MultiModalProcessorKwargsError):
    """A modality's ``media_io_kwargs`` options this server's loader does not take."""

    def __init__(self, modality: str, names: set[str] | list[str]) -> None:
        super().__init__(f"media_io_kwargs[{modality!r}] has unsupported option(s): {', '.join(sorted(names))}.")


class MediaIOImageModeError(MultiModalProcessorKwargsError):
    """An ``image_mode`` other than RGB, which the model's processor takes its images in."""

    def __init__(self, modality: str, mode: object) -> None:
        super().__init__(f"media_io_kwargs[{modality!r}]['image_mode'] must be 'RGB' for this model, got {mode!r}.")


class UnsupportedMultiModalError(MultiModalError):
    """A modality, input kind or model family the multimodal stage does not support. The group:
    each way is a subclass that words its own message."""


class UnsupportedModalityError(UnsupportedMultiModalError):
    """A media item of a modality other than image."""

    def __init__(self, modality: str) -> None:
        super().__init__(f"Modality {modality!r} is not supported; only 'image' is.")


class UnsupportedImageSourceError(UnsupportedMultiModalError):
    """An image given in a form (``source``: ``image_embeds``, ...) the model family's processor does not take."""

    def __init__(self, source: str, family: str) -> None:
        super().__init__(f"{source} inputs are not supported for {family} models; send the image as image_url.")


class ImageSizeMultipleError(UnsupportedMultiModalError):
    """An image whose size is not a multiple of the patch grid (``factor``) where the model's
    processor does not resize."""

    def __init__(self, width: int, height: int, factor: int) -> None:
        super().__init__(f"Image size {width}x{height} is not a multiple of {factor} and resizing is disabled.")


class ImageTokenMissingError(UnsupportedMultiModalError):
    """A model whose tokenizer lacks the image placeholder ``token`` its family needs (raised at load)."""

    def __init__(self, model_dir: object, token: str) -> None:
        super().__init__(f"The tokenizer in {model_dir} has no {token!r} token.")


class UnsupportedImageModelError(UnsupportedMultiModalError):
    """A model of no image family the multimodal stage has a processor for (raised at load)."""

    def __init__(self, model_dir: object, model_type: object, supported: list[str] | tuple[str, ...]) -> None:
        super().__init__(
            f"The model in {model_dir} has no supported image processor (model_type {model_type!r}); "
            f"supported families: {', '.join(supported)}."
        )


class UnknownImageFamilyError(UnsupportedMultiModalError):
    """An image family with no image tensors defined for the stages to hand on; ``families`` are
    the ones defined."""

    def __init__(self, family: str, families: list[str] | tuple[str, ...]) -> None:
        super().__init__(f"No image tensors are defined for family {family!r}; families: {', '.join(families)}.")


class NormalizedOnlyFamilyError(UnsupportedMultiModalError):
    """uint8 ``pixel_values`` to normalize for a family that never sends them
    (``MM_DEVICE_DO_NORMALIZE`` applies to the families vLLM normalizes on the device)."""

    def __init__(self, family: str) -> None:
        super().__init__(f"The {family} family's images are never sent unnormalized.")


class UnsupportedImageProcessorError(UnsupportedMultiModalError):
    """An ``IMAGE_PROCESSOR`` setting that is not "fast" or "slow", or a model whose resampling
    filter the chosen processor cannot run (a deployment error, raised when the stage loads). The
    group: each way is a subclass that words its own message."""


class ImageProcessorSettingError(UnsupportedImageProcessorError):
    """An ``IMAGE_PROCESSOR`` setting other than the ``choices``."""

    def __init__(self, value: object, choices: list[str] | tuple[str, ...]) -> None:
        super().__init__(f"IMAGE_PROCESSOR must be one of {', '.join(choices)}, got {value!r}.")


class FastResampleError(UnsupportedImageProcessorError):
    """A model whose resampling filter (``resample``, from its preprocessor_config.json) the fast
    image processor has no torchvision equivalent of."""

    def __init__(self, resample: int) -> None:
        super().__init__(
            f"resample={resample} (preprocessor_config.json) has no torchvision equivalent, so the "
            "fast image processor cannot run it; set IMAGE_PROCESSOR=slow."
        )


class ImageDeviceError(UnsupportedMultiModalError):
    """An ``IMAGE_DEVICE`` / ``IMAGE_DECODE_DEVICE`` setting that cannot run here (a deployment
    error, raised when the launcher renders the repository or the stage loads): ``setting=value``
    and why not. Each refusal is a subclass that says why."""

    def __init__(self, setting: str, value: object, why: str) -> None:
        super().__init__(f"{setting}={value} {why}")


class DeviceChoiceError(ImageDeviceError):
    """A device setting (``IMAGE_DEVICE``, ``IMAGE_DECODE_DEVICE``) that is none of its ``choices``."""

    def __init__(self, setting: str, value: object, choices: list[str] | tuple[str, ...]) -> None:
        super().__init__(setting, value, f"is not a device here; choose one of {', '.join(choices)}.")


class DeviceFormatError(ImageDeviceError):
    """A processor device that is neither ``cpu`` nor ``cuda[:N]``."""

    def __init__(self, value: object) -> None:
        super().__init__("IMAGE_DEVICE", value, "is not a device here; choose cpu or cuda[:N].")


class GPUInstanceRequiredError(ImageDeviceError):
    """``IMAGE_DEVICE=cuda`` for an ``mm_process`` instance Triton runs on the CPU (``instance_kind``),
    which is given no device."""

    def __init__(self, value: object, instance_kind: str) -> None:
        super().__init__(
            "IMAGE_DEVICE",
            value,
            f"needs mm_process on the GPU, but its instance is {instance_kind} (MM_INSTANCE_KIND=KIND_GPU, "
            "or auto on a host where nvidia-smi sees a GPU).",
        )


class DecodeDeviceNeedsGPUError(ImageDeviceError):
    """Decoding on a device where the pixels are processed on the CPU (``device``): they would only
    come back."""

    def __init__(self, value: object, device: str) -> None:
        super().__init__(
            "IMAGE_DECODE_DEVICE",
            value,
            f"needs IMAGE_DEVICE=cuda (the pixels are processed where they are decoded), not {device}.",
        )


class DecodeDeviceNeedsFastError(ImageDeviceError):
    """Decoding on a device with an image processor (``image_processor``) that resizes with Pillow,
    on the CPU."""

    def __init__(self, value: object, image_processor: str) -> None:
        super().__init__(
            "IMAGE_DECODE_DEVICE",
            value,
            f"needs IMAGE_PROCESSOR=fast (the {image_processor} processor resizes with Pillow, on the CPU).",
        )


class ImageDecoderUnavailableError(ImageDeviceError):
    """``IMAGE_DECODE_DEVICE=cuda`` where torchvision (its ``decode_jpeg``) cannot be imported;
    ``error`` is the import's failure, named with its message."""

    def __init__(self, error: BaseException) -> None:
        reason = f"{type(error).__name__}: {error}"
        super().__init__(
            "IMAGE_DECODE_DEVICE",
            "cuda",
            f"decodes JPEG images with torchvision.io.decode_jpeg, which cannot be imported here ({reason}); "
            "install torchvision beside torch, or set IMAGE_DECODE_DEVICE=cpu (Pillow, as vLLM decodes).",
        )
