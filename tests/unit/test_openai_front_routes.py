"""The front's HTTP routes over a fake of the ensembles (FastAPI's TestClient, no Triton): one
model's card, OpenAI-shaped answers for FastAPI's own 404 / 405 / 400, ``/version`` and the front's
Prometheus ``/metrics``."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from test_openai_front_serving import CARD, PIECES, FakeEnsembles

import client
from openai_front.api_router import create_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def http() -> TestClient:
    app = create_app(CARD, "unused", connect=lambda: FakeEnsembles(PIECES))

    # A typed parameter, only for FastAPI's own validation error (the front's routes take raw bodies).
    @app.get("/typed/{n}")
    async def typed(n: int) -> dict[str, int]:
        return {"n": n}

    with TestClient(app) as c:
        yield c


def assert_openai_error(r, status: int, error_type: str) -> dict:
    assert r.status_code == status
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == status
    assert body["error"]["type"] == error_type  # vLLM's: its error class, or FastAPI's status phrase
    return body["error"]


def test_one_models_card_is_the_listed_one(http):
    listed = http.get("/v1/models").json()["data"][0]
    r = http.get(f"/v1/models/{CARD.name}")
    assert r.status_code == 200
    card = r.json()
    assert card["id"] == CARD.name and card["object"] == "model"
    assert {k: v for k, v in card.items() if k != "permission"} == {
        k: v for k, v in listed.items() if k != "permission"
    }


@pytest.mark.parametrize("model_id", ["gpt-4", "org/some-model"])
def test_an_unknown_model_is_openais_404(http, model_id):
    err = assert_openai_error(http.get(f"/v1/models/{model_id}"), 404, "NotFoundError")
    assert err["message"] == f"The model `{model_id}` does not exist."
    assert err["param"] == "model"


def test_fastapis_own_refusals_are_openai_shaped(http):
    err = assert_openai_error(http.get("/v1/no-such-route"), 404, "Not Found")
    assert err["message"] == "Not Found"
    r = http.get("/v1/chat/completions")
    assert_openai_error(r, 405, "Method Not Allowed")
    assert r.headers["allow"] == "POST"
    err = assert_openai_error(http.get("/typed/x"), 400, "Bad Request")
    assert "n" in err["message"]


def test_a_refused_field_is_vllms_bad_request_error(http):
    err = assert_openai_error(
        http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": -1}), 400, "BadRequestError"
    )
    assert err["message"] == "max_tokens must be at least 1, got -1. (parameter=max_tokens, value=-1)"
    assert err["param"] == "max_tokens"


def test_version_is_the_projects():
    with TestClient(create_app(CARD, "unused", connect=lambda: FakeEnsembles(PIECES))) as c:
        r = c.get("/version")
    assert r.status_code == 200
    assert r.json() == {"version": client.__version__}
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["dynamic"]["version"]
    assert declared == {"attr": "client.__version__"}, "pyproject.toml no longer takes its version from client"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return found


def test_metrics_count_requests_by_endpoint_and_status_with_latencies(http):
    http.get("/v1/models")
    http.get("/v1/models")
    http.get("/v1/models/gpt-4")
    http.get("/v1/no-such-route")
    r = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 3, "stream": True})
    assert r.status_code == 200 and "[DONE]" in r.text

    r = http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    got = samples(r.text)

    def count(endpoint: str, method: str, status: str) -> float:
        key = ("renderer_front_requests_total", (("endpoint", endpoint), ("method", method), ("status", status)))
        return got.get(key, 0)

    assert count("/v1/models", "GET", "200") == 2
    assert count("/v1/models/{model_id:path}", "GET", "404") == 1
    assert count("unmatched", "GET", "404") == 1
    assert count("/v1/completions", "POST", "200") == 1
    latency = ("renderer_front_request_duration_seconds_count", (("endpoint", "/v1/models"), ("method", "GET")))
    assert got[latency] == 2
    streamed = ("renderer_front_request_duration_seconds_sum", (("endpoint", "/v1/completions"), ("method", "POST")))
    assert got[streamed] > 0


def test_a_fault_counts_as_a_500():
    class Broken(FakeEnsembles):
        async def infer(self, model, tensors):
            raise RuntimeError("boom")

    app = create_app(CARD, "unused", connect=lambda: Broken(PIECES))
    with TestClient(app, raise_server_exceptions=False) as c:
        assert_openai_error(c.post("/tokenize", json={"prompt": "Hi"}), 500, "InternalServerError")
        got = samples(c.get("/metrics").text)
    key = ("renderer_front_requests_total", (("endpoint", "/tokenize"), ("method", "POST"), ("status", "500")))
    assert got[key] == 1
