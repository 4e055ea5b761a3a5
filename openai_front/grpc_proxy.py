"""A gRPC proxy for Triton's ``ModelStreamInfer``, so that a stream's client that leaves stops its
generations.

Triton 2.51 cancels an ensemble request only between its steps, and the generation ensembles'
post-processor (``detokenize``) drives the engine for all of a generation: a gRPC client that
cancels its stream, or disconnects, leaves its generations running to ``max_tokens``. The edge
(launcher/edge.py) routes ``ModelStreamInfer`` here; every other method goes to Triton directly.

Each client stream is forwarded to a stream of its own on Triton's gRPC port, message for message
(protobuf objects, tensors left encoded); the client's metadata stays here (``triton_grpc_error``
crashes Triton 2.51). A request to a model that runs a post-processor (``POST_PROCESSORS``: the
model itself or one of its ensemble's steps, from Triton's config, asked once per model) is
remembered by its request id until its final response; one sent without an id gets one, for the
stop to name, and its responses go back with the empty id the client sent, as Triton would answer
it. When the client's stream ends other than by its client half-closing it (a cancellation, a
disconnect, a deadline, Triton's stream failing), each generation still in flight gets
TensorRT-LLM's stop (``Ensembles.stop``, as the HTTP front sends it), and only then is Triton's
stream cancelled. A client that half-closes gets every response until Triton ends the stream.

A client that names its own request ids keeps them: two generations of the same id at once
(on any stream) are one to the post-processor, as they are on Triton's own port.

A request that leaves out a required input is answered here with Triton's own error and not
sent: Triton 2.51 checks only the count of a request's inputs, and runs an ensemble request whose
count is in range but whose required inputs are not all there, answering it with nothing.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator

from .generate import MissingInputsError
from .triton import FINAL_RESPONSE, POST_PROCESSORS, Ensembles, ModelInterface

SERVICE = "inference.GRPCInferenceService"
METHOD = "ModelStreamInfer"
# The id a generation request sent without one gets here: its stop must name it.
ID_PREFIX = "grpc-proxy-"
# How long Triton's stream is kept open for the stops of its abandoned generations to be answered:
# a stop that reaches the post-processor after the stream's cancellation is still taken, but the
# order makes the engine's release the first thing Triton sees.
STOP_WAIT_S = 5.0


class ProxyBindError(RuntimeError):
    """The proxy's port could not be bound."""


@dataclass(frozen=True)
class Generation:
    """What the proxy needs to know of a model that runs a post-processor."""

    post_processor: str
    """The step that drives the engine and takes the stop (``POST_PROCESSORS``)."""

    decoupled: bool
    """The model may send many responses per request; else its one response is its last."""


@dataclass(frozen=True)
class Flight:
    """One generation request of a client stream, from its sending to its final response."""

    generation: Generation
    """Its model's post-processor and kind."""

    named_here: bool
    """The client sent no id and the proxy gave it one: its responses go back with the empty id."""


class _Stream:
    """One client stream's generations in flight, by the request id Triton sees."""

    def __init__(self) -> None:
        self.flights: dict[str, Flight] = {}
        # Requests of one id at once (a client may reuse one): the id leaves with its last.
        self.counts: collections.Counter[str] = collections.Counter()
        self.finished = False  # Triton ended the stream by itself: nothing is left in flight
        self.abandoned = False  # the stops were sent (once)
        self.pump: asyncio.Future | None = None  # the task forwarding the client's requests

    def add(self, rid: str, flight: Flight) -> None:
        self.flights[rid] = flight
        self.counts[rid] += 1

    def answered(self, message: Any) -> None:
        """Before ``message`` goes to the client: its id as the client sent it, and its request
        forgotten when this is its last response."""
        response = message.infer_response
        rid = response.id
        flight = self.flights.get(rid)
        if flight is None:
            return
        if flight.named_here:
            response.id = ""
        # ``in`` first: reading a missing key of a protobuf map would add it to the message.
        final = (
            bool(message.error_message)
            or not flight.generation.decoupled
            or (FINAL_RESPONSE in response.parameters and response.parameters[FINAL_RESPONSE].bool_param)
        )
        if final:
            self.counts[rid] -= 1
            if self.counts[rid] <= 0:
                del self.counts[rid], self.flights[rid]

    def in_flight(self) -> list[tuple[str, Flight]]:
        return list(self.flights.items())


