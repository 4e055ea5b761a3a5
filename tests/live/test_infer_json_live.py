"""Bad JSON on Triton's HTTP ``/infer`` is the client's 400, through the edge: Triton 2.51 answers a
500 to every body its JSON reader fails on (checked here on its own loopback port), and the edge
has the front name the fault instead (openai_front/infer_check.py). Sent as production sends them:
concurrently, interleaved with valid requests, plain JSON and the binary tensor extension; every
valid request still answered, tritonserver still the same process."""

from __future__ import annotations

import http.client
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.support.infer_bodies import REFUSED

pytestmark = pytest.mark.live

MODEL = "render_completion"
INFER = f"/v2/models/{MODEL}/infer"
VALID = json.dumps(
    {"inputs": [{"name": "prompt", "shape": [1, 1], "datatype": "BYTES", "data": ["The capital of France is"]}]}
).encode()
# The binary tensor extension: a JSON header (here cut short) and the tensor's bytes after it.
BINARY_HEADER = (
    b'{"inputs": [{"name": "prompt", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}'
)
BINARY = (BINARY_HEADER + b"\x02\x00\x00\x00hi", {"Inference-Header-Content-Length": str(len(BINARY_HEADER))})


def post(port: int, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        c.request("POST", INFER, body, {"Content-Type": "application/json", **(headers or {})})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


@pytest.fixture(scope="module")
def triton_port(server) -> int:
    from launcher.settings import Settings

    return Settings.from_json(server.settings_file.read_text()).inner.http


def test_triton_itself_answers_each_with_a_500(triton_port):
    for body, _ in REFUSED:
        assert post(triton_port, body)[0] == 500, body[:80]
    assert post(triton_port, BINARY[0], BINARY[1])[0] == 500


def test_the_edge_answers_each_with_a_400_naming_it(server):
    from launcher import cli as launch

    pid = launch.running_pid(server)
    cases = [(body, {}, words) for body, words in REFUSED] + [(BINARY[0], BINARY[1], "not valid JSON")]
    jobs = []
    for body, headers, words in cases * 2:
        jobs += [(body, headers, words), (VALID, {}, None)]

    def send(job: tuple[bytes, dict[str, str], str | None]) -> tuple[str | None, int, bytes]:
        body, headers, words = job
        return (words, *post(server.http_port, body, headers))

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(send, jobs))
    for words, status, raw in answers:
        if words is None:
            assert status == 200, raw[:200]
            continue
        assert status == 400, (words, status, raw[:200])
        assert words in json.loads(raw)["error"], raw[:200]
    assert launch.running_pid(server) == pid
