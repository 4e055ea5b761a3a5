"""The engine's side of the seam: TensorRT-LLM's ``tensorrt_llm`` tensors, and how a request becomes them.

Every tensor the ensembles send to the engine model (``llm``, or a real ``tensorrt_llm``) or read
back from it is named here once, with TensorRT-LLM's data type and dims (batch dimension not
counted), so the configs, the adapters and the interface test all read one table.
``tests/unit/test_engine_interface.py`` checks the table against the upstream listing and every
``config.pbtxt`` against the table.

No Triton here: tensors are numpy arrays without the batch dimension.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .errors import (
    EmbedsTableRangeError,
    EmbedsTableShapeError,
    PromptTableMixError,
    PromptTableRowError,
    TensorShapeError,
    WordListOffsetsError,
)
from .sampling import SamplingParams

Getter = Callable[[str], "np.ndarray | None"]
"""``get(name)``: an input tensor without its batch dimension, or None when absent."""


def read_scalar(get: Getter, name: str, kind: type, default: Any = None) -> Any:
    """A one-element input as ``kind``, or ``default`` when absent."""
    arr = get(name)
    if arr is None:
        return default
    if arr.size != 1:
        raise TensorShapeError(name, "hold exactly one element", arr.size)
    return kind(arr.reshape(-1)[0])


@dataclass(frozen=True)
class TensorSpec:
    """One tensor of an interface."""

    name: str
    """Tensor name."""

    dtype: str
    """Triton data type, e.g. ``TYPE_INT32``."""

    dims: tuple[int, ...]
    """Dims after the batch dimension; -1 is variable."""

    optional: bool = False
    """A request may leave it out (``optional: true`` in the config)."""

    ragged: bool = False
    """Requests batched together may differ in its dims (``allow_ragged_batch: true``)."""

    doc: str = field(default="", compare=False)
    """Why the tensor is there, for a reader of the config: the launcher writes it as ``#`` lines
    above the tensor in the rendered ``config.pbtxt``, each paragraph (``\\n``) wrapped on its own;
    "" for none. Not part of the interface, so two specs that differ only here are equal."""

    @property
    def np_dtype(self) -> type:
        return _NP[self.dtype]


_NP = {
    "TYPE_UINT8": np.uint8,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_UINT64": np.uint64,
    "TYPE_FP32": np.float32,
    "TYPE_FP16": np.float16,
    "TYPE_BOOL": np.bool_,
    "TYPE_STRING": np.object_,
}


def _specs(*items: tuple[str, str, tuple[int, ...]]) -> dict[str, TensorSpec]:
    return {name: TensorSpec(name, dtype, dims) for name, dtype, dims in items}


# tensorrt_llm inputs the ensembles send (or the stand-in honours), exactly as TensorRT-LLM declares them.
ENGINE_INPUTS = _specs(
    ("input_ids", "TYPE_INT32", (-1,)),
    ("input_lengths", "TYPE_INT32", (1,)),
    ("request_output_len", "TYPE_INT32", (1,)),
    ("decoder_input_ids", "TYPE_INT32", (-1,)),
    ("decoder_input_lengths", "TYPE_INT32", (1,)),
    ("end_id", "TYPE_INT32", (1,)),
    ("pad_id", "TYPE_INT32", (1,)),
    ("stop_words_list", "TYPE_INT32", (2, -1)),
    ("bad_words_list", "TYPE_INT32", (2, -1)),
    ("beam_width", "TYPE_INT32", (1,)),
    ("num_return_sequences", "TYPE_INT32", (1,)),
    ("temperature", "TYPE_FP32", (1,)),
    ("runtime_top_k", "TYPE_INT32", (1,)),
    ("runtime_top_p", "TYPE_FP32", (1,)),
    ("repetition_penalty", "TYPE_FP32", (1,)),
    ("presence_penalty", "TYPE_FP32", (1,)),
    ("frequency_penalty", "TYPE_FP32", (1,)),
    ("min_tokens", "TYPE_INT32", (1,)),
    ("seed", "TYPE_UINT64", (1,)),
    ("return_log_probs", "TYPE_BOOL", (1,)),
    ("return_context_logits", "TYPE_BOOL", (1,)),
    ("return_generation_logits", "TYPE_BOOL", (1,)),
    ("exclude_input_in_output", "TYPE_BOOL", (1,)),
    ("stop", "TYPE_BOOL", (1,)),
    ("streaming", "TYPE_BOOL", (1,)),
    ("prompt_embedding_table", "TYPE_FP16", (-1, -1)),
    ("prompt_vocab_size", "TYPE_INT32", (1,)),
)

ENGINE_OUTPUTS = _specs(
    ("output_ids", "TYPE_INT32", (-1, -1)),
    ("sequence_length", "TYPE_INT32", (-1,)),
)

# TensorRT-LLM's ``ensemble`` outputs beside ``text_output``, exactly as it declares them (its
# ``${logits_datatype}`` filled as docs/ENGINES.md fills it, TYPE_FP32). Its client scripts ask for
# them by name, and Triton refuses a request for an output the model does not declare, so the
# ``ensemble`` front declares every one, mapped from its post-processor, ``detokenize``.
# ``batch_index`` is the row a response answers (0 for a request of one prompt; a batched request's
# rows: ``renderer/batch_rows.py``) and ``sequence_index`` always 0 (one sequence per row, as
# TensorRT-LLM numbers them); the others are never made: the inputs that ask for them are refused
# by name (``renderer/trtllm_front.py``), never answered with made-up numbers.
FRONT_OUTPUTS = _specs(
    ("cum_log_probs", "TYPE_FP32", (-1,)),
    ("output_log_probs", "TYPE_FP32", (-1, -1)),
    ("context_logits", "TYPE_FP32", (-1, -1)),
    ("generation_logits", "TYPE_FP32", (-1, -1, -1)),
    ("batch_index", "TYPE_INT32", (1,)),
    ("sequence_index", "TYPE_INT32", (1,)),
    ("kv_cache_alloc_new_blocks", "TYPE_INT32", (1,)),
    ("kv_cache_reused_blocks", "TYPE_INT32", (1,)),
    ("kv_cache_alloc_total_blocks", "TYPE_INT32", (1,)),
    ("arrival_time_ns", "TYPE_INT64", (1,)),
    ("first_scheduled_time_ns", "TYPE_INT64", (1,)),
    ("first_token_time_ns", "TYPE_INT64", (1,)),
    ("last_token_time_ns", "TYPE_INT64", (1,)),
    ("acceptance_rate", "TYPE_FP32", (1,)),
    ("total_accepted_draft_tokens", "TYPE_INT32", (1,)),
    ("total_draft_tokens", "TYPE_INT32", (1,)),
)
# The ones made (in every response to the front); the rest are declared only.
FRONT_OUTPUTS_MADE = ("batch_index", "sequence_index")

# Not TensorRT-LLM's: processed images as vLLM's engine takes them (its MultiModalInput: mm_kwargs,
# mm_hashes, mm_placeholders), for the engines that take them here (vLLM's engine, the stand-in),
# the item identities as bytes (``renderer.multimodal.tensors.identifiers_array``). No supported
# TensorRT-LLM Triton model takes processed images: its LLM-API model takes text_input + image_url
# and processes them itself, and multimodal_encoders is end of life at TensorRT-LLM 1.2
# (docs/ENGINES.md, "Images and TensorRT-LLM", names the upstream commits).
ENGINE_IMAGE_INPUTS = _specs(
    ("pixel_values", "TYPE_FP32", (-1, -1)),  # qwen2_vl: flattened patches; pixtral: (-1, 3, -1, -1)
    ("image_grid_thw", "TYPE_INT64", (-1, 3)),
    ("image_sizes", "TYPE_INT64", (-1, 2)),
    ("mm_identifiers", "TYPE_UINT8", (-1, -1)),
    ("mm_placeholders", "TYPE_INT32", (-1, 2)),
)

# What the post-processing model (``detokenize``) takes beside the engine's inputs: vLLM's output rules.
POSTPROCESS_INPUTS = _specs(
    ("stop_strings", "TYPE_STRING", (-1,)),
    ("stop_token_ids", "TYPE_INT32", (-1,)),
    ("include_stop_str_in_output", "TYPE_BOOL", (1,)),
    ("skip_special_tokens", "TYPE_BOOL", (1,)),
)

# The prompt-length tensors a parameter step (``generation_params``, ``ensemble_params``) takes from
# the step before it and hands on unchanged to ``detokenize``. They exist for the order, not the
# values: with them every generation ensemble is a chain (render -> tokenize -> params -> detokenize),
# so no two steps of one request are ever in flight together. Triton 2.51's ensemble scheduler frees
# the client's request and then answers it (tritonserver dies of SIGSEGV) when one step fails while
# a step that became ready beside it is still being scheduled (docs/RELIABILITY.md, "Ensembles run one step at a time").
CHAINED_INPUTS = ("input_lengths",)

# TensorRT-LLM inputs that both the ``ensemble`` front and ``llm`` declare (under the same names)
# and that are served only at the value that asks for nothing: any other value is refused by name,
# with this reason, by whichever of the two reads it first (``trtllm_front``, ``engines/trtllm_inputs``).
SERVED_ONLY_AT_DEFAULT: tuple[tuple[str, object, str], ...] = (
    ("beam_width", 1, "beam search is not served; use 1"),
    ("num_return_sequences", 1, "one sequence per request; use 1"),
    ("return_log_probs", False, "log probabilities are not returned"),
    ("return_context_logits", False, "logits are not returned"),
    ("return_generation_logits", False, "logits are not returned"),
    ("return_perf_metrics", False, "per-request engine metrics are not returned"),
)

# The engine inputs the post-processing model forwards as it got them; the prompt tensors and
# ``streaming`` / ``exclude_input_in_output`` it sets itself.
FORWARDED = tuple(
    n
    for n in ENGINE_INPUTS
    if n
    not in (
        "input_ids",
        "input_lengths",
        "streaming",
        "exclude_input_in_output",
        "prompt_embedding_table",
        "prompt_vocab_size",
        "stop",
    )
)


# --- word lists (stop_words_list / bad_words_list) ---------------------------------------------


def encode_word_list(words: Iterable[Sequence[int]]) -> np.ndarray:
    """TensorRT-LLM's ``[2, L]`` word list: row 0 every word's ids concatenated (padded with 0),
    row 1 each word's cumulative end offset (padded with -1). No words gives ``[[0], [-1]]``,
    as TensorRT-LLM's own preprocessing sends."""
    flat: list[int] = []
    ends: list[int] = []
    for w in words:
        if len(w) == 0:
            continue
        flat += [int(i) for i in w]
        ends.append(len(flat))
    width = max(1, len(flat))
    out = np.zeros((2, width), np.int32)
    out[0, : len(flat)] = flat
    out[1, :] = -1
    out[1, : len(ends)] = ends
    return out