class StreamProxy:
    """``ModelStreamInfer`` for the server ``ensembles`` reaches, its abandoned generations stopped."""

    def __init__(self, ensembles: Ensembles) -> None:
        self._ensembles = ensembles
        # (model, version) -> its interface and post-processor: asked of Triton once per model.
        self._models: dict[tuple[str, str], asyncio.Future] = {}
        self._background: set[asyncio.Task] = set()

    def handler(self) -> Any:
        """The grpc.aio handler of ``ModelStreamInfer`` alone: Triton's other methods are
        UNIMPLEMENTED here (the edge sends them to Triton)."""
        import grpc
        from tritonclient.grpc import service_pb2

        method = grpc.stream_stream_rpc_method_handler(
            self.model_stream_infer,
            request_deserializer=service_pb2.ModelInferRequest.FromString,
            response_serializer=service_pb2.ModelStreamInferResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE, {METHOD: method})

    async def model_stream_infer(self, requests: AsyncIterator[Any], context: Any) -> None:
        """One client stream, forwarded to a stream of its own on Triton."""
        import grpc

        # No metadata: the client's headers stay here (``triton_grpc_error`` crashes Triton 2.51).
        call = self._ensembles.stub.ModelStreamInfer()
        stream = _Stream()
        writing = asyncio.Lock()  # Triton's responses and the proxy's own refusals, one at a time
        stream.pump = asyncio.ensure_future(self._forward(requests, call, stream, context, writing))
        try:
            while True:
                # Each read in a task of its own: grpc.aio cancels a call whose read (or write) is
                # cancelled, and this handler is cancelled as its client leaves: Triton's stream
                # must outlive it until the stops went.
                read = asyncio.ensure_future(call.read())
                read.add_done_callback(_retrieved)
                try:
                    message = await asyncio.shield(read)
                except grpc.aio.AioRpcError as e:  # Triton ended the stream: its status is the client's
                    await context.abort(e.code(), e.details() or "")
                if message is grpc.aio.EOF:
                    stream.finished = True
                    return
                stream.answered(message)
                async with writing:
                    await context.write(message)
        finally:
            if not stream.finished:  # the client left (or its stream broke) with requests running
                self._abandon(call, stream)

    async def _forward(
        self, requests: AsyncIterator[Any], call: Any, stream: _Stream, context: Any, writing: asyncio.Lock
    ) -> None:
        """The client's requests to Triton, in order; its half-close is passed on too. A request
        without a required input is answered here, as Triton's error, and not sent: Triton runs
        an ensemble request whose count of inputs is in range, and answers it with nothing."""
        try:
            async for request in requests:
                refusal = await self._track(request, stream)
                if refusal is not None:
                    async with writing:
                        await context.write(refusal)
                    continue
                await call.write(request)
            await call.done_writing()
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the client's stream broke (or Triton's): stop what runs
            self._abandon(call, stream)

    async def _track(self, request: Any, stream: _Stream) -> Any:
        """Remembers a generation request; the error response for a request missing an input."""
        facts = await self._facts(request.model_name, request.model_version)
        if facts is None:
            return None  # Triton answers it (an unknown model, Triton away)
        interface, generation = facts
        given = [t.name for t in request.inputs]
        missing = interface.missing(given)
        if missing:
            error = MissingInputsError(
                interface.name, request.id, given, missing, interface.required, len(interface.inputs)
            )
            return _error_response(request, error.message)
        if generation is None:
            return None
        named_here = not request.id
        if named_here:
            request.id = f"{ID_PREFIX}{uuid.uuid4().hex}"
        stream.add(request.id, Flight(generation, named_here))
        return None

    async def _facts(self, model: str, version: str) -> tuple[ModelInterface, Generation | None] | None:
        """``model``'s interface and post-processor, from Triton's config (once per model); None
        for a model Triton cannot describe now (its request fails there as it would)."""
        key = (model, version)
        known = self._models.get(key)
        if known is None:
            known = asyncio.ensure_future(self._ask(model, version))
            # Its error is read by the requests waiting for it; with none left, by no one.
            known.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._models[key] = known
        try:
            return await asyncio.shield(known)
        except Exception:  # noqa: BLE001 - unknown model, Triton away: asked again next time
            if self._models.get(key) is known:
                del self._models[key]
            return None

    async def _ask(self, model: str, version: str) -> tuple[ModelInterface, Generation | None]:
        interface = await self._ensembles.model_interface(model, version)
        for post_processor in POST_PROCESSORS:
            if interface.runs(post_processor):
                return interface, Generation(post_processor, interface.decoupled)
        return interface, None

    def _abandon(self, call: Any, stream: _Stream) -> None:
        """The stop for each generation ``stream`` has in flight, then Triton's stream cancelled
        (once per stream)."""
        if stream.abandoned:
            return
        stream.abandoned = True
        flights = stream.in_flight()
        if not flights:
            _cancel(call, stream)
            return
        # A task of its own: the stream's handler is being cancelled, and would cancel it.
        task = asyncio.get_running_loop().create_task(self._stop_then_cancel(call, stream, flights))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self) -> None:
        """Until the stops already being sent are answered (``STOP_WAIT_S`` at most)."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=STOP_WAIT_S)

    async def _stop_then_cancel(self, call: Any, stream: _Stream, flights: list[tuple[str, Flight]]) -> None:
        try:
            stops = [self._ensembles.stop(rid, flight.generation.post_processor) for rid, flight in flights]
            await asyncio.wait(stops, timeout=STOP_WAIT_S)
        finally:
            _cancel(call, stream)


def _cancel(call: Any, stream: _Stream) -> None:
    """Triton's stream cancelled, and the client's requests no longer read (a write the pump is in
    would cancel the call by itself: grpc.aio's rule)."""
    call.cancel()
    if stream.pump is not None:
        stream.pump.cancel()


def _error_response(request: Any, message: str) -> Any:
    """Triton's error response on a stream, for ``request``."""
    from tritonclient.grpc import service_pb2

    response = service_pb2.ModelStreamInferResponse(error_message=message)
    response.infer_response.id = request.id
    response.infer_response.model_name = request.model_name
    response.infer_response.model_version = request.model_version
    return response


def _retrieved(task: asyncio.Future) -> None:
    """A read nobody waits for any more (its client left) ends unread: its error is expected."""
    if not task.cancelled():
        task.exception()


class GrpcProxy:
    """The proxy's grpc.aio server, in the caller's event loop."""

    def __init__(self, triton_url: str, host: str, port: int) -> None:
        self.triton_url = triton_url
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.port = 0  # the one bound, once started (``port`` 0: any free one)
        self._server: Any = None
        self._ensembles: Ensembles | None = None
        self._proxy: StreamProxy | None = None

    async def start(self) -> None:
        import grpc
        from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE

        self._ensembles = Ensembles(self.triton_url)
        self._proxy = StreamProxy(self._ensembles)
        # Triton's own message limit: the edge and Triton's stubs bound what a request may carry.
        self._server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
                ("grpc.so_reuseport", 0),  # a port another process holds is an error, not shared
            ]
        )
        self._server.add_generic_rpc_handlers((self._proxy.handler(),))
        try:
            bound = self._server.add_insecure_port(self.address)
        except RuntimeError as e:
            raise ProxyBindError(f"the gRPC proxy cannot listen on {self.address}: {e}") from None
        if not bound:
            raise ProxyBindError(f"the gRPC proxy cannot listen on {self.address}")
        self.port = bound
        await self._server.start()

    async def stop(self, grace_s: float) -> None:
        """Streams running get ``grace_s`` to end; those left are cancelled, their generations
        stopped before the client to Triton closes."""
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._proxy is not None:
            await asyncio.sleep(0)  # the handlers just cancelled start their stops
            await self._proxy.drain()
        if self._ensembles is not None:
            await self._ensembles.close()
