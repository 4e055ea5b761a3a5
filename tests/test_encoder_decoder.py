"""Encoder-decoder prompts: renderer rules in-process, and the ensembles on the live server."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import numpy as np
import pytest

from client import RequestError
from renderer import Renderer, RendererConfig
from renderer.encoder_decoder import EncoderDecoderRenderer, encoder_decoder_prompt
from renderer.errors import EncoderDecoderError


@pytest.fixture(scope="module")
def encdec_dir(server_settings):
    from model_builders import default_model, seq2seq_model

    return seq2seq_model.build(
        server_settings.resolved_encdec_model_dir, default_model.build(server_settings.resolved_model_dir)
    )


@pytest.fixture(scope="module")
def encdec(encdec_dir):
    return EncoderDecoderRenderer(Renderer.from_config(RendererConfig(model_dir=str(encdec_dir))))


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


def test_decoder_start_falls_back_to_bos_then_errors(encdec):
    base = encdec.renderer
    no_start = EncoderDecoderRenderer(
        Renderer(base.tokenizer, replace(base.info, decoder_start_token_id=None), base.config)
    )
    assert no_start.decoder_start_token_id() == base.tokenizer.bos_token_id == 1

    class NoBos:
        bos_token_id = None

    neither = EncoderDecoderRenderer(Renderer(NoBos(), replace(base.info, decoder_start_token_id=None), base.config))  # type: ignore[arg-type]
    with pytest.raises(EncoderDecoderError, match="^Cannot find decoder start token id or <BOS>$"):
        neither.decoder_start_token_id()


def test_async_twin_matches_sync_and_keeps_errors_per_item(encdec):
    p = encdec.renderer.default_completion_params
    prompts = [
        encoder_decoder_prompt(encoder_text="a b c", decoder_text="x"),
        encoder_decoder_prompt(encoder_token_ids=[]),
        encoder_decoder_prompt(encoder_text="only encoder", cache_salt="salt"),
    ]
    sync = encdec.render_batch(prompts, [p] * 3)
    both = asyncio.run(encdec.render_batch_async(prompts, [p] * 3))
    for a, b in zip(sync, both):
        if isinstance(a, Exception):
            assert type(a) is type(b) and str(a) == str(b) == "The encoder prompt cannot be empty"
        else:
            assert (a.encoder.prompt_token_ids, a.decoder_prompt_token_ids) == (
                b.encoder.prompt_token_ids,
                b.decoder_prompt_token_ids,
            )
    assert sync[2].encoder.cache_salt == "salt", "cache_salt belongs to the encoder (target) prompt"
