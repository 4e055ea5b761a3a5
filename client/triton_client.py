"""Python client for the renderer ensembles, over Triton HTTP or gRPC (``tritonclient``).

Render calls are plain infer requests. Generation goes over a gRPC bidirectional stream, or
over HTTP through Triton's ``generate`` / ``generate_stream`` (server-sent events) endpoints,
since the generation ensembles contain a decoupled model that plain HTTP infer refuses.
"""

from __future__ import annotations

import base64
import json
import queue
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from renderer.errors import parameter_of

_DTYPES = {
    np.dtype(np.int32): "INT32",
    np.dtype(np.bool_): "BOOL",
    np.dtype(np.object_): "BYTES",
    np.dtype(np.float32): "FP32",
    np.dtype(np.int64): "INT64",
    np.dtype(np.uint64): "UINT64",
}


# gRPC streams go without Triton's ``triton_grpc_error`` header. With it, Triton ends a stream on
# an error with the error's status code, but 2.51 mishandles such a stream's end (the handler takes
# it for a cancellation it then does not find, and the stream's state is used after it is freed):
# tritonserver dies of SIGSEGV within seconds once such errors meet other streams (upstream server
# PR 8708, after 2.51; docs/RELIABILITY.md). Without it, an error reaches the client as its message
# alone, which ``stream_error_kind`` reads.


ErrorKind = Literal["client", "internal", "unavailable", "unknown"]
"""Whose fault a failed request was: ``client`` (the request was wrong: HTTP 4xx, gRPC
INVALID_ARGUMENT and kin), ``internal`` (a server fault: HTTP 500, gRPC INTERNAL / UNKNOWN),
``unavailable`` (the server could not answer now: 503, UNAVAILABLE, deadlines, overload) or
``unknown`` (the error came without a status and is not one of Triton's request checks, e.g. an
SSE error event after the 200 header)."""

# Every gRPC status code as the HTTP status that means the same, for the client and the OpenAI front
# alike (the kind of either follows from the HTTP status, ``error_kind``). Google's canonical
# mapping (google.rpc.Code), except where Triton gives a code another sense: UNIMPLEMENTED is its
# answer to a call a model cannot take (ModelInfer on a decoupled model), the client's choice, which
# the edge answers on HTTP as a 400 too; CANCELLED and ABORTED (Google: 499, 409) come from a
# server that stops a request it had taken (stopping, restarting), so they are a 503 to retry.
GRPC_HTTP_STATUS: dict[str, HTTPStatus] = {
    "INVALID_ARGUMENT": HTTPStatus.BAD_REQUEST,
    "FAILED_PRECONDITION": HTTPStatus.BAD_REQUEST,
    "OUT_OF_RANGE": HTTPStatus.BAD_REQUEST,
    "UNIMPLEMENTED": HTTPStatus.BAD_REQUEST,
    "UNAUTHENTICATED": HTTPStatus.UNAUTHORIZED,
    "PERMISSION_DENIED": HTTPStatus.FORBIDDEN,
    "NOT_FOUND": HTTPStatus.NOT_FOUND,
    "ALREADY_EXISTS": HTTPStatus.CONFLICT,
    "RESOURCE_EXHAUSTED": HTTPStatus.TOO_MANY_REQUESTS,
    "INTERNAL": HTTPStatus.INTERNAL_SERVER_ERROR,
    "UNKNOWN": HTTPStatus.INTERNAL_SERVER_ERROR,
    "DATA_LOSS": HTTPStatus.INTERNAL_SERVER_ERROR,
    "UNAVAILABLE": HTTPStatus.SERVICE_UNAVAILABLE,
    "CANCELLED": HTTPStatus.SERVICE_UNAVAILABLE,
    "ABORTED": HTTPStatus.SERVICE_UNAVAILABLE,
    "DEADLINE_EXCEEDED": HTTPStatus.GATEWAY_TIMEOUT,
}
_HTTP_UNAVAILABLE = {408, 429, 502, 503, 504}


