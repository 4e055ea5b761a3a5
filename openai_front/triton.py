"""The ensembles over gRPC, asynchronously (``tritonclient.grpc.aio``).

Render ensembles are unary calls, whose errors carry their gRPC status code (INVALID_ARGUMENT for
a bad request: a 400 here, anything else a 5xx). Generation ensembles are decoupled, so they go
over a stream of their own per request, without ``triton_grpc_error`` (its error path crashes
Triton 2.51: client/triton_client.py says how): a failed request's error comes as its message
alone, which ``client.stream_error_kind`` reads. Leaving a stream early (the HTTP client went away)
cancels it, and Triton cancels the request in the ensemble; the post-processor then stops the
engine.

``Ensembles.stream`` is the generic form, for Triton's generate extension (``generate.py``): any
model, tensors and request parameters as given, every response as Triton sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence

import numpy as np

from .protocol import FrontError

POST_PROCESSOR = "detokenize"  # the step of the chat and completion ensembles that drives the engine
# Every step that drives an engine for a whole generation (``encoder_decoder_completion``'s has its
# own config), with the inputs its config requires of a stop beyond the four of ``_stop``: Triton
# refuses a request that lacks one before the step sees ``stop``.
POST_PROCESSORS: dict[str, tuple[str, ...]] = {
    POST_PROCESSOR: (),
    "detokenize_enc_dec": ("decoder_input_ids", "decoder_input_lengths"),
}
# What grpc's asyncio client reports when a call fails in its own transport before any status came
# from the server (Triton ended the connection mid-call: killed, crashed, restarting). The call had
# no verdict; it is Triton being away, not an internal error of the request (seen in CI as a 500
# just after tritonserver was killed).
GRPC_LOST_STATUS = ("StatusCode.INTERNAL", "Internal error from Core")
# Reconnect at least this often while Triton is away, so the front serves again as soon as Triton
# is (gRPC's own backoff grows to 2 minutes: after a restart the front answered 500 for 15 s more).
MAX_RECONNECT_BACKOFF_MS = 500
# An error a stream brought without a code, by its kind (client.stream_error_kind).
STREAM_ERRORS = {
    "client": HTTPStatus.BAD_REQUEST,
    "unavailable": HTTPStatus.SERVICE_UNAVAILABLE,
    "internal": HTTPStatus.INTERNAL_SERVER_ERROR,
    "unknown": HTTPStatus.INTERNAL_SERVER_ERROR,
}
# The response parameter Triton's gRPC stream adds to say a request's last response, and the request
# parameter that makes it send one even when a decoupled model ends with the flag alone
# (src/grpc/stream_infer_handler.cc).
FINAL_RESPONSE = "triton_final_response"
EMPTY_FINAL_RESPONSE = "triton_enable_empty_final_response"

ParameterValue = bool | int | float | str
"""A request or response parameter's value, as Triton's ``InferParameter`` carries it."""


@dataclass(frozen=True)
class InputInfo:
    """One input of a model, as its metadata and config describe it."""

    name: str
    """The input's name."""

    datatype: str
    """Triton's datatype name: "INT32", "BYTES", ..."""

    shape: tuple[int, ...]
    """The metadata's shape: the batch dimension (-1) first when the model batches; -1 for any size."""

    optional: bool
    """The config marks it optional: a request may leave it out."""


@dataclass(frozen=True)
class ModelInterface:
    """What a client needs to know of a model to build its requests."""

    name: str
    """The model's name."""

    inputs: tuple[InputInfo, ...]
    """Its inputs, in the metadata's order."""

    decoupled: bool
    """It may send any number of responses per request (``model_transaction_policy``)."""

    steps: tuple[str, ...] = ()
    """An ensemble's step models, in its config's order; () for any other model."""

    def runs(self, model: str) -> bool:
        """``model`` is this model or one of its ensemble's steps."""
        return model == self.name or model in self.steps

    def missing(self, given: Iterable[str]) -> list[str]:
        """The required inputs not in ``given``, in the config's order (as Triton lists them)."""
        names = set(given)
        return [i.name for i in self.inputs if not i.optional and i.name not in names]

    @property
    def required(self) -> int:
        """How many inputs a request must send."""
        return sum(not i.optional for i in self.inputs)


