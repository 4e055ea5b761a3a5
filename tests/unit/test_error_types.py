"""Every named error type can be raised and renders its message.

The renderer's (``renderer/errors/``, one module per domain), the Triton seam's own
(``triton_io/errors.py``) and the OpenAI front's own (``openai_front/errors.py``) are held to a
table: each class has an example made of the facts its constructor takes and the exact message
those facts give, so a change of wording shows here, and a new class without an example fails
until one is added. A group class, whose subclasses word the messages, takes a free-form message;
its example only has to come back in it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from dataclasses import dataclass, field
from typing import Any

import pytest

import openai_front.errors as front_errors
import renderer.errors as render_errors
import triton_io.errors as seam_errors
from renderer.errors import MaxTokensError

PACKAGES = (render_errors, seam_errors, front_errors)


def _defined_in(module: Any) -> dict[str, type[BaseException]]:
    """The error classes ``module`` (a module, or a package and its modules) defines itself."""
    found = {}
    for name in dir(module):
        obj = getattr(module, name)
        if (
            not name.startswith("_")
            and inspect.isclass(obj)
            and issubclass(obj, BaseException)
            and obj.__module__.startswith(module.__name__)
        ):
            found[name] = obj
    return found


ERRORS: dict[str, type[BaseException]] = {n: c for m in PACKAGES for n, c in _defined_in(m).items()}


@dataclass(frozen=True)
class Example:
    """The facts one error class is raised with, and the message they must give."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    expect: str | None = None
    """The whole message; None for a free-form message, which must then hold each argument."""


def said(*args: Any, expect: str | None = None, **kwargs: Any) -> Example:
    """An example as the class is called: ``said(width, height, limit, expect="...")``."""
    return Example(args, kwargs, expect)