# Triton's gRPC stream handler sends only the message, never the code, for a request it refuses
# before any model runs, triton_grpc_error or not (src/grpc/stream_infer_handler.cc, 2.51 to
# 2.73). Those are its own request checks: the same requests get INVALID_ARGUMENT / NOT_FOUND on
# a unary call and 400 / 404 over HTTP (tests/live/test_completion_live.py holds the two side by side). They
# are recognised by Triton's wording (the rest: stream_error_kind, below).
_TRITON_REQUEST_CHECKS: tuple[tuple[re.Pattern[str], ErrorKind], ...] = tuple(
    (re.compile(r"^(\[request id: [^\]]*\] )?" + pattern), kind)
    for pattern, kind in (
        (r"Request for unknown model: '", "client"),
        (r"expected number of inputs between \d+ and \d+ but got \d+ inputs for model '", "client"),
        (r"unexpected inference input '[^']*' for model '", "client"),
        (r"inference input '[^']*' data-type is '\w+', but model '[^']*' expects '\w+'", "client"),
        (r"unexpected shape for input '[^']*' for model '", "client"),
        (r"input byte size mismatch for input '[^']*' for model '", "client"),
        (r"GRPC server is shutting down", "unavailable"),
    )
)


def triton_check_kind(message: str) -> ErrorKind:
    """The kind of an error that came without a status, if its message is one of Triton's own
    request checks (see ``_TRITON_REQUEST_CHECKS``); "unknown" otherwise."""
    return next((kind for pattern, kind in _TRITON_REQUEST_CHECKS if pattern.match(message)), "unknown")


# Triton names the ensemble whose step failed before the step's message, once per nesting level.
_ENSEMBLE_PREFIX = re.compile(r"^(in ensemble '[^']*', )+")
# What a server fault says when a model's error reaches a stream (every other error a model of this
# repository sends is a RenderError, a client error): the adapters' own internal errors
# (triton_io/tensors.py::to_triton_error), the Python backend's for a failed or dead stub
# (python_be.cc), and Triton's for an ensemble step whose model is not loaded.
_SERVER_FAULTS: tuple[tuple[re.Pattern[str], ErrorKind], ...] = tuple(
    (re.compile(pattern), kind)
    for pattern, kind in (
        (r"^[\w.-]+: internal error: ", "internal"),
        (r"^Stub process( '[^']*')? is not healthy", "unavailable"),
        (r"^Failed to process the request", "internal"),
        (r"^Failed to obtain the health mutex", "internal"),
        (r"^(\[request id: [^\]]*\] )?Request for unknown model", "unavailable"),
        (r"^(\[request id: [^\]]*\] )?Model '[^']*' is not ready", "unavailable"),
    )
)


def strip_ensemble_prefix(message: str) -> str:
    """A step's own message, without the "in ensemble 'NAME', " Triton puts before it."""
    return _ENSEMBLE_PREFIX.sub("", message)


def stream_error_kind(message: str) -> ErrorKind:
    """The kind of an error a gRPC stream delivered without a status: Triton's own request checks
    (``triton_check_kind``), a server fault (``_SERVER_FAULTS``), else a model's refusal of the
    request, a client error. An empty message is "unknown"."""
    kind = triton_check_kind(message)
    if kind != "unknown":
        return kind
    inner = strip_ensemble_prefix(message)
    if not inner.strip():
        return "unknown"
    return next((kind for pattern, kind in _SERVER_FAULTS if pattern.match(inner)), "client")


def error_kind(status: object) -> ErrorKind:
    """The kind of an error from its status: an HTTP code ("400", 500) or a gRPC code
    ("StatusCode.INVALID_ARGUMENT", "INTERNAL"); ``None`` or "" (no status) is ``unknown``."""
    s = "" if status is None else str(status).strip()
    if s.isdigit():
        code = int(s)
        if code in _HTTP_UNAVAILABLE:
            return "unavailable"
        if 400 <= code < 500:
            return "client"
        return "internal" if 500 <= code < 600 else "unknown"
    http = grpc_http_status(s)
    return "unknown" if http is None else error_kind(http.value)


def grpc_http_status(code: object) -> HTTPStatus | None:
    """The HTTP status a gRPC status code ("StatusCode.NOT_FOUND" or "NOT_FOUND") stands for;
    None for anything that is not a gRPC code."""
    return GRPC_HTTP_STATUS.get(str(code).strip().removeprefix("StatusCode."))


