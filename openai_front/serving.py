"""The front's work, apart from its routes (``api_router.py``): each endpoint's request body in, its
response body (or its server-sent events) out, over an ``Ensembles``-shaped client of Triton.

``FrontService`` knows nothing of HTTP: a test drives it against a fake of the ensembles
(``tests/unit/test_openai_front_serving.py``), and the router adds only what HTTP adds (reading the
body, the disconnect, the status and headers of an error).
"""

from __future__ import annotations

import json
import time
from typing import Any, AsyncIterator, Callable, Mapping, Protocol

import anyio
import numpy as np

from . import responses as out
from .protocol import (
    FrontError,
    ModelCard,
    Plan,
    check_model,
    detokenize_tensors,
    generation_plan,
    render_plan,
    tokenize_chat_refusal,
    tokenize_plan,
)
from .triton import Piece


class EnsemblesClient(Protocol):
    """What the service needs of Triton (``triton.Ensembles``, or a fake in tests)."""

    async def ready(self) -> bool: ...

    async def infer(self, model: str, tensors: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def generate(self, model: str, tensors: Mapping[str, np.ndarray]) -> AsyncIterator[Piece]: ...

    async def close(self) -> None: ...


class FrontService:
    """Every endpoint's work, over one server's ensembles."""

    def __init__(self, card: ModelCard, connect: Callable[[], EnsemblesClient], model_dir: str | None = None) -> None:
        self.card = card
        """The served model's name and context length, as ``/v1/models`` reports them."""
        self._connect = connect
        self._ensembles: EnsemblesClient | None = None
        self.model_dir = model_dir
        """The model folder, for ``return_token_strs`` (the front loads no tokenizer otherwise)."""
        self._tokenizer: Any = None
        self.created = int(time.time())

    @property
    def ensembles(self) -> EnsemblesClient:
        # Made on first use, inside the server's event loop (grpc.aio channels belong to one loop).
        if self._ensembles is None:
            self._ensembles = self._connect()
        return self._ensembles

    async def close(self) -> None:
        if self._ensembles is not None:
            await self._ensembles.close()

    async def healthy(self) -> bool:
        return await self.ensembles.ready()

    def models(self) -> dict[str, Any]:
        return out.models_body(self.card, self.created)

    def model(self, model_id: str) -> dict[str, Any]:
        """``/v1/models/{id}`` (OpenAI's ``models.retrieve``): the card, or a 404 for another id
        (vLLM serves no such route: its words for an unknown model, without its list of aliases)."""
        check_model({"model": model_id}, self.card, aliases=False)
        return out.model_card_body(self.card, self.created)

    async def render(self, body: dict[str, Any], *, chat: bool) -> Any:
        """vLLM's ``/v1/chat/completions/render`` (one body) and ``/v1/completions/render`` (a list)."""
        tensors, max_tokens, read = render_plan(body, self.card, chat=chat)
        res = await self.ensembles.infer("render_chat" if chat else "render_completion", tensors)
        if chat:
            if max_tokens is None:  # vLLM fills in the rest of the context for a chat
                max_tokens = self.card.max_model_len - int(res["input_lengths"][0])
            return out.render_body("chatcmpl", res, read, self.card, max_tokens)
        return [out.render_body("cmpl", res, read, self.card, max_tokens)]

    async def tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        model, tensors = tokenize_plan(body, self.card)
        try:
            res = await self.ensembles.infer(model, tensors)
        except FrontError as e:
            raise tokenize_chat_refusal(body, e) if model == "render_chat" else e from None
        ids = [int(i) for i in res["input_ids"]]
        strs = self.token_strings(ids) if body.get("return_token_strs") else None
        return {"count": len(ids), "max_model_len": self.card.max_model_len, "tokens": ids, "token_strs": strs}

    async def detokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        res = await self.ensembles.infer("render_completion", detokenize_tensors(body, self.card))
        return {"prompt": res["rendered_prompt"].reshape(-1)[0].decode()}

    def token_strings(self, ids: list[int]) -> list[str]:
        """Token strings, from the model folder's tokenizer (loaded on the first request that asks)."""
        if self.model_dir is None:
            raise FrontError("return_token_strs needs the model folder, which this front was not given.")
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        return self._tokenizer.convert_ids_to_tokens(ids)

    def plan(self, body: dict[str, Any], *, chat: bool) -> Plan:
        """A chat or completion request as the generation ensemble's tensors."""
        return generation_plan(body, self.card, chat=chat)

    async def start(self, plan: Plan) -> AsyncIterator[Piece]:
        """The generation's pieces, ``max_tokens`` resolved first: vLLM's default is the rest of
        the context, once the prompt's length is known."""
        max_tokens = plan.max_tokens
        if max_tokens is None:
            render_inputs = {k: v for k, v in plan.tensors.items() if k not in ("sampling_params", "stream")}
            res = await self.ensembles.infer(
                "render_chat" if plan.model == "chat" else "render_completion", render_inputs
            )
            max_tokens = max(self.card.max_model_len - int(res["input_lengths"][0]), 1)
        plan.tensors["max_tokens"] = np.array([[max_tokens]], dtype=np.int32)
        return self.ensembles.generate(plan.model, plan.tensors)

    async def whole(self, plan: Plan, pieces: AsyncIterator[Piece]) -> dict[str, Any]:
        """A non-streamed answer: every piece, then OpenAI's completion body."""
        got = await collect(pieces)
        text = "".join(p.text for p in got)
        n_out = sum(len(p.ids) for p in got)
        last = got[-1] if got else Piece("", [], "length", 0)
        rid = out.request_id("chatcmpl" if plan.model == "chat" else "cmpl")
        message = json.loads(last.parsed) if last.parsed else None
        return out.completion_body(
            plan.model, rid, self.card.name, text, last.finish_reason or "length", last.prompt_tokens, n_out, message
        )

    async def events(self, plan: Plan, first: Piece | None, rest: AsyncIterator[Piece]) -> AsyncIterator[str]:
        """A streamed answer as server-sent events: OpenAI's chunks, usage as asked, an error that
        comes mid-stream as an OpenAI error event, then ``[DONE]``."""
        rid = out.request_id("chatcmpl" if plan.model == "chat" else "cmpl")
        created = int(time.time())
        kind, name = plan.model, self.card.name
        n_out, prompt_tokens = 0, 0

        def event(body: dict[str, Any]) -> str:
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        async def all_pieces() -> AsyncIterator[Piece]:
            if first is not None:
                yield first
            async for p in rest:
                yield p

        try:
            if kind == "chat":
                yield event(out.chunk_body(kind, rid, name, created, role=True))
            async for p in all_pieces():
                n_out += len(p.ids)
                prompt_tokens = p.prompt_tokens
                # With parsing on, the step's delta as vLLM's parser made it (null: no chunk).
                delta = json.loads(p.parsed) if p.parsed else None
                sends = delta is not None if p.parsed else bool(p.text)
                if not sends and not p.finish_reason:
                    continue
                use = out.usage(prompt_tokens, n_out) if plan.continuous_usage else None
                yield event(
                    out.chunk_body(
                        kind,
                        rid,
                        name,
                        created,
                        text=p.text,
                        finish=p.finish_reason or None,
                        usage_=use,
                        delta=delta if p.parsed else None,
                    )
                )
            if plan.include_usage:
                yield event(
                    out.chunk_body(kind, rid, name, created, no_choices=True, usage_=out.usage(prompt_tokens, n_out))
                )
        except FrontError as e:
            yield event(out.error_body(e.message, e.status, e.param, e.error_type))
        finally:
            # Also when the client went away (this task is being cancelled): the shield lets the
            # generator's own clean-up run, which cancels the request in the ensembles.
            with anyio.CancelScope(shield=True):
                await rest.aclose()
        yield "data: [DONE]\n\n"


async def collect(pieces: AsyncIterator[Piece]) -> list[Piece]:
    try:
        return [p async for p in pieces]
    finally:
        # Also when cancelled (the client went away): the generator's clean-up cancels the
        # request in the ensembles and stops the engine.
        with anyio.CancelScope(shield=True):
            await pieces.aclose()
