"""The attacks of docs/RELIABILITY.md ("The edge holds every port a client reaches"), run for as
long as a soak lasts beside its traffic (``python -m benchmarks.mixed_traffic --attacks``):

- ``oversized``: bodies over the edge's limit on HTTP (the edge's 413, from the declared length)
  and over it on gRPC (``RESOURCE_EXHAUSTED``), and prompts just over ``MAX_INPUT_BYTES`` (the
  stage's 400 naming the limit);
- ``slow_headers``: sockets that trickle their headers a byte at a time: each must be closed by the
  server within ``EDGE_HEADER_TIMEOUT_S`` (and a few seconds of slack);
- ``bad_json``: bodies Triton's own JSON readers answered with a 500 (``/infer`` and ``generate``):
  each must be a 4xx;
- ``abandoned``: long generations whose gRPC stream is cancelled after a second, then one short
  request timed: a generation left running would hold the engine for many seconds.

Each attacker counts what came back in ``Attacks.counts``; an answer it did not expect goes to
``Attacks.wrong``. The server's own checks (its pid, restarts, signals, memory) are the caller's.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

LONG_TOKENS = 200
SLOW_SOCKETS = 200
HEADER_SLACK_S = 5.0
# Bodies Triton 2.51's JSON readers answered with a 500 (tests/support/infer_bodies.py has more).
BAD_INFER = (b"1e400", b'{"inputs": [', b"NaN", b"[]", b'{"inputs": [{"name": "prompt", "datatype": "BYTES"}]}')
BAD_GENERATE = (b"1e400", b'{"prompt": ', b"NaN", b"", b"[]", b'{"prompt": null, "max_tokens": 3}')


@dataclass
class Attacks:
    """What the attackers saw."""

    counts: Counter = field(default_factory=Counter)
    """Answers by attack and kind."""
    wrong: list[str] = field(default_factory=list)
    """Answers no attack expected, with what came back."""
    slow_closed_after_s: list[float] = field(default_factory=list)
    """How long each trickling socket stayed open."""
    after_abandon_s: list[float] = field(default_factory=list)
    """The short request's latency after each round of abandoned generations."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, key: str, wrong: str | None = None) -> None:
        with self.lock:
            self.counts[key] += 1
            if wrong is not None and len(self.wrong) < 50:
                self.wrong.append(f"{key}: {wrong}")

    def as_json(self) -> dict[str, Any]:
        slow = sorted(self.slow_closed_after_s)
        after = sorted(self.after_abandon_s)
        return {
            "counts": dict(self.counts),
            "wrong": self.wrong,
            "slow_header_sockets_closed": len(slow),
            "slow_header_closed_after_s_max": round(slow[-1], 1) if slow else None,
            "after_abandoned_s_median": round(after[len(after) // 2], 3) if after else None,
            "after_abandoned_s_max": round(after[-1], 3) if after else None,
        }


def _http(port: int, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def oversized(s: Any, stop: threading.Event, out: Attacks) -> None:
    """Declared-over bodies every second, a real prompt just over the stage's limit and a gRPC
    message over the edge's every few seconds."""
    import tritonclient.grpc as grpcclient

    limit = s.resolved_max_request_bytes
    k = 0
    while not stop.wait(1.0):
        k += 1
        # Only the declared length is over: the edge answers from the headers alone.
        with socket.create_connection(("127.0.0.1", s.http_port), timeout=30) as sock:
            head = f"POST /v2/models/render_completion/infer HTTP/1.1\r\nHost: x\r\nContent-Length: {limit + 1}\r\n\r\n"
            sock.sendall(head.encode() + b"{")
            answer = sock.recv(4096)
        status = answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/") else answer[:40]
        out.count(
            "oversized_http_413" if status == b"413" else "oversized_http_wrong",
            None if status == b"413" else repr(answer[:120]),
        )
        if k % 5 == 0:  # a prompt just over MAX_INPUT_BYTES, refused by the stage
            prompt = "a" * (s.max_input_bytes + 1)
            body = {"inputs": [{"name": "prompt", "shape": [1, 1], "datatype": "BYTES", "data": [prompt]}]}
            code, raw = _http(s.http_port, "/v2/models/render_completion/infer", json.dumps(body).encode())
            ok = code == 400 and b"more than the limit" in raw
            out.count(
                "over_input_limit_400" if ok else "over_input_limit_wrong", None if ok else f"{code} {raw[:120]!r}"
            )
        if k % 10 == 0:  # one gRPC message over the edge's limit
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
            arr = np.array([[b"a" * (limit + 1)]], dtype=object)
            t = grpcclient.InferInput("prompt", [1, 1], "BYTES")
            t.set_data_from_numpy(arr)
            try:
                client.infer("render_completion", [t])
                out.count("oversized_grpc_wrong", "accepted")
            except Exception as e:  # noqa: BLE001 - the refusal is the expected outcome
                ok = "RESOURCE_EXHAUSTED" in str(e) or "MAX_REQUEST_BYTES" in str(e)
                out.count("oversized_grpc_refused" if ok else "oversized_grpc_wrong", None if ok else str(e)[:160])
            finally:
                client.close()


def _trickle(port: int, stop: threading.Event, out: Attacks) -> None:
    opened = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        head = b"POST /v2/models/render_completion/infer HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000
        try:
            for byte in head:
                sock.sendall(bytes([byte]))
                if stop.wait(1.0):
                    return
            out.count("slow_headers_never_closed", "sent 10,000 header bytes and was still open")
        except OSError:  # closed by the server
            held = time.monotonic() - opened
            out.slow_closed_after_s.append(held)
            out.count("slow_headers_closed")


def slow_headers(s: Any, stop: threading.Event, out: Attacks) -> None:
    """``SLOW_SOCKETS`` trickling sockets at all times, each replaced once the server closes it."""
    pool: list[threading.Thread] = []
    while not stop.is_set():
        pool = [t for t in pool if t.is_alive()]
        while len(pool) < SLOW_SOCKETS:
            t = threading.Thread(target=_trickle, args=(s.http_port, stop, out), daemon=True)
            t.start()
            pool.append(t)
        stop.wait(0.5)
    for t in pool:
        t.join(timeout=5)
    limit = s.edge_header_timeout_s + HEADER_SLACK_S
    late = [round(x, 1) for x in out.slow_closed_after_s if x > limit]
    if late:
        out.count("slow_headers_late", f"open {late[:5]} s, over {limit} s")


def bad_json(s: Any, stop: threading.Event, out: Attacks) -> None:
    """The bodies Triton answered with a 500, in turn: each must be a 4xx."""
    k = 0
    while not stop.wait(0.2):
        path, bodies = (
            ("/v2/models/render_completion/infer", BAD_INFER)
            if k % 2
            else ("/v2/models/completion/generate", BAD_GENERATE)
        )
        body = bodies[(k // 2) % len(bodies)]
        k += 1
        code, raw = _http(s.http_port, path, body)
        ok = 400 <= code < 500
        out.count(
            "bad_json_4xx" if ok else "bad_json_wrong", None if ok else f"{path} {body[:30]!r}: {code} {raw[:120]!r}"
        )


def abandoned(s: Any, stop: threading.Event, out: Attacks, every_s: float = 20.0) -> None:
    """Every ``every_s``: ten long generations on one gRPC stream, left after a second; then one
    short request, timed."""
    import tritonclient.grpc as grpcclient

    from client import RendererClient

    def tensor(name: str, value: Any) -> Any:
        arr = np.array([[value]], dtype=object if isinstance(value, bytes) else np.int32)
        t = grpcclient.InferInput(name, [1, 1], "BYTES" if arr.dtype == object else "INT32")
        t.set_data_from_numpy(arr)
        return t

    while not stop.wait(every_s):
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{s.grpc_port}")
        client.start_stream(lambda *args, **kwargs: None)
        for _ in range(10):
            inputs = [
                tensor("prompt", b"Once upon a time"),
                tensor("max_tokens", LONG_TOKENS),
                tensor("sampling_params", json.dumps({"ignore_eos": True}).encode()),
            ]
            client.async_stream_infer("completion", inputs)
        time.sleep(1.0)
        client.stop_stream(cancel_requests=True)
        client.close()
        out.count("abandoned_generations", None)
        start = time.perf_counter()
        try:
            with RendererClient(f"127.0.0.1:{s.grpc_port}", "grpc") as c:
                list(c.generate("completion", prompt="The capital of France is", max_tokens=3))
            out.after_abandon_s.append(time.perf_counter() - start)
        except Exception as e:  # noqa: BLE001 - no answer is the failure this measures
            out.count("after_abandoned_wrong", str(e)[:160])


ATTACKERS = (oversized, slow_headers, bad_json, abandoned)


def run_beside(s: Any, traffic: Any) -> tuple[Any, Attacks]:
    """``traffic()``'s result with every attacker running until it returns."""
    out = Attacks()
    stop = threading.Event()
    threads = [threading.Thread(target=a, args=(s, stop, out), daemon=True, name=a.__name__) for a in ATTACKERS]
    for t in threads:
        t.start()
    try:
        result = traffic()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    return result, out
