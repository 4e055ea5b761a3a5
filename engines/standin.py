"""The embedded stand-in engine: a transformers model that generates as TensorRT-LLM's engine does.

Not a serving engine (one request at a time, no batching); it exists so the ensembles run end to
end on the embedded model with no GPU, and it follows the ``tensorrt_llm`` semantics a real
engine has (``engines/trtllm_inputs.py``): it stops on ``end_id`` or a stop word only (not on
every EOS id of the model: the ensembles pass the others as stop words), honours ``min_tokens``,
bad words, the penalties and ``runtime_top_k`` = 1 as greedy, and reads prompt-table rows.
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from engines.trtllm_inputs import EngineRequest


@dataclass(frozen=True)
class Step:
    """One generation step."""

    new_ids: list[int]
    """Ids produced by this step."""

    finished: bool
    """Whether this is the last step."""


class Generator:
    """Runs a transformers model from a Hugging Face folder, one request at a time."""

    def __init__(self, model_dir: str | Path, *, device: str = "cpu") -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoModelForSeq2SeqLM

        self._torch = torch
        self.device = device
        self.model_dir = Path(model_dir)
        dtype = torch.float32 if device == "cpu" else torch.bfloat16  # bf16 matmuls are slow on CPU
        config = AutoConfig.from_pretrained(str(model_dir))
        self.is_encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
        self.is_vision_language = getattr(config, "vision_config", None) is not None
        auto = (
            AutoModelForSeq2SeqLM
            if self.is_encoder_decoder
            else AutoModelForImageTextToText
            if self.is_vision_language
            else AutoModelForCausalLM
        )
        # Weights load on the calling thread: transformers' thread-pool loader once hung a stub's
        # load for minutes on these shared cores, and a small model gains nothing from it.
        os.environ.setdefault("HF_DEACTIVATE_ASYNC_LOAD", "1")
        self.model = auto.from_pretrained(str(model_dir), dtype=dtype).to(device).eval()
        cfg = self.model.config
        text_cfg = getattr(cfg, "text_config", None) or cfg
        self.vocab_size = int(text_cfg.vocab_size)
        self.max_len = int(getattr(text_cfg, "max_position_embeddings", 0) or 2048)
        self.image_token_id = getattr(cfg, "image_token_id", None) or getattr(cfg, "image_token_index", None)

    @functools.cached_property
    def _family(self) -> Any:
        from renderer.multimodal.registry import load_family

        return load_family(self.model_dir)

    def _normalized(self, pixel_values: Any) -> Any:
        """uint8 ``pixel_values`` (``MM_DEVICE_DO_NORMALIZE``) normalized as the model's processor
        config says, as vLLM's model does on the device (here with the fast processor's table, so
        the values equal those ``mm_process`` sends with the setting off); float32 as it came."""
        if getattr(pixel_values, "dtype", None) != np.uint8:
            return pixel_values
        return self._family.normalize_raw(pixel_values)

    def generate(self, req: EngineRequest, cancelled: threading.Event | None = None) -> Iterator[Step]:
        """One ``Step`` per generated id; the last has ``finished``. ``cancelled`` ends it early."""
        if req.images:
            yield from self._generate_multimodal(req, cancelled)
            return
        torch = self._torch
        gen = None
        if not req.greedy:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(req.seed if req.seed is not None else torch.seed())
        used = len(req.decoder_input_ids or ()) if self.is_encoder_decoder else req.prompt_len
        budget = min(req.max_tokens, self.max_len - used)
        if budget <= 0:
            yield Step([], True)
            return
        history = list(req.input_ids) if not self.is_encoder_decoder else list(req.decoder_input_ids or ())
        generated: list[int] = []
        with torch.inference_mode():
            past = None  # the KV cache, grown one id per step
            if self.is_encoder_decoder:
                step_in = {
                    "input_ids": torch.tensor([req.input_ids], device=self.device),
                    "decoder_input_ids": torch.tensor([req.decoder_input_ids], device=self.device),
                }
            elif req.prompt_embeds is not None:
                embeds = torch.from_numpy(req.prompt_embeds).to(self.device, self.model.dtype)
                step_in = {"inputs_embeds": embeds.unsqueeze(0)}
            else:
                step_in = {"input_ids": torch.tensor([req.input_ids], device=self.device)}
            for n in range(budget):
                if cancelled is not None and cancelled.is_set():
                    yield Step([], True)
                    return
                out = self.model(**step_in, cache=past, use_cache=True)
                past = out.cache
                logits = process_logits(out.logits[0, -1].float(), req, history, generated)
                token = pick(logits, req, gen)
                generated.append(token)
                done = n == budget - 1 or req.ends(generated)
                yield Step([token], done)
                if done:
                    return
                next_ids = torch.tensor([[token]], device=self.device)
                if self.is_encoder_decoder:
                    # The encoder ran once; later steps only extend the decoder.
                    step_in = {"encoder_outputs": (out.encoder_last_hidden_state,), "decoder_input_ids": next_ids}
                else:
                    step_in = {"input_ids": next_ids}

    def _generate_multimodal(self, req: EngineRequest, cancelled: threading.Event | None) -> Iterator[Step]:
        """Vision-language models through transformers' ``generate`` (their position ids, e.g.
        Qwen2-VL's 3-D rope, are set up there), streamed id by id from its thread, with the same
        logits rules as the text path.

        Long because transformers' ``generate`` takes its streamer and logits processors as classes, defined here over this request's state."""
        import queue

        from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList
        from transformers.generation.stopping_criteria import StoppingCriteria
        from transformers.generation.streamers import BaseStreamer

        torch = self._torch
        budget = min(req.max_tokens, self.max_len - len(req.input_ids))
        if budget <= 0:
            yield Step([], True)
            return
        ids_q: queue.Queue = queue.Queue()
        generated: list[int] = []
        history = list(req.input_ids)
        gen = None
        if not req.greedy:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(req.seed if req.seed is not None else torch.seed())

        class Streamer(BaseStreamer):
            prompt_seen = False

            def put(self, value: Any) -> None:  # first call: the prompt; then one id per step
                if not self.prompt_seen:
                    self.prompt_seen = True
                    return
                ids_q.put(value.reshape(-1).tolist())

            def end(self) -> None:
                ids_q.put(None)

        class Rules(LogitsProcessor):
            """Our logits rules and pick: the chosen id gets every other id masked."""

            def __call__(self, input_ids: Any, scores: Any) -> Any:
                logits = process_logits(scores[0].float(), req, history, generated)
                token = pick(logits, req, gen)
                generated.append(token)
                out = torch.full_like(scores, float("-inf"))
                out[0, token] = 0.0
                return out

        class Stop(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                done = req.ends(generated) or (cancelled is not None and cancelled.is_set())
                return torch.full((input_ids.shape[0],), done, dtype=torch.bool)

        ids = torch.tensor([req.input_ids], device=self.device)
        extra = {
            k: torch.as_tensor(self._normalized(v) if k == "pixel_values" else v, device=self.device)
            for k, v in req.images.items()
            if k in ("pixel_values", "image_grid_thw", "image_sizes")
        }
        if "pixel_values" in extra:
            extra["pixel_values"] = extra["pixel_values"].to(self.model.dtype)
        if self.image_token_id is not None and "image_grid_thw" in extra:
            extra["mm_token_type_ids"] = (ids == self.image_token_id).long()
        kwargs = dict(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=budget,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
            streamer=Streamer(),
            logits_processor=LogitsProcessorList([Rules()]),
            stopping_criteria=[Stop()],
            temperature=None,
            top_p=None,
            top_k=None,
            **extra,
        )
        errors: list[BaseException] = []

        def run() -> None:
            try:
                with torch.inference_mode():
                    self.model.generate(**kwargs)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                errors.append(e)
                ids_q.put(None)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        pending = ids_q.get()
        while pending is not None:
            nxt = ids_q.get()
            yield Step(pending, nxt is None)
            pending = nxt
        worker.join()
        if errors:
            raise errors[0]


def process_logits(logits: Any, req: EngineRequest, history: list[int], generated: list[int]) -> Any:
    """Penalties, bad words and ``min_tokens`` on one step's logits (vLLM's semantics for the
    penalties: repetition over prompt and output ids, presence and frequency over output ids)."""
    import torch

    if req.repetition_penalty != 1.0 and (history or generated):
        seen = torch.tensor(sorted(set(history) | set(generated)), dtype=torch.long)
        vals = logits[seen]
        logits[seen] = torch.where(vals > 0, vals / req.repetition_penalty, vals * req.repetition_penalty)
    if generated and (req.presence_penalty or req.frequency_penalty):
        counts = torch.bincount(torch.tensor(generated, dtype=torch.long), minlength=logits.numel()).to(logits.dtype)
        logits -= req.frequency_penalty * counts + req.presence_penalty * (counts > 0).to(logits.dtype)
    banned = [
        w[-1]
        for w in req.bad_words
        if len(w) == 1 or (len(w) - 1 <= len(generated) and tuple(generated[-(len(w) - 1) :]) == w[:-1])
    ]
    if len(generated) < req.min_tokens:
        banned += [w[0] for w in req.stop_words if len(w) == 1] + ([req.end_id] if req.end_id >= 0 else [])
    if banned:
        logits[torch.tensor(banned, dtype=torch.long)] = float("-inf")
    return logits


def pick(logits: Any, req: EngineRequest, gen: Any) -> int:
    import torch

    if req.greedy:
        return int(torch.argmax(logits))
    logits = logits / req.temperature
    if 0 < req.top_k < logits.numel():
        kth = torch.topk(logits, req.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if req.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        # Drop ids once the mass before them already reaches top_p (the top one stays).
        drop = (torch.cumsum(probs, dim=-1) - probs) >= req.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(0, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1)
    return int(torch.multinomial(probs, 1, generator=gen))
