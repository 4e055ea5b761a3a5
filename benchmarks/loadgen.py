"""A small closed-loop HTTP/1.1 load generator (asyncio, keep-alive), with a check on every response.

perf_analyzer can post our JSON to vLLM's render endpoints (its ``openai`` service kind), but it
never looks at what comes back. This generator does: each response's token ids are compared with
the ids our server returned for the same input, so "same speed" also means "same answer". It is
used for both targets alike, vLLM's ``/v1/*/render`` endpoints and Triton's ``generate`` endpoint
on our ensembles, so its rows compare like with like.

Its own cost is measured and reported: the CPU time this process spent per request (it shares the
machine's cores with the server under test), ``client_cpu_us_per_request`` in its output.

    python -m benchmarks.loadgen --target peer|triton --url 127.0.0.1:PORT --input chat_mix \
        --expected build/bench/expected_ids.json --concurrency 4 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from benchmarks.make_inputs import load

Request = tuple[str, bytes]  # (path, JSON body)


def peer_request(req: dict[str, Any], model: str | None = None) -> Request:
    """vLLM's render endpoints: the OpenAI request body (chat_params fields sit at the top level)."""
    if "prompt" in req:
        body: dict[str, Any] = {"prompt": req["prompt"]}
        path = "/v1/completions/render"
    else:
        body = {"messages": req["messages"], **(req.get("chat_params") or {})}
        if "tools" in body:
            # "auto" (the default) needs --enable-auto-tool-choice and a parser; "none" keeps the
            # tools in the template (vLLM drops them only with --exclude-tools-when-tool-choice-none).
            body["tool_choice"] = "none"
        path = "/v1/chat/completions/render"
    if model:
        body["model"] = model
    return path, json.dumps(body, ensure_ascii=False).encode()


def triton_request(req: dict[str, Any]) -> Request:
    """Triton's generate endpoint on our render ensembles (BYTES inputs as JSON strings)."""
    if "prompt" in req:
        return "/v2/models/render_completion/generate", json.dumps({"prompt": req["prompt"]}).encode()
    body = {
        "messages": json.dumps(req["messages"], ensure_ascii=False),
        "chat_params": json.dumps(req.get("chat_params") or {}, ensure_ascii=False),
    }
    return "/v2/models/render_chat/generate", json.dumps(body, ensure_ascii=False).encode()


def floor_expected(n: int) -> list[list[int]]:
    """What each of ``n`` requests to the Triton floor answers: its stand-in's placeholder ids."""
    from benchmarks.floor import PLACEHOLDER_IDS

    return [list(PLACEHOLDER_IDS)] * n


def peer_ids(doc: Any) -> list[int]:
    return list((doc[0] if isinstance(doc, list) else doc)["token_ids"])


def triton_ids(doc: Any) -> list[int]:
    ids = doc["input_ids"]
    return ids if isinstance(ids, list) else [ids]


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split()[1])
    length, chunked = None, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        k = k.strip().lower()
        if k == "content-length":
            length = int(v.strip())
        elif k == "transfer-encoding" and "chunked" in v.lower():
            chunked = True
    if chunked:
        parts = []
        while True:
            size = int((await reader.readline()).strip().split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                break
            parts.append(await reader.readexactly(size))
            await reader.readline()
        return status, b"".join(parts)
    return status, await reader.readexactly(length or 0)


@dataclass(frozen=True)
class _Load:
    """What every connection of one run shares: where to send, what, how to check it, and the timing window."""

    host: str
    port: int
    requests: list[Request]
    expected: list[list[int]] | None
    extract: Callable[[Any], list[int]]
    max_requests: int | None
    numbers: list[int] | None
    t_measure: float
    t_end: float


@dataclass
class _Tally:
    """The run's counts as the connections add to them (one event loop: no two add at once)."""

    counter: int = 0
    checked: int = 0
    mismatched: int = 0
    errors: int = 0
    measured: int = 0
    first_errors: list[str] = field(default_factory=list)
    failed: set[int] = field(default_factory=set)  # requests answered with an error or with other ids, each once
    latencies: list[float] = field(default_factory=list)

    def error(self, n: int, text: str) -> None:
        """Request ``n`` failed: counted once in ``failed``, its text kept among the first three."""
        self.failed.add(n)
        if len(self.first_errors) < 3:
            self.first_errors.append(text)


async def run_load(
    host: str,
    port: int,
    requests: list[Request],
    expected: list[list[int]] | None,
    extract: Callable[[Any], list[int]],
    concurrency: int,
    seconds: float,
    max_requests: int | None = None,
    warmup_s: float = 0.5,
    numbers: list[int] | None = None,
) -> dict[str, Any]:
    """Closed loop: ``concurrency`` connections each send the next request when the last one returns.

    Every response is checked (status 200, ids equal to ``expected`` when given), warm-up included;
    throughput and latency count only what completed after the warm-up. ``numbers``: each request's
    number in its input file, as errors name it (default: its place in ``requests``).
    """
    t_start = time.perf_counter()
    load = _Load(
        host, port, requests, expected, extract, max_requests, numbers, t_start + warmup_s, t_start + warmup_s + seconds
    )
    tally = _Tally()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(_connection(load, tally) for _ in range(concurrency)))
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    elapsed = min(time.perf_counter(), load.t_end) - load.t_measure
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return _load_result(concurrency, tally, elapsed, cpu_s)


