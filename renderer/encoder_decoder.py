"""Encoder-decoder prompts: an encoder prompt and an optional decoder prompt (vLLM semantics).

Both parts go through the same tokenization step and parameters; in the async form they are
tokenized concurrently. The decoder input always starts with the decoder start token: the
model's ``decoder_start_token_id``, else BOS, else vLLM's error. Prompt extras such as
``cache_salt`` belong to the encoder prompt (vLLM's "target prompt" of an encoder-decoder model).

The server's ``MAX_MODEL_LEN`` bounds each prompt here too (``encoder_decoder_max_model_len``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .errors import DecoderStartTokenError, EncoderDecoderFormsError, EncoderPromptMissingError, RenderError
from .model_info import ModelInfo
from .params import TokenizeParams
from .prompts import EngineInput, RawPrompt, TokenizedPrompt, completion_prompt
from .renderer import Renderer, RendererConfig, capture_error, split_failed


def encoder_decoder_max_model_len(max_model_len: int, model_context: int) -> int:
    """The context length the encoder-decoder model is served with.

    ``MAX_MODEL_LEN`` (``max_model_len``; 0 for unset) names the served model's context; the
    encoder-decoder model is a second model in the same server, whose own context
    (``model_context``) may be shorter. So the setting applies where it fits, and is capped at the
    model's context where it does not, rather than refusing to load a model the setting was not
    written for.
    """
    if max_model_len < 0:
        raise ValueError(f"max_model_len must be 0 (the model's context) or positive, got {max_model_len}")
    return min(max_model_len, model_context) if max_model_len else model_context


@dataclass(frozen=True)
class EncoderDecoderPrompt:
    """Step-1 form of an encoder-decoder request."""

    encoder_prompt: RawPrompt
    """What the encoder reads (carries ``cache_salt``)."""

    decoder_prompt: RawPrompt | None
    """Optional decoder prefix; None starts the decoder from its start token alone."""


@dataclass(frozen=True)
class EncoderDecoderInput:
    """What an encoder-decoder model consumes."""

    encoder: EngineInput
    """The encoder's input ids (and text, salt, arrival time)."""

    decoder_prompt_token_ids: list[int]
    """Decoder input ids, always starting with the decoder start token."""

    decoder_prompt: str | None
    """Decoder prompt text, when given as text."""


def encoder_decoder_prompt(
    *,
    encoder_text: bytes | str | None = None,
    encoder_token_ids: Sequence[int] | None = None,
    decoder_text: bytes | str | None = None,
    decoder_token_ids: Sequence[int] | None = None,
    cache_salt: bytes | str | None = None,
) -> EncoderDecoderPrompt:
    """Step 1: exactly one encoder form, at most one decoder form."""
    if encoder_text is None and encoder_token_ids is None:
        raise EncoderPromptMissingError()
    if encoder_text is not None and encoder_token_ids is not None:
        raise EncoderDecoderFormsError("encoder")
    if decoder_text is not None and decoder_token_ids is not None:
        raise EncoderDecoderFormsError("decoder")
    enc = completion_prompt(text=encoder_text, token_ids=encoder_token_ids, cache_salt=cache_salt)
    dec = None
    if decoder_text is not None or decoder_token_ids is not None:
        dec = completion_prompt(text=decoder_text, token_ids=decoder_token_ids)
    return EncoderDecoderPrompt(enc, dec)


class EncoderDecoderRenderer:
    """The renderer's steps for encoder-decoder models, over a ``Renderer`` for the model."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer

    @classmethod
    def from_model_dir(
        cls, model_dir: str | Path, *, max_model_len: int = 0, tokenizer_backend: str = "auto"
    ) -> "EncoderDecoderRenderer":
        """The renderer for a model folder, bounded by ``encoder_decoder_max_model_len``."""
        context = ModelInfo.from_model_dir(model_dir).max_model_len
        return cls(
            Renderer.from_config(
                RendererConfig(
                    model_dir=str(model_dir),
                    max_model_len=encoder_decoder_max_model_len(max_model_len, context),
                    tokenizer_backend=tokenizer_backend,
                )
            )
        )

    def decoder_start_token_id(self) -> int:
        start = self.renderer.info.decoder_start_token_id
        if start is None:
            start = self.renderer.tokenizer.bos_token_id  # vLLM falls back on <BOS>
        if start is None:
            raise DecoderStartTokenError()
        return int(start)

    def decoder_ids(self, decoder: TokenizedPrompt | None) -> list[int]:
        start = self.decoder_start_token_id()
        ids = [] if decoder is None else list(decoder.prompt_token_ids)
        if not ids or ids[0] != start:
            ids = [start] + ids
        return ids

    def render_batch(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[Any]:
        """Steps 2-4 for a batch; items are step-1 results or the errors they earned."""
        ok, out = split_failed(prompts, params)
        # One tokenize call for every encoder and decoder prompt of the batch.
        flat, flat_params, where = [], [], []
        for i in ok:
            pr: EncoderDecoderPrompt = prompts[i]
            for part in ("encoder_prompt", "decoder_prompt"):
                raw = getattr(pr, part)
                if raw is not None:
                    flat.append(capture_error(self.renderer.render_prompt, raw))
                    flat_params.append(params[i])
                    where.append((i, part))
        tokenized = self._tokenize(flat, flat_params)
        parts: dict[int, dict[str, Any]] = {i: {} for i in ok}
        for (i, part), t in zip(where, tokenized):
            parts[i][part] = t
        arrival = time.time()
        for i in ok:
            out[i] = capture_error(self._process, parts[i], arrival)
        return out

    def _tokenize(self, prompts: list[Any], params: list[TokenizeParams]) -> list[Any]:
        good, res = split_failed(prompts, params)
        for k, t in zip(good, self.renderer.tokenize_prompts([prompts[k] for k in good], [params[k] for k in good])):
            res[k] = t
        return res

    def _process(self, part: dict[str, Any], arrival: float) -> EncoderDecoderInput:
        for value in part.values():
            if isinstance(value, RenderError):
                raise value
        enc = self.renderer.process_for_engine(part["encoder_prompt"], arrival, prompt_type="encoder")
        dec = part.get("decoder_prompt")
        return EncoderDecoderInput(
            encoder=enc,
            decoder_prompt_token_ids=self.decoder_ids(dec),
            decoder_prompt=None if dec is None else dec.prompt,
        )

    async def render_batch_async(self, prompts: Sequence[Any], params: Sequence[Any]) -> list[Any]:
        """Async twin: each request's encoder and decoder prompts are tokenized concurrently."""

        async def one(pr: Any, pa: Any) -> Any:
            if isinstance(pr, Exception) or isinstance(pa, Exception):
                return pr if isinstance(pr, Exception) else pa
            names = [n for n in ("encoder_prompt", "decoder_prompt") if getattr(pr, n) is not None]
            results = await asyncio.gather(
                *(
                    asyncio.to_thread(
                        self._tokenize, [capture_error(self.renderer.render_prompt, getattr(pr, n))], [pa]
                    )
                    for n in names
                )
            )
            return capture_error(self._process, {n: r[0] for n, r in zip(names, results)}, time.time())

        return list(await asyncio.gather(*(one(pr, pa) for pr, pa in zip(prompts, params))))
