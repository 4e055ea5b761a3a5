"""The OpenAI- and vLLM-compatible HTTP front, live: the official ``openai`` client against it, its
answers against the ensembles', vLLM's render endpoints against vLLM's own render server, errors
in OpenAI's shape with the right status, and a client that goes away cancelling the generation.

The front runs beside the test server (``TEST_OPENAI_PORT``, 18003), started by the launcher as
``make serve`` starts it.
"""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import pytest
import ports

from client import RendererClient

pytestmark = pytest.mark.live

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def front(server):
    url = f"http://{server.host}:{server.openai_port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if post(server, "GET", "/health")[0] == 200:
                return server
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"the front on {url} did not answer /health; see {server.build / 'openai_front.log'}")


def post(server, method: str, path: str, body: object = None, raw: bytes | None = None) -> tuple[int, object]:
    c = http.client.HTTPConnection(server.host, server.openai_port, timeout=120)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    c.request(method, path, data, {"Content-Type": "application/json"})
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, (json.loads(payload) if payload else None)


@pytest.fixture(scope="module")
def oai(front):
    from openai import OpenAI

    return OpenAI(base_url=f"http://{front.host}:{front.openai_port}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model_name(oai):
    [m] = oai.models.list().data
    return m.id


@pytest.fixture(scope="module")
def ensembles(server):
    with RendererClient(f"{server.host}:{server.grpc_port}", "grpc") as c:
        yield c


def greedy(ensembles, model: str, **prompt):
    [whole] = list(ensembles.generate(model, max_tokens=16, sampling_params={"temperature": 0.0}, **prompt))
    return whole


def test_openai_client_chat_equals_the_chat_ensemble(oai, model_name, ensembles):
    want = greedy(ensembles, "chat", messages=MESSAGES)
    r = oai.chat.completions.create(model=model_name, messages=MESSAGES, max_tokens=16, temperature=0)
    assert r.choices[0].message.content == want.text and r.choices[0].message.role == "assistant"
    assert r.usage.completion_tokens == len(want.output_ids)
    rendered = ensembles.render_chat(MESSAGES)
    assert r.usage.prompt_tokens == len(rendered.input_ids)
    assert r.choices[0].finish_reason == ("stop" if want.output_ids[-1] == 2 else "length")
    chunks = list(
        oai.chat.completions.create(
            model=model_name,
            messages=MESSAGES,
            max_tokens=16,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want.text
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c for c in chunks if c.choices][-1].choices[0].finish_reason == r.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens and not chunks[-1].choices


def test_openai_client_completion_equals_the_completion_ensemble(oai, model_name, ensembles):
    want = greedy(ensembles, "completion", prompt=PROMPT)
    r = oai.completions.create(model=model_name, prompt=PROMPT, max_tokens=16, temperature=0)
    assert r.choices[0].text == want.text and r.choices[0].finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (5, 16)
    chunks = list(oai.completions.create(model=model_name, prompt=PROMPT, max_tokens=16, temperature=0, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == want.text
    # Token ids as the prompt, and the sampling fields vLLM's API takes.
    ids = ensembles.render_completion(PROMPT).input_ids
    r2 = oai.completions.create(model=model_name, prompt=ids, max_tokens=16, temperature=0)
    assert r2.choices[0].text == want.text
    stop = want.text.split()[1]
    r3 = oai.completions.create(model=model_name, prompt=PROMPT, max_tokens=16, temperature=0, stop=[stop])
    assert r3.choices[0].text == want.text[: want.text.index(stop)] and r3.choices[0].finish_reason == "stop"
    s1, s2 = (
        oai.completions.create(model=model_name, prompt=PROMPT, max_tokens=12, temperature=1.0, seed=5)
        for _ in range(2)
    )
    assert s1.choices[0].text == s2.choices[0].text


def test_without_temperature_vllms_default_samples(oai, model_name):
    """vLLM (and OpenAI) default to temperature 1.0: seeded answers differ across seeds."""
    texts = {
        oai.completions.create(model=model_name, prompt=PROMPT, max_tokens=12, seed=s).choices[0].text
        for s in (1, 2, 3)
    }
    assert len(texts) > 1


def test_max_tokens_left_out_uses_the_rest_of_the_context(front, model_name):
    status, body = post(
        front, "POST", "/v1/completions", {"model": model_name, "prompt": PROMPT, "temperature": 0, "stop": ["\n"]}
    )
    assert status == 200 and body["choices"][0]["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "body, status, message",
    [
        (None, 400, "not valid JSON"),
        ({"messages": MESSAGES, "n": 2}, 400, "n must be 1"),
        ({"messages": MESSAGES, "model": "gpt-4"}, 404, "The model `gpt-4` does not exist."),
        ({"messages": MESSAGES, "temperature": 5}, 400, "temperature must be in [0, 2], got 5.0."),
        ({"messages": MESSAGES, "logprobs": True}, 400, "logprobs is not supported"),
        ({"messages": MESSAGES, "max_tokens": 8180}, 400, "This model's maximum context length is 8192 tokens"),
        ({"messages": MESSAGES, "stream_options": {"include_usage": True}}, 400, "only be defined when `stream=True`"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}],
                    }
                ]
            },
            400,
            "image",
        ),
        ({"messages": "hello"}, 400, "Input should be a valid list"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_chat_requests_are_openai_shaped_4xx(front, body, status, message, stream):
    raw = (
        b"{not json"
        if body is None
        else json.dumps({**body, "stream": stream} if "stream_options" not in body else body).encode()
    )
    got, err = post(front, "POST", "/v1/chat/completions", raw=raw)
    assert got == status, err
    assert set(err["error"]) == {"message", "type", "param", "code"} and err["error"]["code"] == status
    assert message in err["error"]["message"], err
    assert post(front, "GET", "/health")[0] == 200


PARAM_CASES = [
    ({"n": 2}, "n"),  # the front's own refusal
    ({"logprobs": True}, "logprobs"),
    ({"tools": []}, "tools"),  # chat_render's, in vLLM's words and form
    ({"mm_processor_kwargs": {"max_pixels": 4}}, "mm_processor_kwargs"),
]


def test_an_error_names_its_parameter_as_openais_param(server, oai, model_name):
    """OpenAI's own client reads ``param`` from the error: the front's refusals and the stages'
    alike (a stage's error carries its parameter across Triton in vLLM's message form). Each bad
    request goes out beside valid ones from four threads, streamed and not, as production sends
    them; every valid one is answered and tritonserver is the same process at the end."""
    from concurrent.futures import ThreadPoolExecutor

    import openai

    from launcher import cli as launch

    pid = launch.running_pid(server)

    def send(extra: dict, stream: bool) -> None:
        got = oai.chat.completions.create(
            model=model_name, max_tokens=2, stream=stream, messages=MESSAGES, extra_body=extra or None
        )
        if stream:
            list(got)

    def bad_then_good(case: tuple[dict, str], stream: bool) -> tuple[object, str]:
        extra, param = case
        try:
            send(extra, stream)
            got: object = "answered"
        except openai.BadRequestError as e:
            got = e.param
        send({}, stream)  # raises on anything but a 200
        return got, param

    work = [(case, stream) for stream in (False, True) for case in PARAM_CASES] * 2
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda w: bad_then_good(*w), work))
    assert [got for got, _ in results] == [param for _, param in results]
    assert launch.running_pid(server) == pid, "tritonserver restarted"


