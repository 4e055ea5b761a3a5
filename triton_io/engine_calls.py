"""Calls from a stage to the engine model over BLS, TensorRT-LLM's way: a generation's stop (a
request with ``stop`` = true and the engine request's id), the ids each engine response adds, the
engine's errors as the request's, and the sender and stub hand-offs a generation's threads share.
What ``detokenize`` (and ``detokenize_enc_dec``) drive the engine with; the adapter keeps the
request's flow."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer.errors import EngineError, EngineFaultError
from triton_io import tensors as io

ENGINE_OUTPUTS = ["output_ids", "sequence_length"]
"""What a stage asks the engine for: TensorRT-LLM's ids and their count."""


class EngineStop:
    """A generation's stop: sent to the engine (TensorRT-LLM's cancellation: ``stop`` = true with
    the engine request's id) by whichever comes first, the client's stop (from ``execute``, even
    before the engine answered anything) or the text ending the request early.

    A stop sent before the engine's first response may overtake the engine request itself (Triton
    runs a stub's BLS calls on a pool of threads), and the engine ignores a stop for an id it does
    not know, as TensorRT-LLM does: such a stop is sent once more if the engine answers anyway.
    Each is a BLS call on a thread of its own, so ``execute`` never waits for the engine; ``join``
    waits for them, so the request ends only after its stops were answered (their objects join the
    request's ``held``)."""

    def __init__(self, engine: str, decoupled: bool, held: list[Any]) -> None:
        self._engine = engine
        self._decoupled = decoupled
        self._held = held
        self._lock = threading.Lock()
        self._asked = threading.Event()
        self._target: tuple[str, list[Any]] | None = None  # the engine request id and its tensors
        self._answered = False  # the engine sent a response
        self._sent_answered = False  # a stop went after the engine's first response
        self._threads: list[threading.Thread] = []
        self._closed = False  # the request is ending: no stop is sent any more

    def is_set(self) -> bool:
        """Whether the stop was asked for."""
        return self._asked.is_set()

    def arm(self, request_id: str, tensors: list[Any]) -> None:
        """The engine request exists (about to be sent): a stop asked for before goes now."""
        with self._lock:
            self._target = (request_id, tensors)
            if self._asked.is_set() and not self._threads and not self._closed:
                self._start()

    def answered(self) -> None:
        """The engine sent a response: it knows the request."""
        self._answered = True

    def request(self) -> None:
        """Stop the generation: sent now if its engine request exists, else when it is made."""
        with self._lock:
            self._asked.set()
            if self._closed or self._target is None or self._sent_answered:
                return
            if not self._threads or self._answered:
                self._start()

    def join(self) -> None:
        """Wait for the stops sent; none is sent after (a BLS call made once the request has ended
        could outlive what keeps its objects until the stub lets go of them)."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        for thread in threads:
            thread.join()

    def _start(self) -> None:
        self._sent_answered = self._answered
        thread = threading.Thread(target=self._send, name=f"{self._engine}-stop", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _send(self) -> None:
        assert self._target is not None
        request_id, tensors = self._target
        required = {t.name(): t for t in tensors if t.name() in ("input_ids", "input_lengths", "request_output_len")}
        stop = pb_utils.InferenceRequest(
            model_name=self._engine,
            inputs=[*required.values(), *io.output_tensors({"stop": np.array([True])})],
            requested_output_names=ENGINE_OUTPUTS,
            request_id=request_id,
        )
        try:
            if not self._decoupled:  # one (empty) response
                self._held += (stop, stop.exec())
                return
            responses = stop.exec(decoupled=True)
            self._held += (stop, responses)
            for _ in responses:
                pass
        except Exception as e:  # noqa: BLE001 - the generation then runs to its own end
            pb_utils.Logger.log_warn(f"stop of engine request {request_id}: {e}")


class EngineStops:
    """The stops of a batched request's rows, asked for together (a client's stop ends every row)."""

    def __init__(self, stops: list[EngineStop]) -> None:
        self._stops = stops

    def request(self) -> None:
        for stop in self._stops:
            stop.request()


class LockedSender:
    """A request's response sender shared by its rows' threads: one response at a time."""

    def __init__(self, sender: Any) -> None:
        self._sender = sender
        self._lock = threading.Lock()

    def send(self, response: Any = None, flags: int = 0) -> None:
        with self._lock:
            self._sender.send(response, flags=flags)


def stub_let_go(request: Any) -> bool:
    """Wait until the stub has dropped its own references to the request's finished BLS calls;
    whether it has. Call it before the request's final response (its answer comes from the
    request's response factory, which the final response deletes).

    ``is_cancelled`` queues its question on the stub's stub-to-parent thread behind the cleanups
    that the calls' iterators queued as they finished, and returns once that thread has answered
    it, so a False means those cleanups are done. A True may be the stub's cached answer, with no
    round trip: the caller then holds the objects for a while instead (``DeferredRelease``)."""
    try:
        return not request.is_cancelled()
    except Exception:  # noqa: BLE001 - no answer: assume nothing
        return False


def response_ids(response: Any) -> list[int] | None:
    """The new ids of one engine response (beam 0, the first ``sequence_length`` of them)."""
    ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
    if ids is None:
        return None
    arr = ids.as_numpy()
    arr = arr.reshape(arr.shape[-2] if arr.ndim > 1 else 1, -1)[0]
    n = pb_utils.get_output_tensor_by_name(response, "sequence_length")
    length = int(n.as_numpy().reshape(-1)[0]) if n is not None else len(arr)
    return arr[:length].tolist()


def engine_error(error: Any, engine: str) -> Exception:
    """An engine's error response as the request's: its refusal (``INVALID_ARG``) a client error
    in the engine's words, anything else the engine's fault."""
    code = error.code() if hasattr(error, "code") else None
    if code == pb_utils.TritonError.INVALID_ARG:
        return EngineError(error.message())
    return EngineFaultError(engine, error.message())