@dataclass(frozen=True)
class Tensor:
    """One tensor as Triton's gRPC messages carry it."""

    name: str
    """Its name."""

    datatype: str
    """Triton's datatype name."""

    shape: tuple[int, ...]
    """Its shape, batch dimension included."""

    data: bytes
    """Its raw contents, little-endian; BYTES: each element as a 4-byte length, then its bytes."""


@dataclass(frozen=True)
class Reply:
    """One response of a gRPC stream, as Triton sent it."""

    error: str
    """The error's message; "" for a response with outputs."""

    final: bool
    """The request's last response."""

    model_name: str
    """The model that answered."""

    model_version: str
    """Its version."""

    parameters: tuple[tuple[str, ParameterValue], ...]
    """The response's parameters, in the message's order; the stream's own final flag left out."""

    outputs: tuple[Tensor, ...]
    """Its output tensors, in the message's order."""

    @property
    def flag_only(self) -> bool:
        """Nothing but the final flag: what the gRPC stream sends when a decoupled model ends a
        request without a response (``EMPTY_FINAL_RESPONSE``)."""
        return self.final and not self.error and not self.outputs and not self.parameters


@dataclass(frozen=True)
class Piece:
    """One response of a generation ensemble."""

    text: str
    """The text of this response."""

    ids: list[int]
    """Its token ids."""

    finish_reason: str
    """"stop", "length", "abort", or "" while generating."""

    prompt_tokens: int
    """The prompt's length in tokens."""

    parsed: str = ""
    """The ``chat`` ensemble's ``parsed_output``: the JSON of vLLM's message (or, streamed, of the
    step's delta) when the server parses tool calls or reasoning; "" otherwise."""


def _error(e: Exception, front_model: bool = True) -> FrontError:
    """A failed call as an HTTP status: Triton's gRPC status code says whose fault it was.
    ``front_model``: the call named a model of the front's own choosing (not one a client named)."""
    import grpc
    from tritonclient.utils import InferenceServerException

    from client import grpc_http_status, stream_error_kind, strip_ensemble_prefix
    from renderer.errors import parameter_of

    if isinstance(e, grpc.RpcError):  # the call itself failed (transport, deadline)
        code, message = f"StatusCode.{e.code().name}", e.details() or ""
    elif isinstance(e, InferenceServerException):
        code, message = str(e.status()), e.message() or ""
    else:
        return FrontError(f"{type(e).__name__}: {e}", HTTPStatus.INTERNAL_SERVER_ERROR)
    if code in ("", "None"):  # a request's error on a stream
        status = STREAM_ERRORS[stream_error_kind(message)]
    else:
        status = grpc_http_status(code) or HTTPStatus.INTERNAL_SERVER_ERROR
    if (code, message) == GRPC_LOST_STATUS:
        status = HTTPStatus.SERVICE_UNAVAILABLE
    if front_model and "Request for unknown model" in message:
        # The front calls only the ensembles the launcher loads: one not there is still loading
        # (Triton starting or restarting) or being reloaded, not the client's mistake.
        status = HTTPStatus.SERVICE_UNAVAILABLE
    if status == HTTPStatus.SERVICE_UNAVAILABLE and code not in ("", "None"):
        message = f"The inference server is not reachable now (starting or restarting): {message}"
    message = strip_ensemble_prefix(message)  # the stage's own message
    # A client error names its request field in vLLM's form; OpenAI's ``param`` carries it.
    param = parameter_of(message) if status < HTTPStatus.INTERNAL_SERVER_ERROR else None
    return FrontError(message, status, param)


# How long a finished stream may take to end on Triton's side before it is cancelled.
STREAM_END_S = 2.0


async def _end(drain: Awaitable[None], cancel: Callable[[], Any]) -> None:
    """Let Triton end a stream whose request is answered: our side has stopped writing, so it
    closes the call once its last response is out (``drain`` reads to that end). Cancelling it
    instead, racing that end, leaks the request inside Triton 2.51 under concurrent streams: its
    model is then never unloaded, and a stop waits out the whole exit timeout."""
    try:
        await asyncio.wait_for(drain, STREAM_END_S)
    except Exception:  # noqa: BLE001 - the request is answered; only the call's end is left
        cancel()


async def _drain(stream: Any) -> None:
    """Read a tritonclient response iterator to its end."""
    with contextlib.suppress(StopAsyncIteration):
        while True:
            await stream.__anext__()


async def _read_to_eof(call: Any) -> None:
    """Read a gRPC stream call to its end."""
    while await call.read() is not _grpc_eof():
        pass


