"""``render_chat`` and ``chat`` on live tritonservers: token-exact with transformers over three
real templates, every validation error as a 400, hostile templates refused harmlessly."""

from __future__ import annotations

import copy
import json
import shutil
from dataclasses import replace

import pytest
from chat_cases import CASES
from chat_servers import port, render_only_model_dir, start_chat_server
from chat_servers import tokenizer_dirs as chat_tokenizer_dirs
from chat_rules import (
    BAD_MESSAGES,
    BAD_PARAMS,
    HOSTILE,
    VLLM_REFUSED,
    hf_apply,
    hf_reference,
    sent_as_is,
    tools_rendered,
)

from client import RendererClient, RequestError
from renderer.chat import (
    ChatParams,
    ChatRenderer,
)

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def tokenizer_dirs(model_dir):
    return chat_tokenizer_dirs(model_dir)


@pytest.fixture(scope="module", params=["smollm2", "qwen3", "mistral"])
def chat_server(request, server, tokenizer_dirs, tmp_path_factory):
    """(name, settings): the session server for SmolLM2, a render-only server for the others."""
    name = request.param
    if name == "smollm2":
        yield name, server
        return
    from launcher import cli as launch

    tmp = tmp_path_factory.mktemp(f"chat-{name}")
    s = start_chat_server(server, name, render_only_model_dir(tokenizer_dirs[name], tmp / "model"), tmp)
    yield name, s
    launch.stop(s)


@pytest.fixture(scope="module")
def references(tokenizer_dirs):
    from transformers import AutoTokenizer

    return {
        n: (AutoTokenizer.from_pretrained(d), ChatRenderer.from_model_dir(d, trust_request_chat_template=True))
        for n, d in tokenizer_dirs.items()
    }


def reference(refs, name, case, *, tokenize):
    """What the server must answer: transformers' apply_chat_template on the request as sent,
    where vLLM hands it to the template so (``sent_as_is``); otherwise (content parts, tool calls,
    tools: vLLM's own answers for those are tests/live/test_chat_vllm_fixtures_live.py's) the
    renderer in process, its parse rendered and tokenized by transformers, so that the server
    answers as the library does."""
    hf, chat = refs[name]
    if sent_as_is(case):
        return hf_reference(hf, case, tokenize=tokenize)
    params = ChatParams.from_request(copy.deepcopy(case.get("chat_params")))
    rendered = chat.render_messages(copy.deepcopy(case["messages"]), params)
    return hf_apply(hf, chat, rendered, params, tokenize=tokenize)


def _has_media(case) -> bool:
    return any(
        isinstance(m.get("content"), list)
        and any(isinstance(p, dict) and p.get("type") in ("image_url", "image_embeds") for p in m["content"])
        for m in case["messages"]
    )


# These servers serve text-only models: chats with images are refused (tested below). Chats vLLM
# refuses are tests/live/test_chat_vllm_fixtures_live.py's.
TEXT_CASES = [c for c in CASES if not _has_media(c)]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_token_exact_parity(chat_server, references, protocol):
    name, s = chat_server
    cases = [c for c in TEXT_CASES if name in c["templates"] and (c["id"], name) not in VLLM_REFUSED]
    assert len(cases) >= 35 or name != "smollm2"
    port = s.http_port if protocol == "http" else s.grpc_port
    with RendererClient(f"{s.host}:{port}", protocol) as c:
        for case in cases:
            r = c.render_chat(case["messages"], chat_params=tools_rendered(case.get("chat_params")))
            assert r.rendered_prompt == reference(references, name, case, tokenize=False), case["id"]
            assert r.input_ids == reference(references, name, case, tokenize=True), case["id"]
            assert int(r.outputs["input_lengths"][0]) == len(r.input_ids)
            assert r.outputs["mm_placeholders"].shape == (0, 2) and r.outputs["mm_hashes"].shape == (0,)


def test_no_double_bos(client, hf_tokenizer):
    """The template writes the special tokens; tokenize must not add them again."""
    r = client.render_chat([{"role": "user", "content": "hi"}], chat_params={"add_generation_prompt": True})
    bos = hf_tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert r.input_ids[0] == bos and r.input_ids[1] != bos
    forced = client.render_chat([{"role": "user", "content": "hi"}], tokenize_params={"add_special_tokens": True})
    assert forced.input_ids == hf_tokenizer(r.rendered_prompt, add_special_tokens=True).input_ids


