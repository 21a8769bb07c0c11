"""Prometheus metrics of the console: requests by route template, method and status, and their latency;
bus records its readers set aside.

The route template (``/api/v1/captures/{kind}/{record_id}``), not the raw path, labels a request, so
the number of series stays bounded whatever URLs clients send. The console serves them on its own app
port (``/metrics``), so it has no separate metrics port to find taken.

Any bus record a console reader meets may be malformed or foreign (anyone can write to a topic): the
reader sets it aside (or shows it undecoded where a page shows raw messages), counts it in
``console_bus_records_skipped_total`` by reader, topic and a fixed reason, logs why, and goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

SKIPPED = Counter("console_bus_records_skipped", "Bus records a console reader set aside or showed undecoded",
                  ["reader", "topic", "reason"], registry=None)
"""One counter for the process, so readers deep in the services count without being handed the app's
metrics; every app's registry exposes it."""
SKIP_LOG_INTERVAL_S = 60.0
"""A reader, topic and reason is logged at most this often: a topic full of garbage must not flood the log."""
REMEMBERED_RECORDS = 10_000
"""Records of readers that read them again (per page load) counted already, newest kept."""
_lock = threading.Lock()
_logged: dict[tuple[str, str, str], tuple[float, int]] = {}
_counted: OrderedDict[tuple[str, str, int | None, int | None], None] = OrderedDict()


def skipped(reader: str, topic: str, reason: str, detail: object = "",
            record: tuple[int | None, int | None] | None = None) -> None:
    """Count a bus record ``reader`` set aside (``reason``: a short fixed phrase) and log why (``detail``).

    A reader that reads the same records again on every request names the ``record`` (partition, offset, as
    confluent-kafka types them), so that the counter counts records, not page loads.
    """
    now = time.monotonic()
    with _lock:
        if record is not None:
            seen = (reader, topic, *record)
            if seen in _counted:
                return
            _counted[seen] = None
            if len(_counted) > REMEMBERED_RECORDS:
                _counted.popitem(last=False)
        SKIPPED.labels(reader, topic, reason).inc()
        key = (reader, topic, reason)
        last, unlogged = _logged.get(key, (-SKIP_LOG_INTERVAL_S, 0))
        if now - last < SKIP_LOG_INTERVAL_S:
            _logged[key] = (last, unlogged + 1)
            return
        _logged[key] = (now, 0)
    more = f" (and {unlogged} more since the last report)" if unlogged else ""
    log.warning("%s: set aside a record of %s: %s%s%s", reader, topic, reason, f" ({detail})" if detail else "",
                more)


class ConsoleMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("console_http_requests_total", "HTTP requests answered",
                                ["method", "route", "status"], registry=self.registry)
        self.latency = Histogram("console_http_request_duration_seconds", "Time to answer an HTTP request",
                                 ["method", "route"], registry=self.registry,
                                 buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.registry.register(SKIPPED)

    def endpoint(self, _request: Request) -> Response:
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)


class MetricsMiddleware:
    """Pure ASGI (not BaseHTTPMiddleware), so streaming responses such as SSE pass through untouched."""

    def __init__(self, app: ASGIApp, metrics: ConsoleMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status)).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - started)
