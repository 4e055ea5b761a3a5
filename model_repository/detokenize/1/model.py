"""The Triton adapter behind ``detokenize`` (and ``detokenize_enc_dec``): post-processing that
drives the engine, the pattern of TensorRT-LLM's own ``tensorrt_llm_bls``.

Its inputs are the engine's (TensorRT-LLM names, built upstream by ``tokenize`` and
``generation_params`` / ``ensemble_params``) plus vLLM's output rules. Per request it

1. builds the engine request: the inputs as they came, the prompt as ids or as TensorRT-LLM's
   prompt table (``input_embeds`` rows behind fake ids), always ``streaming`` so ids arrive as
   they are generated;
2. sends it to the engine model with BLS (``engine_model``: ``llm`` by default, any model that
   has the ``tensorrt_llm`` interface) and reads the deltas;
3. turns them into text with ``renderer.detokenizer`` (vLLM's incremental rules), and answers
   the client: one response per engine delta when the client streams (the last flagged final),
   else one response with everything;
4. once the text says the request is over (a stop string the engine could not see, or the
   client went away), cancels the engine request TensorRT-LLM's way (a request with ``stop`` =
   true and the same request id) and drains what is still in flight.

It takes TensorRT-LLM's cancellation itself too: a request to this model with ``stop`` = true ends
the running request with the same request id. Triton 2.51 cancels an ensemble request only
between its steps, never inside the step that is running (this one, for all of a generation), so
a client that goes away cancels this way (the front does; the ensemble passes the client's
request id down to this step). That stop goes on to the engine at once, not when the engine's
next response comes: a request still queued in the engine has sent none, and would otherwise be
started, prefilled and stepped once only to be stopped.

Each request runs on its own thread (the engine's response iterator blocks), so one instance
serves many at once.

A request of several rows (a batch of prompts to the TensorRT-LLM front, ``renderer/batch_rows.py``)
runs one generation per row, as TensorRT-LLM's ``tensorrt_llm`` splits it: each row on a thread of
its own, its responses tagged with its ``batch_index``, the FINAL flag on the last response of the
request. A row the engine refuses ends the request: the other rows are stopped and the row's error
is the last response.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from renderer import batch_rows
from renderer import stage_params as sp
from renderer.detokenizer import IncrementalDetokenizer
from renderer.engine_tensors import ENGINE_IMAGE_INPUTS, FORWARDED, prompt_table_tensors
from renderer.errors import BatchRowError, EngineError, EngineFaultError, RenderError
from renderer.model_info import ModelInfo
from renderer.output_parsers.answer import AnswerParser, AnswerStream
from renderer.output_parsers.request import OutputParsing
from renderer.tokenizer import Tokenizer
from triton_io import tensors as io
from triton_io.deferred_release import DeferredRelease

# Every output typed as renderer/stage_tensors.py declares it.
OUT = io.StageOutputs("detokenize")

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
ENGINE_OUTPUTS = ["output_ids", "sequence_length"]
# Asked for by the TensorRT-LLM front (``ensemble``) only, without ``text_output``: an ensemble
# asks a step for exactly what its map names.
FRONT_TEXT = "trtllm_text_output"


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        params = io.model_params(args)
        config = json.loads(args["model_config"])
        self.name = config["name"]
        # detokenize_enc_dec shares this adapter and declares no parsed_output.
        self.parses = any(o["name"] == "parsed_output" for o in config.get("output", []))
        self.engine = params[sp.ENGINE_MODEL]
        # TensorRT-LLM's engine deployed without decoupled mode takes no streamed request: it is
        # asked for everything in one response (the client still gets its pieces from here).
        self.engine_decoupled = io.flag(params, sp.ENGINE_DECOUPLED, True)
        self.encoder_decoder = io.flag(params, sp.ENCODER_DECODER)
        self.tokenizer = Tokenizer.from_pretrained(params[sp.MODEL_DIR], record=params.get(sp.TOKENIZER_RECORD) or None)
        pb_utils.Logger.log_info(f"{self.name}: tokenizer: {self.tokenizer.source}")
        self.vocab_size = ModelInfo.from_model_dir(params[sp.MODEL_DIR]).vocab_size
        # Tool calls and reasoning read from a chat's text, as chat_render's output_parsing says.
        self.answers = AnswerParser(self.tokenizer.hf.get_vocab())
        self._running: dict[str, EngineStop] = {}  # client request id -> its generation's stop
        self._lock = threading.Lock()
        # Every BLS call's Python objects outlive the stub's own references to them, so none is
        # freed without the GIL (triton_io/deferred_release.py).
        self._finished = DeferredRelease(f"{self.name}-release")
        io.return_freed_memory()

    def finalize(self) -> None:
        self._finished.close()
        io.release_before_teardown()

    def execute(self, requests: list) -> None:
        for request in requests:
            stop = io.get_batch(request, "stop")
            # The first row's value, as TensorRT-LLM reads it (getRequestBooleanInputTensor).
            if stop is not None and stop.size and bool(stop.reshape(-1)[0]):
                with self._lock:
                    flight = self._running.get(request.request_id())
                if flight is not None:
                    flight.request()
                request.get_response_sender().send(flags=FINAL)  # as TensorRT-LLM answers a stop
                continue
            threading.Thread(target=self._serve, args=(request,), name=f"{self.name}-request", daemon=True).start()
        return None

    def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        rid = request.request_id()
        held: list[Any] = [request]  # the BLS calls' objects, added as they are made
        try:
            rows = self._rows(request)
        except Exception as e:  # noqa: BLE001 - refused before any engine call
            sender.send(io.error_response(e, self.name), flags=FINAL)
            return
        stops = [EngineStop(self.engine, self.engine_decoupled, held) for _ in rows]
        cancel = stops[0] if len(stops) == 1 else EngineStops(stops)
        if rid:
            with self._lock:
                self._running[rid] = cancel
        try:
            if len(rows) == 1:
                final, drained = self._run_row(rows[0], request, sender, stops[0], held, 0)
            else:
                final, drained = self._run_rows(rows, request, sender, stops, held)
        finally:
            with self._lock:
                if self._running.get(rid) is cancel:
                    del self._running[rid]
            for stop in stops:
                stop.join()  # a stop sent from `execute` is answered before the request ends
        # Before the final response, while the request can still be asked (triton_io/deferred_release.py).
        settled = drained and stub_let_go(request)
        sender.send(final, flags=FINAL)
        if not settled:
            self._finished.keep(*held)
        # else the last references go with `held`, here, on a thread that holds the GIL

    def _rows(self, request: Any) -> list[dict[str, Any]]:
        """The request's inputs by name, once per row: the request's own tensors for a request of
        one row; else each row as a request of its own (renderer/batch_rows.py)."""
        inputs = io.inputs(request)
        ids = inputs["input_ids"].as_numpy()
        if ids.ndim == 0 or ids.shape[0] == 1:
            return [inputs]
        batch_rows.check_engine_takes(ids.shape[0], self.engine_decoupled)
        arrays = io.batch_arrays(request)
        return [
            {name: pb_utils.Tensor(name, arr) for name, arr in batch_rows.row_of(arrays, row).items()}
            for row in range(ids.shape[0])
        ]

    def _run_row(
        self, inputs: dict[str, Any], request: Any, sender: Any, cancel: EngineStop, held: list[Any], row: int
    ) -> tuple[Any, bool]:
        """One generation: its final response (sent by the caller) and whether every BLS call of
        it ran to its end."""
        try:
            return self._generate(inputs, request, sender, cancel, held, row), True
        except (EngineError, EngineFaultError) as e:  # raised once the engine's responses are drained
            return io.error_response(e, self.name), True
        except Exception as e:  # noqa: BLE001 - the error goes to this request only
            return io.error_response(e, self.name), False

    def _run_rows(
        self, rows: list[dict[str, Any]], request: Any, sender: Any, stops: list[EngineStop], held: list[Any]
    ) -> tuple[Any, bool]:
        """Every row's generation at once, each on a thread of its own (TensorRT-LLM generates a
        batch's rows in flight together). Each row's last response goes out as the row ends, but
        the last row's, which the caller sends with the FINAL flag; a row that fails stops the
        others and its error is that last response (TensorRT-LLM sends a row's error as that row's
        response; an ensemble here must get an error as its final one)."""
        out = LockedSender(sender)
        ended: queue.Queue = queue.Queue()

        def run(row: int) -> None:
            try:
                ended.put((row, *self._run_row(rows[row], request, out, stops[row], held, row)))
            except BaseException as e:  # noqa: BLE001 - a row must always report its end
                ended.put((row, io.error_response(e, self.name), False))

        for row in range(len(rows)):
            threading.Thread(target=run, args=(row,), name=f"{self.name}-row", daemon=True).start()
        last: Any = None
        failed = False
        drained = True
        done: set[int] = set()
        for _ in rows:
            row, final, row_drained = ended.get()
            done.add(row)
            drained = drained and row_drained
            if failed:
                continue  # stopped by the row that failed
            if final.has_error():
                failed = True
                for other, stop in enumerate(stops):
                    if other not in done:
                        stop.request()
                error = final.error()
                last = pb_utils.InferenceResponse(
                    output_tensors=[], error=pb_utils.TritonError(_row_message(error, row, len(rows)), error.code())
                )
                continue
            if last is not None:
                out.send(last)
            last = final
        return last, drained

    def _engine_inputs(self, inputs: dict[str, Any]) -> tuple[list[Any], list[int] | None]:
        """The engine request's tensors, and the prompt ids the text continues (None for embeddings)."""
        tensors = [t for n in FORWARDED + tuple(ENGINE_IMAGE_INPUTS) if (t := inputs.get(n)) is not None]
        embeds = io.get(inputs, "input_embeds")
        prompt_ids: list[int] | None
        if embeds is not None and embeds.size:
            tensors += io.output_tensors(prompt_table_tensors(embeds, self.vocab_size))
            prompt_ids = None
        else:
            tensors += [inputs["input_ids"], inputs["input_lengths"]]
            prompt_ids = io.get_ids(inputs, "input_ids")
        tensors += io.output_tensors(
            {"streaming": np.array([self.engine_decoupled]), "exclude_input_in_output": np.array([True])}
        )
        if self.encoder_decoder:
            prompt_ids = io.get_ids(inputs, "decoder_input_ids")
        return tensors, prompt_ids

    def _generate(
        self, inputs: dict[str, Any], request: Any, sender: Any, cancel: EngineStop, held: list[Any], row: int
    ) -> Any:
        """Runs the engine request of one row (``inputs``: its tensors by name), streams the text
        pieces when the client streams; returns the final response, for the caller to send once
        the stub has let go of the BLS calls."""
        parsing = OutputParsing.from_json(io.get_str(inputs, "output_parsing")) if self.parses else OutputParsing()
        parsing.check_servable()  # before the engine sees the request
        tensors, prompt_ids = self._engine_inputs(inputs)
        held.append(tensors)
        stream = bool(io.get_scalar(inputs, "streaming", bool))
        answer = self.answers.stream(parsing, prompt_ids) if stream else None
        detok = IncrementalDetokenizer(
            self.tokenizer,
            prompt_ids,
            stop=io.get_strings(inputs, "stop_strings"),
            stop_token_ids=io.get_ids(inputs, "stop_token_ids") or [],
            include_stop_str_in_output=bool(io.get_scalar(inputs, "include_stop_str_in_output", bool)),
            skip_special_tokens=_flag(inputs, "skip_special_tokens", True) and not parsing.keep_special_tokens,
            min_tokens=io.get_scalar(inputs, "min_tokens") or 0,
            max_tokens=io.get_scalar(inputs, "request_output_len"),
        )
        request_id = uuid.uuid4().hex
        cancel.arm(request_id, tensors)
        engine_request = pb_utils.InferenceRequest(
            model_name=self.engine,
            inputs=tensors,
            requested_output_names=ENGINE_OUTPUTS,
            request_id=request_id,
        )
        n_prompt = int(io.get_scalar(inputs, "input_lengths") or 0)
        asked = set(request.requested_output_names())  # a request naming none is asked for all
        # For the TensorRT-LLM front, the row it answers (batch_index); None for the others.
        front = row if FRONT_TEXT in asked and "text_output" not in asked else None
        done = cancelled = False
        final = None  # a streamed request's last piece, held back until the engine is drained
        responses = engine_request.exec(decoupled=True) if self.engine_decoupled else [engine_request.exec()]
        held += (engine_request, responses)
        for response in responses:
            if done:
                continue  # draining a request ended here
            if response.has_error():
                error = _engine_error(response.error(), self.engine)
                for _ in responses:
                    pass  # to the end, so that the stub cleans the call up
                raise error
            cancel.answered()
            new_ids = _delta(response)
            if new_ids is None:
                continue  # the engine's empty final response
            progress = detok.push(new_ids)
            done = progress.finish_reason is not None
            if stream:
                piece = _piece(
                    detok.next_text(), progress.ids, detok.finish_reason, n_prompt, front, answer, self.parses
                )
                if done:
                    final = piece
                else:
                    sender.send(piece)
            if not done and (cancel.is_set() or request.is_cancelled()):
                done = cancelled = True
            if done and not _ended_by_engine(progress):
                cancel.request()
        if final is not None:
            return final
        cancelled = cancelled or cancel.is_set()  # stopped before the engine sent any ids
        detok.end("abort" if cancelled else "length")  # no-op when the text already ended it
        if stream:
            return _piece(detok.next_text(), [], detok.finish_reason, n_prompt, front, answer, self.parses)
        text, ids = detok.text, detok.output_ids
        parsed, finish = self.answers.whole(parsing, text, detok.finish_reason or "")
        parsed_output = parsed if self.parses else None
        if not _flag(inputs, "exclude_input_in_output", False) and prompt_ids:
            # TensorRT-LLM's non-streamed output starts with the prompt unless excluded.
            text = self.tokenizer.decode(prompt_ids, skip_special_tokens=detok.skip_special_tokens) + text
            ids = prompt_ids + ids
        return _response(text, ids, finish, n_prompt, front, parsed_output)


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


