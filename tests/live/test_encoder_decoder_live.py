"""Encoder-decoder prompts through ``render_encoder_decoder`` and ``encoder_decoder_completion`` on the live
server: ids equal transformers', the decoder start token, bad requests refused, generation end to end.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from client import RequestError


def enc_dec(client, **tensors):
    arr = {}
    for k, v in tensors.items():
        arr[k] = np.array([[v.encode()]], dtype=object) if isinstance(v, str) else np.asarray([v], np.int32)
    return client.infer("render_encoder_decoder", arr)


@pytest.mark.live
def test_ids_equal_transformers_for_both_prompts(client, hf_tokenizer):
    out = enc_dec(client, encoder_prompt="translate this sentence", decoder_prompt="Le début")
    assert out["encoder_input_ids"].tolist() == hf_tokenizer("translate this sentence").input_ids
    assert out["decoder_input_ids"].tolist() == [0] + hf_tokenizer("Le début").input_ids
    assert int(out["decoder_input_lengths"][0]) == len(out["decoder_input_ids"])


@pytest.mark.live
def test_missing_decoder_prompt_gets_the_decoder_start_token(client, encdec_dir):
    cfg = json.loads((encdec_dir / "config.json").read_text())
    out = enc_dec(client, encoder_prompt="only an encoder prompt")
    assert out["decoder_input_ids"].tolist() == [cfg["decoder_start_token_id"]]


@pytest.mark.live
def test_token_id_prompts_and_start_token_not_doubled(client):
    out = enc_dec(client, encoder_prompt_token_ids=[5, 6, 7], decoder_prompt_token_ids=[0, 9])
    assert out["encoder_input_ids"].tolist() == [5, 6, 7]
    assert out["decoder_input_ids"].tolist() == [0, 9]


@pytest.mark.parametrize(
    "tensors, message",
    [
        ({"decoder_prompt": "no encoder"}, "Either encoder_prompt or encoder_prompt_token_ids must be provided."),
        (
            {"encoder_prompt": "a", "encoder_prompt_token_ids": [1]},
            "Only one of encoder_prompt or encoder_prompt_token_ids",
        ),
        ({"encoder_prompt": ""}, "The encoder prompt cannot be empty"),
        ({"encoder_prompt_token_ids": [99999]}, "Token id 99999 is out of vocabulary"),
    ],
)
@pytest.mark.live
def test_bad_encoder_decoder_requests(client, tensors, message):
    with pytest.raises(RequestError) as e:
        enc_dec(client, **tensors)
    assert e.value.is_client_error and message in e.value.message


@pytest.mark.live
def test_generates_end_to_end_like_transformers(client, encdec_dir, hf_tokenizer):
    import torch
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(encdec_dir)
    ids = hf_tokenizer("hello world").input_ids
    ref = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)[0, 1:].tolist()
    tensors = {"encoder_prompt": np.array([[b"hello world"]], dtype=object), "max_tokens": np.array([[8]], np.int32)}
    [whole] = list(client.stream("encoder_decoder_completion", {**tensors, "stream": np.array([[False]])}))
    assert whole.output_ids == ref
    pieces = list(client.stream("encoder_decoder_completion", {**tensors, "stream": np.array([[True]])}))
    assert "".join(p.text for p in pieces) == whole.text
