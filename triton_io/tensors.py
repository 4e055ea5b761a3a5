"""Tensor plumbing shared by the Triton ``model.py`` adapters.

Runs inside the Python backend stub, where ``triton_python_backend_utils`` is importable. It
knows tensors and responses, nothing about rendering: reading optional inputs of batch size 1,
JSON bags, and turning a ``RenderError`` into a client error (HTTP 400 / gRPC INVALID_ARGUMENT)
and anything else into an internal error that names the model, never a dead stub.
"""

from __future__ import annotations

import ctypes
import faulthandler
import gc
import json
import logging
import os
import struct
import traceback
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.errors import RenderError, TensorShapeError
from renderer.flags import parse_flag
from renderer.prompts import decode_utf8
from renderer.json_fields import parse_json
from renderer.stage_tensors import outputs_of
from triton_io.errors import InputTooLargeError

log = logging.getLogger("renderer.triton")
# A stub that dies of a native crash (SIGSEGV, SIGABRT, ...) first writes every thread's Python
# stack to its stderr, which is the server's log: the only trace such a crash leaves (a rare
# detokenize crash on a request thread had none). The backend's own handler still runs after.
if not faulthandler.is_enabled():
    faulthandler.enable(all_threads=True)
# Values of a one-int output kept as shared tensors (``StageOutputs.shared``): a few hundred
# bytes of the stub's shared memory each, at most about 1 MB per output.
SHARED_VALUES = 4096
# Per input tensor; the launcher sets it from MAX_INPUT_BYTES. Triton 2.51 has no body limit.
MAX_INPUT_BYTES = int(os.environ.get("RENDERER_MAX_INPUT_BYTES", 64 * 1024 * 1024))


def model_params(args: dict) -> dict[str, str]:
    """The ``parameters`` block of a model's config as a plain dict."""
    cfg = json.loads(args["model_config"])
    return {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}


def flag(params: dict[str, str], name: str, default: bool = False) -> bool:
    raw = params.get(name)
    return default if raw is None else parse_flag(raw)


def inputs(request: Any) -> dict[str, Any]:
    """A request's input tensors by name, read once: each ``get_input_tensor_by_name`` call
    lists (and wraps) all of a request's inputs again. Every ``get_*`` below takes this mapping
    in place of the request."""
    return {t.name(): t for t in request.inputs()}


def get(request: Any, name: str) -> np.ndarray | None:
    """An input as a numpy array with the batch dimension checked and removed, or None.
    ``request``: the request, or its ``inputs(request)``."""
    arr = get_batch(request, name)
    if arr is None:
        return None
    if arr.ndim == 0 or arr.shape[0] != 1:
        raise TensorShapeError(name, "have batch size 1 (one prompt per request)", f"shape {list(arr.shape)}")
    return arr[0]


def get_batch(request: Any, name: str) -> np.ndarray | None:
    """An input as a numpy array with its batch dimension (the rows of a batched request to the
    TensorRT-LLM front: ``renderer/batch_rows.py``), size checked, or None."""
    t = request.get(name) if type(request) is dict else pb_utils.get_input_tensor_by_name(request, name)
    if t is None:
        return None
    arr = t.as_numpy()
    if arr.dtype.kind != "O":
        size = arr.nbytes
    else:  # BYTES: most inputs hold one element
        size = len(arr.item(0)) if arr.size == 1 else sum(map(len, arr.flat))
    if size > MAX_INPUT_BYTES:
        del arr, t  # the error's traceback holds this frame: not the refused input with it
        raise InputTooLargeError(name, size, MAX_INPUT_BYTES)
    return arr


def batch_arrays(request: Any) -> dict[str, np.ndarray]:
    """Every input of a request as ``get_batch`` reads it, by name."""
    found = inputs(request)
    return {name: arr for name in found if (arr := get_batch(found, name)) is not None}


def get_bytes(request: Any, name: str) -> bytes | None:
    arr = get(request, name)
    return None if arr is None else one_bytes(arr, name)


def one_bytes(arr: np.ndarray, name: str) -> bytes:
    """The one element of a BYTES input as ``get`` returned it."""
    if arr.size != 1:
        raise TensorShapeError(name, "hold exactly one element", arr.size)
    value = arr.reshape(-1)[0]
    return value if isinstance(value, bytes) else str(value).encode()


def get_str(request: Any, name: str) -> str | None:
    raw = get_bytes(request, name)
    return None if raw is None else decode_utf8(raw, name)


def get_json(request: Any, name: str) -> Any:
    """A BYTES [1] input holding JSON; None when absent or empty."""
    text = get_str(request, name)
    if text is None or not text.strip():
        return None
    return parse_json(text, name)


def get_scalar(request: Any, name: str, kind: type = int) -> Any:
    arr = get(request, name)
    if arr is None:
        return None
    if arr.size != 1:
        raise TensorShapeError(name, "hold exactly one element", arr.size)
    return kind(arr.reshape(-1)[0])