def decode_word_list(arr: np.ndarray | None, name: str = "stop_words_list") -> list[tuple[int, ...]]:
    """The words of a ``[2, L]`` word list (the inverse of ``encode_word_list``)."""
    if arr is None or arr.size == 0:
        return []
    if arr.ndim != 2 or arr.shape[0] != 2:
        raise TensorShapeError(name, "have shape [2, L] (a word list)", list(arr.shape))
    flat, ends = arr[0].tolist(), arr[1].tolist()
    words, start = [], 0
    for end in ends:
        if end < 0:
            break
        if not start < end <= len(flat):
            raise WordListOffsetsError(name, len(flat), ends)
        words.append(tuple(flat[start:end]))
        start = end
    return words


# --- sampling fields -> engine tensors ---------------------------------------------------------


@dataclass(frozen=True)
class StopPolicy:
    """How a model's EOS ids reach an engine that stops on one ``end_id``."""

    end_id: int
    """The id TensorRT-LLM stops on (vLLM's model EOS: the tokenizer's), -1 for none."""

    stop_token_ids: tuple[int, ...]
    """Ids that end generation as stop tokens: the generation config's other EOS ids and the
    request's ``stop_token_ids`` (vLLM's ``update_from_generation_config``)."""

    @classmethod
    def resolve(cls, sampling: SamplingParams, tokenizer_eos: int | None, config_eos: Sequence[int]) -> "StopPolicy":
        if sampling.ignore_eos:
            return cls(-1, tuple(dict.fromkeys(sampling.stop_token_ids)))
        end_id = tokenizer_eos if tokenizer_eos is not None else (config_eos[0] if config_eos else -1)
        extra = [i for i in config_eos if i != end_id] + list(sampling.stop_token_ids)
        return cls(end_id, tuple(dict.fromkeys(extra)))

    @property
    def terminating_ids(self) -> tuple[int, ...]:
        """Every id whose generation ends a request as a stop (its text is not shown)."""
        return tuple(dict.fromkeys(([self.end_id] if self.end_id >= 0 else []) + list(self.stop_token_ids)))


