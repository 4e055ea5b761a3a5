"""The edge (launcher/edge.py) holds the ports a client reaches: oversized requests are refused by
name and leave no memory behind, and sockets that trickle their headers are closed without
delaying anyone. Both while valid requests flow; tritonserver must be the same process at the end.
(Streams carrying ``triton_grpc_error`` are in tests/live/test_mixed_traffic_live.py.)"""

from __future__ import annotations

import select
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

# Latency against a rest baseline: measured with no other test file beside it (`make test`).
pytestmark = [pytest.mark.live, pytest.mark.alone]

PROMPT = "The edge keeps the server up."
CLIENTS = 4  # oversized requests in flight at once


def _tree_pss_mb(root: int) -> float:
    from benchmarks.footprint import footprint

    return footprint(root)["total_mb"]


def _infer(protocol: str, url: str, model: str, name: str, value: bytes) -> str:
    """ "ok", or the error's text."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    mod = httpclient if protocol == "http" else grpcclient
    client = mod.InferenceServerClient(url, **({"network_timeout": 60.0} if protocol == "http" else {}))
    tensor = mod.InferInput(name, [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[value]], dtype=object))
    try:
        client.infer(model, [tensor])
        return "ok"
    except Exception as e:  # noqa: BLE001 - the error is what the test reads
        return str(e)
    finally:
        client.close()


class ValidTraffic:
    """render_completion over gRPC in a loop on its own thread, keeping each answer's latency."""

    def __init__(self, url: str) -> None:
        import tritonclient.grpc as grpcclient

        self.client = grpcclient.InferenceServerClient(url)
        self.latencies: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def one(self) -> float:
        import tritonclient.grpc as grpcclient

        tensor = grpcclient.InferInput("prompt", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[PROMPT.encode()]], dtype=object))
        start = time.perf_counter()
        result = self.client.infer("render_completion", [tensor])
        assert result.as_numpy("input_ids").size > 0
        return time.perf_counter() - start

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.latencies.append(self.one())
            except Exception as e:  # noqa: BLE001 - collected, asserted empty
                self.errors.append(str(e))
            time.sleep(0.005)

    def __enter__(self) -> "ValidTraffic":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)
        self.client.close()


def test_oversized_requests_are_refused_by_name_and_memory_levels_off(server):
    """100 refused requests, just over the per-input limit (the stage refuses it, after Triton
    took it in) and far over the body limit (the edge refuses it), HTTP and gRPC, on both render
    ensembles: each answered with a client error naming the limit, and the server's memory flat
    over the second fifty."""
    from launcher import cli as launch

    pid = launch.running_pid(server)
    root = launch.supervisor_pid(server)
    limit, body_limit = server.max_input_bytes, server.resolved_max_request_bytes
    urls = {"http": f"{server.host}:{server.http_port}", "grpc": f"{server.host}:{server.grpc_port}"}
    cases = [
        (protocol, model, name, size)
        for size in (limit + 1, 2 * body_limit)
        for protocol in ("http", "grpc")
        for model, name in (("render_completion", "prompt"), ("render_chat", "messages"))
    ]
    marks: list[float] = []
    with ValidTraffic(urls["grpc"]) as valid:
        marks.append(_tree_pss_mb(root))
        with ThreadPoolExecutor(CLIENTS) as pool:
            for half in range(2):
                batch = [cases[i % len(cases)] for i in range(50)]
                answers = list(pool.map(lambda c: (c, _infer(c[0], urls[c[0]], c[1], c[2], b"x" * c[3])), batch))
                for (protocol, model, name, size), answer in answers:
                    if size > body_limit:
                        code = "[413]" if protocol == "http" else "RESOURCE_EXHAUSTED"
                        want = f"request body larger than the limit of {body_limit} bytes (MAX_REQUEST_BYTES)"
                    else:
                        code = "[400]" if protocol == "http" else "INVALID_ARGUMENT"
                        want = f"Input '{name}' is {size} bytes, more than the limit of {limit} bytes."
                    assert code in answer and want in answer, (protocol, model, size, answer)
                marks.append(_tree_pss_mb(root))
    print(f"\nserver PSS before, after 50 and after 100 refused requests: {marks} MB")
    assert valid.errors == [] and len(valid.latencies) > 20
    assert launch.running_pid(server) == pid
    assert marks[2] - marks[1] < 50, f"memory still growing over the second fifty: {marks} MB"
    # What stays: each stage's shared-memory region grows to hold the inputs of the batch it was
    # handed (up to CLIENTS at once), and tritonserver keeps one HTTP and one gRPC request's buffers.
    bound = (2 * CLIENTS + 2) * body_limit / 2**20
    assert marks[2] - marks[0] < bound, f"{marks} MB, more than {bound:.0f} MB kept"


def _trickle(host: str, port: int, stop: threading.Event, closed_after: list[float]) -> None:
    """Open a connection and send a request's headers a few bytes at a time until the server
    closes it (its time kept) or ``stop``. (On the gRPC port, an HTTP/2 one, these are not even
    HTTP/2's preface: the edge refuses them at once.)"""
    start = time.monotonic()
    sock = socket.create_connection((host, port), timeout=5)
    try:
        sock.sendall(b"POST /v2/models/render_completion/infer HTTP/1.1\r\nHost: x\r\n")
        while not stop.wait(0.5):
            sock.sendall(b"X-Slow: y\r\n")
            readable, _, _ = select.select([sock], [], [], 0)
            if readable and not sock.recv(4096, socket.MSG_PEEK):  # the server's end: closed
                raise ConnectionResetError("closed by the server")
    except OSError:
        closed_after.append(time.monotonic() - start)
    finally:
        sock.close()


def test_sockets_trickling_headers_are_closed_and_delay_no_one(server):
    """200 connections (50 on each port) sending their headers a line every half second: valid
    requests meanwhile are no more than 2x slower than at rest, and the edge closes every one
    of them within its header timeout."""
    from launcher import cli as launch

    pid = launch.running_pid(server)
    ports = (server.http_port, server.grpc_port, server.metrics_port, server.openai_port)
    with ValidTraffic(f"{server.host}:{server.grpc_port}") as valid:
        time.sleep(1.0)
        at_rest = list(valid.latencies)
        stop, closed_after = threading.Event(), []
        threads = [
            threading.Thread(target=_trickle, args=(server.host, port, stop, closed_after), daemon=True)
            for port in ports
            for _ in range(50)
        ]
        for t in threads:
            t.start()
        time.sleep(2.0)
        under = valid.latencies[len(at_rest) :]
        deadline = time.monotonic() + server.edge_header_timeout_s + 5
        while len(closed_after) < len(threads) and time.monotonic() < deadline:
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join(10)
    assert valid.errors == []
    assert len(at_rest) > 10 and len(under) > 10
    rest_p50, under_p50 = statistics.median(at_rest), statistics.median(under)
    assert under_p50 <= 2 * rest_p50 + 0.002, f"p50 {under_p50 * 1e3:.2f} ms against {rest_p50 * 1e3:.2f} ms at rest"
    assert len(closed_after) == len(threads), f"{len(closed_after)} of {len(threads)} closed"
    assert max(closed_after) <= server.edge_header_timeout_s + 2, max(closed_after)
    assert launch.running_pid(server) == pid