def get_strings(request: Any, name: str) -> tuple[str, ...]:
    """A BYTES [-1] input as strings; empty when absent."""
    arr = get(request, name)
    return () if arr is None else tuple(decode_utf8(x, name) for x in arr.reshape(-1))


def get_ids(request: Any, name: str) -> list[int] | None:
    arr = get(request, name)
    if arr is None:
        return None
    if arr.ndim != 1:
        raise TensorShapeError(name, "be a 1-D list of token ids per request", f"shape {list(arr.shape)}")
    return arr.astype(np.int64).tolist()


def tensor(name: str, value: Any, dtype: Any) -> Any:
    """An output tensor with a leading batch dimension of 1."""
    # Lists and arrays first: hasattr on them raises and catches an AttributeError per call.
    if type(value) is np.ndarray:
        arr = value if value.dtype == dtype else value.astype(dtype)
    elif type(value) is list and dtype is np.int32 and len(value) > 8:
        arr = int32_array(value)
    else:
        if type(value) not in (list, tuple) and hasattr(value, "detach"):  # a torch tensor, maybe on the GPU
            value = value.detach().cpu().numpy()
        arr = np.asarray(value, dtype=dtype)
    return pb_utils.Tensor(name, arr[np.newaxis, ...])


def int32_array(values: list[int]) -> np.ndarray:
    """A list of ints (token ids) as an INT32 array: packed by ``struct``, about twice as fast as
    numpy's element-by-element conversion; numpy's words for a value INT32 cannot hold."""
    try:
        return np.frombuffer(struct.pack(f"{len(values)}i", *values), dtype=np.int32)
    except struct.error:
        return np.asarray(values, dtype=np.int32)


_HOLDERS: list["StageOutputs"] = []
"""Every ``StageOutputs`` of this stub: their tensors are freed before the stub's teardown."""


