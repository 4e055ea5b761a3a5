"""Image chats through vLLM's own engine (``LLM_ENGINE=vllm MODEL=qwen2-vl`` / ``MODEL=pixtral``), held
against vLLM alone.

The oracle is vLLM's own ``LLM.chat`` on the same tiny model folder and the same images, greedy,
recorded by ``tests/fixtures/vllm/record_vllm_image_chat.py`` (``image_chat.json``; it never passes
through this project's code). Here the server renders and tokenizes the chat, ``mm_process`` decodes,
processes and hashes the images, and ``llm`` hands the tensors to vLLM's ``AsyncLLM`` as its own
``MultiModalInput``. Greedy ids and text must equal the oracle over gRPC and HTTP, streamed and not,
and through the OpenAI front; the tritonserver stays the same process throughout. Both servers run as
vLLM does by default, ``MM_DEVICE_DO_NORMALIZE`` on: Qwen2-VL's pixels reach the engine as uint8 and
vLLM's model normalizes them (the stand-in through the processor's table), Pixtral's stay float32
(vLLM's Llava cannot normalize on the device), so the float32 hand-over to vLLM runs on Pixtral. The second send of
an image (mm_process's cache, vLLM's encoder cache keyed by ``mm_hashes``) is timed and reported, not
asserted. The stand-in serves the same requests on the same weights: its greedy ids are compared too.

Needs vLLM's environment with torchvision (``make engine-vllm``; ``.ci/run`` installs it) and the
fixture; without them these tests are skipped, saying so.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import ports

from client import RendererClient

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "vllm" / "image_chat.json"
TORCHVISION_STAMP = ROOT / "build" / "peer-venv" / ".torchvision"
# Both tiny families; pixtral through vLLM's Llava/Pixtral model (placeholder runs with is_embed).
FAMILIES = ("qwen2_vl", "pixtral")

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not TORCHVISION_STAMP.exists(),
        reason="vLLM's environment build/peer-venv lacks torchvision: `make engine-vllm` installs it "
        "(.ci/run does), then these tests run",
    ),
    pytest.mark.skipif(not FIXTURE.exists(), reason=f"no oracle at {FIXTURE} (record_vllm_image_chat.py)"),
]

PORT = ports.port("vllm_image")


def oracle() -> dict:
    return json.loads(FIXTURE.read_text())


def filled(fixture: dict, messages: list) -> list:
    """The recorded messages with each ``@name`` image replaced by its data URL."""
    urls = {name: img["url"] for name, img in fixture["images"].items()}
    out = []
    for m in messages:
        content = m["content"]
        if isinstance(content, list):
            content = [
                {"type": "image_url", "image_url": {"url": urls[p["image_url"]["url"][1:]]}}
                if p["type"] == "image_url"
                else p
                for p in content
            ]
        out.append({**m, "content": content})
    return out


@pytest.fixture(scope="module", params=FAMILIES)
def family(request) -> str:
    if request.param not in oracle()["families"]:
        pytest.skip(f"{FIXTURE.name} holds no {request.param} recording (record_vllm_image_chat.py {request.param})")
    return request.param


@pytest.fixture(scope="module")
def cases(family) -> list[tuple[dict, list, dict]]:
    """(request, filled messages, vLLM's answer) for every recorded request."""
    fx = oracle()
    answers = {r["name"]: r for r in fx["families"][family]["results"]}
    out = [(r, filled(fx, r["messages"]), answers[r["name"]]) for r in fx["requests"]]
    assert len(out) >= 12
    return out


def settings_for(server_settings, tmp_path_factory, family: str, engine: str):
    from launcher.settings import Settings

    port = PORT + 20 * FAMILIES.index(family) + (10 if engine == "standin" else 0)
    return replace(
        server_settings,
        model_dir="",
        model=family.replace("_", "-"),
        llm_engine=engine,
        models="chat,render_chat",
        build_dir=str(tmp_path_factory.mktemp(f"vllm-image-{family}-{engine}")),
        http_port=port,
        grpc_port=port + 1,
        metrics_port=port + 2,
        openai_port=port + 3 if engine == "vllm" else 0,
        startup_timeout_s=900,
        mm_device_do_normalize=True,
        # The session's 6 MB input cap is for the render tests; several images' patches exceed it.
        max_input_bytes=Settings().max_input_bytes,
    )


@pytest.fixture(scope="module")
def vllm_server(server_settings, tmp_path_factory, family):
    from launcher import cli as launch
    from launcher.processes import running_pid

    s = settings_for(server_settings, tmp_path_factory, family, "vllm")
    launch.stop(s)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver with vLLM's engine on {family} did not start; see {s.log_file}")
    pid = running_pid(s)
    yield s
    assert running_pid(s) == pid, "tritonserver was restarted while serving the image chats"
    launch.stop(s)


def ask(c: RendererClient, messages: list, max_tokens: int, stream: bool) -> tuple[str, list[int]]:
    pieces = list(
        c.generate(
            "chat", messages=messages, max_tokens=max_tokens, stream=stream, sampling_params={"temperature": 0.0}
        )
    )
    return "".join(p.text for p in pieces), [i for p in pieces for i in p.output_ids]


def describe(mismatches: list[dict]) -> str:
    return json.dumps(mismatches, ensure_ascii=False, indent=1)[:6000]


@pytest.mark.parametrize("protocol, stream", [("grpc", False), ("grpc", True), ("http", False), ("http", True)])
def test_image_chats_on_vllms_engine_answer_as_vllm_alone(vllm_server, cases, protocol, stream):
    max_tokens = oracle()["max_tokens"]
    port = vllm_server.grpc_port if protocol == "grpc" else vllm_server.http_port
    mismatches = []
    with RendererClient(f"{vllm_server.host}:{port}", protocol) as c:
        for r, messages, want in cases:
            text, ids = ask(c, messages, max_tokens, stream)
            if ids != want["token_ids"] or text != want["text"]:
                mismatches.append(
                    {
                        "request": r["name"],
                        "ours": {"ids": ids, "text": text},
                        "vllm": {"ids": want["token_ids"], "text": want["text"]},
                        "equal_to_vllm_without_device_normalize": ids == want.get("token_ids_no_device_normalize"),
                    }
                )
    assert not mismatches, describe(mismatches)


def test_the_expanded_prompt_is_vllms(vllm_server, cases, family):
    """render_chat's ids (placeholders expanded by mm_process) are the prompt vLLM's LLM.chat ran,
    and its pixel_values have the dtype vLLM's own render server sends for the family."""
    import numpy as np

    dtype = np.uint8 if family == "qwen2_vl" else np.float32
    wrong, dtypes = [], set()
    with RendererClient(f"{vllm_server.host}:{vllm_server.grpc_port}", "grpc") as c:
        for r, messages, want in cases:
            rendered = c.render_chat(messages)
            if rendered.input_ids != want["prompt_token_ids"]:
                wrong.append(r["name"])
            if "pixel_values" in rendered.outputs and len(rendered.outputs["pixel_values"]):
                dtypes.add(rendered.outputs["pixel_values"].dtype)
    assert not wrong, wrong
    assert dtypes == {np.dtype(dtype)}, dtypes


def front_post(s, body: dict) -> tuple[int, bytes]:
    c = http.client.HTTPConnection(s.host, s.openai_port, timeout=300)
    c.request("POST", "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, payload


def front_model(s) -> str:
    """The model name the OpenAI front serves, once it answers."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection(s.host, s.openai_port, timeout=5)
            c.request("GET", "/v1/models")
            r = c.getresponse()
            if r.status == 200:
                return json.loads(r.read())["data"][0]["id"]
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the OpenAI front on port {s.openai_port} did not answer /v1/models")


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_front_answers_as_vllm_alone(vllm_server, cases, stream):
    model = front_model(vllm_server)
    max_tokens = oracle()["max_tokens"]
    mismatches = []
    for r, messages, want in cases:
        body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
        status, payload = front_post(vllm_server, body)
        assert status == 200, payload[:500]
        if stream:
            events = [json.loads(line[6:]) for line in payload.decode().splitlines() if line.startswith("data: {")]
            text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
            finish = [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1]
        else:
            out = json.loads(payload)
            text, finish = out["choices"][0]["message"]["content"], out["choices"][0]["finish_reason"]
            assert out["usage"]["prompt_tokens"] == len(want["prompt_token_ids"])
            assert out["usage"]["completion_tokens"] == len(want["token_ids"])
        if text != want["text"] or finish != want["finish_reason"]:
            mismatches.append(
                {"request": r["name"], "ours": [text, finish], "vllm": [want["text"], want["finish_reason"]]}
            )
    assert not mismatches, describe(mismatches)


def fresh_image_url(seed: int) -> str:
    """An image no other request sent (so its first send misses every cache)."""
    import numpy as np
    from PIL import Image

    px = np.random.default_rng(seed).integers(0, 256, (336, 448, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(px).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def metric(s, name: str) -> float:
    c = http.client.HTTPConnection(s.host, s.metrics_port, timeout=10)
    c.request("GET", "/metrics")
    body = c.getresponse().read().decode()
    return sum(float(line.split()[-1]) for line in body.splitlines() if line.startswith(name))


def test_a_repeated_image_measured(vllm_server, record_property):
    """Reported, not asserted: the first and second send of one image under different questions
    (the second: mm_process's cache hit, and vLLM's encoder cache hit on the same mm_hash)."""
    url = fresh_image_url(4242)
    timings = []
    with RendererClient(f"{vllm_server.host}:{vllm_server.grpc_port}", "grpc") as c:
        for question in ("Describe it.", "What colors are in it?", "Describe it."):
            messages = [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": question}],
                }
            ]
            hits = metric(vllm_server, "mm_cache_hits_total")
            t0 = time.perf_counter()
            ask(c, messages, 1, stream=False)  # one token: the time is prefill (encoder included)
            timings.append(
                {
                    "question": question,
                    "s": round(time.perf_counter() - t0, 4),
                    "mm_process_hit": metric(vllm_server, "mm_cache_hits_total") > hits,
                }
            )
    report = {"first_send": timings[0], "repeat_new_question": timings[1], "repeat_same_prompt": timings[2]}
    record_property("repeated_image", report)
    print("repeated image through vLLM's engine:", json.dumps(report))
    (vllm_server.build / "repeated_image.json").write_text(json.dumps(report, indent=1))
    assert not timings[0]["mm_process_hit"] and timings[1]["mm_process_hit"]


@pytest.fixture(scope="module")
def standin_server(server_settings, tmp_path_factory, family):
    from launcher import cli as launch

    s = settings_for(server_settings, tmp_path_factory, family, "standin")
    launch.stop(s)
    if launch.start(s) != 0:
        pytest.fail(f"tritonserver with the stand-in on {family} did not start; see {s.log_file}")
    yield s
    launch.stop(s)


def test_the_stand_in_on_the_same_weights(standin_server, cases, record_property):
    """Two implementations of one model (transformers' and vLLM's), greedy on float32: the same ids,
    or the first step where they part is stated (a near-tie of two logits on the random tiny model)."""
    max_tokens = oracle()["max_tokens"]
    parted = {}
    with RendererClient(f"{standin_server.host}:{standin_server.grpc_port}", "grpc") as c:
        for r, messages, want in cases:
            _, ids = ask(c, messages, max_tokens, stream=False)
            if ids != want["token_ids"]:
                step = next(
                    (k for k, (a, b) in enumerate(zip(ids, want["token_ids"])) if a != b),
                    min(len(ids), len(want["token_ids"])),
                )
                parted[r["name"]] = {"first_differing_step": step, "standin": ids, "vllm": want["token_ids"]}
    record_property("standin_parted", parted)
    print(f"stand-in vs vLLM: {len(cases) - len(parted)} of {len(cases)} requests equal; parted: {json.dumps(parted)}")
    # Agreement is the rule: parting may only come from a near-tie, never from the first step
    # (that would be a different prompt or different image tensors, not float32 rounding).
    assert len(parted) <= len(cases) // 4, describe([{"request": k, **v} for k, v in parted.items()])
    assert all(v["first_differing_step"] > 0 for v in parted.values()), describe(list(parted.items()))
