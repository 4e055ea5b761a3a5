"""Every Python stage's input and output tensors, declared once: name, Triton type, dims, optional,
ragged, and why each is there.

The launcher writes each Python model's ``input [...]`` and ``output [...]`` blocks from these
(``launcher/repository.py``: ``tensor_blocks``, the ``${tensors}`` of its config template), each
``doc`` as a ``#`` comment above its tensor; no template declares a stage's tensors by hand.
``tests/unit/test_stage_tensors.py`` renders the repository for a text model and each image family,
checks every Python model carries exactly these, and holds every ensemble's maps (written by hand:
they choose which step's tensor each name is) to both ends. The engine's tensors
(``engine_tensors.py``) and each image family's (``multimodal/tensors.py``) are the tables these
entries take theirs from, so a tensor of TensorRT-LLM's interface is typed in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .engine_tensors import ENGINE_INPUTS, ENGINE_OUTPUTS, FRONT_OUTPUTS, POSTPROCESS_INPUTS, TensorSpec
from .multimodal.tensors import ITEM_TENSOR_SPECS, image_tensors


@dataclass(frozen=True)
class StageTensors:
    """One Triton model's interface."""

    inputs: tuple[TensorSpec, ...]
    """What it takes, in its config's order."""

    outputs: tuple[TensorSpec, ...]
    """What it answers, in its config's order."""

    def input(self, name: str) -> TensorSpec:
        return _named(self.inputs, name)

    def output(self, name: str) -> TensorSpec:
        return _named(self.outputs, name)


def _named(specs: tuple[TensorSpec, ...], name: str) -> TensorSpec:
    for spec in specs:
        if spec.name == name:
            return spec
    raise KeyError(name)


def _t(
    name: str, dtype: str, dims: tuple[int, ...], *, optional: bool = False, ragged: bool = False, doc: str = ""
) -> TensorSpec:
    return TensorSpec(name, dtype, dims, optional, ragged, doc)


def _engine(name: str, *, optional: bool = False, ragged: bool = False, doc: str = "") -> TensorSpec:
    """A tensor of TensorRT-LLM's interface (or the post-processor's rules), as that table types it."""
    spec = ENGINE_INPUTS.get(name) or ENGINE_OUTPUTS.get(name) or POSTPROCESS_INPUTS[name]
    return replace(spec, optional=optional, ragged=ragged, doc=doc)


def _headed(doc: str, specs: tuple[TensorSpec, ...]) -> tuple[TensorSpec, ...]:
    """``specs`` with ``doc`` written above the first of them (a paragraph of its own): a comment for
    the whole group."""
    if not specs:
        return specs
    first = specs[0]
    return (replace(first, doc=f"{doc}\n{first.doc}".strip()), *specs[1:])


