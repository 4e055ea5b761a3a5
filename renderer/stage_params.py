"""Every Python stage's config parameters, declared once: key, the models whose config carries it,
where the launcher takes its value, and how it writes that value as text.

The launcher writes each model's ``parameters { ... }`` lines from these (``launcher/repository.py``:
``parameter_lines``, the ``${parameters}`` of its config template), each ``doc`` as a ``#`` comment
above its line; no template declares a parameter by hand. A stage reads them back as strings
(``triton_io.tensors.model_params``), in a ``from_config(params)`` classmethod under ``renderer/``
or in its adapter, naming each key by the constants below.
``tests/unit/test_stage_params.py`` holds the table to the settings, the readers and the rendered
configs.

A parameter's value is ``source`` (default: its key) looked up in the launcher: an attribute of
``launcher.settings.Settings`` (a field, whose environment variable is its name in capitals, or a
``resolved_*`` property), or one of ``COMPUTED``, which ``launcher.repository.computed_values``
works out (from the settings, the host and the served model); or ``literal``, the same text always.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The keys the stages read (``from_config`` readers and adapters name them through these).
MODEL_DIR = "model_dir"
TOKENIZER_RECORD = "tokenizer_record"
MAX_MODEL_LEN = "max_model_len"
ENABLE_PROMPT_EMBEDS = "enable_prompt_embeds"
TOKENIZER_BACKEND = "tokenizer_backend"
TRUST_REQUEST_CHAT_TEMPLATE = "trust_request_chat_template"
CHAT_TEMPLATE_ENGINE = "chat_template_engine"
TRUST_REQUEST_MM_KWARGS = "trust_request_mm_kwargs"
ENABLE_AUTO_TOOL_CHOICE = "enable_auto_tool_choice"
TOOL_CALL_PARSER = "tool_call_parser"
REASONING_PARSER = "reasoning_parser"
REQUEST_TEMPLATE_TIMEOUT_S = "request_template_timeout_s"
REQUEST_TEMPLATE_MEMORY_MB = "request_template_memory_mb"
REQUEST_TEMPLATE_MAX_BYTES = "request_template_max_bytes"
LIMIT_MM_PER_PROMPT = "limit_mm_per_prompt"
ENGINE_MODEL = "engine_model"
ENGINE_DECOUPLED = "engine_decoupled"
ENCODER_DECODER = "encoder_decoder"
DEVICE = "device"
DECODE_DEVICE = "decode_device"
MM_DEVICE_DO_NORMALIZE = "mm_device_do_normalize"
CACHE_BYTES = "cache_bytes"
MEDIA_DIR = "media_dir"
MEDIA_HOSTS = "media_hosts"
MAX_IMAGE_BYTES = "max_image_bytes"
MAX_IMAGE_PIXELS = "max_image_pixels"
MEDIA_FETCH_TIMEOUT_S = "media_fetch_timeout_s"
IMAGE_PROCESSOR = "image_processor"
EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"
PROJECT_ROOT = "project_root"
DTYPE = "dtype"
KV_CACHE_GIB = "kv_cache_gib"
FAMILY = "family"


def as_text(value: Any) -> str:
    """A value as a config's ``string_value``: a bool as ``true`` / ``false``, anything else ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resolved_path(value: str) -> str:
    """A path setting made absolute (a stub's working folder is not the launcher's)."""
    return str(Path(value).resolve())


def optional_resolved_path(value: str) -> str:
    """``resolved_path``, an empty setting kept empty (unset)."""
    return resolved_path(value) if value else ""


@dataclass(frozen=True)
class StageParam:
    """One ``parameters`` entry of one or more models' configs."""

    key: str
    """The key the stage reads (a setting's field name where it is one setting)."""

    models: tuple[str, ...]
    """The models whose config carries it: ``name`` (every config template of that model) or
    ``name:variant`` (only its ``config.<variant>.pbtxt``, e.g. ``llm:vllm``)."""

    source: str = ""
    """Where the launcher takes the value (see the module's docstring); empty: ``key``."""

    text: Callable[[Any], str] = as_text
    """How the launcher writes that value."""

    literal: str | None = None
    """A fixed text in place of ``source``."""

    doc: str = ""
    """Why it is there, written as a ``#`` comment above its line."""

    @property
    def value_name(self) -> str:
        """The name of the launcher's value: ``source``, or the key."""
        return self.source or self.key

    def carried_by(self, model: str, variant: str) -> bool:
        """Whether ``model``'s ``config.pbtxt`` (variant ``""``) or ``config.<variant>.pbtxt`` carries it."""
        return model in self.models or (bool(variant) and f"{model}:{variant}" in self.models)


_RECORD_DOC = "The model's tokenizer recorded and proven equal to transformers' (renderer/light_tokenizer.py)."
# The stages that load the served model's tokenizer.
_TOKENIZER_STAGES = ("tokenize", "chat_render", "detokenize", "ensemble_params", "generation_params")
# The stages of the encoder-decoder model (ENCODER_DECODER_MODEL_DIR).
_ENCDEC_STAGES = ("tokenize_enc_dec", "llm_enc_dec", "detokenize_enc_dec")
_IMAGE = "mm_process"
_VLLM = "llm:vllm"

