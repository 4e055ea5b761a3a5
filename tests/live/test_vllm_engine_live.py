"""vLLM's own engine as the downstream model (``LLM_ENGINE=vllm``), held against vLLM itself.

The server runs vLLM's ``AsyncLLM`` inside Triton behind the ``tensorrt_llm`` interface; the
ensembles render, and the engine takes their ids (or prompt embeddings) as its own engine inputs.
The oracle is vLLM alone on the same model folder and requests, recorded by
``tests/fixtures/vllm/record_vllm_engine_text.py`` (``engine_text.json``; it never passes through this
project's code): ``LLM.generate`` on the prompt text, ``LLM.chat`` on the messages (vLLM renders its
template itself), ``LLM.generate`` on an ``EmbedsPrompt``. Token ids, text and finish must be the
same, streamed and not. The recording names the vLLM version and the model's weights; where either
differs from what is installed, the test fails saying to re-record.

Needs vLLM's environment (``make engine-vllm``; ``.ci/run`` installs it). Without it these tests
are skipped, saying so.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from client import RendererClient, RequestError

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (ROOT / "build" / "peer-venv" / ".installed").exists(),
        reason="vLLM's environment build/peer-venv is missing: `make engine-vllm` installs it "
        "(.ci/run does), then these tests run",
    ),
]

FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "engine_text.json"


def max_tokens() -> int:
    return json.loads(FIXTURE.read_text())["max_tokens"]


def installed_vllm() -> str:
    return (ROOT / "build" / "peer-venv" / ".installed").read_text().strip()


@pytest.fixture(scope="module")
def requests_and_answers(model_dir, tmp_path_factory):
    """The recorded requests (embeddings written out as the files the client sends) and vLLM's answers."""
    import base64
    import hashlib

    fixture = json.loads(FIXTURE.read_text())
    assert fixture["vllm"] == installed_vllm(), (
        f"{FIXTURE.name} was recorded with vLLM {fixture['vllm']}, build/peer-venv has {installed_vllm()}: "
        "re-record with build/peer-venv/bin/python tests/fixtures/vllm/record_vllm_engine_text.py"
    )
    weights = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert fixture["weights_sha256"] == weights, (
        f"{FIXTURE.name} was recorded on other weights than {model_dir}: re-record (record_vllm_engine_text.py)"
    )
    tmp = tmp_path_factory.mktemp("vllm-embeds")
    reqs = []
    for i, r in enumerate(fixture["requests"]):
        if r["kind"] == "embeds":
            path = tmp / f"embeds{i}.pt"
            path.write_bytes(base64.b64decode(r["embeds"]))
            r = {**r, "embeds_file": str(path)}
        reqs.append(r)
    answers = fixture["answers"]
    assert len(reqs) >= 20 and len(answers) == len(reqs)
    return reqs, answers


@pytest.fixture(scope="module")
def vllm_server(server_settings, tmp_path_factory):
    from launcher import cli as launch

    port = ports.port("vllm")
    s = replace(
        server_settings,
        openai_port=0,
        llm_engine="vllm",
        enable_prompt_embeds=True,
        models="completion,chat,ensemble",
        build_dir=str(tmp_path_factory.mktemp("vllm-build")),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        startup_timeout_s=600,
    )
    launch.stop(s)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver with vLLM's engine did not start; see {s.log_file}")
    yield s
    launch.stop(s)


def ask(c: RendererClient, r: dict, stream: bool):
    sampling = r["sampling"]
    if r["kind"] == "chat":
        chat = r.get("chat", {})
        pieces = list(
            c.generate(
                "chat",
                messages=r["messages"],
                chat_params=chat or None,
                max_tokens=max_tokens(),
                stream=stream,
                sampling_params=sampling,
            )
        )
    elif r["kind"] == "embeds":
        pieces = list(
            c.generate(
                "completion",
                prompt_embeds=Path(r["embeds_file"]).read_bytes(),
                max_tokens=max_tokens(),
                stream=stream,
                sampling_params=sampling,
            )
        )
    else:
        pieces = list(
            c.generate(
                "completion", prompt=r["prompt"], max_tokens=max_tokens(), stream=stream, sampling_params=sampling
            )
        )
    return "".join(p.text for p in pieces), [i for p in pieces for i in p.output_ids]


@pytest.mark.parametrize("protocol, stream", [("grpc", False), ("grpc", True), ("http", True)])
def test_our_ensembles_on_vllms_engine_answer_as_vllm_does(vllm_server, requests_and_answers, protocol, stream):
    reqs, answers = requests_and_answers
    port = vllm_server.grpc_port if protocol == "grpc" else vllm_server.http_port
    mismatches = []
    with RendererClient(f"{vllm_server.host}:{port}", protocol) as c:
        for r, want in zip(reqs, answers):
            text, ids = ask(c, r, stream)
            if ids != want["token_ids"] or text != want["text"]:
                mismatches.append({"request": r, "ours": {"ids": ids, "text": text}, "vllm": want})
    assert not mismatches, json.dumps(mismatches, ensure_ascii=False, indent=1)[:6000]


def test_the_ensemble_front_on_vllms_engine(vllm_server, requests_and_answers):
    import numpy as np

    reqs, answers = requests_and_answers
    r, want = reqs[0], answers[0]
    assert r["kind"] == "completion" and not r["sampling"]
    with RendererClient(f"{vllm_server.host}:{vllm_server.grpc_port}", "grpc") as c:
        [out] = list(
            c.stream(
                "ensemble",
                {
                    "text_input": np.array([[r["prompt"].encode()]], dtype=object),
                    "max_tokens": np.array([[max_tokens()]], np.int32),
                    "exclude_input_in_output": np.array([[True]]),
                },
            )
        )
    assert out.text == want["text"]


def test_engine_refusals_are_400s(vllm_server):
    with RendererClient(f"{vllm_server.host}:{vllm_server.http_port}", "http") as c:
        with pytest.raises(RequestError) as e:
            list(c.generate("completion", prompt="hi", max_tokens=4, sampling_params={"top_p": 0}))
        assert "top_p must be in (0, 1]" in e.value.message and e.value.is_client_error
        assert c.is_ready()