def sampling_tensors(
    sampling: SamplingParams,
    max_tokens: int,
    policy: StopPolicy,
    pad_id: int,
    seed: int,
    stop_string_ids: Sequence[Sequence[int]] = (),
) -> dict[str, np.ndarray]:
    """The engine tensors for one request's sampling fields.

    Greedy goes as ``runtime_top_k`` = 1 (TensorRT-LLM's unambiguous form) with a neutral
    temperature. Stop ids travel as one-id words of ``stop_words_list``; the tokenized stop
    strings join them so the engine stops early (the text check stays authoritative).
    """
    greedy = sampling.greedy
    words = [(i,) for i in policy.stop_token_ids] + [tuple(w) for w in stop_string_ids]
    return {
        "request_output_len": np.array([max_tokens], np.int32),
        "end_id": np.array([policy.end_id], np.int32),
        "pad_id": np.array([pad_id], np.int32),
        "temperature": np.array([1.0 if greedy else sampling.temperature], np.float32),
        "runtime_top_k": np.array([1 if greedy else sampling.top_k], np.int32),
        "runtime_top_p": np.array([1.0 if greedy else sampling.top_p], np.float32),
        "seed": np.array([seed], np.uint64),
        "min_tokens": np.array([sampling.min_tokens], np.int32),
        "repetition_penalty": np.array([sampling.repetition_penalty], np.float32),
        "presence_penalty": np.array([sampling.presence_penalty], np.float32),
        "frequency_penalty": np.array([sampling.frequency_penalty], np.float32),
        "stop_words_list": encode_word_list(words),
        "bad_words_list": encode_word_list(()),
    }


