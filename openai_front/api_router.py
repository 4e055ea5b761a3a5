"""The HTTP routes: OpenAI's chat and completions (streamed or not), vLLM's render, tokenize and
detokenize endpoints, ``/v1/models`` (and one model's card), ``/health``, ``/version`` and
``/metrics``, each a thin call into ``FrontService`` (``serving.py``) or ``FrontMetrics``
(``metrics.py``); and Triton's own generate extension (``/v2/models/<m>[/versions/<v>]/generate``
and ``generate_stream``, ``generate.py``), whose errors keep Triton's shape ``{"error": "..."}``.
Every other error is OpenAI-shaped, with the status the ensembles' own gRPC status
implies: 400 for a bad request, 503 (with ``Retry-After``) while Triton cannot be reached, 500 only
for a fault; FastAPI's own answers (an unknown route, a wrong method) too. A client that goes away
mid-request, streamed or not, cancels its generation."""

from __future__ import annotations

import asyncio
import contextlib
from http import HTTPStatus
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from client import __version__

from renderer.errors import RenderError

from . import responses as out
from .body import DEFAULT_MAX_BODY_BYTES, read_body
from .infer_check import HEADER_LENGTH, diagnose
from .generate import GenerateError, GenerateFaultError, GenerateService, MethodNotAllowedError, read_raw
from .metrics import FrontMetrics, MetricsMiddleware
from .protocol import FrontError, ModelCard, vllm_error_type
from .serving import EnsemblesClient, FrontService

# Seconds a client is told to wait before it retries a 503 (Triton starting or restarting).
RETRY_AFTER_S = 1
# Triton's generate routes take POST only; the rest are answered 405 in Triton's shape, as Triton does.
GENERATE_METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH"]


class ClientGoneError(FrontError):
    """The client went away before its answer was ready (no one reads this response)."""

    def __init__(self) -> None:
        super().__init__("The client closed the connection before the response.", 499)


