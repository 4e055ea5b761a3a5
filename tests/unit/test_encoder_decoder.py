"""Encoder-decoder prompts: renderer rules in-process, and the ensembles on the live server."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from renderer import Renderer, RendererConfig
from renderer.encoder_decoder import EncoderDecoderRenderer, encoder_decoder_prompt
from renderer.errors import EncoderDecoderError


@pytest.fixture(scope="module")
def encdec(encdec_dir):
    return EncoderDecoderRenderer(Renderer.from_config(RendererConfig(model_dir=str(encdec_dir))))


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
