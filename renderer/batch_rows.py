"""A batch of independent prompts in one request to the TensorRT-LLM front (``ensemble``).

TensorRT-LLM's ``ensemble`` takes a request whose inputs carry N rows, one prompt and its own
parameters per row (its ``end_to_end_grpc_client.py --batch-inputs`` stacks N one-prompt
requests along the batch dimension). Upstream (tensorrtllm_backend ``c2e65b8``,
``all_models/inflight_batcher_llm/`` and ``inflight_batcher_llm/src/``):

- ``preprocessing`` tokenizes each row with its own words and ids and pads the rows' ids,
  ``REQUEST_INPUT_LEN`` saying each row's length;
- ``tensorrt_llm`` splits the request into one generation per row (``splitBatchInputsTensors``,
  the ids cut to each row's length) and answers each row in responses of its own, tagged with
  ``batch_index`` (the row; sent when the request has more than one row); the request's FINAL flag
  comes with the response of the last row to end, so rows interleave as they are generated;
- deployed without decoupled mode, ``tensorrt_llm`` refuses any request of more than one row
  (``BatchNeedsDecoupledEngineError`` keeps its words);
- ``postprocessing`` decodes each response as it comes, one row's ids at a time.

Here the same, stage by stage: ``tokenize`` renders each row as its own prompt, ``ensemble_params``
reads each row's parameters, ``detokenize`` runs one generation per row; so each row is answered
exactly as its prompt sent alone is. This module holds the rules those stages share: how a
request's rows are read, stacked into one batch with padding and taken apart again, and how the
refusal of one row names it. No Triton here: tensors are numpy arrays.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, TypeVar

import numpy as np

from .engine_tensors import Getter
from .errors import BatchNeedsDecoupledEngineError, BatchRowError, RenderError

T = TypeVar("T")

# What a row shorter than the longest is padded with, per tensor whose rows may differ in length;
# each value is one a row never holds, or one the row's own length cuts off, so ``row_of`` takes it
# off again. A word list pads its ids with 0 and its offsets with -1, as TensorRT-LLM's
# preprocessing pads its rows (and as a word list ends anyway).
ROW_PADDING: Mapping[str, Any] = {
    "input_ids": 0,  # cut to the row's input_lengths
    "stop_words_list": (0, -1),
    "bad_words_list": (0, -1),
    "stop_strings": b"",  # never a stop string: vLLM refuses an empty one (EmptyStopStringError)
    "stop_token_ids": -1,  # never a token id
}


def rows_in(arrays: Mapping[str, np.ndarray]) -> int:
    """A request's number of rows: its inputs' batch dimension (Triton refuses a request whose
    inputs differ in it)."""
    for arr in arrays.values():
        return int(arr.shape[0]) if arr.ndim else 1
    return 1


def row_getter(arrays: Mapping[str, np.ndarray], row: int) -> Getter:
    """``get(name)`` for one row: the input without its batch dimension, or None when absent."""

    def get(name: str) -> np.ndarray | None:
        arr = arrays.get(name)
        return None if arr is None else arr[row]

    return get


def each_row(rows: int, read: Callable[[int], T]) -> list[T]:
    """``read(row)`` for each row. A row refused is the request's refusal (TensorRT-LLM answers a
    request with one error too); with several rows the error names the row (``BatchRowError``), with
    one it is the row's own, as that prompt sent alone gets it."""
    out = []
    for row in range(rows):
        try:
            out.append(read(row))
        except RenderError as e:
            if rows == 1:
                raise
            e.__traceback__ = None  # its frames hold the request's arrays
            raise BatchRowError(row, rows, e) from None
    return out


def unless_refused(result: T | BaseException) -> T:
    """A row's result from a batched step that answers an error in place (``Renderer.render_batch``):
    the result, or its error raised."""
    if isinstance(result, BaseException):
        raise result
    return result


def stack_rows(rows: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The rows' tensors (each without the batch dimension, every row naming the same ones) as one
    batch, ``[rows, ...]``: a tensor whose rows differ in shape is padded at the end of each
    dimension with its ``ROW_PADDING`` value."""
    out = {}
    for name in rows[0]:
        arrays = [np.asarray(r[name]) for r in rows]
        shape = tuple(max(dims) for dims in zip(*(a.shape for a in arrays)))
        if any(a.shape != shape for a in arrays):
            arrays = [_padded(name, a, shape) for a in arrays]
        out[name] = np.stack(arrays)
    return out


def _padded(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if name not in ROW_PADDING:
        # A tensor no rule pads cannot be taken apart again: a stage sending it is a bug.
        raise ValueError(f"{name}: rows of shapes that differ ({list(arr.shape)} and {list(shape)}) and no padding")
    pad = ROW_PADDING[name]
    out = np.empty(shape, dtype=arr.dtype)
    if isinstance(pad, tuple):  # one value per index of the first dimension (a word list's two rows)
        for i, value in enumerate(pad):
            out[i] = value
    else:
        out[...] = pad
    out[tuple(slice(0, d) for d in arr.shape)] = arr
    return out


def row_of(arrays: Mapping[str, np.ndarray], row: int) -> dict[str, np.ndarray]:
    """Row ``row`` of a batch as a request of its own (each tensor ``[1, ...]``), with the padding
    ``stack_rows`` added taken off: the ids cut to the row's ``input_lengths``, the padding stop
    strings and stop ids left out. A word list keeps its padding, which is a word list's own end."""
    out = {name: np.ascontiguousarray(arr[row : row + 1]) for name, arr in arrays.items()}
    if "input_ids" in out and "input_lengths" in out:
        out["input_ids"] = out["input_ids"][:, : int(out["input_lengths"].reshape(-1)[0])]
    if "stop_strings" in out:
        kept = [s for s in out["stop_strings"].reshape(-1) if s != ROW_PADDING["stop_strings"]]
        out["stop_strings"] = np.array(kept, dtype=np.object_).reshape(1, -1)
    if "stop_token_ids" in out:
        ids = out["stop_token_ids"]
        out["stop_token_ids"] = ids[ids != ROW_PADDING["stop_token_ids"]].reshape(1, -1)
    return out


def check_engine_takes(rows: int, engine_decoupled: bool) -> None:
    """TensorRT-LLM's engine deployed without decoupled mode answers one response per request, so
    it takes one row per request: a request of several is refused in its words."""
    if rows > 1 and not engine_decoupled:
        raise BatchNeedsDecoupledEngineError()
