"""Triton's generate extension as the front serves it (``openai_front/generate.py``), live, against
Triton 2.51's own endpoint on its loopback HTTP port as the oracle:

- valid requests (every generation ensemble, the render ensembles, composing models; streamed and
  not; ids, parameters, a model's refusal) get Triton's answer byte for byte: status, content type,
  body or server-sent events;
- the requests Triton answers 500 (or 200 with an error body) are 4xx in Triton's error shape,
  naming what was sent;
- tritonserver is still the same process (abandoned requests on these endpoints:
  tests/live/test_abandoned_live.py).

Each runs against the front's own port and, once the edge routes generate to the front, against the
edge (``server.http_port``); until then the edge's case is skipped, saying so.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest

pytestmark = pytest.mark.live

GREEDY = json.dumps({"temperature": 0})
MESSAGES = json.dumps([{"role": "user", "content": "What is the capital of France?"}])
SHORT = {"prompt": "The capital of France is", "max_tokens": 3, "sampling_params": GREEDY}


@dataclass(frozen=True)
class Ports:
    """The three HTTP endpoints a generate request can reach."""

    triton: int
    """tritonserver's own HTTP port (loopback): the oracle."""

    front: int
    """The front's own port (loopback)."""

    edge: int
    """The port clients reach (the edge, when the launcher runs it)."""


def call(port: int, path: str, body: Any = None, *, raw: bytes | None = None, method: str = "POST") -> tuple:
    """(status, content type, body bytes) of one request."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        c.request(method, path, data, {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        c.close()


@pytest.fixture(scope="module")
def server_pid(server) -> int:
    """tritonserver's pid when this module starts."""
    return int(server.pid_file.read_text().strip())