def postprocess_tensors(sampling: SamplingParams, policy: StopPolicy) -> dict[str, np.ndarray]:
    """What ``detokenize`` needs to apply vLLM's output rules."""
    return {
        "stop_strings": np.array([s.encode() for s in sampling.stop], dtype=np.object_).reshape(-1),
        "stop_token_ids": np.array(policy.terminating_ids, np.int32).reshape(-1),
        "include_stop_str_in_output": np.array([sampling.include_stop_str_in_output], np.bool_),
        "skip_special_tokens": np.array([sampling.skip_special_tokens], np.bool_),
    }


# --- prompt embeddings -> TensorRT-LLM's prompt table ------------------------------------------

FP16_MAX = float(np.finfo(np.float16).max)


def prompt_table_tensors(embeds: np.ndarray, vocab_size: int) -> dict[str, np.ndarray]:
    """Prompt embeddings as TensorRT-LLM takes them ("p-tuning"): the rows as an FP16
    ``prompt_embedding_table``, ``prompt_vocab_size`` rows, and ``input_ids`` holding the fake id
    ``vocab_size + row`` at each position."""
    rows = int(embeds.shape[0])
    if embeds.ndim != 2 or rows == 0:
        raise EmbedsTableShapeError(list(embeds.shape))
    if np.abs(embeds).max() > FP16_MAX:
        raise EmbedsTableRangeError(FP16_MAX)
    return {
        "input_ids": np.arange(vocab_size, vocab_size + rows, dtype=np.int32),
        "input_lengths": np.array([rows], np.int32),
        "prompt_embedding_table": embeds.astype(np.float16),
        "prompt_vocab_size": np.array([rows], np.int32),
    }


