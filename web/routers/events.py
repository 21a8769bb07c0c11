"""``GET /api/v1/events?topics=a,b``: live records as Server-Sent Events (bearer token or session cookie).

Each event's ``event:`` is the topic, its ``data:`` the record as JSON plus a ``topic`` field; a
page that fell behind gets ``event: dropped`` with how many it lost. Keep-alive pings every
``PING_S`` seconds keep proxies from closing a quiet stream.

Every ``[console] session_recheck_s`` seconds the stream checks its credentials again: a logout, an expired
token or session, a removed user or a changed role ends it with ``event: closed`` (the page's reconnect then
meets the login). A viewer's events carry no face feature vectors.

A stream that includes the surveillance hits (plates and faces seen, where and when) is a read of personal data:
it is audited once per connection (``events.subscribe``), before the stream starts, and refused (503) when the
audit event cannot be published.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from web.auth import Role
from web.dependencies import AuditDep, HubDep, SettingsDep, ViewerDep, require_role
from web.events import default_topics
from web.hardening import credentials_check, until_revoked
from web.redaction import without_features
from web.routers.data_common import Reason, audit_read

router = APIRouter(prefix="/api/v1", tags=["events"], dependencies=[Depends(require_role(Role.VIEWER))])

PING_S = 15
SEND_TIMEOUT_S = 30
"""A page that accepts nothing for this long (a stuck socket) is disconnected."""


@router.get("/events", response_class=EventSourceResponse)
async def events(user: ViewerDep, audit: AuditDep, request: Request, hub: HubDep, settings: SettingsDep,
                 topics: Annotated[str | None, Query(max_length=2000,
                                                     description="comma-separated topics (default: all)")] = None,
                 reason: Reason = None) -> EventSourceResponse:
    wanted = [t for t in (topics or "").split(",") if t] or list(default_topics(settings.topics))
    unknown = sorted(set(wanted) - set(hub.topics))
    if unknown:
        raise RequestValidationError([{"type": "value_error", "loc": ("query", "topics"), "input": topics,
                                       "msg": f"not event topics: {', '.join(unknown)}; "
                                              f"choose from {', '.join(hub.topics)}"}])
    hits = settings.topics.surveillance_hits
    if hits in wanted:  # recording blocks until the bus acknowledges: not on the event loop
        await run_in_threadpool(audit_read, audit, user, "events.subscribe", hits, {"topics": wanted}, reason)
    stream = without_features(hub.stream(wanted)) if user.role is Role.VIEWER else hub.stream(wanted)
    stream = until_revoked(stream, credentials_check(request, user.role), settings.session_recheck_s)
    return EventSourceResponse(stream, ping=PING_S, send_timeout=SEND_TIMEOUT_S)