@pytest.fixture(scope="module")
def ports(server, server_pid) -> Ports:
    from launcher.settings import Settings

    inner = Settings.from_json(server.settings_file.read_text()).inner
    found = Ports(triton=inner.http, front=inner.front, edge=server.http_port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if call(found.front, "/health", method="GET")[0] == 200:
                return found
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the front on port {found.front} did not answer /health; see {server.build / 'openai_front.log'}")


def edge_routes_generate(port: int) -> bool:
    """Whether the edge sends generate to the front: Triton itself answers this 500, the front 400."""
    status, _, _ = call(port, "/v2/models/completion/generate", raw=b'{"max_tokens": 1e400}')
    return status == 400


@pytest.fixture(params=["front", "edge"])
def target(request, ports) -> int:
    if request.param == "edge" and not edge_routes_generate(ports.edge):
        pytest.skip("the edge does not route generate to the front yet (launcher/edge.py)")
    return ports.front if request.param == "front" else ports.edge


def embeds(model_dir) -> str:
    """Two rows of the model's own embedding table, as ``prompt_embeds`` takes them: FP32 outputs."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        name = next(k for k in f.keys() if k.endswith("embed_tokens.weight"))
        rows = f.get_slice(name)[19556:19558].to(torch.float32)
    return base64.b64encode(save({"embeds": rows * 1.37})).decode()


VALID = [
    ("completion", False, {"prompt": "The capital of France is", "max_tokens": 8, "sampling_params": GREEDY}),
    ("completion", True, {"prompt": "Once upon a time", "max_tokens": 6, "stream": True, "sampling_params": GREEDY}),
    ("completion", True, {"prompt": "Hello", "max_tokens": 4, "sampling_params": GREEDY}),  # one response, as an event
    (
        "completion",
        False,
        {
            "prompt_token_ids": [19556, 905],
            "max_tokens": 4,
            "sampling_params": json.dumps({"temperature": 0, "stop": ["\n"]}),
            "id": "req-1",
        },
    ),
    (
        "completion",
        False,
        {"parameters": {"prompt": "Paris is", "max_tokens": 5, "sampling_params": GREEDY}, "label": "x", "n": 3},
    ),
    ("chat", False, {"messages": MESSAGES, "max_tokens": 8, "sampling_params": GREEDY}),
    ("chat", True, {"messages": MESSAGES, "max_tokens": 8, "stream": True, "sampling_params": GREEDY, "id": "c"}),
    ("ensemble", False, {"text_input": "The capital of France is", "max_tokens": 5, "temperature": 0.0}),
    (
        "ensemble",
        True,
        {
            "text_input": "Tell me a story",
            "max_tokens": 5,
            "stream": True,
            "id": "42",
            "parameters": {"temperature": 0.0, "top_k": 1, "foo": "bar"},
        },
    ),
    ("render_completion", False, {"prompt": "Hello world", "tokenize_params": '{"return_token_offsets": true}'}),
    ("render_completion", True, {"prompt": "Hello"}),
    ("render_completion", False, {"prompt_token_ids": [[19556], [905]], "id": 'x\u0001y"z'}),
    ("render_completion", False, {"prompt": [["Hi"]], "priority": 1, "timeout": "x", "triton_x": 2, "big": 2**64}),
    ("render_chat", False, {"messages": MESSAGES, "chat_params": '{"add_generation_prompt": true}'}),
    ("tokenize", False, {"prompt": "Hello"}),
    ("llm", False, {"input_ids": [19556, 905], "input_lengths": 2, "request_output_len": 3, "temperature": 0.0}),
    (
        "detokenize",
        True,
        {"input_ids": [19556, 905], "input_lengths": 2, "request_output_len": 3, "streaming": True, "temperature": 0},
    ),
    # Answers Triton already gets right: the model's refusals and Triton's own checks.
    ("render_completion", False, {"prompt": "Hello", "tokenize_params": "{bad"}),
    ("render_completion", True, {"prompt": "Hello", "tokenize_params": "{bad"}),
    ("completion", True, {"prompt": "Hi", "max_tokens": 3, "stream": True, "sampling_params": "{bad"}),
    ("render_completion", False, {"prompt": ["Hi", "Ho"]}),
    ("chat", False, {"max_tokens": 3}),
    ("ensemble", False, {"max_tokens": 3}),
    ("nope", False, {"prompt": "x"}),
]


@pytest.mark.parametrize(
    ("model", "stream", "body"),
    VALID,
    ids=[f"{m}-{'stream' if s else 'once'}-{i}" for i, (m, s, _) in enumerate(VALID)],
)
def test_answers_equal_tritons_own(ports, target, model, stream, body):
    path = f"/v2/models/{model}/generate" + ("_stream" if stream else "")
    want = call(ports.triton, path, body)
    got = call(target, path, body)
    assert got == want


@pytest.mark.parametrize(
    "path", ["/v2/models/completion/versions/1/generate", "/v2/models/completion/versions/3/generate_stream"]
)
def test_the_version_routes_equal_tritons_own(ports, target, path):
    body = SHORT | {"stream": path.endswith("_stream")}
    assert call(target, path, body) == call(ports.triton, path, body)


def test_float_outputs_equal_tritons_own(ports, target, model_dir):
    body = {"prompt_embeds": embeds(model_dir)}
    want = call(ports.triton, "/v2/models/render_completion/generate", body)
    assert want[0] == 200 and b'"input_embeds":[' in want[2]
    assert call(target, "/v2/models/render_completion/generate", body) == want


G = "/v2/models/completion/generate"
BAD = [
    # (path, raw body, what the message must name)
    (G, b'{"prompt": "x", "max_tokens": 1e400}', ["1e400"]),
    (G, b'{"prompt": "x", "max_tokens": 3', ["not valid JSON", "delimiter"]),
    (G, b'{"prompt": "x", "max_tokens": NaN}', ["NaN"]),
    (G, b'{"prompt": "x", "max_tokens": Infinity}', ["Infinity"]),
    (G, b'{"prompt": "x", "max_tokens": 1.5}', ["'max_tokens'", "INT32", "1.5"]),
    (G, b'{"prompt": "x", "max_tokens": 4294967297}', ["'max_tokens'", "4294967297"]),
    (G, b'{"prompt": "x", "max_tokens": true}', ["'max_tokens'", "boolean"]),
    (G, b"", ["empty"]),
    (G, b"[]", ["array"]),
    (G, b'"x"', ["string"]),
    (G, b'{"prompt": null, "max_tokens": 3}', ["'prompt'", "BYTES", "null"]),
    (G, b'{"prompt": {"text": "x"}, "max_tokens": 3}', ["'prompt'", "object"]),
    (G, b'{"prompt": "x", "max_tokens": [[1, 2]]}', ["'max_tokens'", "nested"]),
    (G, b'{"prompt": "x", "max_tokens": 3, "stream": 1}', ["'stream'", "BOOL", "integer 1"]),
    (G, b'{"prompt": "x", "max_tokens": 3, "id": 5}', ["'id'", "integer 5"]),
    (G, b'{"prompt": "x", "max_tokens": 3, "parameters": 5}', ["'parameters'", "integer 5"]),
    (G, b'{"prompt": "x", "max_tokens": 3, "temperature": null}', ["'temperature'", "null"]),
    (G, b'{"prompt": "\\ud800", "max_tokens": 3}', ["surrogate", "\\ud800"]),
    (G, b'{"prompt": "\xff", "max_tokens": 3}', ["UTF-8"]),
    (G, b'{"prompt": "x", "max_tokens": 3, "prompt": "y"}', ["'prompt'", "already exists"]),
    (G, b'{"prompt": "x"}', ["'max_tokens'", "'completion'"]),
    (G, b'{"prompt": "x", "max_tokens": 3, "stream": true}', ["generate_stream"]),
    (G + "_stream", b'{"prompt": "x", "stream": true}', ["'max_tokens'", "'completion'"]),
    ("/v2/models/chat/generate_stream", b'{"max_tokens": 3}', ["'messages'", "'chat'"]),
    ("/v2/models/ensemble/generate_stream", b'{"max_tokens": 3}', ["'text_input'", "'ensemble'"]),
    ("/v2/models/nope/generate", b"{}", ["'nope'"]),
    ("/v2/models/completion/versions/9/generate", b"{}", ["'completion'", "version 9"]),
]


@pytest.mark.parametrize(("path", "raw", "names"), BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_bad_requests_are_a_4xx_naming_what_was_sent(target, path, raw, names):
    status, content_type, data = call(target, path, raw=raw)
    assert 400 <= status < 500, (status, data)
    if content_type == "text/event-stream; charset=utf-8":
        # the model refused the request: generate_stream's first event, as Triton writes it
        assert path.endswith("_stream") and data.startswith(b"data: ") and data.endswith(b"\n\n"), data
        data = data.removeprefix(b"data: ")
    else:
        assert content_type == "application/json"
    error = json.loads(data)
    assert set(error) == {"error"}
    for name in names:
        assert name in error["error"], error


def test_a_wrong_method_is_a_405_in_tritons_shape(target):
    assert call(target, G, method="GET") == (405, "application/json", b'{"error":"Method Not Allowed"}')


# --- cancellation -----------------------------------------------------------------------------------


def test_tritonserver_is_still_the_same_process(server, server_pid, ports):
    assert int(server.pid_file.read_text().strip()) == server_pid
    assert call(ports.front, "/health", method="GET")[0] == 200
