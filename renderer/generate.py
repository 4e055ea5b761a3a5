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
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForSeq2SeqLM

        self._torch = torch
        self.device = device
        dtype = torch.float32 if device == "cpu" else torch.bfloat16  # bf16 matmuls are slow on CPU
        config = AutoConfig.from_pretrained(str(model_dir))
        self.is_encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        self.is_vision_language = getattr(config, "vision_config", None) is not None
        auto = (AutoModelForSeq2SeqLM if self.is_encoder_decoder
                else AutoModelForImageTextToText if self.is_vision_language else AutoModelForCausalLM)
        self.model = auto.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
        self.tokenizer = tokenizer or Tokenizer.from_pretrained(model_dir)
        cfg = self.model.config
        text_cfg = getattr(cfg, "text_config", None) or cfg
        self.max_len = int(getattr(text_cfg, "max_position_embeddings", 0) or 2048)
        self.image_token_id = getattr(cfg, "image_token_id", None) or getattr(cfg, "image_token_index", None)

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
        mm_inputs: dict | None = None,
    ) -> Iterator[Step]:
        """Yield one ``Step`` per token. For encoder-decoder models ``input_ids`` feed the
        encoder and ``decoder_input_ids`` (starting with the decoder start token) the decoder;
        ``mm_inputs`` (``pixel_values`` and the family's grid or sizes) go to a vision-language model."""
        if mm_inputs:
            yield from self._generate_multimodal(input_ids, max_tokens, end_ids, sampling, mm_inputs)
            return
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

    def _generate_multimodal(self, input_ids: Sequence[int], max_tokens: int, end_ids: Sequence[int],
                             sampling: SamplingParams, mm_inputs: dict) -> Iterator[Step]:
        """Vision-language models through transformers' ``generate`` (their position ids, e.g.
        Qwen2-VL's 3-D rope, are set up there), streamed token by token from its thread."""
        import queue
        import threading

        from transformers.generation.stopping_criteria import StoppingCriteria
        from transformers.generation.streamers import BaseStreamer

        torch = self._torch
        budget = min(max_tokens, self.max_len - len(input_ids))
        if budget <= 0:
            yield Step([], "length")
            return
        tokens: queue.Queue = queue.Queue()
        stop_now = threading.Event()

        class Streamer(BaseStreamer):
            prompt_seen = False

            def put(self, value):  # first call: the prompt; then one token per step
                if not self.prompt_seen:
                    self.prompt_seen = True
                    return
                tokens.put(value.reshape(-1).tolist())

            def end(self):
                tokens.put(None)

        class StopOnRequest(StoppingCriteria):
            def __call__(self, input_ids, scores, **kwargs):
                return torch.full((input_ids.shape[0],), stop_now.is_set(), dtype=torch.bool)

        ids = torch.tensor([list(input_ids)], device=self.device)
        extra = {k: torch.as_tensor(v, device=self.device) for k, v in mm_inputs.items()}
        if "pixel_values" in extra:
            extra["pixel_values"] = extra["pixel_values"].to(self.model.dtype)
        if self.image_token_id is not None and "image_grid_thw" in extra:
            extra["mm_token_type_ids"] = (ids == self.image_token_id).long()
        kwargs = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=budget,
                      do_sample=sampling.temperature > 0, eos_token_id=list(end_ids) or None, streamer=Streamer(),
                      stopping_criteria=[StopOnRequest()], **extra)
        if sampling.temperature > 0:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or None)
            torch.manual_seed(sampling.seed if sampling.seed is not None else torch.seed())
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        errors: list[BaseException] = []

        def run():
            try:
                with torch.inference_mode():
                    self.model.generate(**kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(e)
                tokens.put(None)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        generated: list[int] = []
        pending = tokens.get()
        while pending is not None:
            nxt = tokens.get()
            generated += pending
            done = nxt is None
            if sampling.stop and not done:
                text = self.tokenizer.decode(generated, skip_special_tokens=True)
                if find_stop(text, sampling.stop) is not None:
                    stop_now.set()
                    worker.join()
                    yield Step(pending, "stop")
                    return
            if done:
                reason = "stop" if pending and pending[-1] in end_ids else "length"
                yield Step(pending, reason)
            else:
                yield Step(pending, None)
            pending = nxt
        worker.join()
        if errors:
            raise errors[0]
