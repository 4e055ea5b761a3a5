"""Prompt embeddings end to end: safe loading, vLLM's rules and messages, generation parity."""

from __future__ import annotations

import base64
import io
import os
import pickle
from dataclasses import replace

import numpy as np
import pytest
import ports
import torch

from client import RendererClient, RequestError

# Every test here talks to a real tritonserver.
pytestmark = pytest.mark.live

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def embed_table(model_dir):
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        name = next(k for k in f.keys() if k.endswith("embed_tokens.weight"))
        return f.get_tensor(name)


def torch_bytes(t) -> bytes:
    buf = io.BytesIO()
    torch.save(t, buf)
    return buf.getvalue()


def safetensors_bytes(t) -> bytes:
    from safetensors.torch import save

    return save({"embeds": t.contiguous()})


@pytest.fixture(scope="module")
def prompt_rows(embed_table, hf_tokenizer):
    return embed_table[hf_tokenizer(PROMPT).input_ids]


@pytest.mark.parametrize("encode", ["torch", "torch-base64", "safetensors", "safetensors-base64", "batched-3d"])
def test_render_embeds_forms(client, prompt_rows, encode):
    t = prompt_rows.unsqueeze(0) if encode == "batched-3d" else prompt_rows
    raw = safetensors_bytes(t) if encode.startswith("safetensors") else torch_bytes(t)
    if encode.endswith("base64"):
        raw = base64.b64encode(raw)
    r = client.render_completion(prompt_embeds=raw)
    assert r.input_ids == []
    assert int(r.outputs["input_lengths"][0]) == len(prompt_rows)
    np.testing.assert_array_equal(r.outputs["input_embeds"], prompt_rows.float().numpy())


def test_float32_embeds_are_rounded_to_the_model_dtype(client, prompt_rows):
    noisy = prompt_rows.float() + 1e-4
    r = client.render_completion(prompt_embeds=torch_bytes(noisy))
    np.testing.assert_array_equal(r.outputs["input_embeds"], noisy.to(torch.bfloat16).float().numpy())


def test_embeds_generate_what_the_token_ids_generate(client, prompt_rows, hf_tokenizer):
    by_ids = list(client.generate("completion", prompt_token_ids=hf_tokenizer(PROMPT).input_ids, max_tokens=10))[0]
    by_embeds = list(client.generate("completion", prompt_embeds=torch_bytes(prompt_rows), max_tokens=10))[0]
    assert by_embeds.output_ids == by_ids.output_ids and by_embeds.text == by_ids.text
    streamed = list(client.generate("completion", prompt_embeds=torch_bytes(prompt_rows), max_tokens=10, stream=True))
    assert "".join(p.text for p in streamed) == by_ids.text


def test_rows_count_as_tokens_for_truncation_and_length(client, prompt_rows):
    r = client.render_completion(
        prompt_embeds=torch_bytes(prompt_rows), tokenize_params={"truncate_prompt_tokens": 2, "truncation_side": "left"}
    )
    np.testing.assert_array_equal(r.outputs["input_embeds"], prompt_rows[-2:].float().numpy())
    with pytest.raises(RequestError, match=f"your prompt contains {len(prompt_rows)} input tokens"):
        client.render_completion(prompt_embeds=torch_bytes(prompt_rows), tokenize_params={"max_total_tokens": 3})


class Exploit:
    def __reduce__(self):
        return (os.system, (f"touch /tmp/embeds-pwned-{os.getpid()}",))


def test_malicious_pickle_is_refused_and_never_runs(client, tmp_path):
    marker = f"/tmp/embeds-pwned-{os.getpid()}"
    payload = pickle.dumps(Exploit())
    buf = io.BytesIO()
    torch.save({"x": torch.zeros(1)}, buf)  # a real zip container...
    for raw in (payload, base64.b64encode(payload)):
        with pytest.raises(RequestError) as e:
            client.render_completion(prompt_embeds=raw)
        assert e.value.is_client_error
        assert "could not be deserialized as a torch tensor" in e.value.message
    assert not os.path.exists(marker)


def _sparse_out_of_bounds() -> bytes:
    indices = torch.tensor([[0, 99], [0, 1]])
    t = torch.sparse_coo_tensor(indices, torch.ones(2), (2, 576), check_invariants=False)
    return torch_bytes(t)


def _two_tensor_safetensors(rows) -> bytes:
    from safetensors.torch import save

    return save({"a": rows.clone(), "b": rows.clone()})


BAD = [
    ("wrong rank", lambda rows: torch_bytes(rows[0]), "prompt_embeds must be of shape (seq_len, hidden_size)"),
    (
        "rank 4",
        lambda rows: torch_bytes(rows.reshape(1, 1, *rows.shape)),
        "prompt_embeds must be of shape (seq_len, hidden_size)",
    ),
    (
        "wrong hidden size",
        lambda rows: torch_bytes(rows[:, :100]),
        "`prompt_embeds` hidden_size 100 does not match the model's hidden_size 576.",
    ),
    (
        "non-float",
        lambda rows: torch_bytes(torch.ones(3, 576, dtype=torch.int64)),
        "`prompt_embeds` dtype torch.int64 is not a floating-point type",
    ),
    ("corrupt bytes", lambda rows: torch_bytes(rows)[:200], "could not be deserialized as a torch tensor"),
    ("not a tensor", lambda rows: torch_bytes({"a": rows}), "payload did not deserialize to a torch.Tensor"),
    ("garbage", lambda rows: b"\x00\x01 not base64 at all \xff", "neither a serialized tensor nor base64"),
    ("nan", lambda rows: torch_bytes(torch.full((2, 576), float("nan"))), "NaN or infinite"),
    ("sparse out of bounds", lambda rows: _sparse_out_of_bounds(), "prompt_embeds"),
    ("two tensors in safetensors", lambda rows: _two_tensor_safetensors(rows), "exactly one tensor"),
]


@pytest.mark.parametrize("name, make, message", BAD, ids=[b[0] for b in BAD])
def test_bad_embeds_are_400s(client, prompt_rows, name, make, message):
    with pytest.raises(RequestError) as e:
        client.render_completion(prompt_embeds=make(prompt_rows))
    assert e.value.is_client_error, e.value.message
    assert message in e.value.message
    assert client.is_ready()


def test_detokenization_on_embeds_is_refused(client, prompt_rows):
    with pytest.raises(RequestError, match="Cannot run detokenization on embeddings"):
        client.render_completion(prompt_embeds=torch_bytes(prompt_rows), tokenize_params={"needs_detokenization": True})


@pytest.fixture(scope="module")
def embeds_off_server(server_settings, tmp_path_factory):
    """A second, render-only server with the flag off (vLLM's default)."""
    from launcher import cli as launch

    s = replace(
        server_settings,
        openai_port=0,
        enable_prompt_embeds=False,
        models="render_completion",
        build_dir=str(tmp_path_factory.mktemp("embeds-off")),
        http_port=ports.port("prompt_embeds"),
        grpc_port=ports.port("prompt_embeds") + 1,
        metrics_port=ports.port("prompt_embeds") + 2,
    )
    assert launch.start(s) == 0
    yield s
    launch.stop(s)


def test_feature_off_is_vllms_error(embeds_off_server, prompt_rows):
    with RendererClient(f"127.0.0.1:{embeds_off_server.http_port}") as c:
        with pytest.raises(RequestError) as e:
            c.render_completion(prompt_embeds=torch_bytes(prompt_rows))
        assert e.value.is_client_error
        assert "You must set `--enable-prompt-embeds` to input `prompt_embeds`." in e.value.message
        assert c.render_completion("text still works").input_ids