# What every engine request may carry beside its prompt and its control flags (TensorRT-LLM's
# optional inputs), as the engine and the post-processor that forwards them both declare it.
_SAMPLING_OPTIONS = tuple(
    _engine(name, optional=True, ragged=name in ("stop_words_list", "bad_words_list"))
    for name in (
        "end_id",
        "pad_id",
        "stop_words_list",
        "bad_words_list",
        "beam_width",
        "num_return_sequences",
        "temperature",
        "runtime_top_k",
        "runtime_top_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "min_tokens",
        "seed",
        "return_log_probs",
        "return_context_logits",
        "return_generation_logits",
    )
)
# The engine's control flags, in TensorRT-LLM's order for the engines.
_ENGINE_CONTROLS = tuple(_engine(name, optional=True) for name in ("exclude_input_in_output", "stop", "streaming"))
# The same flags as the post-processor lists them, by what they ask of its output.
_OUTPUT_CONTROLS = (
    _engine(
        "streaming",
        optional=True,
        doc="What the client asked of the output: streamed deltas, the prompt in non-streamed output.",
    ),
    _engine("exclude_input_in_output", optional=True),
    _engine(
        "stop",
        optional=True,
        doc="TensorRT-LLM's cancellation: true ends the running request that has this request's id.",
    ),
)
# The engine inputs a post-processor forwards as they come (its control flags it sets itself).
_FORWARDED_HEAD = _engine(
    "request_output_len", doc="The engine's inputs (renderer/engine_tensors.py), forwarded as they come."
)
# vLLM's output rules the post-processor applies (``POSTPROCESS_INPUTS``).
_OUTPUT_RULES = _headed(
    "vLLM's output rules.",
    tuple(
        _engine(name, optional=True, ragged=name in ("stop_strings", "stop_token_ids")) for name in POSTPROCESS_INPUTS
    ),
)
_ENGINE_RESULTS = tuple(_engine(name) for name in ENGINE_OUTPUTS)
_POSTPROCESS_OUTPUTS = (
    _t("text_output", "TYPE_STRING", (1,)),
    _t("output_ids", "TYPE_INT32", (-1,)),
    _t(
        "finish_reason",
        "TYPE_STRING",
        (1,),
        doc='Why generation ended ("stop", "length", "abort"; "" until it has) and the prompt\'s length, '
        "so a client can report usage and finish as OpenAI's API does.",
    ),
    _engine("input_lengths"),
)
# Outputs sent without the batch dimension (``triton_io.tensors.StageOutputs.unbatched``).
UNBATCHED_OUTPUTS = ("trtllm_text_output",)
# What ``detokenize`` also answers for the TensorRT-LLM front (the ``ensemble`` model), asked for
# by name: the text as TensorRT-LLM's postprocessing returns its ``OUTPUT``, one string per beam
# with no batch dimension (shape [1], where ``text_output`` is [1, 1]; its clients read
# ``text_output[0]`` as bytes), and the other outputs of TensorRT-LLM's ``ensemble``.
_FRONT_POSTPROCESS_OUTPUTS = (
    _t(
        "trtllm_text_output",
        "TYPE_STRING",
        (-1,),
        doc="For the TensorRT-LLM front (``ensemble``), made only when asked for: the text as TensorRT-LLM's "
        "postprocessing returns it (one string per beam, no batch dimension), then the other outputs of "
        "TensorRT-LLM's ``ensemble`` (renderer/engine_tensors.py::FRONT_OUTPUTS says which are made).",
    ),
    *FRONT_OUTPUTS.values(),
)
# What both parameter stages make: the engine's generation inputs, the output rules, and the
# prompt length handed on for the chain's order (``CHAINED_INPUTS``).
_PARAMS_OUTPUTS = (
    *(
        _engine(name)
        for name in (
            "request_output_len",
            "end_id",
            "pad_id",
            "temperature",
            "runtime_top_k",
            "runtime_top_p",
            "seed",
            "min_tokens",
            "repetition_penalty",
            "presence_penalty",
            "frequency_penalty",
            "stop_words_list",
            "bad_words_list",
            "streaming",
            "exclude_input_in_output",
        )
    ),
    *_headed("vLLM's output rules, for detokenize.", tuple(_engine(name) for name in POSTPROCESS_INPUTS)),
    _engine("input_lengths"),
)
# Why a parameter step takes the prompt's length (``CHAINED_INPUTS``); ``before`` names the step it comes from.
_CHAINED = (
    "The prompt's length from {before}, handed on to detokenize as it came: it makes this step run after "
    "tokenize, never beside it (renderer/engine_tensors.py::CHAINED_INPUTS says why)."
)

_CHAT_INPUTS = (
    _t(
        "messages",
        "TYPE_STRING",
        (1,),
        optional=True,
        doc="Optional so that Triton lets a request without it reach this stage, which names it "
        "(Triton 2.51 checks only how many inputs a request has).",
    ),
    _t("chat_params", "TYPE_STRING", (1,), optional=True),
    _t(
        "tokenize_params",
        "TYPE_STRING",
        (1,),
        optional=True,
        doc="Read by the later steps, never here: mapped here too so that a request without messages "
        "(Triton 2.51 lets one in when the count of its inputs fits) still reaches this step, which "
        "names the missing input; a step given no input at all fails in the backend, naming nothing.",
    ),
    _t("cache_salt", "TYPE_STRING", (1,), optional=True),
    _t("max_tokens", "TYPE_INT32", (1,), optional=True),
    _t("stream", "TYPE_BOOL", (1,), optional=True),
    _t("sampling_params", "TYPE_STRING", (1,), optional=True),
)
_CHAT_PROMPT = (
    _t("prompt", "TYPE_STRING", (1,)),
    _t("chat_template_applied", "TYPE_BOOL", (1,)),
    _t(
        "output_parsing",
        "TYPE_STRING",
        (1,),
        doc="What detokenize reads from the generated text (renderer/output_parsers/request.py).",
    ),
)

