"""``render_completion`` on a live tritonserver over HTTP and gRPC, against transformers."""

from __future__ import annotations

import copy
import json
import threading
import time
import urllib.request

import numpy as np
import pytest

from client import RequestError
from client.triton_client import completion_inputs

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

STRINGS = [
    "Hello world",
    "",
    " ",
    "  two leading spaces",
    "trailing spaces   ",
    "\n\n\t mixed whitespace \r\n",
    "The quick brown fox jumps over the lazy dog.",
    "ALL CAPS SHOUTING",
    "MiXeD cAsE",
    "ünïcödé àccénts ñ ß ø",
    "中文字符测试",
    "日本語のテキストです",
    "한국어 텍스트",
    "Ελληνικά κείμενα",
    "Русский текст",
    "עברית",
    "العربية",
    "emoji 😀🦩👩‍👩‍👧‍👦🇫🇷",
    "𝄞 musical symbols",
    "<|im_start|>user\nlooks like a chat<|im_end|>",
    "<|endoftext|>",
    "<s></s>[INST]",
    "<|im_start|>",
    "code: def f(x):\n    return x ** 2  # comment",
    '{"json": [1, 2, {"a": null}]}',
    "URLs http://example.com/path?q=1&r=2#frag",
    "numbers 3.14159 1e-10 -42 0x1F 1,000,000",
    "punctuation!!! ??? ... --- ___ *** ###",
    "a" * 300,
    "word " * 400,
    "\u200b zero width \u200d joiner",
    "combining e\u0301 and a\u0308",
    "tab\tseparated\tvalues",
    "mixed 中文 and English and emoji 🎉",
]


@pytest.mark.parametrize("add_special", [True, False])
def test_ids_equal_transformers(client, hf_tokenizer, add_special):
    for text in STRINGS:
        if text == "":
            continue  # the empty prompt is an error case, tested below
        r = client.render_completion(text, tokenize_params={"add_special_tokens": add_special})
        assert r.input_ids == hf_tokenizer(text, add_special_tokens=add_special).input_ids, text
        assert r.rendered_prompt == text
        assert int(r.outputs["input_lengths"][0]) == len(r.input_ids)
        assert r.token_offsets == []


@pytest.mark.parametrize("side", ["left", "right"])
def test_truncation_sides(client, hf_tokenizer, side):
    text = "one two three four five six seven eight nine ten"
    full = hf_tokenizer(text).input_ids
    r = client.render_completion(text, tokenize_params={"truncate_prompt_tokens": 4, "truncation_side": side})
    assert r.input_ids == (full[-4:] if side == "left" else full[:4])


def test_truncation_default_side_is_the_tokenizers(client, hf_tokenizer):
    text = "one two three four five six seven eight nine ten"
    r = client.render_completion(text, tokenize_params={"truncate_prompt_tokens": 3})
    full = hf_tokenizer(text).input_ids
    assert hf_tokenizer.truncation_side == "right" and r.input_ids == full[:3]


def test_truncation_minus_one_keeps_max_input(client, hf_tokenizer):
    text = "word " * 100
    r = client.render_completion(
        text,
        tokenize_params={
            "truncate_prompt_tokens": -1,
            "truncation_side": "left",
            "max_total_tokens": 50,
            "max_output_tokens": 10,
        },
    )
    assert r.input_ids == hf_tokenizer(text).input_ids[-40:]


def test_truncation_larger_than_context_error(client):
    with pytest.raises(RequestError) as e:
        client.render_completion("x", tokenize_params={"truncate_prompt_tokens": 9000})
    assert e.value.is_client_error
    assert (
        "truncate_prompt_tokens=9000 cannot be greater than max_total_tokens - max_output_tokens = 8192. "
        "Please request a smaller truncation size." in e.value.message
    )


def test_over_length_prompt_error(client):
    with pytest.raises(RequestError) as e:
        client.render_completion("hello " * 9000)
    assert e.value.is_client_error
    assert (
        "This model's maximum context length is 8192 tokens. However, you requested 0 output tokens and "
        "your prompt contains at least 8193 input tokens, for a total of at least 8193 tokens. Please reduce "
        "the length of the input prompt or the number of requested output tokens."
    ) in e.value.message


