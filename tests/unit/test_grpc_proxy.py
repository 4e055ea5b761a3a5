"""The gRPC stream proxy (``openai_front/grpc_proxy.py``) against a fake of Triton's gRPC side in
this process: messages pass unchanged (the ids it gives restored), the client's metadata stays
behind, and a stream whose client leaves gets TensorRT-LLM's stop for each generation still in
flight (none for finished ones or other models) before Triton's stream is cancelled."""

from __future__ import annotations

import asyncio
import collections
import struct
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

import grpc
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from openai_front import grpc_proxy
from openai_front.triton import FINAL_RESPONSE

TIMEOUT_S = 10.0
HOLD = 0  # ``responses`` parameter: one response, then the request runs until it is stopped
# The fake's models: (decoupled, ensemble steps).
MODELS = {
    "completion": (True, ("tokenize", "generation_params", "detokenize")),
    "encoder_decoder_completion": (True, ("tokenize_enc_dec", "generation_params", "detokenize_enc_dec")),
    "render_completion": (False, ("tokenize",)),
    # A generation that is not decoupled: its one response is its last, flagged or not.
    "completion_once": (False, ("tokenize", "generation_params", "detokenize")),
    "detokenize": (True, ()),
    "detokenize_enc_dec": (True, ()),
    "ensemble": (True, ("tokenize", "ensemble_params", "detokenize")),
}
# The inputs of a model that declares them: (name, optional).
INPUTS = {"ensemble": (("text_input", False), ("max_tokens", False), ("bad_words", True), ("stop_words", True))}


def _input(request: Any, name: str) -> bytes | None:
    for i, t in enumerate(request.inputs):
        if t.name == name:
            return request.raw_input_contents[i]
    return None