def test_offsets_refer_to_the_rendered_text(client):
    r = client.render_chat(
        [{"role": "user", "content": "Where is Paris?"}], tokenize_params={"return_token_offsets": True}
    )
    text = r.rendered_prompt
    assert len(r.token_offsets) == len(r.input_ids)
    assert "".join(text[s:e] for s, e in r.token_offsets) == text


def test_truncation_and_length_check_apply_to_chats(client):
    msgs = [{"role": "user", "content": "word " * 50}]
    full = client.render_chat(msgs)
    cut = client.render_chat(msgs, tokenize_params={"truncate_prompt_tokens": 10, "truncation_side": "left"})
    assert cut.input_ids == full.input_ids[-10:]
    assert len(full.input_ids) > 41
    # Tokenizing stops at max_input_tokens + 1, so the count is a lower bound.
    with pytest.raises(RequestError, match="your prompt contains at least 41 input tokens"):
        client.render_chat(msgs, tokenize_params={"max_total_tokens": 40})


@pytest.mark.parametrize("messages, error, message", BAD_MESSAGES, ids=[m.split("\n")[0] for _, _, m in BAD_MESSAGES])
def test_message_errors_are_400s(client, messages, error, message):
    with pytest.raises(RequestError) as e:
        client.render_chat(messages)
    assert e.value.is_client_error and message in e.value.message


@pytest.mark.parametrize("bag, error, message", BAD_PARAMS, ids=[m for _, _, m in BAD_PARAMS])
def test_chat_params_errors_are_400s(client, bag, error, message):
    with pytest.raises(RequestError) as e:
        client.render_chat([{"role": "user", "content": "hi"}], chat_params=json.dumps(bag))
    assert e.value.is_client_error and message in e.value.message


@pytest.mark.parametrize(
    "raw, message",
    [
        ("[{not json", "messages is not valid JSON"),
        ("", "messages is empty"),
        ('[{"role": "user", "content": "x"}]', None),
    ],
)
def test_raw_messages_payloads(client, raw, message):
    if message is None:
        assert client.render_chat(raw).input_ids
        return
    with pytest.raises(RequestError) as e:
        client.render_chat(raw)
    assert e.value.is_client_error and message in e.value.message


def test_images_refused_on_a_text_only_model(client):
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    with pytest.raises(RequestError, match=r"At most 0 image\(s\) may be provided in one prompt."):
        client.render_chat([{"role": "user", "content": [img, {"type": "text", "text": "what is this?"}]}])


def test_no_template_error(tmp_path, server, model_dir):
    """A model folder without a chat template gets vLLM's message, as a 400."""
    from launcher import cli as launch

    d = tmp_path / "model"
    shutil.copytree(model_dir, d, ignore=shutil.ignore_patterns("*.safetensors", "chat_template.jinja"))
    http = port("no_template")
    s = replace(
        server,
        openai_port=0,
        model_dir=str(d),
        build_dir=str(tmp_path / "b"),
        models="render_chat",
        http_port=http,
        grpc_port=http + 1,
        metrics_port=http + 2,
    )
    assert launch.start(s) == 0
    try:
        with RendererClient(f"127.0.0.1:{s.http_port}") as c:
            with pytest.raises(RequestError) as e:
                c.render_chat([{"role": "user", "content": "hi"}])
            assert e.value.is_client_error
            assert (
                "As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
                "chat template if the tokenizer does not define one."
            ) in e.value.message
            ok = c.render_chat(
                [{"role": "user", "content": "hi"}], chat_params={"chat_template": "{{ messages[0].content }}"}
            )
            assert ok.rendered_prompt == "hi"
    finally:
        launch.stop(s)


@pytest.mark.parametrize("template, error, message", HOSTILE, ids=[t[:60] for t, _, _ in HOSTILE])
def test_hostile_templates_refused_without_hurting_the_server(client, template, error, message):
    with pytest.raises(RequestError) as e:
        client.render_chat([{"role": "user", "content": "hi"}], chat_params={"chat_template": template})
    assert e.value.is_client_error
    if message:
        assert message in e.value.message
    assert client.is_ready()
    assert client.render_chat([{"role": "user", "content": "still fine"}]).input_ids


@pytest.mark.parametrize("stream", [False, True])
def test_chat_answers(client, stream):
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    pieces = list(client.generate("chat", messages=msgs, max_tokens=20, stream=stream))
    text = "".join(p.text for p in pieces)
    assert "Paris" in text
    if stream:
        [whole] = list(client.generate("chat", messages=msgs, max_tokens=20, stream=False))
        assert text == whole.text and len(pieces) > 1