def test_over_length_token_ids_exact_count(client):
    with pytest.raises(RequestError) as e:
        client.render_completion(
            prompt_token_ids=[100] * 60, tokenize_params={"max_total_tokens": 64, "max_output_tokens": 8}
        )
    assert "your prompt contains 60 input tokens, for a total of 68 tokens" in e.value.message


def test_far_over_length_refused_before_tokenizing(client):
    with pytest.raises(RequestError) as e:
        client.render_completion("x" * 100_000, tokenize_params={"max_total_tokens": 100})
    assert e.value.is_client_error and "You passed 100000 input characters" in e.value.message


def test_offsets_equal_transformers(client, hf_tokenizer):
    for text in ["Hello world, how are you?", "<|im_start|>special inside<|im_end|>", "中文 🦩 mixed"]:
        r = client.render_completion(text, tokenize_params={"return_token_offsets": True})
        ref = hf_tokenizer(text, return_offsets_mapping=True)
        assert r.input_ids == ref.input_ids
        assert r.token_offsets == [tuple(o) for o in ref.offset_mapping]


def test_offsets_of_a_truncated_prompt(client, hf_tokenizer):
    text = "alpha beta gamma delta epsilon " * 40
    r = client.render_completion(
        text, tokenize_params={"return_token_offsets": True, "truncate_prompt_tokens": 5, "truncation_side": "left"}
    )
    ref_tok = copy.deepcopy(hf_tokenizer)
    ref_tok.truncation_side = "left"
    ref = ref_tok(text, truncation=True, max_length=5, return_offsets_mapping=True)
    assert r.input_ids == ref.input_ids
    assert r.token_offsets == [tuple(o) for o in ref.offset_mapping]
    assert all(text[s:e] == hf_tokenizer.decode([t]) for t, (s, e) in zip(r.input_ids, r.token_offsets))


def test_token_ids_pass_through_with_detokenization(client, hf_tokenizer):
    ids = hf_tokenizer("passthrough: ünïcödé 中文").input_ids
    r = client.render_completion(prompt_token_ids=ids, tokenize_params={"needs_detokenization": True})
    assert r.input_ids == ids and r.rendered_prompt == hf_tokenizer.decode(ids)
    r = client.render_completion(prompt_token_ids=ids)
    assert r.input_ids == ids and r.rendered_prompt == ""


def test_do_lower_case(client, hf_tokenizer):
    r = client.render_completion("MiXeD CaSe", tokenize_params={"do_lower_case": True})
    assert r.input_ids == hf_tokenizer("mixed case").input_ids


def test_cache_salt_rules(client):
    client.render_completion("salted", cache_salt="tenant-a")
    with pytest.raises(RequestError, match="cache_salt must be at most 1024 characters"):
        client.render_completion("salted", cache_salt="s" * 1025)
    with pytest.raises(RequestError, match="cache_salt must be a non-empty string"):
        client.render_completion("salted", cache_salt="")


BAD_REQUESTS = [
    (
        "no prompt",
        {"tokenize_params": np.array([[b"{}"]], dtype=object)},
        "Either prompt, prompt_token_ids or prompt_embeds must be provided",
    ),
    (
        "two prompt forms",
        {**completion_inputs("a"), "prompt_token_ids": np.array([[1]], np.int32)},
        "Exactly one of prompt, prompt_token_ids or prompt_embeds may be provided, got prompt and prompt_token_ids",
    ),
    ("invalid JSON", completion_inputs("a", tokenize_params="{not json"), "tokenize_params is not valid JSON"),
    ("JSON not an object", completion_inputs("a", tokenize_params="[1]"), "tokenize_params must be a JSON object"),
    (
        "unknown field",
        completion_inputs("a", tokenize_params={"truncate": 3}),
        "Unknown field(s) in tokenize_params: truncate",
    ),
    (
        "wrong type",
        completion_inputs("a", tokenize_params={"add_special_tokens": "no"}),
        "tokenize_params.add_special_tokens must be a boolean",
    ),
    (
        "bad side",
        completion_inputs("a", tokenize_params={"truncation_side": "up"}),
        "`truncation_side` must be either 'left' or 'right'.",
    ),
    ("invalid UTF-8", {"prompt": np.array([[b"ok \xff\xfe bad"]], dtype=object)}, "prompt is not valid UTF-8"),
    ("negative id", completion_inputs(prompt_token_ids=[5, -3]), "Token id -3 is out of vocabulary"),
    ("out-of-vocab id", completion_inputs(prompt_token_ids=[5, 49152]), "Token id 49152 is out of vocabulary"),
    ("empty prompt", completion_inputs(""), "The decoder prompt cannot be empty"),
    ("empty token ids", {"prompt_token_ids": np.zeros((1, 0), np.int32)}, "The decoder prompt cannot be empty"),
    ("two strings in prompt", {"prompt": np.array([[b"a", b"b"]], dtype=object)}, None),
    ("batch of two", {"prompt": np.array([[b"a"], [b"b"]], dtype=object)}, "must have batch size 1"),
    ("wrong dtype", {"prompt_token_ids": np.array([[1, 2]], np.int64)}, "prompt_token_ids"),
]