# The text form of every Python model (``config.pbtxt``).
STAGES: dict[str, StageTensors] = {
    "chat_render": StageTensors(
        inputs=_CHAT_INPUTS,
        outputs=(
            *_CHAT_PROMPT,
            _t(
                "mm_placeholders",
                "TYPE_INT32",
                (-1, 2),
                doc="Text-only models: always empty here. A multimodal model's ensemble takes these from "
                "mm_process, which knows where each item's placeholders land in input_ids.",
            ),
            _t("mm_hashes", "TYPE_STRING", (-1,)),
        ),
    ),
    "detokenize": StageTensors(
        inputs=(
            _engine("input_ids", ragged=True),
            _engine("input_lengths"),
            _t(
                "input_embeds",
                "TYPE_FP32",
                (-1, -1),
                optional=True,
                ragged=True,
                doc="Prompt embeddings from tokenize: sent to the engine as TensorRT-LLM's prompt table.",
            ),
            _FORWARDED_HEAD,
            *_SAMPLING_OPTIONS,
            *_OUTPUT_CONTROLS,
            *_OUTPUT_RULES,
            _t(
                "output_parsing",
                "TYPE_STRING",
                (1,),
                optional=True,
                doc="From chat_render: what to read from the text (tool calls, reasoning); absent for completions.",
            ),
        ),
        outputs=(
            *_POSTPROCESS_OUTPUTS,
            _t(
                "parsed_output",
                "TYPE_STRING",
                (1,),
                doc="The text split as vLLM's chat serving splits it: the JSON of its message (or, streamed, "
                'of the step\'s delta: content, reasoning, tool_calls); "" when nothing is parsed.',
            ),
            *_FRONT_POSTPROCESS_OUTPUTS,
        ),
    ),
    "detokenize_enc_dec": StageTensors(
        inputs=(
            _engine("input_ids", ragged=True),
            _engine("input_lengths"),
            _FORWARDED_HEAD,
            _engine("decoder_input_ids", ragged=True),
            _engine("decoder_input_lengths"),
            *_SAMPLING_OPTIONS,
            *_OUTPUT_CONTROLS,
            *_OUTPUT_RULES,
        ),
        outputs=_POSTPROCESS_OUTPUTS,
    ),
    "ensemble_params": StageTensors(
        inputs=(
            _t("decoder_text_input", "TYPE_STRING", (1,), optional=True),
            _t("max_tokens", "TYPE_INT32", (1,)),
            _engine("num_return_sequences", optional=True),
            _t("bad_words", "TYPE_STRING", (-1,), optional=True),
            _t("stop_words", "TYPE_STRING", (-1,), optional=True),
            _engine("exclude_input_in_output", optional=True),
            _engine("end_id", optional=True),
            _engine("pad_id", optional=True),
            _t("top_k", "TYPE_INT32", (1,), optional=True),
            _t("top_p", "TYPE_FP32", (1,), optional=True),
            _engine("temperature", optional=True),
            _t("length_penalty", "TYPE_FP32", (1,), optional=True),
            _engine("repetition_penalty", optional=True),
            _engine("min_tokens", optional=True),
            _engine("presence_penalty", optional=True),
            _engine("frequency_penalty", optional=True),
            _engine("seed", optional=True),
            _engine("return_log_probs", optional=True),
            _engine("return_context_logits", optional=True),
            _engine("return_generation_logits", optional=True),
            _t("return_perf_metrics", "TYPE_BOOL", (1,), optional=True),
            _engine("beam_width", optional=True),
            _t("stream", "TYPE_BOOL", (1,), optional=True),
            _engine("prompt_embedding_table", optional=True),
            _t("prompt_table_extra_id", "TYPE_UINT64", (1,), optional=True),
            _engine("prompt_vocab_size", optional=True),
            _t("embedding_bias_words", "TYPE_STRING", (-1,), optional=True),
            _t("embedding_bias_weights", "TYPE_FP32", (-1,), optional=True),
            _t("lora_task_id", "TYPE_UINT64", (1,), optional=True),
            _t("lora_weights", "TYPE_FP16", (-1, -1), optional=True, ragged=True),
            _t("lora_config", "TYPE_INT32", (-1, 3), optional=True, ragged=True),
            _t("guided_decoding_guide_type", "TYPE_STRING", (1,), optional=True, ragged=True),
            _t("guided_decoding_guide", "TYPE_STRING", (1,), optional=True, ragged=True),
            _engine("input_lengths", doc=_CHAINED.format(before="tokenize")),
        ),
        outputs=_PARAMS_OUTPUTS,
    ),
    "generation_params": StageTensors(
        inputs=(
            _t("max_tokens", "TYPE_INT32", (1,), optional=True, doc="Absent: the stage names it."),
            _t("stream", "TYPE_BOOL", (1,), optional=True),
            _t("sampling_params", "TYPE_STRING", (1,), optional=True),
            _engine("input_lengths", doc=_CHAINED.format(before="the step before")),
        ),
        outputs=_PARAMS_OUTPUTS,
    ),
    "llm": StageTensors(
        inputs=(
            _engine("input_ids", optional=True, ragged=True),
            _engine("input_lengths"),
            _engine("request_output_len"),
            *_SAMPLING_OPTIONS,
            *_ENGINE_CONTROLS,
            _engine("prompt_embedding_table", optional=True, ragged=True),
            _engine("prompt_vocab_size", optional=True),
        ),
        outputs=_ENGINE_RESULTS,
    ),
    "llm_enc_dec": StageTensors(
        inputs=(
            _engine("input_ids", optional=True, ragged=True),
            _engine("input_lengths"),
            _engine("request_output_len"),
            _engine("decoder_input_ids", ragged=True),
            _engine("decoder_input_lengths", optional=True),
            *_SAMPLING_OPTIONS,
            *_ENGINE_CONTROLS,
        ),
        outputs=_ENGINE_RESULTS,
    ),
    "tokenize": StageTensors(
        inputs=(
            _t("prompt", "TYPE_STRING", (1,), optional=True),
            _t(
                "text_input",
                "TYPE_STRING",
                (1,),
                optional=True,
                doc="TensorRT-LLM's prompt (the ``ensemble`` front's): a request may carry a batch of them, "
                "one per row, each rendered as its own completion prompt with its row of max_tokens "
                "(renderer/batch_rows.py).",
            ),
            _t("prompt_token_ids", "TYPE_INT32", (-1,), optional=True, ragged=True),
            _t("prompt_embeds", "TYPE_STRING", (1,), optional=True),
            _t("tokenize_params", "TYPE_STRING", (1,), optional=True),
            _t("cache_salt", "TYPE_STRING", (1,), optional=True),
            _t(
                "max_tokens",
                "TYPE_INT32",
                (1,),
                optional=True,
                doc="max_tokens of a generation request: reserves room in the context for the length check.",
            ),
            _t(
                "chat_template_applied",
                "TYPE_BOOL",
                (1,),
                optional=True,
                doc="Set by chat_render: the text came from a chat template (chat tokenize defaults apply).",
            ),
        ),
        outputs=(
            _t("input_ids", "TYPE_INT32", (-1,)),
            _t("input_lengths", "TYPE_INT32", (1,)),
            _t("token_offsets", "TYPE_INT32", (-1, 2)),
            _t("rendered_prompt", "TYPE_STRING", (1,)),
            _t(
                "input_embeds",
                "TYPE_FP32",
                (-1, -1),
                doc="(seq_len, hidden_size) for prompt_embeds requests (input_ids is then empty); [0, 0] otherwise.",
            ),
            _t(
                "length_limit",
                "TYPE_INT32",
                (2,),
                doc="(max_total_tokens or -1, max_output_tokens) as resolved for this request (MAX_MODEL_LEN, "
                "tokenize_params, max_tokens): mm_process checks the expanded ids against the same limit.",
            ),
        ),
    ),
    "tokenize_enc_dec": StageTensors(
        inputs=(
            _t("encoder_prompt", "TYPE_STRING", (1,), optional=True),
            _t("encoder_prompt_token_ids", "TYPE_INT32", (-1,), optional=True, ragged=True),
            _t("decoder_prompt", "TYPE_STRING", (1,), optional=True),
            _t("decoder_prompt_token_ids", "TYPE_INT32", (-1,), optional=True, ragged=True),
            _t("tokenize_params", "TYPE_STRING", (1,), optional=True),
            _t("cache_salt", "TYPE_STRING", (1,), optional=True),
            _t("max_tokens", "TYPE_INT32", (1,), optional=True),
        ),
        outputs=(
            _t("encoder_input_ids", "TYPE_INT32", (-1,)),
            _t("encoder_input_lengths", "TYPE_INT32", (1,)),
            _t("decoder_input_ids", "TYPE_INT32", (-1,)),
            _t("decoder_input_lengths", "TYPE_INT32", (1,)),
        ),
    ),
}