class RequestError(Exception):
    """The server refused or failed a request; ``kind`` says whose fault it was."""

    def __init__(self, status: object, message: str, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.status: str = "" if status is None or str(status) == "None" else str(status)
        """The HTTP code ("400", "500") or gRPC code ("StatusCode.INVALID_ARGUMENT"); "" when the
        error arrived without one."""
        self.kind: ErrorKind = kind or error_kind(self.status)
        """"client" for a bad request, "internal" for a server fault (see ``ErrorKind``): from the
        status, or given where the status was lost on the way."""
        self.message = message
        """The server's message."""

    @property
    def is_client_error(self) -> bool:
        return self.kind == "client"

    @property
    def parameter(self) -> str | None:
        """The request field the server's message names, in vLLM's form (``... (parameter=max_tokens)``):
        how an error carries its parameter across Triton (``renderer/errors/``)."""
        return parameter_of(self.message)

    def __repr__(self) -> str:
        return f"RequestError(kind={self.kind!r}, status={self.status!r}, message={self.message!r})"


@dataclass(frozen=True)
class Rendered:
    """What a render ensemble returned."""

    input_ids: list[int]
    """Token ids for the LLM."""

    token_offsets: list[tuple[int, int]]
    """Per-token character spans (empty unless asked for)."""

    rendered_prompt: str
    """The prompt text (the rendered chat for render_chat)."""

    outputs: dict[str, np.ndarray]
    """Every output tensor, batch dimension removed (multimodal tensors live here)."""


@dataclass(frozen=True)
class Generated:
    """One response of a generation ensemble."""

    text: str
    """Text of this response (a piece when streaming, the whole answer otherwise)."""

    output_ids: list[int]
    """Ids of this response."""

    finish_reason: str = ""
    """Why generation ended, on the last response ("stop", "length", "abort", "tool_calls");
    "" before it."""

    parsed: Any = None
    """``chat`` under the server's tool-call / reasoning parsers: vLLM's message (``content``,
    ``reasoning``, ``tool_calls``) of a whole answer, or a streamed step's delta (None: the step
    adds nothing); None too when the server parses nothing."""


def _bytes_arr(value: str | bytes) -> np.ndarray:
    return np.array([[value.encode() if isinstance(value, str) else value]], dtype=np.object_)


def _json_arr(value: Any) -> np.ndarray:
    return _bytes_arr(value if isinstance(value, (str, bytes)) else json.dumps(value))


def completion_inputs(
    prompt: str | bytes | None = None,
    prompt_token_ids: Sequence[int] | None = None,
    prompt_embeds: bytes | None = None,
    tokenize_params: Mapping[str, Any] | str | None = None,
    cache_salt: str | None = None,
) -> dict[str, np.ndarray]:
    """Tensors of the contract's completion inputs (batch dimension of 1 included)."""
    t: dict[str, np.ndarray] = {}
    if prompt is not None:
        t["prompt"] = _bytes_arr(prompt)
    if prompt_token_ids is not None:
        t["prompt_token_ids"] = np.asarray([list(prompt_token_ids)], dtype=np.int32)
    if prompt_embeds is not None:
        t["prompt_embeds"] = _bytes_arr(prompt_embeds)
    if tokenize_params is not None:
        t["tokenize_params"] = _json_arr(tokenize_params)
    if cache_salt is not None:
        t["cache_salt"] = _bytes_arr(cache_salt)
    return t


def chat_inputs(
    messages: Sequence[Mapping[str, Any]] | str,
    chat_params: Mapping[str, Any] | str | None = None,
    tokenize_params: Mapping[str, Any] | str | None = None,
    cache_salt: str | None = None,
) -> dict[str, np.ndarray]:
    t = {"messages": _json_arr(messages)}
    if chat_params is not None:
        t["chat_params"] = _json_arr(chat_params)
    if tokenize_params is not None:
        t["tokenize_params"] = _json_arr(tokenize_params)
    if cache_salt is not None:
        t["cache_salt"] = _bytes_arr(cache_salt)
    return t


def generation_inputs(
    max_tokens: int, stream: bool = False, sampling_params: Mapping[str, Any] | None = None
) -> dict[str, np.ndarray]:
    t = {"max_tokens": np.array([[max_tokens]], dtype=np.int32), "stream": np.array([[stream]], dtype=np.bool_)}
    if sampling_params is not None:
        t["sampling_params"] = _json_arr(sampling_params)
    return t


class RendererClient:
    """Talks to the renderer ensembles; ``protocol`` is "http" or "grpc"."""

    def __init__(self, url: str = "127.0.0.1:8000", protocol: str = "http", timeout_s: float = 120.0) -> None:
        if protocol not in ("http", "grpc"):
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        self.url = url.removeprefix("http://")
        self.protocol = protocol
        self.timeout_s = timeout_s
        if protocol == "http":
            import tritonclient.http as mod

            self._client = mod.InferenceServerClient(self.url, network_timeout=timeout_s, connection_timeout=timeout_s)
        else:
            import tritonclient.grpc as mod

            self._client = mod.InferenceServerClient(self.url)
        self._mod = mod

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "RendererClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_ready(self) -> bool:
        try:
            return bool(self._client.is_server_ready())
        except Exception:  # noqa: BLE001 - unreachable counts as not ready
            return False

    # --- generic ---------------------------------------------------------------------------

    def _inputs(self, tensors: Mapping[str, np.ndarray]) -> list[Any]:
        out = []
        for name, arr in tensors.items():
            arr = np.asarray(arr)
            i = self._mod.InferInput(name, list(arr.shape), _DTYPES.get(arr.dtype) or _dtype_name(arr))
            i.set_data_from_numpy(arr)
            out.append(i)
        return out

    def infer(self, model: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """A plain infer call; returns every output with its batch dimension removed."""
        from tritonclient.utils import InferenceServerException

        try:
            res = self._client.infer(model, self._inputs(tensors))
        except InferenceServerException as e:
            raise RequestError(str(e.status()), e.message()) from None
        names = (
            [o["name"] for o in res.get_response()["outputs"]]
            if self.protocol == "http"
            else [o.name for o in res.get_response().outputs]
        )
        return {n: res.as_numpy(n)[0] for n in names}

    # --- render ----------------------------------------------------------------------------

    def render_completion(self, prompt: str | bytes | None = None, **kwargs: Any) -> Rendered:
        return _rendered(self.infer("render_completion", completion_inputs(prompt, **kwargs)))

    def render_chat(self, messages: Sequence[Mapping[str, Any]] | str, **kwargs: Any) -> Rendered:
        return _rendered(self.infer("render_chat", chat_inputs(messages, **kwargs)))

    # --- generate --------------------------------------------------------------------------

    def stream(self, model: str, tensors: Mapping[str, np.ndarray]) -> Iterator[Generated]:
        """Responses of a decoupled model, as they arrive."""
        if self.protocol == "grpc":
            yield from self._stream_grpc(model, tensors)
        else:
            yield from self._stream_http(model, tensors)

    def generate(
        self,
        model: str = "completion",
        *,
        max_tokens: int,
        stream: bool = False,
        sampling_params: Mapping[str, Any] | None = None,
        **prompt: Any,
    ) -> Iterator[Generated]:
        """Generate from ``completion`` (prompt kwargs) or ``chat`` (``messages=``...)."""
        make = chat_inputs if model == "chat" else completion_inputs
        tensors = {**make(**prompt), **generation_inputs(max_tokens, stream, sampling_params)}
        yield from self.stream(model, tensors)

    def _stream_grpc(self, model: str, tensors: Mapping[str, np.ndarray]) -> Iterator[Generated]:
        q: queue.Queue = queue.Queue()
        # No triton_grpc_error header (see stream_error_kind): an error comes as its message.
        self._client.start_stream(callback=lambda result, error: q.put((result, error)))
        ended = False  # the server closed the request (final response or error)
        last = _LastPiece(model)
        try:
            self._client.async_stream_infer(model, self._inputs(tensors), enable_empty_final_response=True)
            while True:
                try:
                    result, error = q.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise RequestError(
                        "DEADLINE_EXCEEDED", f"no response from '{model}' within {self.timeout_s} s"
                    ) from None
                if error is not None:
                    # A transport failure has a code; a request's error on the stream has none.
                    status, message = error.status(), error.message() or ""
                    ended = True
                    raise RequestError(status, message, None if status else stream_error_kind(message))
                final = result.get_response().parameters["triton_final_response"].bool_param
                text = result.as_numpy("text_output")
                if text is not None:
                    ids = result.as_numpy("output_ids")  # the TensorRT-LLM front returns text only
                    finish = result.as_numpy("finish_reason")
                    last.saw(finish is not None, _first_str(finish))
                    yield Generated(
                        text.reshape(-1)[0].decode(),
                        [] if ids is None else ids.reshape(-1).tolist(),
                        _first_str(finish),
                        _parsed(_first_str(result.as_numpy("parsed_output"))),
                    )
                if final:
                    ended = True
                    last.check()
                    return
        finally:
            # A stream the server never ended (a timeout, a stub that died mid-generation, a
            # caller that stopped reading) is cancelled: a plain stop_stream waits for it forever.
            self._client.stop_stream(cancel_requests=not ended)

    def _stream_http(self, model: str, tensors: Mapping[str, np.ndarray]) -> Iterator[Generated]:
        try:
            yield from self._stream_http_events(model, tensors)
        except TimeoutError:
            # The gRPC path's wording: a stream whose server went silent (a stub that died
            # mid-generation leaves its stream open) ends as an error, never a raw socket timeout.
            raise RequestError("DEADLINE_EXCEEDED", f"no response from '{model}' within {self.timeout_s} s") from None

    def _stream_http_events(self, model: str, tensors: Mapping[str, np.ndarray]) -> Iterator[Generated]:
        body = _generate_body(tensors)
        req = urllib.request.Request(
            f"http://{self.url}/v2/models/{model}/generate_stream",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            resp = urllib.request.urlopen(req, timeout=self.timeout_s)  # noqa: S310 (always http://)
        except urllib.error.HTTPError as e:
            raise RequestError(str(e.code), _error_text(e.read())) from None
        last = _LastPiece(model)
        with resp:
            for line in resp:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    # An error after the 200 header (Triton sends the status of an error that
                    # comes first): no status, so kind "unknown", never taken for a client error.
                    raise RequestError(None, event["error"])
                ids = event.get("output_ids", [])
                text = event.get("text_output", "")
                finish = _one(event.get("finish_reason", ""))
                last.saw("finish_reason" in event, finish)
                yield Generated(
                    _one(text),
                    ids if isinstance(ids, list) else [ids],
                    finish,
                    _parsed(_one(event.get("parsed_output", ""))),
                )
        # The event stream closed: complete only if its last piece said why generation ended.
        last.check()


class _LastPiece:
    """Whether a stream ended with its last piece. The generation ensembles put a finish_reason on
    the last piece of every request; a stream the server closes before it is cut short and must
    not read as complete (seen in CI: a detokenize stub killed mid-stream, the HTTP event stream
    closed after one piece of 600 with no error event). Models without a finish_reason output (the
    TensorRT-LLM front) are not checked."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.pieces = 0
        self.has_field = False
        self.finish = ""

    def saw(self, has_field: bool, finish: str) -> None:
        self.pieces += 1
        self.has_field = self.has_field or has_field
        self.finish = finish

    def check(self) -> None:
        if self.has_field and not self.finish:
            raise RequestError(
                None,
                f"the stream from '{self.model}' ended after {self.pieces} response(s) without its last one "
                "(none said why generation ended): the server ended it early",
                kind="unavailable",
            )


def _one(value: Any) -> str:
    """A [1] string output as Triton's generate endpoint writes it (a list or the string)."""
    return value[0] if isinstance(value, list) else value


def _first_str(arr: np.ndarray | None) -> str:
    return "" if arr is None or not arr.size else arr.reshape(-1)[0].decode()


def _parsed(text: str) -> Any:
    """``parsed_output`` as data ("" when the server parses nothing; "null": a step adding nothing)."""
    return json.loads(text) if text else None


def _generate_body(tensors: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Tensors as the JSON body of Triton's generate endpoints (one request, batch of 1)."""
    body: dict[str, Any] = {}
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        if arr.ndim == 0 or arr.shape[0] != 1:
            raise ValueError(
                f"{name}: the HTTP generate endpoint takes a batch of exactly 1, got shape {list(arr.shape)}; use gRPC"
            )
        v = arr[0]
        if v.dtype == np.object_:
            if name == "prompt_embeds":
                # JSON carries no raw bytes; base64 is accepted.
                body[name] = base64.b64encode(v.reshape(-1)[0]).decode()
                continue
            if v.ndim > 1:
                raise ValueError(f"{name}: the HTTP generate endpoint takes strings or a list of them; use gRPC")
            try:
                items = [x.decode() if isinstance(x, bytes) else str(x) for x in v.reshape(-1)]
            except UnicodeDecodeError:
                raise ValueError(f"{name}: not UTF-8, which JSON cannot carry; use gRPC") from None
            body[name] = items[0] if len(items) == 1 else items  # a JSON list becomes a [n] tensor
        elif v.size == 1 and not name.endswith("token_ids"):
            body[name] = v.reshape(-1)[0].item()
        else:
            body[name] = v.tolist()
    return body


def _rendered(out: dict[str, np.ndarray]) -> Rendered:
    offsets = out.get("token_offsets", np.zeros((0, 2), np.int32)).reshape(-1, 2)
    rp = out.get("rendered_prompt")
    return Rendered(
        input_ids=out["input_ids"].astype(np.int64).tolist(),
        token_offsets=[(int(a), int(b)) for a, b in offsets],
        rendered_prompt=rp.reshape(-1)[0].decode() if rp is not None else "",
        outputs=out,
    )


def _dtype_name(arr: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(arr.dtype)


def _error_text(raw: bytes) -> str:
    raw = raw.strip().removeprefix(b"data:")  # generate_stream wraps its error as an SSE event
    try:
        return json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        return raw.decode(errors="replace")