async def _connection(load: _Load, tally: _Tally) -> None:
    """One keep-alive connection sending the next request whenever the last one returns, until the window ends."""
    reader, writer = await asyncio.open_connection(load.host, load.port)
    try:
        while True:
            now = time.perf_counter()
            if now >= load.t_end or (load.max_requests is not None and tally.counter >= load.max_requests):
                return
            i = tally.counter % len(load.requests)
            n = load.numbers[i] if load.numbers else i
            tally.counter += 1
            path, body = load.requests[i]
            head = (
                f"POST {path} HTTP/1.1\r\nHost: {load.host}:{load.port}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            t0 = time.perf_counter()
            writer.write(head + body)
            await writer.drain()
            status, payload = await _read_response(reader)
            t1 = time.perf_counter()
            if t0 >= load.t_measure and t1 <= load.t_end:
                tally.latencies.append(t1 - t0)
                tally.measured += 1
            _check(load, tally, i, n, status, payload)
    finally:
        writer.close()


def _check(load: _Load, tally: _Tally, i: int, n: int, status: int, payload: bytes) -> None:
    """Count request ``i`` (number ``n`` in its file): an error status, or ids other than ``expected``'s."""
    if status != 200:
        tally.errors += 1
        tally.error(n, f"request {n}: HTTP {status}: {payload[:300]!r}")
        return
    if load.expected is not None:
        tally.checked += 1
        if load.extract(json.loads(payload)) != load.expected[i]:
            tally.mismatched += 1
            tally.error(n, f"request {n}: ids differ from ours")


def _load_result(concurrency: int, tally: _Tally, elapsed: float, cpu_s: float) -> dict[str, Any]:
    """The run's row: throughput and latency percentiles of the measured window, the checks, the client's CPU."""
    latencies = sorted(tally.latencies)

    def pct(p: float) -> float | None:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else None

    counter = tally.counter
    return {
        "concurrency": concurrency,
        "requests_per_s": tally.measured / elapsed if elapsed > 0 else None,
        "measured_requests": tally.measured,
        "sent": counter,
        "p50_ms": pct(0.50),
        "p90_ms": pct(0.90),
        "p99_ms": pct(0.99),
        "checked": tally.checked,
        "mismatched": tally.mismatched,
        "errors": tally.errors,
        "first_errors": tally.first_errors,
        "failed_requests": sorted(tally.failed),
        "client_cpu_us_per_request": cpu_s / counter * 1e6 if counter else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", choices=["peer", "triton"], required=True)
    ap.add_argument("--url", required=True, help="host:port")
    ap.add_argument("--input", required=True, help="an input name (benchmarks/inputs/NAME.json)")
    ap.add_argument("--expected", help="JSON {input name: [ids per request]} to check every response against")
    ap.add_argument(
        "--floor",
        action="store_true",
        help="the target is the Triton floor: check every response against its stand-in's placeholder ids, "
        "so the client parses and compares as much as for ours",
    )
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--max-requests", type=int)
    ap.add_argument("--warmup-s", type=float, default=0.5)
    ap.add_argument("--model", help="the model name the peer serves (optional)")
    ap.add_argument(
        "--skip",
        default="",
        help="comma-separated request indices to leave out (those a peer refuses or answers otherwise: "
        "a wrong answer is not timed); the output's indices stay those of the whole input",
    )
    a = ap.parse_args(argv)
    skip = {int(i) for i in a.skip.split(",") if i}
    reqs = load(a.input)
    kept = [i for i in range(len(reqs)) if i not in skip]
    reqs = [reqs[i] for i in kept]
    if a.target == "peer":
        requests, extract = [peer_request(r, a.model) for r in reqs], peer_ids
    else:
        requests, extract = [triton_request(r) for r in reqs], triton_ids
    expected = json.loads(Path(a.expected).read_text())[a.input] if a.expected else None
    expected = [expected[i] for i in kept] if expected is not None else None
    if a.floor:
        expected = floor_expected(len(requests))
    host, _, port = a.url.rpartition(":")
    out = asyncio.run(
        run_load(
            host or "127.0.0.1",
            int(port),
            requests,
            expected,
            extract,
            a.concurrency,
            a.seconds,
            a.max_requests,
            a.warmup_s,
            kept,
        )
    )
    out.update(target=a.target, input=a.input)
    if skip:
        out["skipped_requests"] = sorted(skip)
    json.dump(out, sys.stdout)
    print()
    return 0 if out["errors"] == 0 and out["mismatched"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
