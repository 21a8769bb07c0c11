"""``GET /api/v1/events?topics=a,b``: live records as Server-Sent Events (bearer token or session cookie).

Each event's ``event:`` is the topic, its ``data:`` the record as JSON plus a ``topic`` field; a
page that fell behind gets ``event: dropped`` with how many it lost. Keep-alive pings every
``PING_S`` seconds keep proxies from closing a quiet stream.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from sse_starlette import EventSourceResponse

from web.dependencies import ViewerDep
from web.events import EventHub, default_topics

router = APIRouter(prefix="/api/v1", tags=["events"])

PING_S = 15
SEND_TIMEOUT_S = 30
"""A page that accepts nothing for this long (a stuck socket) is disconnected."""


@router.get("/events", response_class=EventSourceResponse)
async def events(_user: ViewerDep, request: Request,
                 topics: Annotated[str | None, Query(max_length=2000,
                                                     description="comma-separated topics (default: all)")] = None,
                 ) -> EventSourceResponse:
    hub: EventHub = request.app.state.hub
    wanted = [t for t in (topics or "").split(",") if t] or list(default_topics(request.app.state.settings.topics))
    unknown = sorted(set(wanted) - set(hub.topics))
    if unknown:
        raise RequestValidationError([{"type": "value_error", "loc": ("query", "topics"), "input": topics,
                                       "msg": f"not event topics: {', '.join(unknown)}; "
                                              f"choose from {', '.join(hub.topics)}"}])
    return EventSourceResponse(hub.stream(wanted), ping=PING_S, send_timeout=SEND_TIMEOUT_S)