@pytest.mark.parametrize("name, tensors, message", BAD_REQUESTS, ids=[b[0] for b in BAD_REQUESTS])
def test_bad_request_is_a_400_and_server_stays_ready(client, name, tensors, message):
    with pytest.raises(RequestError) as e:
        client.infer("render_completion", tensors)
    assert e.value.is_client_error, (e.value.status, e.value.message)
    if message:
        assert message in e.value.message
    assert client.is_ready()
    assert client.render_completion("still fine").input_ids


def test_oversized_input_is_a_400(client, server):
    big = "x" * (server.max_input_bytes + 1)
    with pytest.raises(RequestError) as e:
        client.render_completion(big)
    assert e.value.is_client_error
    assert (
        f"Input 'prompt' is {len(big)} bytes, more than the limit of {server.max_input_bytes} bytes." in e.value.message
    )
    assert client.render_completion("small is fine").input_ids


def test_no_inputs_at_all_is_a_400(client):
    with pytest.raises(RequestError) as e:
        client.infer("render_completion", {})
    assert e.value.is_client_error


def test_bad_and_good_sharing_a_batch(server, hf_tokenizer):
    """Requests sent together share a dynamic batch; the bad ones fail alone."""
    from client import RendererClient

    def stats():
        with urllib.request.urlopen(f"{server.http_url}/v2/models/tokenize/stats") as r:
            s = json.load(r)["model_stats"][0]
        return s["inference_count"], s["execution_count"]

    good = [f"good request number {i}" for i in range(12)]
    results: dict[int, object] = {}
    barrier = threading.Barrier(24)

    def send(i):
        with RendererClient(f"{server.host}:{server.http_port}", "http") as c:
            barrier.wait()
            try:
                if i % 2 == 0:
                    results[i] = c.render_completion(good[i // 2]).input_ids
                else:
                    results[i] = c.render_completion(prompt_token_ids=[1, -i])
            except RequestError as e:
                results[i] = e

    inf0, exe0 = stats()
    threads = [threading.Thread(target=send, args=(i,)) for i in range(24)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    # Triton counts an execution in the model's statistics after its responses have gone out: read
    # them until all 24 requests are counted, for at most 5 s (once, 23 were counted at the first read).
    deadline = time.monotonic() + 5
    inf1, exe1 = stats()
    while inf1 - inf0 < 24 and time.monotonic() < deadline:
        time.sleep(0.05)
        inf1, exe1 = stats()
    for i in range(24):
        if i % 2 == 0:
            assert results[i] == hf_tokenizer(good[i // 2]).input_ids
        else:
            assert isinstance(results[i], RequestError) and f"Token id -{i} is out of vocabulary" in results[i].message
    assert inf1 - inf0 == 24
    assert exe1 - exe0 < 24, "no two requests shared a batch: the isolation was not exercised"


def test_http_generate_endpoint_and_curl_shape(server, hf_tokenizer):
    body = json.dumps({"prompt": "curl me", "tokenize_params": json.dumps({"return_token_offsets": True})}).encode()
    req = urllib.request.Request(f"{server.http_url}/v2/models/render_completion/generate", data=body, method="POST")
    with urllib.request.urlopen(req) as r:
        out = json.load(r)
    assert out["input_ids"] == hf_tokenizer("curl me").input_ids
    # The generate endpoint flattens tensors: offsets come as [s0, e0, s1, e1, ...].
    assert out["token_offsets"] == [
        x for o in hf_tokenizer("curl me", return_offsets_mapping=True).offset_mapping for x in o
    ]