# What an image family's repository serves instead (``config.multimodal.pbtxt``), before the
# family's own image tensors are added (``stage_tensors``).
MULTIMODAL_STAGES: dict[str, StageTensors] = {
    "mm_process": StageTensors(
        inputs=(
            _t("input_ids", "TYPE_INT32", (-1,), ragged=True),
            _t("token_offsets", "TYPE_INT32", (-1, 2), ragged=True),
            _t("mm_items", "TYPE_STRING", (-1,), ragged=True),
            _t(
                "mm_data",
                "TYPE_STRING",
                (-1,),
                optional=True,
                ragged=True,
                doc="Each item's data URL, in step with mm_items (whose JSON then says so); absent: data inline.",
            ),
            _t("mm_kwargs", "TYPE_STRING", (1,)),
            _t(
                "length_limit",
                "TYPE_INT32",
                (2,),
                doc="tokenize's length_limit: the expanded ids are checked against what it resolved.",
            ),
        ),
        outputs=(
            _t("input_ids", "TYPE_INT32", (-1,)),
            _t("input_lengths", "TYPE_INT32", (1,)),
            _t("token_offsets", "TYPE_INT32", (-1, 2)),
            _t("mm_placeholders", "TYPE_INT32", (-1, 2)),
            _t("mm_hashes", "TYPE_STRING", (-1,)),
            _t(
                "mm_identifiers",
                "TYPE_UINT8",
                (-1, -1),
                doc="mm_hashes as bytes, for the engine (renderer/multimodal/tensors.py says why).",
            ),
        ),
    ),
    "chat_render": StageTensors(
        inputs=_CHAT_INPUTS,
        outputs=(
            *_CHAT_PROMPT,
            _t(
                "mm_items",
                "TYPE_STRING",
                (-1,),
                doc="The chat's media items (one JSON object each: modality, source, uuid), each item's data "
                "URL in mm_data (raw text, never escaped into JSON), and the request's mm_processor_kwargs / "
                "media_io_kwargs, for mm_process.",
            ),
            _t("mm_data", "TYPE_STRING", (-1,)),
            _t("mm_kwargs", "TYPE_STRING", (1,)),
        ),
    ),
}

