"""Abandoned generation requests free the engine, on every port a client reaches: 50 long
generations sent at once whose clients all leave, then the next short request is answered within
2x its latency at rest (plus a fixed slack for these shared cores), and tritonserver is the same
process. The paths: Triton's HTTP ``generate`` and ``generate_stream`` (served by the front behind
the edge), a gRPC stream (through the front's stream proxy, ``openai_front/grpc_proxy.py``) and
the OpenAI front. The stand-in engine serves one request at a time, so a generation left running,
or one started only to be stopped, is seen by the next request (docs/RELIABILITY.md, "The edge").
"""

from __future__ import annotations

import http.client
import json
import socket
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

# Latency against a rest baseline: measured with no other test file beside it (`make test`).
pytestmark = [pytest.mark.live, pytest.mark.alone]

ABANDONED = 50
MAX_TOKENS = 200  # about 14 s each on the stand-in engine: one left running is plain to see
SLACK_S = 0.25  # scheduling noise of 2 shared cores, on a request of about 0.15 s
GENERATE = "/v2/models/completion/generate"
SHORT = {"prompt": "The capital of France is", "max_tokens": 3, "sampling_params": json.dumps({"temperature": 0})}
LONG = {"prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "sampling_params": json.dumps({"ignore_eos": True})}


def _post(port: int, path: str, body: dict, timeout: float = 120) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _short_http(port: int) -> float:
    start = time.perf_counter()
    status, raw = _post(port, GENERATE, SHORT)
    assert status == 200, raw
    return time.perf_counter() - start


def _short_front(port: int) -> float:
    start = time.perf_counter()
    status, raw = _post(port, "/v1/completions", {"prompt": SHORT["prompt"], "max_tokens": 3, "temperature": 0})
    assert status == 200, raw
    return time.perf_counter() - start


def _short_grpc(url: str) -> float:
    from client import RendererClient

    with RendererClient(url, "grpc") as c:
        start = time.perf_counter()
        assert list(c.generate("completion", prompt=SHORT["prompt"], max_tokens=3))
        return time.perf_counter() - start


def _abandon_http(port: int, path: str, body: dict, sent: threading.Barrier, leave: threading.Event) -> None:
    """Send ``body``, then close the socket once told, reading nothing."""
    data = json.dumps(body).encode()
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(data)}"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head.encode() + b"\r\n\r\n" + data)
        sent.wait()
        leave.wait()


def _abandon_over_http(port: int, path: str, body: Callable[[int], dict]) -> None:
    sent = threading.Barrier(ABANDONED + 1)
    leave = threading.Event()
    clients = [
        threading.Thread(target=_abandon_http, args=(port, path, body(i), sent, leave)) for i in range(ABANDONED)
    ]
    for t in clients:
        t.start()
    sent.wait()
    time.sleep(1.0)  # every request reaches the engine's queue
    leave.set()
    for t in clients:
        t.join()


def _tensor(mod, name: str, value) -> object:
    arr = np.array([[value]], dtype=object if isinstance(value, bytes) else np.int32)
    t = mod.InferInput(name, list(arr.shape), "BYTES" if arr.dtype == object else "INT32")
    t.set_data_from_numpy(arr)
    return t


def _abandon_over_grpc(url: str) -> None:
    import tritonclient.grpc as grpcclient

    streams = []
    for _ in range(ABANDONED // 10):  # several clients, ten generations on each stream
        client = grpcclient.InferenceServerClient(url)
        client.start_stream(lambda *args, **kwargs: None)
        for _ in range(10):
            inputs = [
                _tensor(grpcclient, "prompt", LONG["prompt"].encode()),
                _tensor(grpcclient, "max_tokens", MAX_TOKENS),
                _tensor(grpcclient, "sampling_params", LONG["sampling_params"].encode()),
            ]
            client.async_stream_infer("completion", inputs)
        streams.append(client)
    time.sleep(1.0)
    for client in streams:  # every client leaves at once
        client.stop_stream(cancel_requests=True)
        client.close()


PATHS = ["http_generate", "http_generate_stream", "grpc_stream", "openai_front"]


@pytest.mark.parametrize("path", PATHS)
def test_abandoned_generations_free_the_engine(server, path):
    from launcher import cli as launch

    pid = launch.running_pid(server)
    grpc_url = f"{server.host}:{server.grpc_port}"
    if path == "grpc_stream":
        short = lambda: _short_grpc(grpc_url)  # noqa: E731
        abandon = lambda: _abandon_over_grpc(grpc_url)  # noqa: E731
    elif path == "openai_front":
        short = lambda: _short_front(server.openai_port)  # noqa: E731
        front = {"prompt": LONG["prompt"], "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 1.0}
        abandon = lambda: _abandon_over_http(  # noqa: E731
            server.openai_port, "/v1/completions", lambda i: front | {"stream": i % 2 == 0}
        )
    else:
        stream = path.endswith("_stream")
        short = lambda: _short_http(server.http_port)  # noqa: E731
        abandon = lambda: _abandon_over_http(  # noqa: E731
            server.http_port, GENERATE + ("_stream" if stream else ""), lambda i: LONG | {"stream": stream}
        )
    rest = statistics.median(short() for _ in range(5))
    abandon()
    after = short()
    print(f"\n{path}: {after:.3f} s after {ABANDONED} abandoned at once, {rest:.3f} s at rest")
    assert after <= 2 * rest + SLACK_S, f"{after:.2f} s after {ABANDONED} abandoned generations, {rest:.2f} s at rest"
    assert launch.running_pid(server) == pid