def test_bad_completion_requests(front, oai, model_name):
    import openai

    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=model_name, prompt=["one", "two"], max_tokens=4)
    assert "one prompt per request" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.completions.create(model=model_name, prompt=PROMPT, max_tokens=4, extra_body={"top_p": 0})
    assert "top_p must be in (0, 1]" in str(e.value)


def test_unknown_fields_are_ignored_as_vllm_ignores_them(front, model_name):
    status, body = post(
        front,
        "POST",
        "/v1/completions",
        {"model": model_name, "prompt": PROMPT, "max_tokens": 2, "temperature": 0, "some_future_field": 1},
    )
    assert status == 200 and body["usage"]["completion_tokens"] == 2


def test_a_client_that_goes_away_cancels_the_generation(front, model_name):
    """The stand-in generates one request at a time: had the abandoned 1,000-token answer gone on,
    the next request would wait for all of it."""
    body = json.dumps(
        {
            "model": model_name,
            "messages": MESSAGES,
            "max_tokens": 1000,
            "ignore_eos": True,
            "stream": True,
            "temperature": 0,
        }
    )
    c = http.client.HTTPConnection(front.host, front.openai_port, timeout=120)
    c.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    events = 0
    t0 = time.monotonic()
    for line in r:
        events += line.startswith(b"data:")
        if events >= 5:
            break
    per_token = (time.monotonic() - t0) / 4
    c.close()
    t0 = time.monotonic()
    status, out = post(
        front, "POST", "/v1/completions", {"model": model_name, "prompt": "Hi", "max_tokens": 2, "temperature": 0}
    )
    waited = time.monotonic() - t0
    assert status == 200
    assert waited < min(30.0, 200 * per_token), f"the next request waited {waited:.1f} s: the generation went on"


def test_models_and_health(front, model_name):
    status, body = post(front, "GET", "/v1/models")
    assert status == 200 and body["data"][0]["id"] == model_name == "smollm2-135m-instruct"
    assert body["data"][0]["max_model_len"] == 8192


# --- vLLM's render, tokenize and detokenize endpoints ------------------------------------------

RENDER_CHATS = [
    {"messages": MESSAGES},
    {"messages": MESSAGES, "add_generation_prompt": False},
    {
        "messages": [{"role": "system", "content": "Be brief."}, *MESSAGES, {"role": "assistant", "content": "Paris"}],
        "continue_final_message": True,
        "add_generation_prompt": False,
        "max_tokens": 7,
        "temperature": 0.3,
        "stop": ["\n"],
    },
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]}]},
]
RENDER_COMPLETIONS = [{"prompt": PROMPT}, {"prompt": "日本語 😀", "max_tokens": 3}, {"prompt": [19556, 905]}]


