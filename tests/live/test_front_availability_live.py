"""The front frees the engine when its client goes away, and says 503 while Triton is away.

- A client that disconnects from a long generation, streamed or not, cancels it: the next small
  request is served at once instead of waiting for the abandoned one to reach ``max_tokens`` (the
  stand-in engine serves one request at a time, so a request left running is seen by the next).
- While tritonserver is gone (killed here; the supervisor restarts it) the front answers 503 with
  ``Retry-After`` in OpenAI's error shape and ``/health`` is 503; once Triton is ready again the
  front serves within 2 s.
"""

from __future__ import annotations

from pathlib import Path

import http.client
import json
import os
import signal
import time

import pytest
import ports

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.live

PORT = ports.port("front_availability")
LONG = 1500  # tokens: tens of seconds of the stand-in engine on these cores
SMALL = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0}


@pytest.fixture(scope="module")
def server(model_dir):
    from dataclasses import replace

    from benchmarks.mixed_traffic import settings
    from launcher import cli as launch

    s = replace(settings(ROOT / "build" / "test-front-availability", PORT), models="completion,chat")
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver did not start; see {s.log_file}")
    yield s
    launch.stop(s)


def request(
    port: int, method: str, path: str, body: dict | None = None, timeout: float = 60
) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(
            method, path, body=None if body is None else json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def abandon(port: int, body: dict, after_s: float) -> None:
    """Send ``body`` and close the connection after ``after_s`` (streamed: after its first chunk)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
    if body.get("stream"):
        resp = conn.getresponse()
        assert resp.status == 200
        resp.read1(64)
    else:
        time.sleep(after_s)  # the response is minutes away: nothing to read yet
    conn.close()


@pytest.mark.parametrize("stream", [False, True], ids=["non-streamed", "streamed"])
def test_a_client_that_goes_away_frees_the_engine(server, stream):
    port = server.openai_port
    status, _, raw = request(port, "POST", "/v1/completions", SMALL)
    assert status == 200, raw
    # How long the long one takes alone is what a request behind it would wait, had it run on.
    abandon(
        port,
        {"prompt": "Once upon a time", "max_tokens": LONG, "temperature": 1.0, "ignore_eos": True, "stream": stream},
        1.0,
    )
    started = time.monotonic()
    status, _, raw = request(port, "POST", "/v1/completions", SMALL)
    waited = time.monotonic() - started
    assert status == 200, raw
    # A 1,500-token generation takes far longer than this here; the small one alone takes ~0.2 s.
    assert waited < 5.0, f"the next request waited {waited:.1f} s: the abandoned generation ran on"


def test_503_while_triton_is_away_then_served_within_2_s(server):
    from launcher import cli as launch

    port = server.openai_port
    assert request(port, "POST", "/v1/completions", SMALL)[0] == 200
    pid = launch.running_pid(server)
    os.kill(pid, signal.SIGKILL)
    seen_503 = False
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        new_pid = launch.running_pid(server)
        if new_pid not in (None, pid) and launch.is_ready(server):
            break
        status, headers, raw = request(port, "POST", "/v1/completions", SMALL, timeout=30)
        if status == 200 and launch.running_pid(server) not in (None, pid):
            break  # the restarted server answered before this loop saw it ready
        assert status == 503, (status, raw)
        err = json.loads(raw)["error"]
        assert err["code"] == 503 and err["message"] and headers.get("retry-after") == "1", (headers, err)
        assert request(port, "GET", "/health")[0] == 503
        seen_503 = True
        time.sleep(0.2)
    else:
        pytest.fail("tritonserver was not restarted within 180 s")
    ready_at = time.monotonic()
    assert seen_503
    while True:
        status, _, raw = request(port, "POST", "/v1/completions", SMALL, timeout=30)
        if status == 200:
            break
        assert status == 503, (status, raw)
        assert time.monotonic() - ready_at < 2.0, "the front still refused 2 s after Triton was ready"
        time.sleep(0.05)
    served_after = time.monotonic() - ready_at
    print(f"front served {served_after:.2f} s after Triton was ready again")
    assert served_after < 2.0
    assert request(port, "GET", "/health")[0] == 200
