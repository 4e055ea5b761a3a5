"""The ``Renderer``: vLLM's four input steps over a batch of requests, sync and async.

1. render  - raw request fields to prompt forms (``prompts.completion_prompt``)
2. tokenize - one batched encode for every text prompt, then pad / truncate / length-check
3. extras  - merge ``cache_salt`` and processor kwargs into the target prompt
4. process - engine inputs, stamped with their arrival time

A batch never fails as a whole: each item of a result list is either its output or the
``RenderError`` that item earned, so one bad request does not fail the others batched with it.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass
import logging
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence, TypeVar, Union

from .errors import (
    EmbedsDetokenizeError,
    EmbedsDisabledError,
    EmbedsPaddingError,
    EmptyPromptError,
    NoPromptError,
    PromptTypeError,
    RenderError,
    TokenIdRangeError,
    TokenIdTypeError,
)
from .model_info import ModelInfo
from .params import TokenizeParams, request_tokenize_params
from .prompts import (
    EmbedsBytesPrompt,
    EmbedsPrompt,
    EngineInput,
    Prompt,
    RawPrompt,
    TextPrompt,
    TokenizedPrompt,
    TokensPrompt,
    completion_prompt,
    decode_utf8,
)
from .tokenizer import EncodeOptions, Tokenizer

logger = logging.getLogger(__name__)
T = TypeVar("T")
Result = Union[T, RenderError]


@dataclass(frozen=True)
class RendererConfig:
    """Server-wide renderer settings."""

    model_dir: str
    """Hugging Face model folder (tokenizer and config)."""

    max_model_len: int = 0
    """Context length; 0 takes the model config's."""

    enable_prompt_embeds: bool = False
    """vLLM's ``--enable-prompt-embeds``."""

    tokenizer_backend: str = "auto"
    """Text encoding engine: "auto", "huggingface" or "fastokens" (``renderer.tokenizer_backend``)."""

    tokenizer_record: str = ""
    """The folder holding the model's proven tokenizer record (``renderer.light_tokenizer``), which
    spares the stub transformers; empty: transformers loads the tokenizer."""


