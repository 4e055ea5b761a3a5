"""The OpenAI front fuzzed like the ensembles.

Four client threads send, seeded and interleaved, valid chat and completion requests (each answer
checked against the same request answered alone) and invalid ones to every endpoint the front
serves: bytes that are not JSON, bodies that are not objects, fields of the wrong type, NaN and
infinities, lone surrogates, nesting past the parser's stack, a body over the limit, streams
dropped after their first chunk. Meanwhile an idle connection and one sending its headers a byte
at a time stay open. Every answer must be a 2xx, or a 4xx in OpenAI's error shape; never a 5xx.
tritonserver and every stub are the same processes at the end.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.live

REQUESTS = int(os.environ.get("FRONT_FUZZ_REQUESTS", 600))
ENDPOINTS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/chat/completions/render",
    "/v1/completions/render",
    "/tokenize",
    "/detokenize",
)
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
VALID = {
    "/v1/chat/completions": {"messages": CHAT, "max_tokens": 3, "temperature": 0},
    "/v1/completions": {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0},
}
WRONG_VALUES = (5, -1, 1.5, "x", "", None, True, [], {}, [1, "a"], {"a": {"b": []}}, 10**30, "\u0000")


def wrong_field_body(rng: random.Random, endpoint: str) -> bytes:
    base = dict(VALID.get(endpoint, {"prompt": "hi", "messages": CHAT, "tokens": [1, 2]}))
    field = rng.choice(
        [
            "messages",
            "prompt",
            "max_tokens",
            "temperature",
            "top_p",
            "top_k",
            "seed",
            "stop",
            "stream",
            "n",
            "tools",
            "chat_template_kwargs",
            "add_generation_prompt",
            "stream_options",
            "tokens",
            "model",
            "truncate_prompt_tokens",
            "min_tokens",
            "repetition_penalty",
        ]
    )
    # None for max_tokens is vLLM's "the rest of the context": a long generation, not a wrong type.
    base[field] = rng.choice([v for v in WRONG_VALUES if v is not None or field != "max_tokens"])
    if rng.random() < 0.3:
        base["messages"] = [{"role": rng.choice(["user", "bogus", 3]), "content": rng.choice(WRONG_VALUES)}]
    return json.dumps(base).encode()


def invalid_body(rng: random.Random, endpoint: str, limit: int) -> bytes:
    kind = rng.randrange(9)
    if kind == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if kind == 1:
        return json.dumps(VALID["/v1/completions"]).encode()[: rng.randrange(1, 40)]
    if kind == 2:
        return rng.choice([b"[]", b'"x"', b"1", b"null", b"[{}]", b"true"])
    if kind == 3:
        return rng.choice([b'{"prompt": "a", "temperature": NaN}', b'{"prompt": "a", "top_p": Infinity}'])
    if kind == 4:
        return b'{"prompt": "a\\ud800b", "messages": [{"role": "user", "content": "\\udfff"}], "max_tokens": 2}'
    if kind == 5:
        n = rng.choice([1500, 5000, 100_000])
        return b'{"messages": ' + b"[" * n + b"]" * n + b', "prompt": "a", "max_tokens": 2}'
    if kind == 6:
        return b'{"prompt": "' + b"x" * (limit + 10) + b'"}'
    return wrong_field_body(rng, endpoint)


def post(port: int, path: str, body: bytes, drop_after_first: bool = False) -> tuple[int, bytes]:
    """(status, body); a connection the server broke is status 0, its error the body."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if drop_after_first and resp.status == 200:
            resp.read1(64)  # the first bytes of the stream, then the connection goes
            return resp.status, b""
        return resp.status, resp.read()
    except OSError as e:
        return 0, repr(e).encode()
    finally:
        conn.close()


def openai_error_shape(raw: bytes) -> bool:
    try:
        err = json.loads(raw)["error"]
    except (ValueError, KeyError, TypeError):
        return False
    return isinstance(err.get("message"), str) and bool(err["message"]) and isinstance(err.get("code"), int)


def hold_idle(port: int, stop: threading.Event) -> None:
    with socket.create_connection(("127.0.0.1", port)):
        stop.wait()


def hold_slow_headers(port: int, stop: threading.Event) -> None:
    """A slowloris: a request line and headers sent a byte a second, never finished."""
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 1000
    with socket.create_connection(("127.0.0.1", port)) as s:
        for b in head:
            if stop.wait(1.0):
                return
            try:
                s.send(bytes([b]))
            except OSError:
                return  # the server may close a connection this slow; that is fine too


def test_front_answers_client_input_with_4xx_only(server):
    from launcher import cli as launch
    from launcher.watchdog import stubs_of

    port = server.openai_port
    pid = launch.running_pid(server)
    stubs_before = set(stubs_of(pid))
    expected = {path: post(port, path, json.dumps(body).encode()) for path, body in VALID.items()}
    assert all(status == 200 for status, _ in expected.values()), expected
    texts = {path: _text(raw) for path, (_, raw) in expected.items()}

    stop = threading.Event()
    holders = [
        threading.Thread(target=hold_idle, args=(port, stop), daemon=True),
        threading.Thread(target=hold_slow_headers, args=(port, stop), daemon=True),
    ]
    for h in holders:
        h.start()
    problems: list[str] = []
    counts = {"ok": 0, "refused": 0, "dropped": 0}
    lock = threading.Lock()
    left = [REQUESTS]

    def worker(index: int) -> None:
        rng = random.Random(2300 + index)
        k = 0
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            k += 1
            if k % 3 == 0:  # one valid request in three
                path = rng.choice(list(VALID))
                body = dict(VALID[path])
                drop = rng.random() < 0.2
                if drop:
                    body["stream"] = True
                status, raw = post(port, path, json.dumps(body).encode(), drop_after_first=drop)
                if status != 200:
                    outcome = f"valid {path} answered {status}: {raw[:200]!r}"
                elif drop:
                    outcome = "dropped"
                else:
                    outcome = "ok" if _text(raw) == texts[path] else f"valid {path} answered {raw[:200]!r}"
            else:
                path = rng.choice(ENDPOINTS)
                body_bytes = invalid_body(rng, path, server.max_input_bytes)
                status, raw = post(port, path, body_bytes)
                if status >= 500 or status == 0:
                    outcome = f"{path} answered {status} to {body_bytes[:120]!r}: {raw[:300]!r}"
                elif status >= 400 and not openai_error_shape(raw):
                    outcome = f"{path} answered {status} without OpenAI's error shape: {raw[:200]!r}"
                else:
                    outcome = "refused" if status >= 400 else "ok"
            with lock:
                if outcome in counts:
                    counts[outcome] += 1
                else:
                    problems.append(outcome)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # With the slow connection still open, a normal request is served.
    assert post(port, "/v1/completions", json.dumps(VALID["/v1/completions"]).encode())[0] == 200
    stop.set()
    elapsed = time.monotonic() - started
    print(f"front fuzz: {counts} in {elapsed:.0f} s, {len(problems)} problems")
    report = Path(server.build_dir).parent / "reports" / "front_fuzz.json"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(json.dumps({"counts": counts, "seconds": round(elapsed), "problems": problems}, indent=2))
    assert problems == [], problems[:20]
    assert counts["refused"] > REQUESTS // 3 and counts["ok"] > REQUESTS // 10, counts
    assert launch.running_pid(server) == pid, "tritonserver restarted"
    assert set(stubs_of(pid)) == stubs_before, "a stub died or was replaced"


def _text(raw: bytes) -> str:
    choice = json.loads(raw)["choices"][0]
    return choice["message"]["content"] if "message" in choice else choice["text"]