def _row_message(error: Any, row: int, rows: int) -> str:
    """A row's error as the batched request's, naming the row (``BatchRowError``'s words)."""
    return str(BatchRowError(row, rows, RenderError(error.message())))


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


def _flag(request: Any, name: str, default: bool) -> bool:
    v = io.get_scalar(request, name, bool)
    return default if v is None else bool(v)


def _delta(response: Any) -> list[int] | None:
    """The new ids of one engine response (beam 0, the first ``sequence_length`` of them)."""
    ids = pb_utils.get_output_tensor_by_name(response, "output_ids")
    if ids is None:
        return None
    arr = ids.as_numpy()
    arr = arr.reshape(arr.shape[-2] if arr.ndim > 1 else 1, -1)[0]
    n = pb_utils.get_output_tensor_by_name(response, "sequence_length")
    length = int(n.as_numpy().reshape(-1)[0]) if n is not None else len(arr)
    return arr[:length].tolist()


def _ended_by_engine(progress: Any) -> bool:
    """Whether the engine stops by itself at this id: its end id, a stop id or max tokens."""
    return progress.finish_reason == "length" or isinstance(progress.stop_reason, int)


def _engine_error(error: Any, engine: str) -> Exception:
    code = error.code() if hasattr(error, "code") else None
    if code == pb_utils.TritonError.INVALID_ARG:
        return EngineError(error.message())
    return EngineFaultError(engine, error.message())