@pytest.mark.parametrize("body", RENDER_CHATS)
def test_chat_render_endpoint_equals_the_ensemble(front, ensembles, body):
    status, out = post(front, "POST", "/v1/chat/completions/render", body)
    assert status == 200, out
    chat = {k: body[k] for k in ("add_generation_prompt", "continue_final_message") if k in body}
    assert out["token_ids"] == ensembles.render_chat(body["messages"], chat_params=chat or None).input_ids
    assert out["sampling_params"]["max_tokens"] == body.get("max_tokens", 8192 - len(out["token_ids"]))


@pytest.mark.parametrize("body", RENDER_COMPLETIONS)
def test_completion_render_endpoint_equals_the_ensemble(front, ensembles, body):
    status, out = post(front, "POST", "/v1/completions/render", body)
    assert status == 200, out
    p = body["prompt"]
    want = (
        ensembles.render_completion(p).input_ids
        if isinstance(p, str)
        else ensembles.render_completion(prompt_token_ids=p).input_ids
    )
    assert out[0]["token_ids"] == want


def test_tokenize_and_detokenize(front, ensembles, hf_tokenizer):
    status, out = post(front, "POST", "/tokenize", {"prompt": PROMPT, "return_token_strs": True})
    assert status == 200 and out["tokens"] == ensembles.render_completion(PROMPT).input_ids
    assert out["count"] == len(out["tokens"]) and out["max_model_len"] == 8192
    assert out["token_strs"] == hf_tokenizer.convert_ids_to_tokens(out["tokens"])
    status, chat = post(front, "POST", "/tokenize", {"messages": MESSAGES})
    assert chat["tokens"] == ensembles.render_chat(MESSAGES).input_ids
    status, back = post(front, "POST", "/detokenize", {"tokens": out["tokens"]})
    assert status == 200 and back == {"prompt": PROMPT}


@pytest.fixture(scope="module")
def vllm_render(model_dir):
    """vLLM's own render server (``vllm launch render``), where vLLM's environment is installed."""
    if not (ROOT / "build" / "peer-venv" / ".installed").exists():
        pytest.skip(
            "vLLM's environment build/peer-venv is missing (`make engine-vllm`; .ci/run installs it): "
            "the comparison with vLLM's render server needs it"
        )
    from benchmarks.peer import PeerServer

    srv = PeerServer(
        str(model_dir),
        port=ports.port("vllm_render"),
        log=ROOT / "build" / "test-server" / "vllm-render.log",
    )
    srv.start()
    yield srv
    srv.stop()


def vllm_post(srv, path: str, body: dict) -> tuple[int, object]:
    host, port = srv.url.split(":")
    c = http.client.HTTPConnection(host, int(port), timeout=120)
    c.request("POST", path, json.dumps({"model": srv.model_dir, **body}), {"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read())


@pytest.mark.parametrize(
    "path, body",
    [("/v1/chat/completions/render", b) for b in RENDER_CHATS]
    + [("/v1/completions/render", b) for b in RENDER_COMPLETIONS],
)
def test_render_endpoints_equal_vllms(front, vllm_render, path, body):
    status, ours = post(front, "POST", path, body)
    vstatus, theirs = vllm_post(vllm_render, path, body)
    assert status == vstatus == 200, (ours, theirs)
    if isinstance(theirs, list):
        ours, theirs = ours[0], theirs[0]
    assert ours["token_ids"] == theirs["token_ids"]
    assert set(ours) == set(theirs)
    # The sampling parameters a token-in-token-out client forwards, as vLLM serializes them (the
    # default max_tokens fills the context, which is 2048 on the peer and the model's 8192 here).
    if "max_tokens" not in body:
        ours["sampling_params"].pop("max_tokens", None), theirs["sampling_params"].pop("max_tokens", None)
    assert ours["sampling_params"] == theirs["sampling_params"]


@pytest.mark.parametrize(
    "body",
    [
        {"prompt": PROMPT},
        {"prompt": "日本語 😀", "add_special_tokens": False},
        {"messages": MESSAGES},
        {"messages": MESSAGES, "add_generation_prompt": False},
    ],
)
def test_tokenize_equals_vllms(front, vllm_render, body):
    status, ours = post(front, "POST", "/tokenize", body)
    vstatus, theirs = vllm_post(vllm_render, "/tokenize", body)
    assert status == vstatus == 200
    assert ours["tokens"] == theirs["tokens"] and ours["count"] == theirs["count"]


@pytest.mark.parametrize("tokens", [[19556, 905], [1, 9690, 198, 2683], [216, 34, 32, 33]])
def test_detokenize_equals_vllms(front, vllm_render, tokens):
    assert (
        post(front, "POST", "/detokenize", {"tokens": tokens})[1]
        == vllm_post(vllm_render, "/detokenize", {"tokens": tokens})[1]
    )
