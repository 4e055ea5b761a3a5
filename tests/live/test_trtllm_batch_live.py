"""Batched requests to the TensorRT-LLM front (``ensemble``), live: a request whose inputs carry N
prompts, each row with its own parameters, is answered row by row (``batch_index``), each row the
same as its prompt sent alone, as TensorRT-LLM's ``ensemble`` serves a batch.

Batched, single and invalid requests go at once from several threads, interleaved, over gRPC
(tritonclient streams, as TensorRT-LLM's clients send them) and HTTP (``generate_stream`` for a
single prompt; a batch sent to ``/infer`` is refused, the model being decoupled as upstream's is);
the invalid ones get a 400 / INVALID_ARGUMENT naming what was sent (the row and the input), and
tritonserver is the same process at the end.
"""

from __future__ import annotations

import queue
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

pytestmark = pytest.mark.live

TOKENS = 8
PROMPTS = ["The capital of France is", "Once upon a time"]
# Each row's own parameters, as TensorRT-LLM's preprocessing takes them (greedy: no top_k / top_p);
# the last row is the first's prompt with a stop word of its own.
ROWS = [
    {"text_input": PROMPTS[0], "max_tokens": TOKENS, "exclude_input_in_output": True},
    {"text_input": PROMPTS[1], "max_tokens": 5, "exclude_input_in_output": False},
    {"text_input": PROMPTS[0], "max_tokens": TOKENS, "exclude_input_in_output": True, "stop_words": ["answer"]},
]
TYPES = {"text_input": object, "max_tokens": np.int32, "exclude_input_in_output": np.bool_, "stream": np.bool_}
TYPES |= {"stop_words": object, "beam_width": np.int32}
# What a row that leaves an input out holds in a batch whose other rows send it: its no-op value.
DEFAULTS = {"beam_width": 1, "exclude_input_in_output": False}


def tensors(rows: list[dict], stream: bool) -> dict[str, np.ndarray]:
    """Rows stacked along the batch dimension, as ``end_to_end_grpc_client.py --batch-inputs``
    stacks them; a word list padded with "" (TensorRT-LLM's preprocessing skips an empty word)."""
    rows = [{**r, "stream": stream} for r in rows]
    names = sorted({name for r in rows for name in r})
    out = {}
    for name in names:
        if name == "stop_words":
            width = max(len(r.get(name, [])) for r in rows)
            values = [[w.encode() for w in r.get(name, [])] + [b""] * (width - len(r.get(name, []))) for r in rows]
        else:
            cells = [r.get(name, DEFAULTS.get(name)) for r in rows]
            values = [[v.encode() if isinstance(v, str) else v] for v in cells]
        out[name] = np.array(values, dtype=TYPES[name])
    return out


def infer_inputs(module, inputs: dict[str, np.ndarray]) -> list:
    """tritonclient inputs (``module``: its ``grpc`` or ``http``), as TensorRT-LLM's script makes them."""
    from tritonclient.utils import np_to_triton_dtype

    out = []
    for name, arr in inputs.items():
        t = module.InferInput(name, list(arr.shape), np_to_triton_dtype(arr.dtype))
        t.set_data_from_numpy(arr)
        out.append(t)
    return out


@dataclass(frozen=True)
class Answer:
    """What one request to ``ensemble`` got."""

    rows: dict[int, str]
    """Each row's text, by ``batch_index`` (streamed pieces joined)."""

    error: str | None = None
    """The error, when refused."""

    status: str | None = None
    """Its status: the HTTP code; none on a gRPC stream, where Triton sends a request's error as
    its message alone (README, "Bad requests")."""


def grpc_request(url: str, inputs: dict[str, np.ndarray]) -> Answer:
    """One request on a gRPC stream of its own, as TensorRT-LLM's clients send it; its responses
    until the FINAL flag."""
    import tritonclient.grpc as grpcclient

    got: queue.Queue = queue.Queue()
    c = grpcclient.InferenceServerClient(url)
    try:
        c.start_stream(callback=lambda result, error: got.put((result, error)))
        ins = infer_inputs(grpcclient, inputs)
        outs = [grpcclient.InferRequestedOutput(n) for n in ("text_output", "batch_index")]
        c.async_stream_infer("ensemble", ins, outputs=outs, enable_empty_final_response=True)
        rows: dict[int, str] = {}
        while True:
            result, error = got.get(timeout=180)
            if error is not None:
                return Answer(rows, error.message(), error.status() or None)
            if result.as_numpy("text_output") is not None:
                row = int(result.as_numpy("batch_index").reshape(-1)[0])
                rows[row] = rows.get(row, "") + result.as_numpy("text_output")[0].decode()
            if result.get_response().parameters["triton_final_response"].bool_param:
                return Answer(rows)
    finally:
        c.stop_stream()
        c.close()