def _piece(
    text: str,
    ids: list[int],
    finish_reason: str | None,
    n_prompt: int,
    front: int | None,
    answer: AnswerStream | None,
    parses: bool,
) -> Any:
    """One streamed response; with parsing on, its delta (and the finish reason vLLM reports)."""
    if answer is None:
        return _response(text, ids, finish_reason, n_prompt, front, "" if parses else None)
    step = answer.step(text, ids, finish_reason)
    return _response(text, ids, step.finish_reason, n_prompt, front, step.delta)


def _response(
    text: str,
    ids: list[int],
    finish_reason: str | None,
    n_prompt: int,
    front: int | None = None,
    parsed: str | None = None,
) -> Any:
    """One response: the text piece and its ids, and, for clients that report usage and finish
    (the OpenAI front), the prompt's length and why generation ended ("" until it has).
    ``front``: for TensorRT-LLM's ``ensemble`` interface instead, the row answered: its clients read
    the text as TensorRT-LLM's postprocessing returns it ([1]: one beam, no batch dimension) and
    index every response by ``batch_index`` (the row of a batched request, else 0) and
    ``sequence_index`` (0: one sequence per request)."""
    values: dict[str, Any] = {"output_ids": ids, "finish_reason": [finish_reason or ""], "input_lengths": [n_prompt]}
    if front is None:
        outputs = {"text_output": [text], **values}
        if parsed is not None:  # the model declares it (detokenize, not detokenize_enc_dec)
            outputs["parsed_output"] = [parsed]
        return pb_utils.InferenceResponse(output_tensors=OUT.all(outputs))
    values |= {"batch_index": [front], "sequence_index": [0]}
    return pb_utils.InferenceResponse(output_tensors=[OUT.unbatched(FRONT_TEXT, [text]), *OUT.all(values)])