def _response(request: Any, text: bytes, final: bool) -> Any:
    m = service_pb2.ModelStreamInferResponse()
    r = m.infer_response
    r.model_name, r.model_version, r.id = request.model_name, "1", request.id
    out = r.outputs.add()
    out.name, out.datatype = "text_output", "BYTES"
    out.shape.extend([1, 1])
    r.raw_output_contents.append(struct.pack("<I", len(text)) + text)
    r.parameters["sequence_id"].int64_param = 0
    r.parameters[FINAL_RESPONSE].bool_param = final
    return m


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Triton's metadata, config and ``ModelStreamInfer`` for ``MODELS``. A request's
    ``responses`` parameter says how many responses it gets (``HOLD``: one, then it runs until a
    stop names its id); ``error`` makes its one response an error, ``abort`` ends the stream with a
    status."""

    def __init__(self) -> None:
        self.requests: list[Any] = []  # the stream requests that are not stops, as they came
        self.sent: list[Any] = []  # the responses to them, as sent
        self.metadata: list[dict[str, str]] = []  # each stream's metadata
        self.config_calls: collections.Counter[str] = collections.Counter()
        self.events: list[tuple[str, ...]] = []  # ("stop", model, id) and ("cancelled",), in order
        self.stop_inputs: dict[str, set[str]] = {}  # a stop's id -> its input names
        self._running: dict[str, asyncio.Event] = {}

    def release(self, rid: str) -> None:
        """The held request ``rid`` ends by itself (its engine finished)."""
        self._running[rid].set()

    async def ModelMetadata(self, request, context):  # noqa: N802 - the service's method name
        if request.name not in MODELS:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"Request for unknown model: '{request.name}' is not found")
        meta = service_pb2.ModelMetadataResponse(name=request.name, versions=["1"], platform="ensemble")
        for name, _ in INPUTS.get(request.name, ()):
            meta.inputs.add(name=name, datatype="BYTES", shape=[-1, 1])
        return meta

    async def ModelConfig(self, request, context):  # noqa: N802 - the service's method name
        self.config_calls[request.name] += 1
        decoupled, steps = MODELS[request.name]
        config = model_config_pb2.ModelConfig(name=request.name)
        config.model_transaction_policy.decoupled = decoupled
        for name, optional in INPUTS.get(request.name, ()):
            config.input.add(name=name, optional=optional)
        for step in steps:
            config.ensemble_scheduling.step.add(model_name=step, model_version=-1)
        return service_pb2.ModelConfigResponse(config=config)

    async def ModelStreamInfer(self, requests, context):  # noqa: N802 - the service's method name
        self.metadata.append(dict(context.invocation_metadata()))
        lock = asyncio.Lock()
        held = []

        async def send(message: Any, record: bool = True) -> None:
            async with lock:
                if record:
                    self.sent.append(message)
                await context.write(message)

        try:
            async for request in requests:
                if _input(request, "stop") == b"\x01":  # TensorRT-LLM's stop
                    self.events.append(("stop", request.model_name, request.id))
                    self.stop_inputs[request.id] = {t.name for t in request.inputs}
                    if request.id in self._running:
                        self._running[request.id].set()
                    await send(_response(request, b"", True), record=False)
                    continue
                self.requests.append(request)
                if request.model_name not in MODELS:
                    m = service_pb2.ModelStreamInferResponse(error_message="Request for unknown model")
                    m.infer_response.id = request.id
                    await send(m)
                    continue
                if "abort" in request.parameters:  # Triton ends the whole stream
                    # Under the writers' lock: grpc refuses a status sent while a held request's
                    # write is in flight (GRPC_CALL_ERROR_TOO_MANY_OPERATIONS; seen in a full run).
                    async with lock:
                        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "message larger than max")
                if "error" in request.parameters:
                    m = service_pb2.ModelStreamInferResponse(error_message="in ensemble: max_tokens must be > 0")
                    m.infer_response.id = request.id
                    m.infer_response.parameters[FINAL_RESPONSE].bool_param = True
                    await send(m)
                    continue
                n = request.parameters["responses"].int64_param
                if n == HOLD:
                    self._running[request.id] = asyncio.Event()
                    held.append(asyncio.ensure_future(self._hold(request, send)))
                    continue
                for i in range(n):
                    m = _response(request, f"t{i}".encode(), i == n - 1)
                    if not MODELS[request.model_name][0]:
                        del m.infer_response.parameters[FINAL_RESPONSE]
                    await send(m)
            await asyncio.gather(*held)
            # grpc.aio ends a cancelled stream's requests as a half-close does, and cancels its
            # handler a moment later: still here then, this handler tells them apart.
            await asyncio.sleep(0.1)
        except asyncio.CancelledError:
            self.events.append(("cancelled",))
            raise
        finally:  # however the stream ended, what it still runs ends with it
            for task in held:
                task.cancel()

    async def _hold(self, request: Any, send: Any) -> None:
        await send(_response(request, b"start", False))
        await self._running[request.id].wait()
        await send(_response(request, b"end", True))


@asynccontextmanager
async def proxied() -> AsyncIterator[tuple[FakeTriton, Any]]:
    """A fake Triton, the proxy in front of it, and a stub on the proxy."""
    fake = FakeTriton()
    upstream = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, upstream)
    port = upstream.add_insecure_port("127.0.0.1:0")
    await upstream.start()
    proxy = grpc_proxy.GrpcProxy(f"127.0.0.1:{port}", "127.0.0.1", 0)
    await proxy.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}")
    try:
        yield fake, service_pb2_grpc.GRPCInferenceServiceStub(channel)
    finally:
        await channel.close()
        await proxy.stop(0)
        await upstream.stop(0)


def request(model: str, rid: str = "", responses: int = 1, inputs: tuple[str, ...] = ("prompt",), **extra: Any) -> Any:
    r = service_pb2.ModelInferRequest(model_name=model, id=rid)
    for name in inputs:
        t = r.inputs.add()
        t.name, t.datatype = name, "BYTES"
        t.shape.extend([1, 1])
        r.raw_input_contents.append(struct.pack("<I", 5) + b"hello")
    r.parameters["responses"].int64_param = responses
    for key, value in extra.items():
        r.parameters[key].string_param = value
    return r


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT_S))


async def wait_for(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.01)


def _without_id(message: Any) -> Any:
    copy = type(message)()
    copy.CopyFrom(message)
    if hasattr(copy, "infer_response"):
        copy.infer_response.id = ""
    else:
        copy.id = ""
    return copy


def test_messages_pass_unchanged_and_metadata_stays_behind():
    sent = [
        request("completion", "a", responses=3),
        request("completion", "", responses=2),  # no id: one given, and taken back off its answers
        request("render_completion", "", responses=1),  # not a generation: untouched
        request("nosuch", "u"),  # Triton's error, as it sent it
    ]

    async def main() -> tuple[FakeTriton, list[Any]]:
        async with proxied() as (fake, stub):
            call = stub.ModelStreamInfer(metadata=(("x-trace", "1"), ("triton_grpc_error", "true")))
            for r in sent:
                await call.write(r)
            await call.done_writing()
            return fake, [m async for m in call]

    fake, got = run(main())
    assert fake.requests[0] == sent[0] and fake.requests[2] == sent[2] and fake.requests[3] == sent[3]
    given = fake.requests[1].id
    assert given.startswith(grpc_proxy.ID_PREFIX) and _without_id(fake.requests[1]) == sent[1]
    # What the client gets is what Triton sent, but for the id the proxy gave.
    expected = [_without_id(m) if m.infer_response.id == given else m for m in fake.sent]
    assert got == expected and len(got) == 3 + 2 + 1 + 1
    assert [m.infer_response.id for m in got] == ["a"] * 3 + [""] * 3 + ["u"]
    assert "x-trace" not in fake.metadata[0] and "triton_grpc_error" not in fake.metadata[0]
    assert not [e for e in fake.events if e[0] == "stop"] and ("cancelled",) not in fake.events


def test_a_request_missing_a_required_input_is_refused_naming_it():
    # Three inputs of four, text_input not among them: a count Triton takes, and then answers with
    # nothing at all. The proxy answers it as Triton's own check words it, and sends it nowhere.
    sent = [
        request("ensemble", "bad", inputs=("max_tokens", "bad_words", "stop_words")),
        request("ensemble", "", inputs=("bad_words",)),
        request("ensemble", "ok", responses=2, inputs=("text_input", "max_tokens")),
    ]

    async def main() -> tuple[FakeTriton, list[Any]]:
        async with proxied() as (fake, stub):
            call = stub.ModelStreamInfer()
            for r in sent:
                await call.write(r)
            await call.done_writing()
            return fake, [m async for m in call]

    fake, got = run(main())
    assert [r.id for r in fake.requests] == ["ok"]
    errors = [m for m in got if m.error_message]
    assert [m.infer_response.id for m in errors] == ["bad", ""]
    assert "[request id: bad] missing required input(s) for model 'ensemble'" in errors[0].error_message
    assert "missing required input(s) ['text_input']" in errors[0].error_message
    assert "expected number of inputs between 2 and 4 but got 1 inputs" in errors[1].error_message
    assert "['text_input','max_tokens']" in errors[1].error_message
    assert [m.infer_response.id for m in got if not m.error_message] == ["ok", "ok"]


def test_a_client_that_cancels_stops_its_running_generations():
    async def main() -> tuple[FakeTriton, list[Any]]:
        async with proxied() as (fake, stub):
            call = stub.ModelStreamInfer()
            for r in (
                request("completion", "held", responses=HOLD),
                request("completion", "", responses=HOLD),
                request("encoder_decoder_completion", "held-ed", responses=HOLD),
                request("completion", "done", responses=1),  # finished: no stop
                request("completion", "failed", error="1"),  # its error was its end: no stop
                request("render_completion", "other", responses=HOLD),  # not a generation: no stop
                request("completion_once", "once"),  # answered once: no stop
            ):
                await call.write(r)
            got = [await call.read() for _ in range(7)]  # each held request's first, the others' one
            call.cancel()
            await wait_for(lambda: ("cancelled",) in fake.events)
            return fake, got

    fake, got = run(main())
    assert {m.infer_response.id for m in got} == {"held", "", "held-ed", "done", "failed", "other", "once"}
    given = fake.requests[1].id
    stops = [e for e in fake.events if e[0] == "stop"]
    assert sorted(stops) == sorted(
        [("stop", "detokenize", "held"), ("stop", "detokenize", given), ("stop", "detokenize_enc_dec", "held-ed")]
    )
    # The stops first, then Triton's stream cancelled.
    assert fake.events.index(("cancelled",)) > max(fake.events.index(s) for s in stops)
    # Each post-processor's stop carries what its config requires.
    assert fake.stop_inputs["held"] == {"stop", "input_ids", "input_lengths", "request_output_len"}
    assert fake.stop_inputs["held-ed"] == fake.stop_inputs["held"] | {"decoder_input_ids", "decoder_input_lengths"}


def test_a_closed_channel_is_a_client_that_left():
    async def main() -> FakeTriton:
        fake = FakeTriton()
        upstream = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, upstream)
        port = upstream.add_insecure_port("127.0.0.1:0")
        await upstream.start()
        proxy = grpc_proxy.GrpcProxy(f"127.0.0.1:{port}", "127.0.0.1", 0)
        await proxy.start()
        try:
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{proxy.port}")
            call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer()
            await call.write(request("completion", "held", responses=HOLD))
            await call.read()
            await channel.close(grace=None)  # the connection goes, the call with it
            await wait_for(lambda: ("cancelled",) in fake.events)
            return fake
        finally:
            await proxy.stop(0)
            await upstream.stop(0)

    fake = run(main())
    assert [e for e in fake.events if e[0] == "stop"] == [("stop", "detokenize", "held")]


def test_a_half_closed_stream_gets_every_response():
    async def main() -> tuple[FakeTriton, list[Any]]:
        async with proxied() as (fake, stub):
            call = stub.ModelStreamInfer()
            await call.write(request("completion", "", responses=HOLD))
            await call.done_writing()  # the client is done writing, not gone
            got = [await call.read()]
            await asyncio.sleep(0.2)  # the proxy keeps the stream open meanwhile
            fake.release(fake.requests[0].id)
            while (message := await call.read()) is not grpc.aio.EOF:
                got.append(message)
            return fake, got

    fake, got = run(main())
    assert [m.infer_response.raw_output_contents[0][4:] for m in got] == [b"start", b"end"]
    assert all(m.infer_response.id == "" for m in got)
    assert fake.events == []  # no stop, no cancellation


def test_a_models_config_is_asked_once():
    async def main() -> FakeTriton:
        async with proxied() as (fake, stub):
            for _ in range(3):
                call = stub.ModelStreamInfer()
                for rid in ("x", "y"):
                    await call.write(request("completion", rid))
                await call.done_writing()
                assert len([m async for m in call]) == 2
            return fake

    assert run(main()).config_calls == {"completion": 1}


def test_other_methods_are_left_to_triton():
    async def main() -> grpc.StatusCode:
        async with proxied() as (_, stub):
            try:
                await stub.ServerLive(service_pb2.ServerLiveRequest())
            except grpc.aio.AioRpcError as e:
                return e.code()
            return grpc.StatusCode.OK

    assert run(main()) == grpc.StatusCode.UNIMPLEMENTED


def test_tritons_stream_error_is_the_clients():
    async def main() -> tuple[FakeTriton, grpc.aio.AioRpcError]:
        async with proxied() as (fake, stub):
            call = stub.ModelStreamInfer()
            await call.write(request("completion", "held", responses=HOLD))
            await call.read()
            await call.write(request("completion", "big", abort="1"))
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await call.read()
            await wait_for(lambda: len([e for e in fake.events if e[0] == "stop"]) == 2)
            return fake, e.value

    fake, error = run(main())
    assert (error.code(), error.details()) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "message larger than max")
    # What Triton's stream left unanswered may run on in its post-processor: stopped all the same.
    assert sorted(e for e in fake.events if e[0] == "stop") == [("stop", "detokenize", n) for n in ("big", "held")]