EXAMPLES: dict[str, Example] = {
    "AssistantTokensMaskError": said(
        expect="`return_assistant_tokens_mask=True` requires `return_dict=True` and `tokenize=True`"
    ),
    "AutoToolChoiceDisabledError": said(
        expect='"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
    ),
    "AutoToolChoiceWithoutParserError": said(expect="Error: --enable-auto-tool-choice requires --tool-call-parser"),
    "Base64DigitError": said(expect="Non-base64 digit found"),
    "BatchNeedsDecoupledEngineError": said(
        expect="Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy"
    ),
    "BatchRowError": said(
        1,
        3,
        MaxTokensError(0),
        expect="Row 1 of the batch of 3 (batch_index 1): max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
    ),
    "CacheSaltError": said("the refusal's own words"),
    "CacheSaltLengthError": said(300, 256, expect="cache_salt must be at most 256 characters, got 300."),
    "ChatError": said("the refusal's own words"),
    "ChatRequestValidationError": said(
        "1 validation error for ChatRequestModel", expect="1 validation error for ChatRequestModel"
    ),
    "ChatTemplateBlocksError": said(
        "too many statically nested blocks",
        expect="Chat template is nested too deeply to compile: Python refused its code (too many statically nested blocks).",
    ),
    "ChatTemplateBuildError": said(
        "a string",
        2000000,
        1000000,
        expect="Chat template tried to build a string of length 2000000; the limit is 1000000.",
    ),
    "ChatTemplateCompileError": said(
        "unexpected indent (<template>, line 3)",
        expect="Chat template cannot be compiled: unexpected indent (<template>, line 3)",
    ),
    "ChatTemplateCountError": said(
        "slice", 10000000, 100000, expect="Chat template called slice with 10000000; the limit is 100000."
    ),
    "ChatTemplateDeadlineError": said(5.0, expect="Chat template rendering took longer than 5 seconds."),
    "ChatTemplateError": said("the refusal's own words"),
    "ChatTemplateIndentError": said(
        1000, 64, expect="Chat template asked tojson for an indent of 1000; the limit is 64."
    ),
    "ChatTemplateLimitError": said("the refusal's own words"),
    "ChatTemplateLiteralError": said(
        "5000", 4300, expect="Chat template has an integer literal of 5000 digits; the limit is 4300."
    ),
    "ChatTemplateLoopError": said(100000, expect="Chat template ran more than 100000 loop iterations."),
    "ChatTemplateNestingError": said(expect="Chat template is nested too deeply to parse or compile."),
    "ChatTemplateNumberError": said(
        70000.4, 65536, expect="Chat template computed a number of about 70000 bits; the limit is 65536."
    ),
    "ChatTemplateOutputError": said(1000000, expect="Rendered chat template exceeds 1000000 characters."),
    "ChatTemplatePaddingError": said(
        "99999999", 1000000, expect="Chat template format string pads to 99999999 characters; the limit is 1000000."
    ),
    "ChatTemplateRangeError": said(
        10000000, 100000, expect="Chat template called range() with 10000000 items; the limit is 100000."
    ),
    "ChatTemplateRecursionError": said(expect="Chat template recursion is too deep."),
    "ChatTemplateRenderError": said(
        "Conversation roles must alternate user/assistant/user/assistant/...",
        expect="Conversation roles must alternate user/assistant/user/assistant/...",
    ),
    "ChatTemplateResolutionError": said(
        expect="As of transformers v4.44, default chat template is no longer allowed, so you must provide a chat template if the tokenizer does not define one."
    ),
    "ChatTemplateResourceError": said(512, expect="Chat template needed more memory than its limit of 512 MiB."),
    "ChatTemplateSecurityError": said(
        "access to attribute '__class__' of 'str' object is unsafe.",
        expect="access to attribute '__class__' of 'str' object is unsafe.",
    ),
    "ChatTemplateSizeError": said(
        300000,
        262144,
        expect="Chat template is 300000 bytes; a template sent with a request may have at most 262144 bytes.",
    ),
    "ChatTemplateSyntaxError": said(
        "unexpected end of template, expected 'end of print statement'.",
        expect="unexpected end of template, expected 'end of print statement'.",
    ),
    "ChatTemplateTimeoutError": said(
        2.5, True, expect="Chat template used more than 2.5 seconds of CPU time; its worker was stopped."
    ),
    "ChatTemplateTooLargeError": said(expect="Chat template is too large or nested too deeply to compile."),
    "ChatTemplateWorkerCrashError": said(
        "killed by signal 11 (SIGSEGV)",
        expect="Chat template crashed its render worker (killed by signal 11 (SIGSEGV)); data nested too deeply can overflow the C stack.",
    ),
    "ChatTemplateWorkerError": said(
        "ValueError", "bad value", expect="Chat template failed in its render worker: ValueError: bad value"
    ),
    "ContentPartError": said("the refusal's own words"),
    "ContentPartShapeError": said(0, 1, expect="messages[0].content[1] must be a string or a content part object."),
    "ContinueFieldNotInTemplateError": said(
        "reasoning_content",
        expect='continue_final_message is set to "reasoning_content" but this is not an accepted field in the chat_template',
    ),
    "ContinueFinalMessageError": said("the refusal's own words"),
    "ContinueWithGenerationPromptError": said(
        expect="continue_final_message and add_generation_prompt are not compatible. Use continue_final_message when you want the model to continue the final message, and add_generation_prompt when you want to add a header that will prompt it to start a new assistant message instead."
    ),
    "DataURLEncodingError": said(expect="Only base64 data URLs are supported for now."),
    "DataURLSeparatorError": said(
        "data:image/png;base64iVBORw0KGgoAAAANSUhEUg",
        expect="Invalid data URL 'data:image/png;base64iVBORw0KGgo': missing ',' separator.",
    ),
    "DeclaredLengthError": said(
        "input_lengths",
        5,
        4,
        "ids given",
        expect="input_lengths=5 does not match the 4 ids given. (parameter=input_lengths)",
    ),
    "DecodeDeviceNeedsFastError": said(
        "cuda",
        "slow",
        expect="IMAGE_DECODE_DEVICE=cuda needs IMAGE_PROCESSOR=fast (the slow processor resizes with Pillow, on the CPU).",
    ),
    "DecodeDeviceNeedsGPUError": said(
        "cuda",
        "cpu",
        expect="IMAGE_DECODE_DEVICE=cuda needs IMAGE_DEVICE=cuda (the pixels are processed where they are decoded), not cpu.",
    ),
    "DecoderStartTokenError": said(expect="Cannot find decoder start token id or <BOS>"),
    "DeviceChoiceError": said(
        "IMAGE_DEVICE",
        "tpu",
        ("auto", "cpu", "cuda"),
        expect="IMAGE_DEVICE=tpu is not a device here; choose one of auto, cpu, cuda.",
    ),
    "DeviceFormatError": said("cuda:x", expect="IMAGE_DEVICE=cuda:x is not a device here; choose cpu or cuda[:N]."),
    "DocumentsError": said("'int' object is not iterable", expect="'int' object is not iterable"),
    "EmbedsBase64Error": said("Incorrect padding", expect="`prompt_embeds` is not valid base64: Incorrect padding"),
    "EmbedsDeserializeError": said(
        "Weights only load failed.",
        expect="`prompt_embeds` could not be deserialized as a torch tensor: Weights only load failed.",
    ),
    "EmbedsDetokenizeError": said(expect="Cannot run detokenization on embeddings"),
    "EmbedsDisabledError": said(expect="You must set `--enable-prompt-embeds` to input `prompt_embeds`."),
    "EmbedsDtypeError": said(
        "torch.int64",
        "torch.float32",
        expect="`prompt_embeds` dtype torch.int64 is not a floating-point type, cannot safely cast to the model's dtype torch.float32.",
    ),
    "EmbedsEncodingError": said(expect="`prompt_embeds` is neither a serialized tensor nor base64 text."),
    "EmbedsError": said("the refusal's own words"),
    "EmbedsHiddenSizeError": said(
        512, 576, expect="`prompt_embeds` hidden_size 512 does not match the model's hidden_size 576."
    ),
    "EmbedsNonFiniteError": said(expect="`prompt_embeds` contains NaN or infinite values."),
    "EmbedsNotTensorError": said(expect="`prompt_embeds` payload did not deserialize to a torch.Tensor."),
    "EmbedsPaddingError": said(expect="Cannot pad tokens for embedding inputs"),
    "EmbedsSafetensorsError": said(
        "Error while deserializing header: HeaderTooLarge",
        expect="`prompt_embeds` could not be read as safetensors: Error while deserializing header: HeaderTooLarge",
    ),
    "EmbedsShapeError": said((4,), expect="prompt_embeds must be of shape (seq_len, hidden_size); got shape (4,)."),
    "EmbedsSparseError": said(
        "size is inconsistent with indices",
        expect="`prompt_embeds` is a malformed sparse tensor: size is inconsistent with indices",
    ),
    "EmbedsTableRangeError": said(
        65504.0, expect="prompt_embeds holds values beyond 65504, which the engine's FP16 prompt table cannot carry."
    ),
    "EmbedsTableShapeError": said(
        [0, 576], expect="prompt embeddings must be (seq_len, hidden_size) with seq_len > 0, got [0, 576]."
    ),
    "EmbedsTensorCountError": said(2, expect="`prompt_embeds` safetensors must hold exactly one tensor, got 2."),
    "EmptyCacheSaltError": said(expect="cache_salt must be a non-empty string."),
    "EmptyConversationError": said(
        expect="Cannot apply chat template to an empty conversation. Provide at least one message."
    ),
    "EmptyImageError": said(0, 16, expect="The image has an empty size 0x16."),
    "EmptyMessagesError": said(expect="messages is empty: send a JSON array of chat messages."),
    "EmptyPromptError": said("encoder", expect="The encoder prompt cannot be empty"),
    "EmptyStopStringError": said(expect="stop cannot contain an empty string."),
    "EmptyToolsError": said(
        expect="`tools` must not be an empty array. Either provide at least one tool or omit the field entirely. (parameter=tools)"
    ),
    "EncoderDecoderError": said("the refusal's own words"),
    "EncoderDecoderFormsError": said(
        "decoder", expect="Only one of decoder_prompt or decoder_prompt_token_ids may be provided."
    ),
    "EncoderPromptMissingError": said(expect="Either encoder_prompt or encoder_prompt_token_ids must be provided."),
    "EngineError": said("the refusal's own words"),
    "EngineFaultError": said("vllm", "CUDA out of memory", expect="engine 'vllm': CUDA out of memory"),
    "EngineImageFamilyError": said(
        "llava",
        ["qwen2_vl", "pixtral"],
        expect="vLLM's engine here takes images of the families qwen2_vl, pixtral, not 'llava'.",
    ),
    "FastResampleError": said(
        4,
        expect="resample=4 (preprocessor_config.json) has no torchvision equivalent, so the fast image processor cannot run it; set IMAGE_PROCESSOR=slow.",
    ),
    "FieldTypeError": said(
        "sampling_params",
        "temperature",
        "a number",
        "hot",
        expect="sampling_params.temperature must be a number, got str 'hot'. (parameter=temperature)",
    ),
    "FinalMessageFieldError": said(
        "content", expect='continue_final_message is set but the final message has no "content" to continue!'
    ),
    "FinalMessageNotRenderedError": said(
        "Once upon",
        "<|user|>Hi<|assistant|>",
        expect="continue_final_message is set but the final message does not appear in the chat after applying the chat template! This can happen if the chat template deletes portions of the final message. Please verify the chat template and final message in your chat to ensure they are compatible.Final message to continue: Once upon\nRendered chat:\n<|user|>Hi<|assistant|>",
    ),
    "FinalMessageTypeError": said(
        'can only concatenate list (not "str") to list', expect='can only concatenate list (not "str") to list'
    ),
    "ForcedToolChoiceUnavailableError": said(
        '"required"',
        expect='tool_choice="required" is not served: vLLM forces the call with structured outputs and this server\'s engines take no guided decoding; send tool_choice "auto" (parameter=tool_choice)',
    ),
    "GPUInstanceRequiredError": said(
        "cuda",
        "KIND_CPU",
        expect="IMAGE_DEVICE=cuda needs mm_process on the GPU, but its instance is KIND_CPU (MM_INSTANCE_KIND=KIND_GPU, or auto on a host where nvidia-smi sees a GPU).",
    ),
    "GenerationPromptConflictError": said(
        True, expect="Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    ),
    "ImageAspectRatioError": said(250.0, expect="absolute aspect ratio must be smaller than 200, got 250.0"),
    "ImageBombError": said(
        "Image size (200000000 pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack.",
        expect="Image size (200000000 pixels) exceeds limit of 178956970 pixels, could be decompression bomb DOS attack.",
    ),
    "ImageDecodeError": said("image file is truncated", expect="Failed to load image: image file is truncated"),
    "ImageDecoderUnavailableError": said(
        ModuleNotFoundError("No module named 'torchvision'"),
        expect="IMAGE_DECODE_DEVICE=cuda decodes JPEG images with torchvision.io.decode_jpeg, which cannot be imported here (ModuleNotFoundError: No module named 'torchvision'); install torchvision beside torch, or set IMAGE_DECODE_DEVICE=cpu (Pillow, as vLLM decodes).",
    ),
    "ImageDeviceError": said(
        "IMAGE_DEVICE",
        "cuda:7",
        "is not a device here; choose cpu or cuda[:N].",
        expect="IMAGE_DEVICE=cuda:7 is not a device here; choose cpu or cuda[:N].",
    ),
    "ImageFormatError": said(
        "cannot identify image file <_io.BytesIO object>",
        expect="Failed to load image: cannot identify image file <_io.BytesIO object>",
    ),
    "ImagePartValidationError": said(
        "1 validation error for ChatCompletionContentPartImageParam",
        expect="1 validation error for ChatCompletionContentPartImageParam",
    ),
    "ImageProcessorSettingError": said(
        "medium", ("fast", "slow"), expect="IMAGE_PROCESSOR must be one of fast, slow, got 'medium'."
    ),
    "ImageRunsMismatchError": said(2, 2, 1, expect="2 placeholder runs, 2 hashes and 1 processed images do not match."),
    "ImageSizeMultipleError": said(
        30, 20, 28, expect="Image size 30x20 is not a multiple of 28 and resizing is disabled."
    ),
    "ImageTokenMissingError": said(
        "/models/pixtral", "[IMG]", expect="The tokenizer in /models/pixtral has no '[IMG]' token."
    ),
    "ImageTooLargeError": said(
        10000,
        20000,
        178956970,
        expect="Image dimensions 10000x20000 (200000000 pixels) exceed the maximum of 178956970 pixels. Set MAX_IMAGE_PIXELS to increase this limit.",
    ),
    "InputIdsRangeError": said(
        49152, expect="input_ids must be in [0, 49152) without a prompt_embedding_table. (parameter=input_ids)"
    ),
    "InputUTF8Error": said("prompt", expect="Input 'prompt' is not valid UTF-8. (parameter=prompt)"),
    "InvalidJSONError": said(
        "sampling_params",
        "Expecting value",
        1,
        1,
        expect="sampling_params is not valid JSON: Expecting value at line 1 column 1",
    ),
    "InvalidMessagesError": said("the refusal's own words"),
    "InvalidParamsError": said("the refusal's own words"),
    "InvalidToolChoiceError": said("the refusal's own words"),
    "InvalidUTF8Error": said("prompt", 3, expect="prompt is not valid UTF-8: invalid byte at position 3"),
    "LengthLimitError": said(
        [8192, 9000],
        expect="Input 'length_limit' must be (max_total_tokens >= 1 or -1, 0 <= max_output_tokens <= max_total_tokens), got [8192, 9000].",
    ),
    "LocalMediaDisabledError": said(
        expect="Loading local files is not allowed: no allowed media directory is configured."
    ),
    "MaxTokensError": said(0, expect="max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)"),
    "MediaFetchError": said(
        "http://images.example/cat.png",
        "timed out",
        expect="Could not fetch the image from 'http://images.example/cat.png': timed out",
    ),
    "MediaFileMissingError": said(
        "cats/missing.png", expect="The file 'cats/missing.png' does not exist under the allowed media directory."
    ),
    "MediaHostError": said(
        "evil.example",
        True,
        expect="Fetching images from 'evil.example' is not allowed: the host is not in the allowed media hosts.",
    ),
    "MediaIOImageModeError": said(
        "image", "L", expect="media_io_kwargs['image']['image_mode'] must be 'RGB' for this model, got 'L'."
    ),
    "MediaIOKwargsTypeError": said("list", expect="media_io_kwargs must be an object keyed by modality, got list."),
    "MediaIOModalityError": said(
        "video", {"image"}, expect="media_io_kwargs has unsupported modality 'video'; supported: image."
    ),
    "MediaIOOptionError": said(
        "image", {"frames"}, expect="media_io_kwargs['image'] has unsupported option(s): frames."
    ),
    "MediaIOOptionsTypeError": said("image", expect="media_io_kwargs['image'] must be an object."),
    "MediaItemsCountError": said(1, 2, expect="mm_data has 1 elements for 2 mm_items entries."),
    "MediaItemsDataError": said(expect="An mm_items entry refers to mm_data, but no mm_data element was sent for it."),
    "MediaItemsEntryError": said(expect="mm_items entries must be JSON objects."),
    "MediaLoadError": said("the refusal's own words"),
    "MediaPathOutsideError": said(
        "../etc/passwd", expect="The file '../etc/passwd' is outside the allowed media directory."
    ),
    "MediaSchemeError": said(
        "ftp",
        True,
        False,
        expect="Unsupported image URL scheme 'ftp': use a data URL (data:image/...;base64,...), a file: URL under the allowed media directory.",
    ),
    "MediaSourceTypeError": said("int", expect="An image must be given as a URL string or bytes, got int."),
    "MediaTooLargeError": said(
        30000000, 20971520, True, expect="The image is about 30000000 bytes, more than the limit of 20971520 bytes."
    ),
    "MediaURLError": said("the refusal's own words"),
    "MissingInputError": said(
        "decoder_input_ids",
        "by an encoder-decoder engine",
        expect="Input 'decoder_input_ids' is required by an encoder-decoder engine. (parameter=decoder_input_ids)",
    ),
    "MissingMaxTokensError": said(expect="Input 'max_tokens' is required for generation. (parameter=max_tokens)"),
    "MultiModalCacheMissError": said(
        0,
        "cat-1",
        expect="multi_modal_data['image'][0] is empty and multi_modal_uuids['image'][0]='cat-1' is not in the processor cache (never sent, or evicted); send the image data with that uuid again.",
    ),
    "MultiModalError": said("the refusal's own words"),
    "MultiModalLimitError": said(1, "image", expect="At most 1 image(s) may be provided in one prompt."),
    "MultiModalPlaceholderCountError": said(
        2,
        1,
        expect="Expected there to be 2 prompt updates corresponding to 2 image items, but instead found 1 prompt updates! This is likely because you forgot to include input placeholder tokens (e.g., `<image>`, `<|image_pad|>`) in the prompt. If the model has a chat template, make sure you have applied it before calling `LLM.generate`.",
    ),
    "MultiModalPlaceholderError": said(
        "<image>",
        expect="Found more '<image>' placeholders in input prompt than actual multimodal data items. (parameter=messages)",
    ),
    "MultiModalProcessorKwargsError": said("the refusal's own words"),
    "MultiModalUUIDError": said(
        "image", 2, expect="multi_modal_data['image'][2] is empty but multi_modal_uuids['image'][2] is missing."
    ),
    "MultiModalUUIDLengthError": said(
        "image",
        1,
        2,
        expect="If given, multi_modal_uuids['image'] must have same length as multi_modal_data['image'], but got 1 vs 2.",
    ),
    "NoPromptError": said(expect="You must pass at least one prompt"),
    "NoTextToContinueError": said(
        expect="continue_final_message is set but we could not find any text to continue in the final message!"
    ),
    "NotIterableError": said("int", expect="'int' object is not iterable"),
    "NotSubscriptableError": said("list", expect="'list' object is not subscriptable"),
    "OutOfVocabStopIdsError": said(
        [50000],
        49152,
        expect="token_id(s) [50000] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: 49152 (parameter=stop_token_ids, value=[50000])",
    ),
    "OutputOverContextError": said(
        "max_completion_tokens",
        9000,
        8192,
        expect="max_completion_tokens=9000 cannot be greater than max_model_len=8192. Please request fewer output tokens. (parameter=max_completion_tokens, value=9000)",
    ),
    "OutputParserNameError": said(
        "tool_call_parser",
        "nope",
        expect="Input 'output_parsing' names no tool_call_parser this server has: 'nope'. (parameter=output_parsing)",
    ),
    "OutputParsingError": said(
        "must be a JSON object", expect="Input 'output_parsing' must be a JSON object. (parameter=output_parsing)"
    ),
    "OutputParsingJSONError": said(
        "Expecting value: line 1 column 1 (char 0)",
        expect="Input 'output_parsing' is not JSON: Expecting value: line 1 column 1 (char 0). (parameter=output_parsing)",
    ),
    "OutputParsingObjectError": said(expect="Input 'output_parsing' must be a JSON object. (parameter=output_parsing)"),
    "OutputTokensError": said(
        "max_output_tokens",
        900,
        "max_total_tokens",
        512,
        expect="max_output_tokens=900 cannot be greater than max_total_tokens=512. Please request fewer output tokens. (parameter=max_output_tokens, value=900)",
    ),
    "PadTokenMissingError": said(
        expect="pad_prompt_tokens needs a tokenizer with a pad token. (parameter=pad_prompt_tokens)"
    ),
    "ParamsNestingError": said(
        "chat_template_kwargs.a",
        64,
        expect="chat_template_kwargs.a is nested more than 64 levels deep (lists and objects); the limit is 64.",
    ),
    "ParserSettingError": said("a parser setting refused", expect="a parser setting refused"),
    "PartTypeInvalidError": said(expect="Invalid 'type' field in multimodal part. (parameter=type)"),
    "PartTypeMissingError": said(expect="Missing 'type' field in multimodal part. (parameter=type)"),
    "PartUUIDMissingError": said(
        0, expect="multi_modal_data['image'][0] is empty but multi_modal_uuids['image'][0] is missing."
    ),
    "ProcessorKwargUnknownError": said(
        {"zoom"},
        frozenset({"max_pixels", "min_pixels"}),
        expect="Unknown field(s) in mm_processor_kwargs: zoom. Allowed fields: max_pixels, min_pixels.",
    ),
    "ProcessorKwargValueError": said(
        "max_pixels", -1, expect="mm_processor_kwargs.max_pixels must be a positive integer, got -1."
    ),
    "ProcessorPixelsOrderError": said(
        1000, 10, expect="mm_processor_kwargs: min_pixels (1000) must not be greater than max_pixels (10)."
    ),
    "ProcessorSizeKeysError": said(
        ("shortest_edge", "longest_edge"),
        expect="mm_processor_kwargs.size must be an object with 'shortest_edge' and/or 'longest_edge'.",
    ),
    "PromptCharsTooLongError": said(
        100000,
        16,
        2048,
        2032,
        20320,
        expect="You passed 100000 input characters and requested 16 output tokens. However, the model's context length is only 2048 tokens, resulting in a maximum input length of 2032 tokens (at most 20320 characters). Please reduce the length of the input prompt.",
    ),
    "PromptError": said("the refusal's own words"),
    "PromptFormError": said(
        ["prompt", "prompt_token_ids"],
        expect="Exactly one of prompt, prompt_token_ids or prompt_embeds may be provided, got prompt and prompt_token_ids.",
    ),
    "PromptTableMixError": said(
        expect="input_ids mixes vocabulary ids and prompt-table ids; this engine takes one or the other. (parameter=input_ids)"
    ),
    "PromptTableRowError": said(
        7, 4, expect="input_ids refers to prompt-table row 7, but the table has 4 rows. (parameter=input_ids)"
    ),
    "PromptTooLongError": said(
        2048,
        16,
        4000,
        True,
        expect="This model's maximum context length is 2048 tokens. However, you requested 16 output tokens and your prompt contains at least 4000 input tokens, for a total of at least 4016 tokens. Please reduce the length of the input prompt or the number of requested output tokens.",
    ),
    "PromptTypeError": said(
        expect="Expected prompt['prompt'] to be a string before tokenization; use 'prompt_token_ids' for token ID inputs"
    ),
    "ReasoningMarkersError": said(
        "deepseek_r1", expect="deepseek_r1 reasoning parser could not locate think start/end tokens in the tokenizer!"
    ),
    "RenderDataNestingError": said(expect="Chat request data is nested too deeply to render."),
    "RenderError": said(
        "max_tokens is too small",
        parameter="max_tokens",
        value=0,
        expect="max_tokens is too small (parameter=max_tokens, value=0)",
    ),
    "RequestNestingError": said(
        "messages[0].content",
        64,
        expect="messages[0].content is nested more than 64 levels deep (lists and objects); the limit is 64.",
    ),
    "RequestRecursionError": said(expect="The chat request is nested too deeply (messages, tools or documents)."),
    "SamplingRangeError": said("top_k", "-1, 0 or at least 1", -2, expect="top_k must be -1, 0 or at least 1, got -2."),
    "StopStringsLimitError": said(
        64, 512, expect="stop takes at most 64 strings of at most 512 characters. (parameter=stop)"
    ),
    "StopTokenIdsLimitError": said(1024, expect="stop_token_ids takes at most 1024 ids. (parameter=stop_token_ids)"),
    "StopTokenIdsTypeError": said(
        [1, "2"], expect="stop_token_ids must contain only integers, got [1, '2']. (parameter=stop_token_ids)"
    ),
    "StreamingNeedsDecoupledError": said(
        expect="Streaming is only supported if model is deployed using decoupled mode."
    ),
    "TemplateCallArgumentError": said(
        "jinja2.environment.Template.render",
        "messages",
        True,
        expect="jinja2.environment.Template.render() got multiple values for keyword argument 'messages'",
    ),
    "TensorError": said("the refusal's own words"),
    "TensorShapeError": said(
        "input_ids",
        "be a 1-D list of token ids per request",
        "shape [2, 3]",
        expect="Input 'input_ids' must be a 1-D list of token ids per request, got shape [2, 3]. (parameter=input_ids)",
    ),
    "TextPartJoinError": said(1, "NoneType", expect="sequence item 1: expected str instance, NoneType found"),
    "TokenIdError": said("the refusal's own words"),
    "TokenIdRangeError": said(
        10000000, 49151, expect="Token id 10000000 is out of vocabulary (valid ids are 0 to 49151)."
    ),
    "TokenIdTypeError": said("7", expect="Token ids must be integers, got str '7'."),
    "ToolCallEntryError": said(expect="assistant tool_calls entries must be objects. (parameter=tool_calls)"),
    "ToolCallError": said("the refusal's own words"),
    "ToolCallTypeError": said(
        expect="chat completions only support assistant tool_calls of type 'function'. (parameter=tool_calls)"
    ),
    "ToolChoiceError": said("the refusal's own words"),
    "ToolChoiceFunctionError": said(
        "get_weather",
        expect='Invalid value for `function`: `get_weather` in `tool_choice`! Correct usage: `{"type": "function", "function": {"name": "my_function"}}` (parameter=tool_choice.function)',
    ),
    "ToolChoiceNameError": said(
        3,
        expect='Invalid `name` in `function`: `3` in `tool_choice`! Correct usage: `{"type": "function", "function": {"name": "my_function"}}` (parameter=tool_choice.function.name)',
    ),
    "ToolChoiceNameMissingError": said(
        expect='Expected field `name` in `function` in `tool_choice`! Correct usage: `{"type": "function", "function": {"name": "my_function"}}` (parameter=tool_choice.function.name)'
    ),
    "ToolChoiceValueError": said(
        "sometimes",
        expect='Invalid value for `tool_choice`: sometimes! Only named tools, "none", "auto" or "required" are supported. (parameter=tool_choice)',
    ),
    "ToolChoiceWithoutToolsError": said(
        expect="When using `tool_choice`, `tools` must be set. (parameter=tool_choice)"
    ),
    "ToolParserRequiredError": said(
        '"required"', expect='tool_choice="required" requires --tool-call-parser to be set'
    ),
    "ToolParsingUnavailableError": said(
        "tool_choice needs a tool-call parser", expect="tool_choice needs a tool-call parser"
    ),
    "TopKTypeError": said(1.5, expect="top_k must be an integer, got float (parameter=top_k)"),
    "TotalTokensOverContextError": said(
        9000,
        8192,
        expect="max_total_tokens=9000 cannot be greater than the model's maximum context length of 8192 tokens. (parameter=max_total_tokens, value=9000)",
    ),
    "TruncationOverContextError": said(
        9000,
        8192,
        expect="truncate_prompt_tokens=9000 cannot be greater than max_model_len = 8192. Please request a smaller truncation size. (parameter=truncate_prompt_tokens, value=9000)",
    ),
    "TruncationSideError": said(
        "middle", expect="`truncation_side` must be either 'left' or 'right'. (parameter=truncation_side, value=middle)"
    ),
    "TruncationSizeError": said(
        "truncate_prompt_tokens",
        900,
        "max_total_tokens",
        "max_output_tokens",
        500,
        expect="truncate_prompt_tokens=900 cannot be greater than max_total_tokens - max_output_tokens = 500. Please request a smaller truncation size. (parameter=truncate_prompt_tokens, value=900)",
    ),
    "UnknownFieldError": said(
        "sampling_params",
        ["tempo", "beam"],
        ["temperature", "top_p"],
        expect="Unknown field(s) in sampling_params: beam, tempo. Allowed fields: temperature, top_p. (parameter=beam)",
    ),
    "NormalizedOnlyFamilyError": said("pixtral", expect="The pixtral family's images are never sent unnormalized."),
    "UnknownImageFamilyError": said(
        "llava",
        ["qwen2_vl", "pixtral"],
        expect="No image tensors are defined for family 'llava'; families: qwen2_vl, pixtral.",
    ),
    "UnknownPartTypeError": said(
        "hologram",
        ["image_url", "text"],
        expect="Unsupported chat content part type: 'hologram'. Supported types: image_url, text. (parameter=type, value=hologram)",
    ),
    "UnknownReasoningParserError": said("thinker", expect="reasoning_parser_name='thinker' has not been registered"),
    "UnknownToolChoiceError": said(
        expect="The tool specified in `tool_choice` does not match any of the specified `tools` (parameter=tool_choice)"
    ),
    "UnknownToolParserError": said(
        "nope", ("hermes", "llama3_json"), expect="invalid tool call parser: nope (chose from { hermes,llama3_json })"
    ),
    "UnrenderedPartTypeError": said(
        "input_audio",
        ("image_url", "text"),
        expect="Unsupported chat content part type for this renderer: 'input_audio'. Supported types: image_url, text.",
    ),
    "UnsupportedImageModelError": said(
        "/models/llava",
        "llava",
        ("qwen2_vl", "pixtral"),
        expect="The model in /models/llava has no supported image processor (model_type 'llava'); supported families: qwen2_vl, pixtral.",
    ),
    "UnsupportedImageProcessorError": said("the refusal's own words"),
    "UnsupportedImageSourceError": said(
        "image_embeds",
        "pixtral",
        expect="image_embeds inputs are not supported for pixtral models; send the image as image_url.",
    ),
    "UnsupportedInputError": said(
        "beam_width",
        "one beam only",
        4,
        expect="Input 'beam_width' is not supported by this server: one beam only (got 4). (parameter=beam_width)",
    ),
    "UnsupportedModalityError": said("audio", expect="Modality 'audio' is not supported; only 'image' is."),
    "UnsupportedMultiModalError": said("the refusal's own words"),
    "UntrustedChatTemplateError": said(
        expect="Chat template is passed with request, but --trust-request-chat-template is not set. Refused request with untrusted chat template."
    ),
    "UntrustedMultiModalKwargsError": said(
        "mm_processor_kwargs",
        "preprocessing",
        expect="Per-request mm_processor_kwargs are disabled by default because they can change multimodal preprocessing resource usage. Start the server with --trust-request-mm-kwargs only when clients are trusted. (parameter=mm_processor_kwargs)",
    ),
    "ValueRangeError": said(
        "temperature",
        "at least 0",
        -1,
        expect="temperature must be at least 0, got -1. (parameter=temperature, value=-1)",
    ),
    "WordListOffsetsError": said(
        "stop_words_list",
        3,
        [2, 1],
        expect="Word list offsets must increase within the 3 ids, got [2, 1]. (parameter=stop_words_list)",
    ),
    "InputTooLargeError": said(
        "prompt",
        70000000,
        67108864,
        expect="Input 'prompt' is 70000000 bytes, more than the limit of 67108864 bytes. (parameter=prompt)",
    ),
    "BodyEncodingError": said(
        "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
        expect="The request body is not valid UTF-8: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte.",
    ),
    "BodyJSONConstantError": said("NaN", expect="The request body is not valid JSON: NaN is not a JSON value."),
    "BodyJSONSyntaxError": said(
        "Expecting value: line 1 column 1 (char 0)",
        expect="The request body is not valid JSON: Expecting value: line 1 column 1 (char 0)",
    ),
    "BodyNestingError": said(expect="The request body nests arrays and objects too deeply to be parsed."),
    "BodyNotJSONError": said("the refusal's own words"),
    "BodyNotObjectError": said("list", expect="The request body must be a JSON object, got list."),
    "BodySurrogateError": said(
        "\\ud800", expect="The request body holds a lone UTF-16 surrogate (\\ud800), which is no Unicode character."
    ),
    "BodyTooLargeError": said(
        70000000,
        67108864,
        True,
        expect="The request body declares 70000000 bytes, more than the limit of 67108864 bytes.",
    ),
    "CacheSaltFieldError": said(
        expect="Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"
    ),
    "CacheSaltFormError": said(
        256,
        expect="Parameter 'cache_salt' must be at most 256 characters and must not contain '@', '/', '\\\\', or NUL. (parameter=cache_salt)",
    ),
    "FrontRequestError": said("the refusal's own words", parameter="prompt", expect="the refusal's own words"),
    "FrontValidationError": said(
        "Stream options can only be defined when `stream=True`.",
        parameter="stream_options",
        expect="Stream options can only be defined when `stream=True`. (parameter=stream_options)",
    ),
    "GenerationPromptFlagsError": said(
        expect="Cannot set both `continue_final_message` and `add_generation_prompt` to True."
    ),
    "LogprobsLimitError": said(
        "top_logprobs",
        "top_logprobs",
        30,
        20,
        expect="Requested top_logprobs logprobs of 30, which is greater than max allowed: 20 (parameter=top_logprobs, value=30)",
    ),
    "LogprobsRangeError": said(
        "top_logprobs", -1, expect="`top_logprobs` must be a positive value or -1. (parameter=top_logprobs, value=-1)"
    ),
    "LogprobsTypeError": said(
        "logprobs", "yes", expect="`logprobs` must be an integer. (parameter=logprobs, value=yes)"
    ),
    "MessagesNotIterableError": said(5, expect="'int' object is not iterable"),
    "MessagesNotListError": said(expect="messages must be a list of chat messages."),
    "NoPromptGivenError": said(
        expect="Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)"
    ),
    "PromptAndEmbedsError": said(expect="Provide either prompt or prompt_embeds, not both."),
    "PromptBatchError": said(expect="This server takes one prompt per request; send the prompts as separate requests."),
    "PromptEmbedsFieldError": said(expect="prompt_embeds must be a base64 string of one serialized tensor."),
    "PromptFieldError": said(expect="prompt must be a string, a list of token ids, or a list holding one of them."),
    "PromptLogprobsStreamError": said(
        expect="`prompt_logprobs` are not available when `stream=True`. (parameter=prompt_logprobs)"
    ),
    "RequestBodyError": said("the refusal's own words"),
    "RequestModelError": said(
        "1 validation error for ChatCompletionRequest",
        parameter="body.max_tokens",
        expect="1 validation error for ChatCompletionRequest",
    ),
    "SingleChoiceError": said(2, expect="n must be 1: this server returns one choice per request, got 2."),
    "StreamOptionsError": said(
        expect="Stream options can only be defined when `stream=True`. (parameter=stream_options)"
    ),
    "TokensFieldError": said(expect="tokens must be a list of token ids."),
    "TopLogprobsWithoutLogprobsError": said(
        expect="when using `top_logprobs`, `logprobs` must be set to true. (parameter=top_logprobs)"
    ),
    "UnknownModelError": said("gpt-5", "smollm2", expect="The model `gpt-5` does not exist. Valid aliases: smollm2."),
    "UnsupportedFieldError": said(
        "n", "this server returns one choice", expect="n is not supported: this server returns one choice."
    ),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_every_error_is_raised_with_its_own_message(name: str) -> None:
    cls = ERRORS[name]
    assert name in EXAMPLES, f"{name} has no example in EXAMPLES: add the facts it is raised with and its message"
    example = EXAMPLES[name]
    with pytest.raises(cls) as raised:
        raise cls(*example.args, **example.kwargs)
    message = str(raised.value)
    assert message.strip(), f"{name} renders an empty message"
    if example.expect is not None:
        assert message == example.expect
    else:
        for value in [*example.args, *example.kwargs.values()]:
            assert str(value) in message, f"{name}'s message leaves out {value!r}"


def test_every_example_names_a_class() -> None:
    assert not set(EXAMPLES) - set(ERRORS), f"examples of no error class: {sorted(set(EXAMPLES) - set(ERRORS))}"


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_every_error_says_what_it_is(name: str) -> None:
    doc = ERRORS[name].__doc__
    assert doc and doc.strip(), f"{name} says nowhere what it is"


def test_no_two_error_classes_share_a_name_and_the_package_exports_each() -> None:
    seen: dict[str, str] = {}
    modules = [seam_errors, front_errors] + [
        importlib.import_module(f"{render_errors.__name__}.{m.name}")
        for m in pkgutil.iter_modules(render_errors.__path__)
    ]
    for module in modules:
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and issubclass(cls, BaseException) and cls.__module__ == module.__name__:
                assert name not in seen, f"{name} is defined in both {seen[name]} and {module.__name__}"
                seen[name] = module.__name__
                if module not in (seam_errors, front_errors):
                    assert getattr(render_errors, name, None) is cls, f"renderer.errors does not export {name}"
    assert set(seen) == set(ERRORS)
