"""The engines' rules: TensorRT-LLM inputs this server does not serve, decoupled-mode refusals, a
batch row refused, and the engine's own refusals and faults.
"""

from __future__ import annotations

from .base import RenderError, short
from .params import InvalidParamsError
from .multimodal import UnsupportedMultiModalError
from .prompt import EmbedsError
from .tensors import TensorError


class UnsupportedInputError(InvalidParamsError):
    """A TensorRT-LLM input this server, or the engine behind it, does not serve."""

    def __init__(self, name: str, why: str, value: object = None) -> None:
        got = "" if value is None else f" (got {short(value)})"
        super().__init__(f"Input '{name}' is not supported by this server: {why}{got}.", parameter=name)


class DeclaredLengthError(TensorError):
    """A TensorRT-LLM length input (``input_lengths``, ``decoder_input_lengths``,
    ``prompt_vocab_size``) that does not match what it counts: ``counted`` is how many there are
    and what they are (``"ids given"``, ``"rows of prompt_embedding_table"``)."""

    def __init__(self, name: str, declared: int, actual: int, counted: str) -> None:
        super().__init__(f"{name}={declared} does not match the {actual} {counted}.", parameter=name)


class InputIdsRangeError(TensorError):
    """TensorRT-LLM ``input_ids`` outside the vocabulary where no ``prompt_embedding_table`` gives
    the ids past it a meaning."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__(
            f"input_ids must be in [0, {vocab_size}) without a prompt_embedding_table.", parameter="input_ids"
        )


class EmbedsTableShapeError(EmbedsError):
    """Prompt embeddings for TensorRT-LLM's prompt table that are not (seq_len, hidden_size) with
    at least one row."""

    def __init__(self, shape: list[int]) -> None:
        super().__init__(f"prompt embeddings must be (seq_len, hidden_size) with seq_len > 0, got {shape}.")


class EmbedsTableRangeError(EmbedsError):
    """Prompt embeddings with values past ``limit`` (FP16's largest), which TensorRT-LLM's FP16
    prompt table cannot carry."""

    def __init__(self, limit: float) -> None:
        super().__init__(
            f"prompt_embeds holds values beyond {limit:g}, which the engine's FP16 prompt table cannot carry."
        )


class EngineImageFamilyError(UnsupportedMultiModalError):
    """Images of a family (``name``) vLLM's engine here does not take; ``families`` are the ones it does."""

    def __init__(self, name: str, families: list[str] | tuple[str, ...]) -> None:
        super().__init__(f"vLLM's engine here takes images of the families {', '.join(families)}, not {name!r}.")


class ImageRunsMismatchError(UnsupportedMultiModalError):
    """A request's image tensors out of step: placeholder runs, hashes and processed images not
    one each per image."""

    def __init__(self, runs: int, hashes: int, images: int) -> None:
        super().__init__(f"{runs} placeholder runs, {hashes} hashes and {images} processed images do not match.")


class WordListOffsetsError(InvalidParamsError):
    """A TensorRT-LLM word list (``name``: ``stop_words_list``, ``bad_words_list``) whose offsets do
    not increase within its ``ids`` ids."""

    def __init__(self, name: str, ids: int, offsets: object) -> None:
        super().__init__(f"Word list offsets must increase within the {ids} ids, got {short(offsets)}.", parameter=name)


class PromptTableMixError(InvalidParamsError):
    """TensorRT-LLM ``input_ids`` that mix vocabulary ids and prompt-table ids."""

    def __init__(self) -> None:
        super().__init__(
            "input_ids mixes vocabulary ids and prompt-table ids; this engine takes one or the other.",
            parameter="input_ids",
        )


class PromptTableRowError(InvalidParamsError):
    """TensorRT-LLM ``input_ids`` naming a prompt-table row past the table's ``rows``."""

    def __init__(self, row: int, rows: int) -> None:
        super().__init__(
            f"input_ids refers to prompt-table row {row}, but the table has {rows} rows.", parameter="input_ids"
        )


class EngineError(RenderError):
    """The engine refused the request: a client error, in the engine's own words (``detail``,
    free-form)."""

    def __init__(self, detail: str, *, parameter: str | None = None) -> None:
        super().__init__(detail, parameter=parameter)


class StreamingNeedsDecoupledError(EngineError):
    """A streamed request to an engine deployed without decoupled mode: TensorRT-LLM's words."""

    prints_parameter = False

    def __init__(self) -> None:
        super().__init__(
            "Streaming is only supported if model is deployed using decoupled mode.", parameter="streaming"
        )


class BatchNeedsDecoupledEngineError(EngineError):
    """A request of several rows for an engine deployed without decoupled mode: TensorRT-LLM's
    words (its ``tensorrt_llm`` backend, ``createRequestsFromInputTensors`` in
    ``inflight_batcher_llm/src/utils.cc``), which it sends as an internal error; a refusal of what
    the client sent here, so a client error."""

    prints_parameter = False

    def __init__(self) -> None:
        super().__init__("Batch size > 1 requires the tensorrt_llm backend to be using decoupled transaction policy")


class BatchRowError(RenderError):
    """One row of a batched request refused (``renderer/batch_rows.py``): the request's error,
    naming the row as ``batch_index`` numbers it, then the row's own message (and its parameter)."""

    prints_parameter = False

    def __init__(self, row: int, rows: int, cause: RenderError) -> None:
        super().__init__(f"Row {row} of the batch of {rows} (batch_index {row}): {cause}", parameter=cause.parameter)
        self.row = row
        """The refused row, counted from 0."""
        self.cause = cause
        """The row's own error."""


class EngineFaultError(RuntimeError):
    """The engine failed the request: an internal error, not the client's. ``detail`` is the
    engine's own message (free-form)."""

    def __init__(self, engine: str, detail: str) -> None:
        super().__init__(f"engine '{engine}': {detail}")