def create_app(
    card: ModelCard,
    triton_url: str,
    model_dir: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    connect: Callable[[], EnsemblesClient] | None = None,
    infer_check_path: str = "",
) -> FastAPI:
    """The front's app over the Triton server at ``triton_url`` (``connect`` replaces the gRPC
    client, for a fake of the ensembles); ``infer_check_path``, where given, is the route the edge
    sends the /infer requests Triton answered with a 500 to (``infer_check.py``)."""
    if connect is None:

        def connect() -> EnsemblesClient:
            from .triton import Ensembles

            return Ensembles(triton_url)

    service = FrontService(card, connect, model_dir)
    app = FastAPI(title="Triton renderer: OpenAI- and vLLM-compatible front", docs_url=None, redoc_url=None)

    app.add_exception_handler(FrontError, front_error)
    app.add_exception_handler(RenderError, refused)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(Exception, fault)
    metrics = FrontMetrics()
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    async def body_of(request: Request) -> dict[str, Any]:
        return await read_body(request.stream(), request.headers.get("content-length"), max_body_bytes)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200 if await service.healthy() else 503)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        return JSONResponse(service.models())

    # ``:path``: a model id may hold slashes (``org/model``), as Hugging Face ids do.
    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> JSONResponse:
        return JSONResponse(service.model(model_id))

    @app.get("/version")
    async def version() -> JSONResponse:
        return JSONResponse({"version": __version__})

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.exposition(), media_type=metrics.content_type)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await generate(request, chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await generate(request, chat=False)

    @app.post("/v1/chat/completions/render")
    async def render_chat(request: Request) -> JSONResponse:
        return JSONResponse(await service.render(await body_of(request), chat=True))

    @app.post("/v1/completions/render")
    async def render_completion(request: Request) -> JSONResponse:
        return JSONResponse(await service.render(await body_of(request), chat=False))

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        return JSONResponse(await service.tokenize(await body_of(request)))

    @app.post("/detokenize")
    async def detokenize(request: Request) -> JSONResponse:
        return JSONResponse(await service.detokenize(await body_of(request)))

    async def generate(request: Request, *, chat: bool) -> Response:
        plan = service.plan(await body_of(request), chat=chat)
        pieces = await service.start(plan)
        if not plan.stream:
            return JSONResponse(await until_disconnected(request, service.whole(plan, pieces)))
        # The first piece before any byte is sent: a request the ensembles refuse gets its status.
        # Its wait is watched too: a generation queued behind others sends nothing for a while, and
        # its client may leave meanwhile (closing ``pieces`` then stops it before it ever starts).
        first = await until_disconnected(request, first_piece(pieces))
        return StreamingResponse(service.events(plan, first, pieces), media_type="text/event-stream")

    triton_generator = GenerateService(lambda: service.ensembles)

    async def triton_generate(request: Request, model: str, version: str, *, stream: bool) -> Response:
        """Triton's generate extension, over gRPC: a client that goes away cancels the request."""
        try:
            if request.method != "POST":
                raise MethodNotAllowedError()
            raw = await read_raw(request.stream(), request.headers.get("content-length"), max_body_bytes)
            req = await triton_generator.prepare(model, version, raw)
            answer = triton_generator.stream(req) if stream else triton_generator.whole(req)
            return await until_disconnected(request, answer)
        except GenerateError as e:
            return e.response()
        except ClientGoneError:
            raise  # no one reads the answer
        except Exception as e:  # noqa: BLE001 - a bug of the front: a 500, in Triton's shape too
            return GenerateFaultError(e).response()

    async def infer_check(request: Request) -> Response:
        """Why Triton refused an /infer request with a 500 (the edge sends only those here)."""
        try:
            raw = await read_raw(request.stream(), request.headers.get("content-length"), max_body_bytes)
        except GenerateError as e:
            return e.response()
        return diagnose(raw, request.headers.get(HEADER_LENGTH)).response()

    if infer_check_path:
        app.add_api_route(infer_check_path, infer_check, methods=["POST"])

    @app.api_route("/v2/models/{model}/generate", methods=GENERATE_METHODS)
    async def generate_triton(request: Request, model: str) -> Response:
        return await triton_generate(request, model, "", stream=False)

    @app.api_route("/v2/models/{model}/generate_stream", methods=GENERATE_METHODS)
    async def generate_stream_triton(request: Request, model: str) -> Response:
        return await triton_generate(request, model, "", stream=True)

    @app.api_route("/v2/models/{model}/versions/{version}/generate", methods=GENERATE_METHODS)
    async def generate_version_triton(request: Request, model: str, version: str) -> Response:
        return await triton_generate(request, model, version, stream=False)

    @app.api_route("/v2/models/{model}/versions/{version}/generate_stream", methods=GENERATE_METHODS)
    async def generate_stream_version_triton(request: Request, model: str, version: str) -> Response:
        return await triton_generate(request, model, version, stream=True)

    @app.on_event("shutdown")
    async def close() -> None:
        await service.close()

    return app


async def front_error(_: Request, e: FrontError) -> JSONResponse:
    """A refusal (or Triton away) in OpenAI's error shape; a 503 says when to retry."""
    headers = {"Retry-After": str(RETRY_AFTER_S)} if e.status == HTTPStatus.SERVICE_UNAVAILABLE else None
    return JSONResponse(
        out.error_body(e.message, e.status, e.param, e.error_type), status_code=e.status, headers=headers
    )


async def refused(request: Request, e: RenderError) -> JSONResponse:
    """A request a rule refused (``renderer.errors``): a 4xx whose ``param`` is the field it names."""
    return await front_error(request, FrontError.of(e))


async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (no such route, a method the route does not take) in OpenAI's shape,
    their status and headers (a 405's ``Allow``) kept."""
    return JSONResponse(out.error_body(str(e.detail), e.status_code), status_code=e.status_code, headers=e.headers)


async def invalid(_: Request, e: RequestValidationError) -> JSONResponse:
    """A path or query parameter FastAPI could not read: a 400 in OpenAI's shape, as vLLM answers it
    (not FastAPI's 422 ``{"detail": [...]}``)."""
    msg = "; ".join(f"{'.'.join(str(x) for x in err.get('loc', ()))}: {err.get('msg', '')}" for err in e.errors())
    return JSONResponse(out.error_body(msg, HTTPStatus.BAD_REQUEST), status_code=400)


async def fault(_: Request, e: Exception) -> JSONResponse:
    """A bug of the front: a 500 in OpenAI's error shape."""
    msg = f"{type(e).__name__}: {e}"
    return JSONResponse(
        out.error_body(msg, HTTPStatus.INTERNAL_SERVER_ERROR, error_type=vllm_error_type(500)), status_code=500
    )


async def first_piece(pieces: AsyncIterator[Any]) -> Any:
    """The first of ``pieces``, None if there is none; closes ``pieces`` if cancelled meanwhile."""
    try:
        return await pieces.__anext__()
    except StopAsyncIteration:
        return None
    except asyncio.CancelledError:
        await pieces.aclose()
        raise


async def until_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """``work``'s result, or its cancellation once the client has gone away (its body is read: the
    next ASGI message is the disconnect). Without this a non-streamed generation ran to
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
