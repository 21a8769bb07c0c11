"""The console's hardening that is not one route's business: who may read ``/metrics``, ``/docs`` from the
console's own copy of Swagger UI, HSTS under TLS, an access log that never records a query string, and
event streams that end with their session.

Kept out of the data routers on purpose: those stay about their data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from web.auth import COOKIE_NAME, Role, is_loopback
from web.dependencies import get_auth
from web.metrics import ConsoleMetrics

SWAGGER_JS = "/static/vendor/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = "/static/vendor/swagger-ui/swagger-ui.css"
"""Copied from the npm package ``swagger-ui-dist`` by ``web/frontend/copy-assets.mjs`` (no CDN)."""
HSTS = "max-age=31536000"


def metrics_endpoint(metrics: ConsoleMetrics) -> Any:
    """``/metrics`` for a loopback client (the local Prometheus or agent) or a bearer token of an admin."""

    async def endpoint(request: Request) -> Response:
        if not is_loopback(request.client.host if request.client else None):
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            user = None
            if scheme.lower() == "bearer" and token.strip():
                user = await run_in_threadpool(get_auth(request).user_for_token, token.strip())
            if user is None:
                return JSONResponse({"detail": "metrics: loopback clients or an admin's bearer token only"},
                                    status_code=401, headers={"WWW-Authenticate": "Bearer"})
            if not user.role.allows(Role.ADMIN):
                return JSONResponse({"detail": f"requires role {Role.ADMIN.value}"}, status_code=403)
        return metrics.endpoint(request)

    return endpoint


def add_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI from the console's own static files (the app is made with ``docs_url=None``)."""

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title=f"{app.title} - API",
                                   swagger_js_url=SWAGGER_JS, swagger_css_url=SWAGGER_CSS,
                                   swagger_favicon_url="/static/favicon.svg",
                                   oauth2_redirect_url="/docs/oauth2-redirect")

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()


class StrictTransportSecurity:
    """Pure ASGI (streams such as SSE pass untouched): every response says ``Strict-Transport-Security``."""

    def __init__(self, app: ASGIApp, value: str = HSTS) -> None:
        self.app = app
        self.value = value.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_hsts(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"strict-transport-security", self.value)]
            await send(message)

        await self.app(scope, receive, send_with_hsts)


class AccessLogWithoutQuery(logging.Filter):
    """Cuts the query string from uvicorn's access-log lines: searched plates, cursors and the like are
    personal data or secrets, and a log keeps them for good. The path (route and ids) stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str) and "?" in args[2]:
            record.args = (*args[:2], args[2].split("?", 1)[0], *args[3:])
        return True


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's loggers in the solution's one log format (they propagate to the root's handler, `contracts.logs`),
    with :class:`AccessLogWithoutQuery` on the access log."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"no_query": {"()": AccessLogWithoutQuery}},
        "loggers": {
            "uvicorn": {"level": "INFO", "handlers": [], "propagate": True},
            "uvicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "uvicorn.access": {"level": "INFO", "handlers": [], "propagate": True, "filters": ["no_query"]},
        },
    }


def credentials_check(request: Request, role: Role) -> Callable[[], bool]:
    """Whether the request's bearer token or session cookie still names a user with the same role (sync: HBase)."""
    auth = get_auth(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip() if scheme.lower() == "bearer" else ""
    session_id = request.cookies.get(COOKIE_NAME, "")

    def check() -> bool:
        user = auth.user_for_token(token) if token else auth.user_for_session(session_id)
        return user is not None and user.role == role

    return check


async def until_revoked(events: AsyncIterator[ServerSentEvent], still_valid: Callable[[], bool],
                        every_s: float) -> AsyncIterator[ServerSentEvent]:
    """``events`` until ``still_valid()`` (asked every ``every_s``) says no; then ``event: closed`` and the end.

    The next event is awaited in its own task, so a check never cancels the hub's stream in the middle of a
    wait; the stream is always closed (unsubscribed) at the end.
    """
    iterator = aiter(events)
    pending: asyncio.Future[ServerSentEvent] | None = None
    next_check = time.monotonic() + every_s
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(anext(iterator))
            done, _ = await asyncio.wait({pending}, timeout=max(0.0, next_check - time.monotonic()))
            if done:
                try:
                    event = pending.result()
                except StopAsyncIteration:
                    return
                finally:
                    pending = None
                yield event
            if time.monotonic() >= next_check:
                if not await run_in_threadpool(still_valid):
                    yield ServerSentEvent(json.dumps({"reason": "session ended"}), event="closed")
                    return
                next_check = time.monotonic() + every_s
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await pending
        with contextlib.suppress(RuntimeError):
            await iterator.aclose()  # type: ignore[attr-defined]
