"""Token generation with a transformers causal LM: the reference ``llm`` behind the ensembles.

Not a serving engine (no continuous batching); it exists so the ensembles run end to end on
the embedded model. Greedy when temperature is 0; otherwise seeded temperature / top-k / top-p
sampling. Stops at the end id, a stop string, ``max_tokens`` or the context length.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from .detokenizer import find_stop
from .sampling import SamplingParams
from .tokenizer import Tokenizer


@dataclass(frozen=True)
class Step:
    """One generation step as the caller sees it."""

    new_ids: list[int]
    """Ids produced by this step."""

    finish_reason: str | None
    """None while generating; "stop" (end id or stop string) or "length" on the last step."""


class Generator:
    """Runs a causal LM from a Hugging Face folder, one request at a time."""

    def __init__(self, model_dir: str | Path, *, device: str = "cpu", tokenizer: Tokenizer | None = None) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM

        self._torch = torch
        self.device = device
        dtype = torch.float32 if device == "cpu" else torch.bfloat16  # bf16 matmuls are slow on CPU
        self.is_encoder_decoder = bool(getattr(AutoConfig.from_pretrained(str(model_dir)), "is_encoder_decoder", False))
        auto = AutoModelForSeq2SeqLM if self.is_encoder_decoder else AutoModelForCausalLM
        self.model = auto.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
        self.tokenizer = tokenizer or Tokenizer.from_pretrained(model_dir)
        cfg = self.model.config
        self.max_len = int(getattr(cfg, "max_position_embeddings", 0) or 2048)

    def generate(
        self,
        input_ids: Sequence[int],
        max_tokens: int,
        *,
        end_ids: Sequence[int] = (),
        sampling: SamplingParams = SamplingParams(),
        inputs_embeds: "object | None" = None,
        prompt_len: int | None = None,
        decoder_input_ids: Sequence[int] | None = None,
    ) -> Iterator[Step]:
        """Yield one ``Step`` per token. For encoder-decoder models ``input_ids`` feed the
        encoder and ``decoder_input_ids`` (starting with the decoder start token) the decoder."""
        torch = self._torch
        gen = None
        if sampling.temperature > 0:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(sampling.seed if sampling.seed is not None else torch.seed())
        if self.is_encoder_decoder:
            budget = min(max_tokens, self.max_len - len(decoder_input_ids or ()))
        else:
            budget = min(max_tokens, self.max_len - (len(input_ids) if prompt_len is None else prompt_len))
        if budget <= 0:
            yield Step([], "length")
            return
        generated: list[int] = []
        scanned = 0
        with torch.inference_mode():
            past = None  # the KV cache, grown one token per step
            if self.is_encoder_decoder:
                step_in = {"input_ids": torch.tensor([list(input_ids)], device=self.device),
                           "decoder_input_ids": torch.tensor([list(decoder_input_ids)], device=self.device)}
            elif inputs_embeds is not None:
                step_in = {"inputs_embeds": inputs_embeds.to(self.device, self.model.dtype).unsqueeze(0)}
            else:
                step_in = {"input_ids": torch.tensor([list(input_ids)], device=self.device)}
            for n in range(budget):
                out = self.model(**step_in, cache=past, use_cache=True)
                past = out.cache
                token = self._pick(out.logits[0, -1], sampling, gen)
                generated.append(token)
                if token in end_ids:
                    yield Step([token], "stop")
                    return
                if sampling.stop:
                    text = self.tokenizer.decode(generated, skip_special_tokens=True)
                    # Rescan only the tail that could hold a stop string completed by this token.
                    start = max(0, scanned - max(len(s) for s in sampling.stop))
                    if find_stop(text, sampling.stop, start) is not None:
                        yield Step([token], "stop")
                        return
                    scanned = len(text)
                if n == budget - 1:
                    yield Step([token], "length")
                    return
                yield Step([token], None)
                next_ids = torch.tensor([[token]], device=self.device)
                if self.is_encoder_decoder:
                    # The encoder ran once; later steps only extend the decoder.
                    step_in = {"encoder_outputs": (out.encoder_last_hidden_state,), "decoder_input_ids": next_ids}
                else:
                    step_in = {"input_ids": next_ids}

    def _pick(self, logits: "object", s: SamplingParams, gen: "object | None") -> int:
        torch = self._torch
        if s.temperature == 0:
            return int(torch.argmax(logits))
        logits = logits.float() / s.temperature
        if s.top_k > 0 and s.top_k < logits.numel():
            kth = torch.topk(logits, s.top_k).values[-1]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if s.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            # Drop tokens once the mass before them already reaches top_p (the top one stays).
            drop = (torch.cumsum(probs, dim=-1) - probs) >= s.top_p
            sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
            logits = torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)
        probs = torch.softmax(logits, dim=-1)
        return int(torch.multinomial(probs, 1, generator=gen))
