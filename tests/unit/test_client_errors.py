"""The client says whose fault an error was (``RequestError.kind``), on every path, no server.

Internal errors carry messages too, so a test that counts "an error with a message" as a client
error hides server faults; these tests pin the status -> kind mapping the live tests rely on.
"""

from __future__ import annotations

import json
import threading
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator

import grpc
import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from client import RendererClient, RequestError, error_kind, grpc_http_status, stream_error_kind, triton_check_kind


@pytest.mark.parametrize(
    "status, kind",
    [
        ("400", "client"),
        (400, "client"),
        ("404", "client"),
        ("500", "internal"),
        (500, "internal"),
        ("503", "unavailable"),
        ("429", "unavailable"),
        ("StatusCode.INVALID_ARGUMENT", "client"),
        ("INVALID_ARGUMENT", "client"),
        ("StatusCode.NOT_FOUND", "client"),
        ("StatusCode.INTERNAL", "internal"),
        ("StatusCode.UNKNOWN", "internal"),
        ("StatusCode.UNAVAILABLE", "unavailable"),
        ("StatusCode.DEADLINE_EXCEEDED", "unavailable"),
        (None, "unknown"),
        ("", "unknown"),
        ("None", "unknown"),
        ("200", "unknown"),
        ("StatusCode.BOGUS", "unknown"),
    ],
)
def test_error_kind(status: Any, kind: str) -> None:
    assert error_kind(status) == kind
    e = RequestError(status, "a message")
    assert e.kind == kind and e.is_client_error == (kind == "client")