# The models that take a family's image tensors and every item's identity as optional, ragged
# inputs after TensorRT-LLM's (``stage_tensors``).
IMAGE_TAKERS = ("llm", "detokenize")


def stage_tensors(model: str, family: str | None = None, raw: bool = False) -> StageTensors:
    """``model``'s interface in the repository served for ``family`` (None: a text-only model);
    ``raw``: its ``pixel_values`` are uint8 (``renderer/multimodal/tensors.py``: ``raw_pixels``)."""
    if family is None:
        return STAGES[model]
    if model == "mm_process":
        base = MULTIMODAL_STAGES[model]
        return replace(
            base, outputs=base.outputs + _headed(f"The {family} family's image tensors.", image_tensors(family, raw))
        )
    if model in MULTIMODAL_STAGES:
        return MULTIMODAL_STAGES[model]
    base = STAGES[model]
    if model in IMAGE_TAKERS:
        images = image_tensors(family, raw)
        extra = tuple(replace(t, optional=True, ragged=True) for t in (*images, *ITEM_TENSOR_SPECS))
        note = (
            f"The {family} family's processed images, placeholders and hashes, after TensorRT-LLM's inputs "
            "(an extension: renderer/multimodal/tensors.py)."
        )
        return replace(base, inputs=base.inputs + _headed(note, extra))
    return base


def has_stage_tensors(model: str, family: str | None = None) -> bool:
    """Whether ``model`` is a Python model with a stage table here (an ensemble has none)."""
    return model in STAGES or (family is not None and model in MULTIMODAL_STAGES)


def outputs_of(model: str) -> dict[str, TensorSpec]:
    """Every output ``model`` has in any repository (text or image family; a name means one tensor in
    all of them), by name: what its adapter types its outputs by."""
    out: dict[str, TensorSpec] = {}
    for table in (STAGES, MULTIMODAL_STAGES):
        if model in table:
            out.update({t.name: t for t in table[model].outputs})
    if not out:
        raise KeyError(f"no stage tensors are declared for {model!r}")
    return out
