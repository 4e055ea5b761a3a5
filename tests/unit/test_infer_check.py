"""The front's reading of an /infer body Triton 2.51 answered with a 500 (openai_front/infer_check.py):
each client error is a 400 naming the member at fault and what was sent; a well-formed body stays a
500, said as the server's fault. The bodies are the ones Triton's JSON reader fails on with a 500
(each checked live through the edge: tests/live/test_infer_json_live.py)."""

from __future__ import annotations

import pytest

from openai_front.infer_check import InferServerFaultError, diagnose
from tests.support.infer_bodies import REFUSED, body, tensor


@pytest.mark.parametrize(("body", "words"), REFUSED, ids=range(len(REFUSED)))
def test_a_client_error_is_a_400_naming_it(body, words):
    e = diagnose(body, None)
    assert e.status == 400, e.message
    assert words in e.message


@pytest.mark.parametrize(
    "body",
    [
        body(tensor(["hi"])),
        body(tensor(["hi"]), tensor([[1, 2]], "INT64", shape=(1, 2), name="n"), id="x", parameters={"a": 1.5}),
        body({"name": "p", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}),
        body(tensor(["hi"]), outputs=[{"name": "x", "parameters": {"binary_data": True}}]),
    ],
)
def test_a_well_formed_body_stays_the_servers_fault(body):
    e = diagnose(body, None)
    assert isinstance(e, InferServerFaultError) and e.status == 500


def test_the_binary_extension_is_read_up_to_its_json_header():
    header = b'{"inputs": [{"name": "p", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]}'
    binary = b"\x02\x00\x00\x00hi"
    assert diagnose(header + binary, str(len(header))).status == 500  # well-formed: Triton's own fault
    assert "not valid JSON" in diagnose(header[:-1] + b"]" + binary, str(len(header))).message
    for bad in ("x", "-1", str(len(header + binary) + 1)):
        e = diagnose(header + binary, bad)
        assert e.status == 400 and "Inference-Header-Content-Length" in e.message