# Whose fault each gRPC code is, as the client reported it before the client and the front shared
# one table: the shared table must keep every one of these.
GRPC_KINDS = {
    **dict.fromkeys(
        ("INVALID_ARGUMENT", "NOT_FOUND", "OUT_OF_RANGE", "FAILED_PRECONDITION", "ALREADY_EXISTS", "UNIMPLEMENTED"),
        "client",
    ),
    **dict.fromkeys(("PERMISSION_DENIED", "UNAUTHENTICATED"), "client"),
    **dict.fromkeys(("INTERNAL", "UNKNOWN", "DATA_LOSS"), "internal"),
    **dict.fromkeys(("UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "CANCELLED", "ABORTED"), "unavailable"),
}


@pytest.mark.parametrize("code", [c.name for c in grpc.StatusCode if c is not grpc.StatusCode.OK])
def test_every_grpc_code_means_one_http_status_and_kind(code: str) -> None:
    """The client's kind and the OpenAI front's HTTP status of a gRPC code come from one table:
    every code grpc defines is in it, and its kind read from the code equals the kind of the HTTP
    status the front answers."""
    from openai_front.triton import _error as front_error

    http = grpc_http_status(f"StatusCode.{code}")
    assert http is not None, f"{code} has no HTTP status: the front would answer it as a 500"
    assert error_kind(f"StatusCode.{code}") == error_kind(http.value) == GRPC_KINDS[code]
    answered = front_error(InferenceServerException("a message", status=f"StatusCode.{code}"))
    assert answered.status == http


def test_no_status_is_empty_and_never_a_client_error() -> None:
    e = RequestError(None, "something failed")
    assert e.status == "" and e.kind == "unknown" and not e.is_client_error
    assert "kind='unknown'" in repr(e) and str(e) == "something failed"


# --- HTTP generate_stream (SSE) against a stub HTTP server -----------------------------------


@contextmanager
def _serve(reply: Callable[[BaseHTTPRequestHandler], None]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            reply(self)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _sse(status: int, *events: dict[str, Any]) -> Callable[[BaseHTTPRequestHandler], None]:
    """Triton's generate_stream: an error that comes first gets its HTTP status; one after
    the 200 header is a ``data: {"error": ...}`` event with no status."""

    def reply(h: BaseHTTPRequestHandler) -> None:
        h.send_response(status)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        for e in events:
            h.wfile.write(b"data: " + json.dumps(e).encode() + b"\n\n")

    return reply


def _http_error(status: int, events: tuple[dict[str, Any], ...]) -> RequestError:
    with _serve(_sse(status, *events)) as url, RendererClient(url, "http", timeout_s=10) as c:
        with pytest.raises(RequestError) as e:
            list(c.generate("completion", prompt="hi", max_tokens=2, stream=True))
    return e.value


def test_http_400_is_a_client_error() -> None:
    e = _http_error(400, ({"error": "max_tokens must be at least 1, got 0."},))
    assert (e.kind, e.status, e.message) == ("client", "400", "max_tokens must be at least 1, got 0.")


def test_http_500_is_an_internal_error() -> None:
    e = _http_error(500, ({"error": "detokenize: internal error: KeyError: 3"},))
    assert (e.kind, e.status) == ("internal", "500") and not e.is_client_error


def test_sse_error_after_the_header_is_unknown_not_client() -> None:
    e = _http_error(200, ({"text_output": "Paris", "output_ids": [7]}, {"error": "engine 'llm': boom"}))
    assert (e.kind, e.status, e.message) == ("unknown", "", "engine 'llm': boom") and not e.is_client_error


def _http_stream(*events: dict[str, Any]) -> list[Any]:
    with _serve(_sse(200, *events)) as url, RendererClient(url, "http", timeout_s=10) as c:
        return list(c.generate("completion", prompt="hi", max_tokens=2, stream=True))


def test_http_stream_closed_before_its_last_piece_is_an_error_not_a_finish() -> None:
    """A stub that dies mid-generation: Triton may close the event stream when the model is
    reloaded, with no error event. Pieces without a finish_reason and then the end are a stream
    cut short, never a complete answer."""
    piece = {"text_output": "Par", "output_ids": [7], "finish_reason": ""}
    with pytest.raises(RequestError) as e:
        _http_stream(piece, piece)
    assert e.value.kind == "unavailable" and "ended after 2 response(s) without its last one" in e.value.message


def test_http_stream_with_its_last_piece_is_complete() -> None:
    pieces = _http_stream(
        {"text_output": "Par", "output_ids": [7], "finish_reason": ""},
        {"text_output": "is", "output_ids": [8], "finish_reason": ["length"]},
    )
    assert [(p.text, p.finish_reason) for p in pieces] == [("Par", ""), ("is", "length")]


def test_http_stream_of_a_model_without_finish_reason_is_not_checked() -> None:
    """The TensorRT-LLM front's ``ensemble`` answers ``text_output`` alone: nothing to check."""
    assert [p.text for p in _http_stream({"text_output": "Paris"})] == ["Paris"]


# --- gRPC stream against a stand-in for tritonclient's stream --------------------------------


class _FakeStream:
    """What ``tritonclient.grpc`` hands the stream callback when Triton ends a stream with an error."""

    def __init__(self, error: InferenceServerException | None) -> None:  # None: the server never answers
        self.error = error
        self.headers: dict[str, str] | None = None
        self.callback: Callable[[Any, Any], None] | None = None
        self.cancelled: bool | None = None  # what the client passed to stop_stream

    def start_stream(self, callback: Callable[[Any, Any], None], headers: dict[str, str] | None = None) -> None:
        self.callback, self.headers = callback, headers

    def async_stream_infer(self, *args: Any, **kwargs: Any) -> None:
        assert self.callback is not None
        if self.error is not None:
            self.callback(None, self.error)

    def stop_stream(self, cancel_requests: bool = False) -> None:  # tritonclient.grpc's signature
        self.cancelled = cancel_requests

    def close(self) -> None:
        pass


REFUSED = "[request id: <id_unknown>] unexpected shape for input 'prompt' for model 'completion'. Expected [-1,1]"


@pytest.mark.parametrize(
    "status, message, kind",
    [
        ("StatusCode.INVALID_ARGUMENT", "a message", "client"),
        ("StatusCode.INTERNAL", "a message", "internal"),
        ("StatusCode.UNKNOWN", "a message", "internal"),
        (None, "in ensemble 'chat', a message", "client"),  # a model's refusal: the stream drops the code
        (None, "in ensemble 'chat', tokenize: internal error: KeyError: 3", "internal"),
        (None, "", "unknown"),
        (None, REFUSED, "client"),  # Triton's own request check
        ("StatusCode.INTERNAL", REFUSED, "internal"),  # a code, when there is one, decides
    ],
)
def test_grpc_stream_error_kind(status: str | None, message: str, kind: str) -> None:
    c = RendererClient("127.0.0.1:1", "grpc", timeout_s=10)  # never connects: the stream is faked
    fake = _FakeStream(InferenceServerException(msg=message, status=status))
    c._client = fake
    with pytest.raises(RequestError) as e:
        list(c.generate("completion", prompt="hi", max_tokens=2, stream=True))
    assert e.value.kind == kind and e.value.message == message
    assert e.value.status == (status or "")
    assert fake.headers is None  # never triton_grpc_error: its error path crashes Triton 2.51
    assert fake.cancelled is False  # the error ended the request on the server: nothing to cancel


def test_grpc_stream_the_server_never_ends_is_cancelled() -> None:
    c = RendererClient("127.0.0.1:1", "grpc", timeout_s=0.2)
    fake = _FakeStream(None)
    c._client = fake
    with pytest.raises(RequestError) as e:
        list(c.generate("completion", prompt="hi", max_tokens=2, stream=True))
    assert (e.value.status, e.value.kind) == ("DEADLINE_EXCEEDED", "unavailable")
    assert fake.cancelled is True  # a plain stop_stream would wait for the dead stream forever


class _Result:
    """One streamed response as ``tritonclient.grpc`` hands it to the callback."""

    def __init__(self, outputs: dict[str, Any], final: bool) -> None:
        self.outputs, self.final = outputs, final

    def get_response(self) -> Any:
        flag = type("P", (), {"bool_param": self.final})()
        return type("R", (), {"parameters": {"triton_final_response": flag}})()

    def as_numpy(self, name: str) -> Any:
        v = self.outputs.get(name)
        return None if v is None else np.array([v.encode()] if isinstance(v, str) else v, dtype=object)


class _FakeResults(_FakeStream):
    """A stream that delivers ``results`` and then its final (empty) response."""

    def __init__(self, results: list[_Result]) -> None:
        super().__init__(None)
        self.results = results

    def async_stream_infer(self, *args: Any, **kwargs: Any) -> None:
        assert self.callback is not None
        for r in self.results:
            self.callback(r, None)


def _grpc_stream(results: list[_Result]) -> list[Any]:
    c = RendererClient("127.0.0.1:1", "grpc", timeout_s=2)
    c._client = _FakeResults(results)
    return list(c.generate("completion", prompt="hi", max_tokens=2, stream=True))


def test_grpc_stream_final_before_its_last_piece_is_an_error_not_a_finish() -> None:
    piece = {"text_output": "Par", "output_ids": [7], "finish_reason": ""}
    with pytest.raises(RequestError) as e:
        _grpc_stream([_Result(piece, False), _Result({}, True)])
    assert e.value.kind == "unavailable" and "without its last one" in e.value.message
    last = {"text_output": "is", "output_ids": [8], "finish_reason": "length"}
    pieces = _grpc_stream([_Result(piece, False), _Result(last, False), _Result({}, True)])
    assert [p.finish_reason for p in pieces] == ["", "length"]
    assert [p.text for p in _grpc_stream([_Result({"text_output": "Paris"}, True)])] == ["Paris"]


@pytest.mark.parametrize(
    "message, kind",
    [
        ("Request for unknown model: 'x' is not found", "client"),
        (
            "[request id: <id_unknown>] expected number of inputs between 2 and 7 but got 1 inputs for model 'chat'.",
            "client",
        ),
        ("unexpected inference input 'bogus' for model 'completion'", "client"),
        (
            "[request id: 7] inference input 'prompt' data-type is 'FP32', but model 'completion' expects 'BYTES'",
            "client",
        ),
        (
            "[request id: <id_unknown>] input byte size mismatch for input 'max_tokens' for model 'completion'.",
            "client",
        ),
        ("GRPC server is shutting down and has stopped accepting new requests.", "unavailable"),
        # Not Triton's checks: a model's fault, or a check's wording quoted inside another message.
        ("detokenize: internal error: KeyError: 3", "unknown"),
        ("engine 'llm': unexpected shape for input 'x' for model 'y'", "unknown"),
        ("", "unknown"),
    ],
)
def test_triton_check_kind(message: str, kind: str) -> None:
    assert triton_check_kind(message) == kind


@pytest.mark.parametrize(
    "message, kind",
    [
        ("in ensemble 'chat', Cannot apply chat template to an empty conversation.", "client"),
        ("in ensemble 'completion', max_tokens must be at least 1, got 0.", "client"),
        ("Failed to load image: not an image", "client"),  # a RenderError's wording, not the backend's
        ("in ensemble 'chat', detokenize: internal error: RuntimeError: engine 'llm': boom", "internal"),
        ("in ensemble 'completion', Stub process 'tokenize_0_0' is not healthy.", "unavailable"),
        ("in ensemble 'chat', Failed to process the request(s) for model instance 'chat_render_0_0'", "internal"),
        ("in ensemble 'chat', Request for unknown model: 'tokenize' is not found", "unavailable"),
        ("in ensemble 'a', in ensemble 'b', x: internal error: E", "internal"),
        ("Request for unknown model: 'x' is not found", "client"),  # the client named it
        ("in ensemble 'chat', ", "unknown"),
    ],
)
def test_stream_error_kind(message: str, kind: str) -> None:
    assert stream_error_kind(message) == kind


def test_http_generate_takes_a_batch_of_one() -> None:

    c = RendererClient("127.0.0.1:1", "http", timeout_s=1)  # refused before anything is sent
    with pytest.raises(
        ValueError,
        match=r"prompt: the HTTP generate endpoint takes a batch of exactly 1, got shape "
        r"\[2, 1\]",
    ):
        list(c.stream("completion", {"prompt": np.array([[b"a"], [b"b"]], dtype=object)}))
