"""The HTTP routes: OpenAI's chat and completions (streamed or not), vLLM's render, tokenize and
detokenize endpoints, ``/v1/models`` and ``/health``. Every error is OpenAI-shaped, with the
status the ensembles' own gRPC status implies: 400 for a bad request, 503 (with ``Retry-After``)
while Triton cannot be reached, 500 only for a fault. A client that goes away mid-request, streamed
or not, cancels its generation."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from http import HTTPStatus
from typing import Any, AsyncIterator, Awaitable

import anyio
import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from . import responses as out
from .body import DEFAULT_MAX_BODY_BYTES, read_body
from .requests import (
    FrontError,
    ModelCard,
    Plan,
    detokenize_tensors,
    generation_plan,
    render_plan,
    tokenize_plan,
)
from .triton import Ensembles, Piece

# Seconds a client is told to wait before it retries a 503 (Triton starting or restarting).
RETRY_AFTER_S = 1


class ClientGoneError(FrontError):
    """The client went away before its answer was ready (no one reads this response)."""

    def __init__(self) -> None:
        super().__init__("The client closed the connection before the response.", 499)


def create_app(
    card: ModelCard, triton_url: str, model_dir: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
) -> FastAPI:
    app = FastAPI(title="Triton renderer: OpenAI- and vLLM-compatible front", docs_url=None, redoc_url=None)
    state: dict[str, Any] = {"created": int(time.time())}

    def ensembles() -> Ensembles:
        # Made on first use, inside the server's event loop (grpc.aio channels belong to one loop).
        if "ensembles" not in state:
            state["ensembles"] = Ensembles(triton_url)
        return state["ensembles"]

    @app.exception_handler(FrontError)
    async def front_error(_: Request, e: FrontError) -> JSONResponse:
        headers = {"Retry-After": str(RETRY_AFTER_S)} if e.status == HTTPStatus.SERVICE_UNAVAILABLE else None
        return JSONResponse(out.error_body(e.message, e.status, e.param), status_code=e.status, headers=headers)

    @app.exception_handler(Exception)
    async def fault(_: Request, e: Exception) -> JSONResponse:
        msg = f"{type(e).__name__}: {e}"
        return JSONResponse(out.error_body(msg, HTTPStatus.INTERNAL_SERVER_ERROR), status_code=500)

    async def body_of(request: Request) -> dict[str, Any]:
        return await read_body(request.stream(), request.headers.get("content-length"), max_body_bytes)

    @app.get("/health")
    async def health() -> Response:
        ok = await ensembles().ready()
        return Response(status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse(out.models_body(card, state["created"]))

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await generate(generation_plan(await body_of(request), card, chat=True), request)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(generation_plan(await body_of(request), card, chat=False), request)

    @app.post("/v1/chat/completions/render")
    async def render_chat(request: Request) -> JSONResponse:
        body = await body_of(request)
        tensors, max_tokens = render_plan(body, card, chat=True)
        res = await ensembles().infer("render_chat", tensors)
        if max_tokens is None:  # vLLM fills in the rest of the context for a chat
            max_tokens = card.max_model_len - int(res["input_lengths"][0])
        return JSONResponse(out.render_body("chatcmpl", res, body, card, max_tokens))

    @app.post("/v1/completions/render")
    async def render_completion(request: Request) -> JSONResponse:
        body = await body_of(request)
        tensors, max_tokens = render_plan(body, card, chat=False)
        res = await ensembles().infer("render_completion", tensors)
        return JSONResponse([out.render_body("cmpl", res, body, card, max_tokens)])

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        body = await body_of(request)
        model, tensors = tokenize_plan(body, card)
        res = await ensembles().infer(model, tensors)
        ids = [int(i) for i in res["input_ids"]]
        strs = token_strings(ids) if body.get("return_token_strs") else None
        return JSONResponse({"count": len(ids), "max_model_len": card.max_model_len, "tokens": ids, "token_strs": strs})

    @app.post("/detokenize")
    async def detokenize(request: Request) -> JSONResponse:
        res = await ensembles().infer("render_completion", detokenize_tensors(await body_of(request), card))
        return JSONResponse({"prompt": res["rendered_prompt"].reshape(-1)[0].decode()})

    def token_strings(ids: list[int]) -> list[str]:
        """Token strings, from the model folder's tokenizer (loaded on the first request that asks)."""
        if model_dir is None:
            raise FrontError("return_token_strs needs the model folder, which this front was not given.")
        if "tokenizer" not in state:
            from transformers import AutoTokenizer

            state["tokenizer"] = AutoTokenizer.from_pretrained(model_dir)
        return state["tokenizer"].convert_ids_to_tokens(ids)

    async def generate(plan: Plan, request: Request) -> Response:
        ens = ensembles()
        max_tokens = plan.max_tokens
        if max_tokens is None:
            # vLLM's default: the rest of the context, once the prompt's length is known.
            render_inputs = {k: v for k, v in plan.tensors.items() if k not in ("sampling_params", "stream")}
            res = await ens.infer("render_chat" if plan.model == "chat" else "render_completion", render_inputs)
            max_tokens = max(card.max_model_len - int(res["input_lengths"][0]), 1)
        plan.tensors["max_tokens"] = np.array([[max_tokens]], dtype=np.int32)
        pieces = ens.generate(plan.model, plan.tensors)
        rid = out.request_id("chatcmpl" if plan.model == "chat" else "cmpl")
        if not plan.stream:
            got = await until_disconnected(request, collect(pieces))
            text = "".join(p.text for p in got)
            n_out = sum(len(p.ids) for p in got)
            last = got[-1] if got else Piece("", [], "length", 0)
            return JSONResponse(
                out.completion_body(
                    plan.model, rid, card.name, text, last.finish_reason or "length", last.prompt_tokens, n_out
                )
            )
        # The first piece before any byte is sent: a request the ensembles refuse gets its status.
        try:
            first = await pieces.__anext__()
        except StopAsyncIteration:
            first = None
        return StreamingResponse(sse(plan, rid, first, pieces), media_type="text/event-stream")

    async def collect(pieces: AsyncIterator[Piece]) -> list[Piece]:
        try:
            return [p async for p in pieces]
        finally:
            # Also when cancelled (the client went away): the generator's clean-up cancels the
            # request in the ensembles and stops the engine.
            with anyio.CancelScope(shield=True):
                await pieces.aclose()

    async def until_disconnected(request: Request, work: Awaitable[Any]) -> Any:
        """``work``'s result, or its cancellation once the client has gone away (its body is read:
        the next ASGI message is the disconnect). Without this a non-streamed generation ran to
        ``max_tokens`` for nobody and held the engine meanwhile."""

        async def disconnect() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        task = asyncio.ensure_future(work)
        watcher = asyncio.ensure_future(disconnect())
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watcher.cancel()
            if not task.done():
                task.cancel()  # the client went away, or this handler itself is being cancelled
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            raise ClientGoneError()
        return task.result()

    async def sse(plan: Plan, rid: str, first: Piece | None, rest: AsyncIterator[Piece]) -> AsyncIterator[str]:
        created = int(time.time())
        kind = plan.model
        n_out, prompt_tokens = 0, 0

        def event(body: dict[str, Any]) -> str:
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        try:
            if kind == "chat":
                yield event(out.chunk_body(kind, rid, card.name, created, role=True))

            async def all_pieces() -> AsyncIterator[Piece]:
                if first is not None:
                    yield first
                async for p in rest:
                    yield p

            async for p in all_pieces():
                n_out += len(p.ids)
                prompt_tokens = p.prompt_tokens
                if not p.text and not p.finish_reason:
                    continue
                use = out.usage(prompt_tokens, n_out) if plan.continuous_usage else None
                yield event(
                    out.chunk_body(
                        kind, rid, card.name, created, text=p.text, finish=p.finish_reason or None, usage_=use
                    )
                )
            if plan.include_usage:
                yield event(
                    out.chunk_body(
                        kind, rid, card.name, created, no_choices=True, usage_=out.usage(prompt_tokens, n_out)
                    )
                )
        except FrontError as e:
            yield event(out.error_body(e.message, e.status, e.param))
        finally:
            # Also when the client went away (this task is being cancelled): the shield lets the
            # generator's own clean-up run, which cancels the request in the ensembles.
            with anyio.CancelScope(shield=True):
                await rest.aclose()
        yield "data: [DONE]\n\n"

    @app.on_event("shutdown")
    async def close() -> None:
        if "ensembles" in state:
            await state["ensembles"].close()

    return app
