"""The front's own Prometheus metrics (``GET /metrics``): requests answered, by endpoint, method and
status, and their latencies. Triton's metrics (queue and compute times of every model, the
``mm_process`` cache) are on Triton's own metrics port (``METRICS_PORT``, 8002), not here.

One registry per app, not prometheus_client's global one: tests build several apps in one process.
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, MutableMapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A path no route matched is counted under one label, so unknown URLs cannot grow the label set.
UNMATCHED = "unmatched"
# A request whose client left before any response started (nginx's code for it).
CLIENT_GONE = 499
# Seconds: a render is milliseconds, a long generation (to the last streamed byte) tens of seconds.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


class FrontMetrics:
    """The counters and histogram, and their text exposition."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "renderer_front_requests",
            "HTTP requests the OpenAI front answered, by endpoint (route template), method and status.",
            ["endpoint", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "renderer_front_request_duration_seconds",
            "Time from a request's arrival to its response's last byte (a stream's end included).",
            ["endpoint", "method"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint, method).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class MetricsMiddleware:
    """Pure ASGI, so a streamed response is timed to its last byte (a ``BaseHTTPMiddleware`` would
    stop the clock when the body starts) and a fault that escapes the app still counts as a 500."""

    def __init__(self, app: ASGIApp, metrics: FrontMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = CLIENT_GONE

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except Exception:
            status = 500
            raise
        finally:
            # The router writes the matched route into this same scope; its template keeps labels few.
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or UNMATCHED
            self.metrics.observe(endpoint, scope.get("method", ""), status, time.perf_counter() - start)