def http_single(http_url: str, row: dict, stream: bool) -> Answer:
    from client import RendererClient, RequestError

    with RendererClient(http_url, "http") as c:
        try:
            pieces = list(c.stream("ensemble", tensors([row], stream)))
        except RequestError as e:
            return Answer({}, e.message, e.status)
    return Answer({0: "".join(p.text for p in pieces)})


def http_batch_to_infer(http_url: str, inputs: dict[str, np.ndarray]) -> Answer:
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    c = httpclient.InferenceServerClient(http_url)
    try:
        c.infer("ensemble", infer_inputs(httpclient, inputs))
    except InferenceServerException as e:
        return Answer({}, e.message(), e.status())
    finally:
        c.close()
    return Answer({})


@pytest.fixture(scope="module")
def urls(server) -> tuple[str, str]:
    return f"{server.host}:{server.grpc_port}", f"{server.host}:{server.http_port}"


@pytest.fixture(scope="module")
def alone(urls) -> dict[tuple[int, bool], str]:
    """Each row's text with its prompt sent alone (a request of one row), streamed and not."""
    out = {}
    for i, row in enumerate(ROWS):
        for stream in (False, True):
            got = grpc_request(urls[0], tensors([row], stream))
            assert got.error is None and set(got.rows) == {0}, got
            out[i, stream] = got.rows[0]
    assert out[1, False].startswith(PROMPTS[1])  # the prompt first, as TensorRT-LLM's non-streamed text
    assert "answer" in out[0, False] and out[2, False] == out[0, False].split("answer")[0]  # cut at its stop word
    return out


def test_each_row_of_a_batch_is_its_prompt_sent_alone(urls, alone):
    for stream in (False, True):
        got = grpc_request(urls[0], tensors(ROWS, stream))
        assert got.error is None, got.error
        assert got.rows == {i: alone[i, stream] for i in range(len(ROWS))}


def refused_on_a_stream(got: Answer) -> str:
    """A gRPC stream's refusal: no code (Triton's), a client error by its words; its message
    without the ensemble's prefix."""
    from client.triton_client import stream_error_kind, strip_ensemble_prefix

    assert got.error is not None and got.status is None, got
    assert stream_error_kind(got.error) == "client", got
    assert got.rows == {}, got  # refused before any row was generated
    return strip_ensemble_prefix(got.error)


def test_batched_single_and_invalid_requests_interleaved_over_grpc_and_http(server, urls, alone):
    from launcher import cli as launch

    pid = launch.running_pid(server)
    grpc_url, http_url = urls
    bad_row = {**ROWS[1], "beam_width": 2}
    jobs = []  # (what, call, check)
    for round_ in range(3):
        stream = bool(round_ % 2)
        order = [1, 0, 2] if round_ == 1 else [0, 2, 1]

        def batched(order=order, stream=stream) -> None:
            got = grpc_request(grpc_url, tensors([ROWS[i] for i in order], stream))
            assert got.error is None, got.error
            assert got.rows == {k: alone[i, stream] for k, i in enumerate(order)}

        def single_grpc(i=round_, stream=stream) -> None:
            got = grpc_request(grpc_url, tensors([ROWS[i]], stream))
            assert got.error is None and got.rows == {0: alone[i, stream]}, got

        def single_http(i=(round_ + 1) % 3, stream=stream) -> None:
            got = http_single(http_url, ROWS[i], stream)
            assert got.error is None and got.rows == {0: alone[i, stream]}, got

        def bad_batch_grpc(stream=stream) -> None:
            message = refused_on_a_stream(grpc_request(grpc_url, tensors([ROWS[0], bad_row], stream)))
            assert message == (
                "Row 1 of the batch of 2 (batch_index 1): Input 'beam_width' is not supported by this server: "
                "beam search is not served; use 1 (got 2). (parameter=beam_width)"
            )

        def bad_length_grpc(stream=stream) -> None:
            rows = [ROWS[0], ROWS[2], {**ROWS[1], "max_tokens": 0}]
            message = refused_on_a_stream(grpc_request(grpc_url, tensors(rows, stream)))
            assert message.startswith("Row 2 of the batch of 3 (batch_index 2): max_tokens must be at least 1, got 0.")
            assert message.endswith("(parameter=max_tokens, value=0)")

        def bad_single_http(stream=stream) -> None:
            got = http_single(http_url, bad_row, stream)
            assert got.status == "400" and "Input 'beam_width' is not supported" in got.error, got
            assert "Row" not in got.error  # a request of one row gets that row's own error

        def batch_to_http_infer() -> None:
            got = http_batch_to_infer(http_url, tensors(ROWS[:2], False))
            assert got.status == "400" and "model ensemble streams its responses" in got.error, got

        jobs += [batched, single_grpc, bad_batch_grpc, single_http, bad_length_grpc, bad_single_http]
        jobs += [batch_to_http_infer]
    with ThreadPoolExecutor(max_workers=6) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()
    assert launch.running_pid(server) == pid, "tritonserver restarted"
