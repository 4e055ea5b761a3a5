"""One ``tensorrt_llm`` request read as an engine reads it: TensorRT-LLM's semantics, no Triton.

Both engines behind the ``llm`` interface (the transformers stand-in and vLLM's engine) parse
their tensors here, so they agree on every rule: fake ids ``vocab_size + row`` select rows of
``prompt_embedding_table``, ``stop_words_list`` / ``bad_words_list`` are ``[2, L]`` word lists,
generation stops on ``end_id`` (one id) or a stop word, ``runtime_top_k`` = 1 is greedy, and
inputs asking for what neither engine does (beams, several sequences, log probs, logits) are
refused by name rather than ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from renderer.engine_tensors import (
    ENGINE_IMAGE_INPUTS,
    SERVED_ONLY_AT_DEFAULT,
    Getter,
    decode_word_list,
    prompt_rows,
    read_scalar,
)
from renderer.errors import (
    DeclaredLengthError,
    InputIdsRangeError,
    MissingInputError,
    StreamingNeedsDecoupledError,
    UnsupportedInputError,
    ValueRangeError,
)


@dataclass(frozen=True)
class EngineRequest:
    """One request to the engine, decoded from TensorRT-LLM's tensors."""

    input_ids: list[int]
    """Prompt ids as given (fake ids ``vocab_size + row`` where the prompt is table rows)."""

    prompt_embeds: np.ndarray | None
    """``(len(input_ids), hidden)`` prompt embeddings, when ``input_ids`` are fake ids."""

    max_tokens: int
    """``request_output_len``."""

    end_id: int = -1
    """The id that ends generation; -1 for none."""

    stop_words: tuple[tuple[int, ...], ...] = ()
    """Id sequences that end generation (kept in the output)."""

    bad_words: tuple[tuple[int, ...], ...] = ()
    """Id sequences never generated."""

    temperature: float = 1.0
    """Sampling temperature; 0 is greedy."""

    top_k: int = 0
    """``runtime_top_k``; 1 is greedy, 0 keeps every id."""

    top_p: float = 1.0
    """``runtime_top_p``."""

    seed: int | None = None
    """``seed``; None draws one."""

    min_tokens: int = 0
    """Ids generated before ``end_id`` or a stop word may end generation."""

    repetition_penalty: float = 1.0
    """Over prompt and output ids."""

    presence_penalty: float = 0.0
    """Over output ids."""

    frequency_penalty: float = 0.0
    """Over output ids, per occurrence."""

    streaming: bool = False
    """One response per step with only the new ids, the last flagged final."""

    exclude_input_in_output: bool = False
    """Without streaming: leave the prompt out of ``output_ids``."""

    decoder_input_ids: list[int] | None = None
    """Encoder-decoder models: the decoder prompt (``input_ids`` feed the encoder)."""

    images: dict[str, np.ndarray] | None = None
    """Processed images (the extension tensors), for vision-language models."""

    request_id: str = ""
    """Triton's request id (a later request with ``stop`` = true and this id cancels it)."""

    @property
    def greedy(self) -> bool:
        return self.top_k == 1 or self.temperature == 0.0

    @property
    def prompt_len(self) -> int:
        return len(self.input_ids)

    def ends(self, generated: Sequence[int]) -> bool:
        """TensorRT-LLM's end rule after the latest generated id: never before ``min_tokens`` ids
        (and at least one); then on ``end_id``, or where the output ends with a stop word (which it
        keeps). Every engine behind ``llm`` stops by this one rule."""
        if len(generated) < max(self.min_tokens, 1):
            return False
        if generated[-1] == self.end_id:
            return True
        n = len(generated)
        return any(len(w) <= n and tuple(generated[n - len(w) :]) == w for w in self.stop_words)


def _ids(get: Getter, name: str) -> list[int] | None:
    arr = get(name)
    return None if arr is None else arr.reshape(-1).astype(np.int64).tolist()


def parse(
    get: Getter, vocab_size: int, *, request_id: str = "", encoder_decoder: bool = False, decoupled: bool = True
) -> EngineRequest:
    """Read a request from ``get(name) -> array without the batch dimension, or None``, for an
    engine deployed ``decoupled`` or not (TensorRT-LLM's ``decoupled_mode``)."""
    for name, default, what in SERVED_ONLY_AT_DEFAULT:
        value = read_scalar(get, name, type(default), default)
        if value != default:
            raise UnsupportedInputError(name, what, value)
    ids = _ids(get, "input_ids")
    if ids is None:
        raise MissingInputError("input_ids")
    table = get("prompt_embedding_table")
    if table is not None and table.size:
        rows = read_scalar(get, "prompt_vocab_size", int, None)
        if rows is not None and rows != table.shape[0]:
            raise DeclaredLengthError("prompt_vocab_size", rows, table.shape[0], "rows of prompt_embedding_table")
        embeds = prompt_rows(ids, table.astype(np.float32), vocab_size)
    else:
        if any(i >= vocab_size or i < 0 for i in ids):
            raise InputIdsRangeError(vocab_size)
        embeds = None
    declared = read_scalar(get, "input_lengths", int, None)
    if declared is not None and declared != len(ids):
        raise DeclaredLengthError("input_lengths", declared, len(ids), "ids given")
    decoder_ids = _ids(get, "decoder_input_ids") if encoder_decoder else None
    if encoder_decoder:
        if not decoder_ids:
            raise MissingInputError("decoder_input_ids", "by an encoder-decoder engine")
        n_dec = read_scalar(get, "decoder_input_lengths", int, None)
        if n_dec is not None and n_dec != len(decoder_ids):
            raise DeclaredLengthError("decoder_input_lengths", n_dec, len(decoder_ids), "ids given")
    max_tokens = read_scalar(get, "request_output_len", int, None)
    if max_tokens is None:
        raise MissingInputError("request_output_len")
    if max_tokens < 1:
        raise ValueRangeError("request_output_len", "at least 1", max_tokens)
    seed = read_scalar(get, "seed", int, None)
    streaming = read_scalar(get, "streaming", bool, False)
    if streaming and not decoupled:
        raise StreamingNeedsDecoupledError()
    images = {n: a for n in ENGINE_IMAGE_INPUTS if (a := get(n)) is not None and a.size}
    return EngineRequest(
        input_ids=ids,
        prompt_embeds=embeds,
        max_tokens=max_tokens,
        end_id=read_scalar(get, "end_id", int, -1),
        stop_words=tuple(decode_word_list(get("stop_words_list"))),
        bad_words=tuple(decode_word_list(get("bad_words_list"), "bad_words_list")),
        temperature=read_scalar(get, "temperature", float, 1.0),
        top_k=read_scalar(get, "runtime_top_k", int, 0),
        top_p=read_scalar(get, "runtime_top_p", float, 1.0),
        seed=seed,
        min_tokens=read_scalar(get, "min_tokens", int, 0),
        repetition_penalty=read_scalar(get, "repetition_penalty", float, 1.0),
        presence_penalty=read_scalar(get, "presence_penalty", float, 0.0),
        frequency_penalty=read_scalar(get, "frequency_penalty", float, 0.0),
        streaming=streaming,
        exclude_input_in_output=read_scalar(get, "exclude_input_in_output", bool, False),
        decoder_input_ids=decoder_ids,
        images=images or None,
        request_id=request_id,
    )