class Ensembles:
    """An asyncio gRPC client of one Triton server's ensembles."""

    def __init__(self, url: str) -> None:
        import tritonclient.grpc.aio as grpcclient

        self._mod = grpcclient
        self.url = url
        # tritonclient's own channel options (message sizes, keepalive) plus a short reconnect backoff.
        self._client = grpcclient.InferenceServerClient(url, channel_args=self._channel_args())
        self._stopping: set[asyncio.Task] = set()

    def _channel_args(self) -> list[tuple[str, Any]]:
        from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, KeepAliveOptions

        k = KeepAliveOptions()
        return [
            ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
            ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
            ("grpc.keepalive_time_ms", k.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", k.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", k.keepalive_permit_without_calls),
            ("grpc.http2.max_pings_without_data", k.http2_max_pings_without_data),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
        ]

    async def close(self) -> None:
        await self._client.close()

    async def ready(self) -> bool:
        try:
            return bool(await self._client.is_server_ready())
        except Exception:  # noqa: BLE001 - unreachable counts as not ready
            return False

    def _inputs(self, tensors: Mapping[str, np.ndarray]) -> list[Any]:
        from tritonclient.utils import np_to_triton_dtype

        out = []
        for name, arr in tensors.items():
            t = self._mod.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
            t.set_data_from_numpy(arr)
            out.append(t)
        return out

    async def infer(self, model: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A unary call: every output, batch dimension removed."""
        try:
            res = await self._client.infer(model, self._inputs(tensors))
        except Exception as e:  # noqa: BLE001 - mapped to an HTTP status
            raise _error(e) from None
        return {o.name: res.as_numpy(o.name)[0] for o in res.get_response().outputs}

    async def generate(self, model: str, tensors: Mapping[str, np.ndarray]) -> AsyncIterator[Piece]:
        """The responses of one generation request, as they come; closing this iterator early
        cancels the request."""
        inputs = self._inputs(tensors)
        rid = f"front-{uuid.uuid4().hex}"

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": model, "inputs": inputs, "request_id": rid}

        stream = self._client.stream_infer(requests())
        finished = False
        try:
            while True:
                try:
                    result, error = await stream.__anext__()
                except StopAsyncIteration:
                    return
                except Exception as e:  # noqa: BLE001 - the call failed: mapped to an HTTP status
                    raise _error(e) from None
                if error is not None:
                    raise _error(error)
                text = result.as_numpy("text_output")
                if text is not None:
                    ids = result.as_numpy("output_ids")
                    finish = result.as_numpy("finish_reason")
                    n = result.as_numpy("input_lengths")
                    parsed = result.as_numpy("parsed_output")
                    yield Piece(
                        text.reshape(-1)[0].decode(),
                        [] if ids is None else ids.reshape(-1).tolist(),
                        "" if finish is None else finish.reshape(-1)[0].decode(),
                        0 if n is None else int(n.reshape(-1)[0]),
                        "" if parsed is None else parsed.reshape(-1)[0].decode(),
                    )
                if result.get_response().parameters["triton_final_response"].bool_param:
                    finished = True
                    return
        finally:
            if finished:
                await _end(_drain(stream), stream.cancel)
            else:
                stream.cancel()
                self.stop(rid)

    async def model_interface(self, model: str, version: str = "") -> ModelInterface:
        """A model's inputs and kind, from its metadata and config; a client's unknown model is
        Triton's own 404 (NOT_FOUND), not the 503 of an ensemble the front calls itself."""
        try:
            meta = await self._client.get_model_metadata(model, version)
            config = (await self._client.get_model_config(model, version)).config
        except Exception as e:  # noqa: BLE001 - mapped to an HTTP status
            raise _error(e, front_model=False) from None
        optional = {i.name for i in config.input if i.optional}
        return ModelInterface(
            name=meta.name,
            inputs=tuple(InputInfo(i.name, i.datatype, tuple(i.shape), i.name in optional) for i in meta.inputs),
            decoupled=config.model_transaction_policy.decoupled,
            steps=tuple(step.model_name for step in config.ensemble_scheduling.step),
        )

    async def stream(
        self,
        model: str,
        version: str,
        inputs: Sequence[Tensor],
        parameters: Mapping[str, ParameterValue],
        rid: str,
        *,
        stop_post_processor: bool = False,
    ) -> AsyncGenerator[Reply, None]:
        """Every response of one request, as Triton sends them, up to the final one (an empty
        final response included: ``Reply.flag_only``); closing this iterator early cancels the
        request, and with ``stop_post_processor`` stops the engine too (see ``generate``)."""
        from tritonclient.grpc import service_pb2

        request = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=rid)
        for t in inputs:
            pb = request.inputs.add()
            pb.name, pb.datatype = t.name, t.datatype
            pb.shape.extend(t.shape)
            request.raw_input_contents.append(t.data)
        for key, value in parameters.items():
            _set_parameter(request.parameters[key], value)
        request.parameters[EMPTY_FINAL_RESPONSE].bool_param = True

        async def requests() -> AsyncIterator[Any]:
            yield request

        # The stub's own call on the client's channel: tritonclient's ``stream_infer`` refuses every
        # "triton_" parameter (the empty-final one included), and its error responses drop the
        # message's parameters, the final flag with them; without both the end of a decoupled
        # model's request cannot be told.
        call = self._client._client_stub.ModelStreamInfer(requests())
        finished = False
        try:
            while True:
                try:
                    message = await call.read()
                except Exception as e:  # noqa: BLE001 - the call failed: mapped to an HTTP status
                    raise _error(e, front_model=False) from None
                if message is _grpc_eof():
                    return
                reply = _reply(message)
                yield reply
                if reply.final:
                    finished = True
                    return
        finally:
            if finished:
                await _end(_read_to_eof(call), call.cancel)
            else:
                call.cancel()
                if stop_post_processor:
                    self.stop(rid)

    @property
    def stub(self) -> Any:
        """The generated gRPC stub on this client's channel, for the calls tritonclient wraps in a
        way that loses what a caller needs (the gRPC proxy's pass-through of whole messages)."""
        return self._client._client_stub

    def stop(self, rid: str, post_processor: str = POST_PROCESSOR) -> asyncio.Task:
        """TensorRT-LLM's stop for the generation request ``rid``, sent in a task of its own (done
        when ``post_processor`` answered it, or the request had ended).

        Triton cancels an ensemble only between its steps; the post-processor, which runs for all
        of a generation, takes the stop by request id. A task of its own: the caller may be being
        cancelled (its client went away), which would cancel the stop with it."""
        task = asyncio.get_running_loop().create_task(self._stop(rid, post_processor))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        return task

    async def _stop(self, rid: str, post_processor: str) -> None:
        tensors = {
            "stop": np.array([[True]]),
            "input_ids": np.zeros((1, 1), np.int32),
            "input_lengths": np.ones((1, 1), np.int32),
            "request_output_len": np.ones((1, 1), np.int32),
        }
        for name in POST_PROCESSORS.get(post_processor, ()):  # placeholders: a stop reads none of them
            tensors[name] = np.zeros((1, 1), np.int32) if name.endswith("_ids") else np.ones((1, 1), np.int32)
        inputs = self._inputs(tensors)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": post_processor, "inputs": inputs, "request_id": rid}

        try:
            async for _ in self._client.stream_infer(requests()):
                break  # its one (empty, final) response
        except Exception:  # noqa: BLE001 - the request may have ended already
            pass


def _grpc_eof() -> Any:
    import grpc.aio

    return grpc.aio.EOF


def _set_parameter(pb: Any, value: ParameterValue) -> None:
    if isinstance(value, bool):  # before int: a bool is an int in Python
        pb.bool_param = value
    elif isinstance(value, int):
        pb.int64_param = value
    elif isinstance(value, float):
        pb.double_param = value
    else:
        pb.string_param = value


def _reply(message: Any) -> Reply:
    """A ``ModelStreamInferResponse`` as a ``Reply``."""
    r = message.infer_response
    params: list[tuple[str, ParameterValue]] = []
    final = False
    for key, p in r.parameters.items():
        kind = p.WhichOneof("parameter_choice")
        value = getattr(p, kind) if kind else ""
        if key == FINAL_RESPONSE:
            final = bool(value)
        else:
            params.append((key, value))
    raw = list(r.raw_output_contents)
    outputs = tuple(
        Tensor(o.name, o.datatype, tuple(o.shape), raw[i] if i < len(raw) else b"") for i, o in enumerate(r.outputs)
    )
    return Reply(message.error_message, final, r.model_name, r.model_version, tuple(params), outputs)