class StageOutputs:
    """Makes one stage's output tensors, each typed as ``renderer/stage_tensors.py`` declares it:
    an adapter names the tensor and gives the values, never the dtype."""

    def __init__(self, model: str) -> None:
        self.specs = outputs_of(model)
        self._shared: dict[str, dict[int, Any]] = {}
        self._constants: dict[tuple[str, int], tuple[Any, Any]] = {}
        _HOLDERS.append(self)

    def release(self) -> None:
        """Drop the tensors made once (``release_before_teardown``)."""
        self._shared.clear()
        self._constants.clear()

    def __call__(self, name: str, value: Any) -> Any:
        spec = self.specs[name]  # a KeyError here is an output the table does not declare
        if spec.dtype == "TYPE_STRING":
            return bytes_tensor(name, value)
        return tensor(name, value, spec.np_dtype)

    def empty(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """An empty array of the output's dtype, without the batch dimension: for an output most
        responses leave empty, made once."""
        return np.zeros(shape, dtype=self.specs[name].np_dtype)

    def constant(self, name: str, value: Any) -> Any:
        """The output tensor of ``value``, an array that many responses send alike (an empty
        list, a flag) and that is never written: made on first use and handed to every response
        as the same object. The stub copies a tensor into its shared memory on the first send
        only (``PbTensor::SaveToSharedMemory`` skips a tensor already there) and owns that copy
        while the object lives, so the server's reads of it never free it: each later response
        skips the constructor, the allocation and the copy. (Made lazily: the stub imports a
        model.py to auto-complete its config before ``pb_utils.Tensor`` exists.)"""
        key = (name, id(value))
        hit = self._constants.get(key)
        if hit is None:
            hit = self._constants[key] = (value, self(name, value))  # holds value: its id stays its own
        return hit[1]

    def shared(self, name: str, value: int) -> Any:
        """``constant`` for a one-int output whose values repeat (a prompt's length): one tensor
        per value below ``SHARED_VALUES``, made on first use; larger values get a new tensor."""
        cache = self._shared.setdefault(name, {})
        t = cache.get(value)
        if t is None:
            t = self(name, [value])
            if 0 <= value < SHARED_VALUES:
                cache[value] = t
        return t

    def echo(self, name: str, arr: np.ndarray) -> Any:
        """A BYTES output of the input array ``arr`` (as ``get`` returned it) sent back as it
        came: no element is decoded, encoded or copied into a new array."""
        if self.specs[name].dtype != "TYPE_STRING" or arr.dtype != np.object_:
            raise TypeError(f"{name}: echo sends a BYTES input as a BYTES output, got {arr.dtype}")
        return pb_utils.Tensor(name, arr[np.newaxis, ...])

    def all(self, values: Mapping[str, Any]) -> list[Any]:
        return [self(name, value) for name, value in values.items()]

    def batch(self, values: Mapping[str, np.ndarray]) -> list[Any]:
        """Output tensors of arrays that already carry the batch dimension (a batched request's
        rows, ``renderer.batch_rows.stack_rows``)."""
        return [
            pb_utils.Tensor(name, np.ascontiguousarray(arr, dtype=self.specs[name].np_dtype))
            for name, arr in values.items()
        ]

    def unbatched(self, name: str, value: Any) -> Any:
        """The tensor without the leading batch dimension: for an output whose consumers expect
        it so (TensorRT-LLM's postprocessing returns its text as [beams], not [1, beams])."""
        spec = self.specs[name]
        if spec.dtype == "TYPE_STRING":
            value = [s.encode() if isinstance(s, str) else s for s in value]
        return pb_utils.Tensor(name, np.asarray(value, dtype=spec.np_dtype))


def requested(request: Any) -> frozenset[str]:
    """The outputs Triton asks of ``request``: an ensemble step is asked for those its
    ``output_map`` names, a direct request naming none for all. A stage builds only these (the
    backend drops the others after they were made and copied into shared memory)."""
    return frozenset(request.requested_output_names())


def handed_on(request: Any, names: Sequence[str]) -> dict[str, np.ndarray]:
    """The inputs among ``names`` that the request carries, as they came (batch dimension removed),
    for a step that passes them to the next one (``renderer.engine_tensors.CHAINED_INPUTS``)."""
    found = {name: get(request, name) for name in names}
    return {name: arr for name, arr in found.items() if arr is not None}


def output_tensors(tensors: Mapping[str, np.ndarray]) -> list[Any]:
    """Arrays without the batch dimension -> output tensors with a batch dimension of 1."""
    return [pb_utils.Tensor(name, np.ascontiguousarray(arr)[np.newaxis, ...]) for name, arr in tensors.items()]


def bytes_tensor(name: str, items: Sequence[str | bytes] | np.ndarray) -> Any:
    if type(items) is np.ndarray and items.dtype == np.object_ and not items.size:
        arr = items  # an empty output made once (StageOutputs.empty)
    else:
        arr = np.array([s.encode() if isinstance(s, str) else s for s in items], dtype=np.object_)
    return pb_utils.Tensor(name, arr[np.newaxis, ...])


def error_response(exc: BaseException, model: str) -> Any:
    return pb_utils.InferenceResponse(output_tensors=[], error=to_triton_error(exc, model))


def to_triton_error(exc: BaseException, model: str) -> Any:
    if isinstance(exc, RenderError):
        return pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
    # A bug, not a bad request: log the trace (server side only) and answer 500.
    log.error("%s: internal error: %s", model, "".join(traceback.format_exception(exc)))
    return pb_utils.TritonError(f"{model}: internal error: {type(exc).__name__}: {exc}", pb_utils.TritonError.INTERNAL)


def parse_each(requests: Sequence[Any], parse: Callable[[Any], tuple[Any, Any]]) -> tuple[list[Any], list[Any]]:
    """``parse(request) -> (prompt, params)`` for each request; a request that fails to parse
    carries its exception in both places, so a batched renderer answers it with that error."""
    prompts, params = [], []
    for r in requests:
        try:
            pr, pa = parse(r)
        except Exception as e:  # noqa: BLE001 - becomes this request's error response
            if isinstance(e, RenderError):
                # Its traceback holds this frame, whose lists hold it: a cycle that kept the
                # request's inputs (a refused 6 MiB prompt) alive until the garbage collector ran.
                e.__traceback__ = None
            pr = pa = e
        prompts.append(pr)
        params.append(pa)
    return prompts, params


def respond_each(
    requests: Sequence[Any], model: str, build: Callable[[Any], Any], later: Callable[[Any], bool] | None = None
) -> list[Any]:
    """One response per request, in the requests' order; an exception in one becomes that
    request's error only. ``later``: requests it says may be slow are built after the others of
    the batch, so a fast request never waits behind them."""
    out: list[Any] = [None] * len(requests)
    order = range(len(requests))
    # Ordering matters only within a batch; a lone request skips the check (7% of chat_render's
    # execute at concurrency 1, by py-spy: it reads the chat_params input a second time).
    if later is not None and len(requests) > 1:
        order = sorted(order, key=lambda i: _is_later(later, requests[i]))
    for i in order:
        try:
            out[i] = build(requests[i])
        except Exception as e:  # noqa: BLE001 - every failure must become a response
            out[i] = error_response(e, model)
    return out


def _is_later(later: Callable[[Any], bool], request: Any) -> bool:
    try:
        return bool(later(request))
    except Exception:  # noqa: BLE001 - a bad input is the build's to report, in the normal order
        return False


def release_before_teardown() -> None:
    """Free, at ``finalize``, the backend objects (requests, tensors, responses) still held: the
    tensors ``StageOutputs`` made once, and cyclic garbage (a failed request's traceback, for
    one). Left to the interpreter's teardown, the 2.51 stub frees them after itself and
    segfaults at every stop."""
    for holder in _HOLDERS:
        holder.release()
    gc.collect()


def return_freed_memory() -> None:
    """At the end of ``initialize``: give the C heap's free pages back to the system. Loading a
    tokenizer parses megabytes of JSON and proves engines on probes, and glibc keeps the freed
    pages (10-30 MB a stub) for good unless asked; every stub of the pod would hold them."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to return this way
        pass
