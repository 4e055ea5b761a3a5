"""``tool_choice`` against a live server with vLLM's default settings (no ``ENABLE_AUTO_TOOL_CHOICE``,
no ``TOOL_CALL_PARSER``): ``render_chat``, the ``chat`` ensemble and the OpenAI front refuse what
vLLM refuses, in its words, while valid requests sent beside them from several threads are
answered, and tritonserver stays the same process. The rules themselves are unit-tested in
tests/unit/test_tool_choice.py.
"""

from __future__ import annotations

import http.client
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from client import RendererClient, RequestError

pytestmark = pytest.mark.live

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
AUTO = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
# chat_params -> vLLM's answer (None: rendered).
CASES = [
    ({"tools": TOOLS}, AUTO),
    ({"tools": TOOLS, "tool_choice": "auto"}, AUTO),
    ({"tools": TOOLS, "tool_choice": "required"}, 'tool_choice="required" requires --tool-call-parser to be set'),
    (
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        'tool_choice=function "get_weather" requires --tool-call-parser to be set',
    ),
    ({"tool_choice": "auto"}, "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)"),
    ({"tools": TOOLS, "tool_choice": "none"}, None),
]
ENSEMBLE_PREFIX = re.compile(r"^in ensemble '[^']+', ")


def _send(server, protocol: str, model: str, bag: dict) -> str | None:
    """None when answered, else the error's message (a client error)."""
    port = server.http_port if protocol == "http" else server.grpc_port
    with RendererClient(f"{server.host}:{port}", protocol) as c:
        try:
            if model == "render_chat":
                c.render_chat(MESSAGES, chat_params=bag)
            else:
                list(c.generate("chat", max_tokens=2, messages=MESSAGES, chat_params=bag))
        except RequestError as e:
            assert e.is_client_error, e
            return ENSEMBLE_PREFIX.sub("", e.message)
    return None


def test_refused_as_vllm_beside_valid_requests(server):
    from launcher import cli as launch

    pid = launch.running_pid(server)
    work = [(p, m, case) for p in ("http", "grpc") for m in ("render_chat", "chat") for case in CASES] * 2

    def bad_then_good(item):
        protocol, model, (bag, message) = item
        got = _send(server, protocol, model, bag)
        assert _send(server, protocol, model, {}) is None  # a valid request beside it is answered
        return got, message

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(bad_then_good, work))
    assert [got for got, _ in results] == [want for _, want in results]
    assert launch.running_pid(server) == pid, "tritonserver restarted"


@pytest.fixture(scope="module")
def front(server):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if _front(server, None, "GET", "/health")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the front did not answer /health; see {server.build / 'openai_front.log'}")


def _front(server, body: dict | None, method: str = "POST", path: str = "/v1/chat/completions") -> tuple[int, object]:
    c = http.client.HTTPConnection(server.host, server.openai_port, timeout=120)
    data = None if body is None else json.dumps(body).encode()
    c.request(method, path, data, {"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read()
    # A streamed answer is server-sent events; an error is JSON.
    payload = json.loads(raw) if "json" in (r.getheader("Content-Type") or "") else raw.decode()
    c.close()
    return r.status, payload


FRONT_CASES = CASES + [({"tools": TOOLS, "tool_choice": None}, None)]


def test_front_answers_tool_choice_as_vllm_beside_valid_requests(front):
    """vLLM's answer through the OpenAI front, which forwards ``tool_choice`` (an explicit null too:
    accepted, where an absent one defaults to "auto"): the refusals as 400s in vLLM's words, with
    ``param`` as vLLM's front gives it (null for the online renderer's, whose text names none),
    streamed and not, sent from several threads beside valid requests; same tritonserver after."""
    from launcher import cli as launch

    pid = launch.running_pid(front)
    work = [(extra, message, stream) for extra, message in FRONT_CASES for stream in (False, True)] * 2

    def bad_then_good(item):
        extra, message, stream = item
        base = {"messages": MESSAGES, "max_tokens": 2, "stream": stream}
        status, err = _front(front, {**base, **extra})
        if message is None:
            assert status == 200, err
        else:
            assert status == 400, err
            assert err["error"]["message"] == message
            assert err["error"]["param"] == ("tool_choice" if "(parameter=tool_choice)" in message else None)
        assert _front(front, base)[0] == 200
        return status

    with ThreadPoolExecutor(4) as pool:
        statuses = list(pool.map(bad_then_good, work))
    assert statuses.count(400) == 4 * sum(m is not None for _, m in FRONT_CASES)
    assert launch.running_pid(front) == pid, "tritonserver restarted"
