"""What a user meets in the first hour, against the session's server: the
``openai`` package's ``models.retrieve``, the front's ``/version`` and ``/metrics``, and the two
answers of Triton's own HTTP API that README.md documents as Triton 2.51's (a 1-element output
of ``/generate`` is a scalar; the infer API repeats an ensemble's ``sequence_*`` parameters)."""

from __future__ import annotations

import http.client
import json
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

import client

pytestmark = pytest.mark.live


def get(host: str, port: int, method: str, path: str, body: object = None) -> tuple[int, str]:
    c = http.client.HTTPConnection(host, port, timeout=120)
    c.request(method, path, None if body is None else json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    text = r.read().decode()
    c.close()
    return r.status, text


@pytest.fixture(scope="module")
def front(server):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if get(server.host, server.openai_port, "GET", "/health")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the front did not answer /health; see {server.build / 'openai_front.log'}")


@pytest.fixture(scope="module")
def oai(front):
    from openai import OpenAI

    return OpenAI(base_url=f"http://{front.host}:{front.openai_port}/v1", api_key="unused", max_retries=0)


def test_models_retrieve(oai):
    import openai

    [listed] = oai.models.list().data
    card = oai.models.retrieve(listed.id)
    assert card.id == listed.id and card.object == "model"
    with pytest.raises(openai.NotFoundError) as e:
        oai.models.retrieve("no-such-model")
    assert e.value.status_code == 404
    assert e.value.body["message"] == "The model `no-such-model` does not exist."  # OpenAI's shape, unwrapped


def test_unknown_route_is_openai_shaped(front):
    status, text = get(front.host, front.openai_port, "GET", "/v1/no-such-route")
    assert status == 404
    assert json.loads(text)["error"]["code"] == 404


def test_version(front):
    status, text = get(front.host, front.openai_port, "GET", "/version")
    assert status == 200 and json.loads(text) == {"version": client.__version__}


def test_metrics_count_this_sessions_requests(front, oai):
    def completions_200() -> float:
        _, text = get(front.host, front.openai_port, "GET", "/metrics")
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "renderer_front_requests_total" and s.labels == {
                    "endpoint": "/v1/completions",
                    "method": "POST",
                    "status": "200",
                }:
                    return s.value
        return 0

    before = completions_200()
    oai.completions.create(model=oai.models.list().data[0].id, prompt="Hi", max_tokens=2)
    assert completions_200() == before + 1


def test_triton_generate_writes_a_one_element_output_as_a_scalar(server):
    """Triton 2.51's generate extension (server src/http_server.cc,
    ``GenerateRequestClass::ExactMappingOutput``) strips any 1-element output to a scalar; the
    infer API keeps the shape. If this starts failing, Triton changed: update README.md."""
    status, text = get(
        server.host, server.http_port, "POST", "/v2/models/render_completion/generate", {"prompt_token_ids": [19556]}
    )
    assert status == 200 and json.loads(text)["input_ids"] == 19556
    body = {"inputs": [{"name": "prompt_token_ids", "shape": [1, 1], "datatype": "INT32", "data": [19556]}]}
    status, text = get(server.host, server.http_port, "POST", "/v2/models/render_completion/infer", body)
    [ids] = [o for o in json.loads(text)["outputs"] if o["name"] == "input_ids"]
    assert status == 200 and ids["shape"] == [1, 1] and ids["data"] == [19556]


def test_triton_infer_repeats_an_ensembles_sequence_parameters(server):
    """Triton 2.51's ensemble scheduler (core src/ensemble_scheduler/ensemble_scheduler.cc) tags
    every composing model's output with the step's sequence id and flags, and adds the three
    parameters once per such ensemble output; a composing model alone sends none."""
    body = {"inputs": [{"name": "prompt", "shape": [1, 1], "datatype": "BYTES", "data": ["Hi"]}]}
    _, text = get(server.host, server.http_port, "POST", "/v2/models/render_completion/infer", body)
    pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
    params = dict(pairs)["parameters"]
    assert [k for k, _ in params].count("sequence_id") > 1
    assert {k: v for k, v in params} == {"sequence_id": 0, "sequence_start": False, "sequence_end": False}
    _, text = get(server.host, server.http_port, "POST", "/v2/models/tokenize/infer", body)
    assert "parameters" not in json.loads(text)