class Renderer:
    """Turns completion requests into engine inputs exactly as vLLM's renderer does."""

    def __init__(self, tokenizer: Tokenizer, info: ModelInfo, config: RendererConfig) -> None:
        self.tokenizer = tokenizer
        self.info = info
        self.config = config
        self._bagless: dict[tuple[bool, int | None], TokenizeParams] = {}

    @classmethod
    def from_config(cls, config: RendererConfig) -> "Renderer":
        info = ModelInfo.from_model_dir(config.model_dir, config.max_model_len)
        tokenizer = Tokenizer.from_pretrained(
            Path(config.model_dir), backend=config.tokenizer_backend, record=config.tokenizer_record or None
        )
        return cls(tokenizer, info, config)

    def warmup(self) -> bool:
        """Render one text prompt before the first request: the tokenizer's lazily computed
        bounds (the longest token: a walk over the vocabulary, about 20 ms for 49k tokens) and
        the encoder's first call are paid at load, not by a client's first request. Returns
        whether it rendered; a refusal (a context too short for the word) is logged, not fatal,
        as the chat template's warmup."""
        (result,) = self.render_batch(
            [self.render_prompt(completion_prompt(text="warmup"))], [self.default_completion_params]
        )
        if isinstance(result, BaseException):
            logger.warning("Tokenizer warmup failed: %s", result)
            return False
        return True

    # --- defaults ------------------------------------------------------------------------

    @property
    def default_completion_params(self) -> TokenizeParams:
        """Completions add the tokenizer's special tokens (vLLM default)."""
        return request_tokenize_params(self.info.max_model_len, None)

    def request_params(
        self, bag: Mapping[str, Any] | None, *, chat: bool = False, max_output_tokens: int | None = None
    ) -> TokenizeParams:
        """Defaults overlaid with a request's ``tokenize_params`` (and its ``max_tokens``)."""
        if bag is not None:
            return request_tokenize_params(self.info.max_model_len, bag, chat=chat, max_output_tokens=max_output_tokens)
        # Most requests send no bag: their (frozen) params are shared instead of rebuilt.
        key = (chat, max_output_tokens)
        params = self._bagless.get(key)
        if params is None:
            if len(self._bagless) >= 1024:
                self._bagless.clear()
            params = self._bagless[key] = request_tokenize_params(
                self.info.max_model_len, None, chat=chat, max_output_tokens=max_output_tokens
            )
        return params

    # --- step 1 ----------------------------------------------------------------------------

    def render_prompt(self, prompt: RawPrompt) -> Prompt:
        """Load embeds bytes (safely); other forms pass as they are."""
        if isinstance(prompt, EmbedsBytesPrompt):
            if not self.config.enable_prompt_embeds:
                raise EmbedsDisabledError()
            from .embeds import safe_load_prompt_embeds

            tensor = safe_load_prompt_embeds(prompt.raw, hidden_size=self.info.hidden_size, dtype=self._embeds_dtype)
            return EmbedsPrompt(prompt_embeds=tensor, cache_salt=prompt.cache_salt)
        if isinstance(prompt, TextPrompt) and not isinstance(prompt.prompt, str):
            raise PromptTypeError()
        return prompt

    @cached_property
    def _embeds_dtype(self) -> Any:
        from .embeds import model_dtype

        return model_dtype(self.config.model_dir)

    def render_prompts(self, prompts: Sequence[RawPrompt]) -> list[Prompt]:
        if len(prompts) == 0:
            raise NoPromptError()
        return [self.render_prompt(p) for p in prompts]

    # --- step 2 ----------------------------------------------------------------------------

    def tokenize_prompts(
        self, prompts: Sequence[Prompt], params: Sequence[TokenizeParams] | TokenizeParams
    ) -> list[Result[TokenizedPrompt]]:
        """Tokenize a batch; all text prompts sharing encode options go in one backend call."""
        if isinstance(params, TokenizeParams):
            params = [params] * len(prompts)
        tok = self.tokenizer
        side = tok.truncation_side
        results: list[Any] = [None] * len(prompts)
        groups: dict[tuple[EncodeOptions, bool], list[tuple[int, str, int]]] = defaultdict(list)

        for i, (prompt, p) in enumerate(zip(prompts, params)):
            try:
                if isinstance(prompt, TokensPrompt):
                    results[i] = self._finish_tokens(prompt, p)
                    continue
                if isinstance(prompt, EmbedsPrompt):
                    results[i] = self._finish_embeds(prompt, p)
                    continue
                if not isinstance(prompt.prompt, str):
                    raise PromptTypeError()
                text, shift = p.prepare_text(prompt.prompt, tok.max_chars_per_token, side)
                opts = EncodeOptions(p.add_special_tokens, p.encode_max_length(), p.side(side))
                groups[(opts, p.return_token_offsets and tok.is_fast)].append((i, text, shift))
            except RenderError as e:
                results[i] = e.with_traceback(None)  # no cycle through this frame keeping the inputs alive

        for (opts, offsets), items in groups.items():
            encoded = tok.encode_batch([text for _, text, _ in items], opts, offsets=offsets)
            for (i, _, shift), enc in zip(items, encoded):
                try:
                    results[i] = self._finish_text(prompts[i], params[i], enc.ids, enc.offsets, shift)
                except RenderError as e:
                    results[i] = e.with_traceback(None)  # no cycle through this frame keeping the inputs alive
        return results

    async def tokenize_prompts_async(
        self, prompts: Sequence[Prompt], params: Sequence[TokenizeParams] | TokenizeParams
    ) -> list[Result[TokenizedPrompt]]:
        return await asyncio.to_thread(self.tokenize_prompts, prompts, params)

    def _finish_text(
        self, prompt: TextPrompt, p: TokenizeParams, ids: list[int], offsets: list[tuple[int, int]] | None, shift: int
    ) -> TokenizedPrompt:
        bounded = p.truncation_length is None and p.max_input_tokens is not None
        at_least = bounded and len(ids) > p.max_input_tokens  # tokenizing stopped at the +1 bound
        if offsets is not None and shift:
            # Spans refer to the text as sent, before the pre-trim; (0, 0) marks special tokens.
            offsets = [o if o == (0, 0) else (o[0] + shift, o[1] + shift) for o in offsets]
        ids, offsets = self._post_tokenization(ids, offsets, p, at_least=at_least)
        return TokenizedPrompt(
            prompt_token_ids=ids, prompt=prompt.prompt, token_offsets=offsets, cache_salt=prompt.cache_salt
        )

    def _finish_tokens(self, prompt: TokensPrompt, p: TokenizeParams) -> TokenizedPrompt:
        ids = self.validate_token_ids(prompt.prompt_token_ids)
        ids, _ = self._post_tokenization(ids, None, p, at_least=False)
        text = prompt.prompt
        if p.needs_detokenization and text is None:
            text = self.tokenizer.decode(ids)
        return TokenizedPrompt(prompt_token_ids=ids, prompt=text, cache_salt=prompt.cache_salt)

    def _finish_embeds(self, prompt: EmbedsPrompt, p: TokenizeParams) -> TokenizedPrompt:
        if p.needs_detokenization:
            raise EmbedsDetokenizeError()
        rows = prompt.prompt_embeds
        if p.pad_length is not None and p.pad_length > len(rows):
            raise EmbedsPaddingError()
        rows = p.truncate(rows, self.tokenizer.truncation_side)  # rows count as tokens
        p.check_length(len(rows))
        return TokenizedPrompt(prompt_token_ids=[], prompt_embeds=rows, cache_salt=prompt.cache_salt)

    def _post_tokenization(
        self, ids: list[int], offsets: list | None, p: TokenizeParams, *, at_least: bool
    ) -> tuple[list[int], list | None]:
        """Pad, truncate, then check the length: vLLM's order."""
        side = self.tokenizer.truncation_side
        n_before = len(ids)
        ids = p.pad(ids, self.tokenizer.pad_token_id, side, at_least=at_least)
        if offsets is not None and len(ids) > n_before:
            offsets = offsets + [(0, 0)] * (len(ids) - n_before)
        ids = p.truncate(ids, side)
        if offsets is not None:
            offsets = p.truncate(offsets, side)
        p.check_length(len(ids), at_least=at_least)
        return ids, offsets

    def validate_token_ids(self, ids: Sequence[int]) -> list[int]:
        out: list[int] = []
        hi = self.tokenizer.max_token_id
        for t in ids:
            if isinstance(t, bool) or not isinstance(t, int):
                raise TokenIdTypeError(t)
            out.append(t)
        if out:
            lo_id, hi_id = min(out), max(out)
            if hi_id > hi:
                raise TokenIdRangeError(hi_id, hi)
            if lo_id < 0:
                raise TokenIdRangeError(lo_id, hi)
        return out

    # --- step 3 ----------------------------------------------------------------------------

    def process_for_engine(
        self, prompt: TokenizedPrompt, arrival_time: float | None = None, *, prompt_type: str = "decoder"
    ) -> EngineInput:
        # vLLM's engine-side input check: an empty prompt has nothing to condition on.
        if prompt.num_tokens == 0:
            raise EmptyPromptError(prompt_type)
        return EngineInput(
            prompt_token_ids=prompt.prompt_token_ids,
            prompt=prompt.prompt,
            token_offsets=prompt.token_offsets,
            cache_salt=prompt.cache_salt,
            prompt_embeds=prompt.prompt_embeds,
            arrival_time=time.time() if arrival_time is None else arrival_time,
        )

    # --- the whole pipeline ----------------------------------------------------------------

    def render_batch(
        self,
        prompts: Sequence[Result[Prompt]],
        params: Sequence[Result[TokenizeParams]],
        *,
        ids_as_array: bool = False,
    ) -> list[Result[EngineInput]]:
        """Steps 2-4 for a batch whose step-1 results (or errors) are already known.
        ``ids_as_array``: a text prompt that only needs its length bounded comes back with its
        ids as an int32 array (``render_text_array``), for a caller that sends them as a tensor."""
        arrival = time.time()
        ok, out = split_failed(prompts, params)
        if ids_as_array:
            rest = []
            for i in ok:
                res = capture_error(self.render_text_array, prompts[i], params[i], arrival)
                if res is None:
                    rest.append(i)
                else:
                    out[i] = res
            ok = rest
            if not ok:  # the lane answered the whole batch (most batches of one)
                return out
        tokenized = self.tokenize_prompts([prompts[i] for i in ok], [params[i] for i in ok])
        for i, t in zip(ok, tokenized):
            out[i] = t if isinstance(t, RenderError) else capture_error(self.process_for_engine, t, arrival)
        return out

    def render_text_bytes(self, raw: bytes, p: TokenizeParams) -> EngineInput | None:
        """Steps 1-4 for a request whose one field is its UTF-8 text prompt ``raw`` (no token ids,
        embeds or cache salt: ``completion_prompt``'s only work is then the decode), through the
        array lane; None where the full path must answer (``render_text_array``)."""
        return self.render_text_array(TextPrompt(prompt=decode_utf8(raw, "prompt")), p, time.time())

    def render_text_array(self, prompt: Prompt, p: TokenizeParams, arrival_time: float) -> EngineInput | None:
        """Steps 2-4 for a text prompt whose params ask for no truncation, padding or offsets,
        with ``prompt_token_ids`` an int32 array from the tokenizer's array path; None where the
        full path must answer (another prompt form or such params, no array path, a text the
        array path refuses). Same ids and same errors as the full path, which encodes to at most
        ``max_input_tokens + 1`` and then checks the length: a longer prompt fails there with
        "at least" that many tokens."""
        if (
            type(prompt) is not TextPrompt
            or p.truncate_prompt_tokens is not None
            or p.pad_prompt_tokens is not None
            or p.return_token_offsets
        ):
            return None
        tok = self.tokenizer
        if not isinstance(prompt.prompt, str):
            raise PromptTypeError()
        text, _ = p.prepare_text(prompt.prompt, tok.max_chars_per_token, tok.truncation_side)
        ids = tok.encode_array(text, p.add_special_tokens)
        if ids is None:
            return None
        limit = p.max_input_tokens
        if limit is not None and len(ids) > limit:
            p.check_length(limit + 1, at_least=True)
        if len(ids) == 0:
            raise EmptyPromptError("decoder")
        return EngineInput(
            prompt_token_ids=ids,
            prompt=prompt.prompt,
            token_offsets=None,
            cache_salt=prompt.cache_salt,
            prompt_embeds=None,
            arrival_time=arrival_time,
        )

    async def render_batch_async(
        self, prompts: Sequence[Result[Prompt]], params: Sequence[Result[TokenizeParams]]
    ) -> list[Result[EngineInput]]:
        return await asyncio.to_thread(self.render_batch, prompts, params)


def split_failed(prompts: Sequence[Any], params: Sequence[Any]) -> tuple[list[int], list[Any]]:
    """Indices of the items whose step 1 succeeded, and a result list already holding the
    error of every item whose prompt or params failed (any exception: it answers that item)."""
    ok = [
        i
        for i, (pr, pa) in enumerate(zip(prompts, params))
        if not isinstance(pr, Exception) and not isinstance(pa, Exception)
    ]
    out: list[Any] = [pr if isinstance(pr, Exception) else pa for pr, pa in zip(prompts, params)]
    return ok, out


def capture_error(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)``, or the ``RenderError`` it raised: batches keep going item by item."""
    try:
        return fn(*args, **kwargs)
    except RenderError as e:
        return e.with_traceback(None)  # its frames would keep the inputs alive as long as it
