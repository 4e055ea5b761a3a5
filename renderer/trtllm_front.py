"""Requests to the TensorRT-LLM-compatible front (the ``ensemble`` model): its tensors -> ``SamplingParams``.

TensorRT-LLM's ``ensemble`` takes sampling as separate tensors (``top_k``, ``top_p``,
``temperature``, ``stop_words``, ...). Their meanings here are TensorRT-LLM's: with neither
``top_k`` nor ``top_p`` set decoding is greedy; ``stop_words`` end generation (cut from the text,
as vLLM cuts stop strings); ``end_id`` replaces the model's EOS id. An input this server cannot
honour is refused by name, never ignored; one set to its no-op value is accepted
(``length_penalty`` only acts on beam search, which is refused, so any value is a no-op).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engine_tensors import SERVED_ONLY_AT_DEFAULT, Getter, read_scalar
from .errors import InputUTF8Error, MissingInputError, UnsupportedInputError
from .sampling import SamplingParams


@dataclass(frozen=True)
class FrontRequest:
    """What the ``ensemble`` front's tensors ask for."""

    sampling: SamplingParams
    """Sampling and stop rules, in vLLM's terms."""

    max_tokens: int
    """``max_tokens``."""

    end_id: int | None = None
    """``end_id`` when given (replaces the model's EOS id)."""

    pad_id: int | None = None
    """``pad_id`` when given."""

    bad_words: tuple[str, ...] = ()
    """``bad_words``: word strings never generated."""

    stream: bool = False
    """``stream``."""

    exclude_input_in_output: bool = False
    """``exclude_input_in_output``: without it a non-streamed answer starts with the prompt."""


def _strings(get: Getter, name: str) -> tuple[str, ...]:
    arr = get(name)
    if arr is None:
        return ()
    out = []
    for x in arr.reshape(-1):
        try:
            s = x.decode() if isinstance(x, bytes) else str(x)
        except UnicodeDecodeError:
            raise InputUTF8Error(name) from None
        if s:
            out.append(s)
    return tuple(out)


def parse_front_request(get: Getter) -> FrontRequest:
    """Read the ``ensemble`` inputs (``get(name)`` -> the array without its batch dimension, or None)."""
    for name, why in _REFUSED_IF_PRESENT:
        arr = get(name)
        if arr is not None and arr.size:
            raise UnsupportedInputError(name, why)
    for name, default, why in SERVED_ONLY_AT_DEFAULT:
        value = read_scalar(get, name, type(default))
        if value is not None and value != default:
            raise UnsupportedInputError(name, why, value)
    max_tokens = read_scalar(get, "max_tokens", int)
    if max_tokens is None:
        raise MissingInputError("max_tokens")
    top_k = read_scalar(get, "top_k", int) or 0
    top_p = read_scalar(get, "top_p", float) or 0.0
    temperature = read_scalar(get, "temperature", float)
    greedy = (top_k in (0, 1) and top_p == 0.0) or top_k == 1 or temperature == 0.0
    seed = read_scalar(get, "seed", int)
    sampling = SamplingParams(
        temperature=0.0 if greedy else (1.0 if temperature is None else temperature),
        top_p=1.0 if greedy or top_p == 0.0 else top_p,
        top_k=0 if greedy else top_k,
        seed=seed,
        stop=_strings(get, "stop_words"),
        min_tokens=read_scalar(get, "min_tokens", int) or 0,
        repetition_penalty=_default(read_scalar(get, "repetition_penalty", float), 1.0),
        presence_penalty=_default(read_scalar(get, "presence_penalty", float), 0.0),
        frequency_penalty=_default(read_scalar(get, "frequency_penalty", float), 0.0),
    )
    sampling.verify(max_tokens)
    return FrontRequest(
        sampling=sampling,
        max_tokens=max_tokens,
        end_id=read_scalar(get, "end_id", int),
        pad_id=read_scalar(get, "pad_id", int),
        bad_words=_strings(get, "bad_words"),
        stream=bool(read_scalar(get, "stream", bool)),
        exclude_input_in_output=bool(read_scalar(get, "exclude_input_in_output", bool)),
    )


def _default(v: Any, default: Any) -> Any:
    return default if v is None else v


# Present (and non-empty) means asked for.
_REFUSED_IF_PRESENT = (
    ("decoder_text_input", "encoder-decoder prompts go to the encoder_decoder_completion ensemble"),
    ("prompt_embedding_table", "prompt embeddings go to the completion ensemble as prompt_embeds"),
    ("prompt_vocab_size", "prompt embeddings go to the completion ensemble as prompt_embeds"),
    ("prompt_table_extra_id", "there is no prompt table reuse here"),
    ("embedding_bias_words", "embedding bias is not served"),
    ("embedding_bias_weights", "embedding bias is not served"),
    ("lora_task_id", "LoRA adapters are not served"),
    ("lora_weights", "LoRA adapters are not served"),
    ("lora_config", "LoRA adapters are not served"),
    ("guided_decoding_guide_type", "guided decoding is not served"),
    ("guided_decoding_guide", "guided decoding is not served"),
)