STAGE_PARAMS: tuple[StageParam, ...] = (
    StageParam(MODEL_DIR, (*_TOKENIZER_STAGES, "llm", _IMAGE), source="resolved_model_dir"),
    StageParam(MODEL_DIR, _ENCDEC_STAGES, source="resolved_encdec_model_dir"),
    StageParam(TOKENIZER_RECORD, _TOKENIZER_STAGES, doc=_RECORD_DOC),
    StageParam(EXECUTION_ENV_PATH, (_VLLM,), source="vllm_env", text=resolved_path),
    StageParam(
        PROJECT_ROOT,
        (_VLLM,),
        doc="The stub's Python is isolated (PYTHONPATH is ignored): the adapter finds the project here.",
    ),
    StageParam(DEVICE, (_VLLM,), source="vllm_device"),
    StageParam(DTYPE, (_VLLM,), source="resolved_vllm_dtype"),
    StageParam(
        MAX_MODEL_LEN,
        ("tokenize", "tokenize_enc_dec", _VLLM),
        doc="MAX_MODEL_LEN (an encoder-decoder model caps it at its own context: renderer/encoder_decoder.py).",
    ),
    StageParam(KV_CACHE_GIB, (_VLLM,), source="vllm_kv_cache_gib"),
    StageParam(ENABLE_PROMPT_EMBEDS, ("tokenize", _VLLM)),
    StageParam(FAMILY, (_VLLM,)),
    StageParam(TOKENIZER_BACKEND, ("tokenize", "tokenize_enc_dec")),
    StageParam(TRUST_REQUEST_CHAT_TEMPLATE, ("chat_render",)),
    StageParam(CHAT_TEMPLATE_ENGINE, ("chat_render",)),
    StageParam(TRUST_REQUEST_MM_KWARGS, ("chat_render",)),
    StageParam(ENABLE_AUTO_TOOL_CHOICE, ("chat_render",)),
    StageParam(TOOL_CALL_PARSER, ("chat_render",)),
    StageParam(REASONING_PARSER, ("chat_render",)),
    StageParam(REQUEST_TEMPLATE_TIMEOUT_S, ("chat_render",)),
    StageParam(REQUEST_TEMPLATE_MEMORY_MB, ("chat_render",)),
    StageParam(REQUEST_TEMPLATE_MAX_BYTES, ("chat_render",)),
    StageParam(LIMIT_MM_PER_PROMPT, ("chat_render:multimodal", _IMAGE, _VLLM)),
    StageParam(ENGINE_MODEL, ("detokenize",)),
    StageParam(ENGINE_MODEL, ("detokenize_enc_dec",), literal="llm_enc_dec"),
    StageParam(
        ENGINE_DECOUPLED,
        ("detokenize",),
        doc="Whether the engine is deployed decoupled (TensorRT-LLM's ``decoupled_mode``): without, it is\n"
        "asked for each generation in one response.",
    ),
    StageParam(ENCODER_DECODER, ("detokenize_enc_dec",), literal="true"),
    StageParam(DEVICE, (_IMAGE,), source="mm_device", doc="IMAGE_DEVICE resolved against mm_process's instance kind."),
    StageParam(CACHE_BYTES, (_IMAGE,), source="mm_cache_bytes"),
    StageParam(MEDIA_DIR, (_IMAGE,), text=optional_resolved_path),
    StageParam(MEDIA_HOSTS, (_IMAGE,)),
    StageParam(MAX_IMAGE_BYTES, (_IMAGE,)),
    StageParam(MAX_IMAGE_PIXELS, (_IMAGE,)),
    StageParam(MEDIA_FETCH_TIMEOUT_S, (_IMAGE,)),
    StageParam(IMAGE_PROCESSOR, (_IMAGE,)),
    StageParam(
        MM_DEVICE_DO_NORMALIZE,
        (_IMAGE, _VLLM),
        doc="vLLM's mm_device_do_normalize: uint8 pixel_values, normalized by the engine, for a family\n"
        "whose vLLM model can (renderer/multimodal/families.py: normalizes_on_device).",
    ),
    StageParam(
        DECODE_DEVICE,
        (_IMAGE,),
        source="image_decode_device",
        doc='IMAGE_DECODE_DEVICE: "cuda" decodes JPEG images on the device (device is IMAGE_DEVICE resolved).',
    ),
)
"""Every stage parameter, in the order a config lists them."""

COMPUTED = frozenset(
    {
        "tokenizer_record",
        "engine_model",
        "engine_decoupled",
        "vllm_device",
        "resolved_vllm_dtype",
        "mm_device",
        "family",
        "project_root",
    }
)
"""The sources that are no attribute of the settings: ``launcher.repository.computed_values``."""


def stage_params(model: str, variant: str = "") -> tuple[StageParam, ...]:
    """What ``model``'s config (``config.<variant>.pbtxt``; ``""``: ``config.pbtxt``) carries, in order."""
    return tuple(p for p in STAGE_PARAMS if p.carried_by(model, variant))


def parameter_models() -> frozenset[str]:
    """Every model some parameter is carried by."""
    return frozenset(m.split(":")[0] for p in STAGE_PARAMS for m in p.models)
