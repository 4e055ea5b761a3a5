"""The ensembles over gRPC, asynchronously (``tritonclient.grpc.aio``).

Render ensembles are unary calls, whose errors carry their gRPC status code (INVALID_ARGUMENT for
a bad request: a 400 here, anything else a 5xx). Generation ensembles are decoupled, so they go
over a stream of their own per request, without ``triton_grpc_error`` (its error path crashes
Triton 2.51: client/triton_client.py says how): a failed request's error comes as its message
alone, which ``client.stream_error_kind`` reads. Leaving a stream early (the HTTP client went away)
cancels it, and Triton cancels the request in the ensemble; the post-processor then stops the
engine.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, AsyncIterator, Mapping

import numpy as np

from .protocol import FrontError

POST_PROCESSOR = "detokenize"  # the step of the chat and completion ensembles that drives the engine
# A gRPC status code as an HTTP status; any other code is a 500.
GRPC_STATUS = {
    "StatusCode.INVALID_ARGUMENT": HTTPStatus.BAD_REQUEST,
    "StatusCode.NOT_FOUND": HTTPStatus.NOT_FOUND,
    "StatusCode.UNIMPLEMENTED": HTTPStatus.NOT_IMPLEMENTED,
    # Triton not reachable: starting, restarting after a crash, or gone. The client may retry.
    "StatusCode.UNAVAILABLE": HTTPStatus.SERVICE_UNAVAILABLE,
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


def _error(e: Exception) -> FrontError:
    """A failed call as an HTTP status: Triton's gRPC status code says whose fault it was."""
    import grpc
    from tritonclient.utils import InferenceServerException

    from client import stream_error_kind, strip_ensemble_prefix
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
        status = GRPC_STATUS.get(code, HTTPStatus.INTERNAL_SERVER_ERROR)
    if (code, message) == GRPC_LOST_STATUS:
        status = HTTPStatus.SERVICE_UNAVAILABLE
    if "Request for unknown model" in message:
        # The front calls only the ensembles the launcher loads: one not there is still loading
        # (Triton starting or restarting) or being reloaded, not the client's mistake.
        status = HTTPStatus.SERVICE_UNAVAILABLE
    if status == HTTPStatus.SERVICE_UNAVAILABLE and code not in ("", "None"):
        message = f"The inference server is not reachable now (starting or restarting): {message}"
    message = strip_ensemble_prefix(message)  # the stage's own message
    # A client error names its request field in vLLM's form; OpenAI's ``param`` carries it.
    param = parameter_of(message) if status < HTTPStatus.INTERNAL_SERVER_ERROR else None
    return FrontError(message, status, param)


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
            stream.cancel()
            if not finished:
                # Triton cancels an ensemble only between its steps; the post-processor, which runs
                # for all of a generation, takes TensorRT-LLM's stop by request id. A task of its
                # own: this one may be cancelled (the HTTP client went away), and would cancel it.
                task = asyncio.get_running_loop().create_task(self._stop(rid))
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    async def _stop(self, rid: str) -> None:
        tensors = {
            "stop": np.array([[True]]),
            "input_ids": np.zeros((1, 1), np.int32),
            "input_lengths": np.ones((1, 1), np.int32),
            "request_output_len": np.ones((1, 1), np.int32),
        }
        inputs = self._inputs(tensors)

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": POST_PROCESSOR, "inputs": inputs, "request_id": rid}

        try:
            async for _ in self._client.stream_infer(requests()):
                break  # its one (empty, final) response
        except Exception:  # noqa: BLE001 - the request may have ended already
            pass