def prompt_rows(input_ids: Sequence[int], table: np.ndarray, vocab_size: int) -> np.ndarray | None:
    """The prompt-table rows ``input_ids`` select (every id a fake id ``vocab_size + row``), or
    None when they are all vocabulary ids. Mixing both forms in one prompt is refused."""
    fake = [i >= vocab_size for i in input_ids]
    if not any(fake):
        return None
    if not all(fake):
        raise PromptTableMixError()
    rows = [i - vocab_size for i in input_ids]
    if max(rows) >= table.shape[0]:
        raise PromptTableRowError(max(rows), table.shape[0])
    return table[rows]


# --- a generation request -> every tensor generation_params sends on ---------------------------


class GenerationResolver:
    """Per model: turns validated ``SamplingParams`` into the engine and post-processing tensors."""

    @classmethod
    def from_model_dir(cls, model_dir: str, tokenizer_record: str | None = None) -> "GenerationResolver":
        """``tokenizer_record``: as ``Tokenizer.from_pretrained``'s ``record``."""
        from .model_info import ModelInfo
        from .tokenizer import Tokenizer

        info = ModelInfo.from_model_dir(model_dir)
        return cls(Tokenizer.from_pretrained(model_dir, record=tokenizer_record), info.eos_token_ids, info.pad_token_id)

    def __init__(self, tokenizer: "object", config_eos: Sequence[int], pad_id: int | None) -> None:
        """``tokenizer`` is a ``renderer.tokenizer.Tokenizer``; ``config_eos`` the generation
        config's EOS ids (``ModelInfo.eos_token_ids``)."""
        self.tokenizer = tokenizer
        self.tokenizer_eos = tokenizer.eos_token_id
        self.config_eos = tuple(config_eos)
        self.pad_id = pad_id

    def word_ids(self, words: Sequence[str], *, exact: bool = False) -> list[list[int]]:
        """Each word's ids without special tokens (as TensorRT-LLM tokenizes words). With
        ``exact``, a word whose ids do not decode back to it is left out (stop strings: the
        text check catches those, and the engine must never stop where the text has no stop)."""
        out = []
        for w in words:
            ids = self.tokenizer.hf.encode(w, add_special_tokens=False)
            if ids and (not exact or self.tokenizer.decode(ids) == w):
                out.append(ids)
        return out

    def tensors(
        self,
        sampling: SamplingParams,
        max_tokens: int,
        *,
        end_id: int | None = None,
        pad_id: int | None = None,
        bad_words: Sequence[str] = (),
    ) -> dict[str, np.ndarray]:
        """Every tensor ``generation_params`` / ``ensemble_params`` send on; ``end_id`` replaces
        the model's EOS id (TensorRT-LLM's ``end_id`` input)."""
        import secrets

        policy = StopPolicy.resolve(
            sampling, self.tokenizer_eos if end_id is None else end_id, self.config_eos if end_id is None else ()
        )
        if pad_id is None:
            pad_id = self.pad_id if self.pad_id is not None else max(policy.end_id, 0)
        seed = sampling.seed if sampling.seed is not None else secrets.randbits(63)
        out = {
            **sampling_tensors(sampling, max_tokens, policy, pad_id, seed, self.word_ids(sampling.stop, exact=True)),
            **postprocess_tensors(sampling, policy),
        }
        if bad_words:
            out["bad_words_list"] = encode_word_list(self.word_ids(bad_words))
        return out
