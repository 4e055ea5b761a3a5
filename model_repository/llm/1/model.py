"""The Triton adapter of the stand-in engine (``llm``, ``llm_enc_dec``): TensorRT-LLM's
``tensorrt_llm`` interface over ``engines/standin.py``.

Behaviour a consumer of the real engine relies on, kept here:

- decoupled (TensorRT-LLM's ``decoupled_mode: true``, the default) or not (``LLM_DECOUPLED=0``);
  with ``streaming`` each response carries only the new ids, and the last response carries the
  FINAL flag; without it, one response with every id, the prompt first unless
  ``exclude_input_in_output``. Not decoupled, every request gets exactly one response (a stop: an
  empty one) and ``streaming`` is refused in TensorRT-LLM's words;
- ``output_ids`` is ``[beams, tokens]`` and ``sequence_length`` ``[beams]`` (one beam here);
- a request with ``stop`` = true cancels the running request that has its request id, and gets
  an empty final response (TensorRT-LLM's cancellation); a cancelled client request stops too.

Requests run one at a time on a worker thread, so ``execute`` returns at once and a ``stop``
request is answered while another request generates. Each request's responses go out through its
own ``ResponseOutbox``, so a caller that stopped taking them (its stub died) holds up only that
request, which the worker then drops.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from engines import trtllm_inputs
from engines.standin import Generator
from renderer import stage_params as sp
from triton_io import tensors as io
from triton_io.outbox import ResponseOutbox

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("llm")

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.name = config["name"]
        self.decoupled = bool(config.get("model_transaction_policy", {}).get("decoupled", False))
        self.generator = Generator(io.model_params(args)[sp.MODEL_DIR])
        self._queue: queue.Queue = queue.Queue()
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._work, name=f"{self.name}-worker", daemon=True)
        self._worker.start()

    def execute(self, requests: list) -> None:
        for request in requests:
            sender = request.get_response_sender()
            try:
                if io.get_scalar(request, "stop", bool):
                    self._stop(request.request_id())
                    self._end(sender.send)
                    continue
                req = trtllm_inputs.parse(
                    lambda n, r=request: io.get(r, n),
                    self.generator.vocab_size,
                    request_id=request.request_id(),
                    encoder_decoder=self.generator.is_encoder_decoder,
                    decoupled=self.decoupled,
                )
            except Exception as e:  # noqa: BLE001 - the error goes to this request only
                sender.send(io.error_response(e, self.name), flags=FINAL)
                continue
            cancel = threading.Event()
            if req.request_id:
                with self._lock:
                    self._running[req.request_id] = cancel
            self._queue.put((request, sender, req, cancel))
        return None

    def finalize(self) -> None:
        self._queue.put(None)
        self._worker.join(timeout=10)
        io.release_before_teardown()

    def _end(self, send: Any) -> None:
        """A request's end without ids: the FINAL flag alone, or (not decoupled, where every request
        gets exactly one response) an empty response with it."""
        if self.decoupled:
            send(flags=FINAL)
        else:
            send(pb_utils.InferenceResponse(output_tensors=[]), flags=FINAL)

    def _stop(self, request_id: str) -> None:
        with self._lock:
            event = self._running.get(request_id)
        if event is not None:
            event.set()

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            request, sender, req, cancel = item
            outbox = ResponseOutbox(sender, f"{self.name}-send", FINAL)
            try:
                if cancel.is_set() or request.is_cancelled():
                    # Stopped while it queued (its client left): no prefill, no step. Each such
                    # request cost the requests behind it one engine step and its prompt's prefill.
                    self._end(outbox.send)
                    continue
                if not self._generate(request, outbox, req, cancel):
                    self._end(outbox.send)
            except Exception as e:  # noqa: BLE001 - the error goes to this request only
                outbox.send(io.error_response(e, self.name), flags=FINAL)
            finally:
                with self._lock:
                    if self._running.get(req.request_id) is cancel:
                        del self._running[req.request_id]

    def _generate(
        self, request: Any, sender: ResponseOutbox, req: trtllm_inputs.EngineRequest, cancel: threading.Event
    ) -> bool:
        """Runs one request; whether its final response went (else the caller ends it)."""
        generated: list[int] = []
        for step in self.generator.generate(req, cancel):
            # Ask before queueing the final response: once it is out the request must not be touched.
            if request.is_cancelled():
                cancel.set()
            if sender.stalled() and not cancel.is_set():
                pb_utils.Logger.log_warn(f"{self.name}: a request's caller stopped taking responses; dropped")
                cancel.set()
            generated += step.new_ids
            if req.streaming:
                if step.finished or cancel.is_set():
                    sender.send(_response(step.new_ids), flags=FINAL)
                    return True
                if step.new_ids:
                    sender.send(_response(step.new_ids))
            elif step.finished or cancel.is_set():
                prompt = [] if req.exclude_input_in_output else list(req.decoder_input_ids or req.input_ids)
                sender.send(_response(prompt + generated), flags=FINAL)
                return True
        return False


def _response(ids: list[int]) -> Any:
    arr = np.asarray(ids, np.int64).reshape(1, -1)  # [beams, tokens]
    return pb_utils.InferenceResponse(
        output_tensors=[
            OUT("output_ids", arr),
            OUT("sequence_length", [arr.shape[1]]),
        ]
    )
