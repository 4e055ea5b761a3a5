"""The load generator checks every response it times, the floor's too (``benchmarks/loadgen.py``).

A local asyncio HTTP server (no tritonserver: this is the client's own logic) answers each request
with the ids the test chose; the generator must count each response as checked and tell equal ids
from different ones, with the floor's placeholder ids as the expectation under ``--floor``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from benchmarks import loadgen
from benchmarks.floor import PLACEHOLDER_IDS


async def _serve(ids: list[int]) -> tuple[asyncio.AbstractServer, int]:
    body = json.dumps({"input_ids": ids}).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return  # the client closed its connection
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
            )
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _run(answer: list[int], expected: list[list[int]]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        server, port = await _serve(answer)
        async with server:
            reqs = [("/v2/models/render_chat/generate", b"{}")] * len(expected)
            return await loadgen.run_load(
                "127.0.0.1", port, reqs, expected, loadgen.triton_ids, 2, 0.2, max_requests=20, warmup_s=0
            )

    return asyncio.run(go())


def test_floor_responses_are_parsed_and_checked_like_ours() -> None:
    out = _run(list(PLACEHOLDER_IDS), loadgen.floor_expected(3))
    assert out["checked"] == out["sent"] > 0 and out["mismatched"] == 0


def test_a_floor_answer_other_than_its_placeholders_is_a_mismatch() -> None:
    out = _run([1, 2, 3], loadgen.floor_expected(3))
    assert out["checked"] == out["mismatched"] > 0
    assert "ids differ" in out["first_errors"][0]
