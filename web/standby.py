"""A standing-by console is read-only, and sends operators' pages to the active site's console (`web/site.py`).

- A request that would change something (POST, PUT, PATCH, DELETE) is refused: 409 naming the active site and its
  console while this site stands by, 503 with ``Retry-After`` while a switchover drains (neither site acts then).
  Logging in and out is not refused (an operator may read a standing-by site), nor is the DR API: the switchover
  that promotes this site when the active one is lost is asked here.
- A page (a browser's navigation, ``Accept: text/html``) is redirected (303) to the same page at the active site's
  console, when its URL is configured; the DR page and the login page are not, so that an admin can follow and run a
  switchover from either site. Pages already open learn it from ``GET /api/v1/site`` (`static/js/common.js`).
- The API's reads answer as they do at the active site: a script or a drill may read a standing-by site.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from web.site import ConsoleSite

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
OPEN_TO_WRITES = ("/api/v1/auth/", "/api/v1/dr/")
"""What a standing-by console still accepts: logging in and out, and the DR page's commands (a switchover, a drill)."""
STAY = ("/dr", "/login", "/lang/", "/static/", "/api/", "/metrics", "/docs", "/openapi.json")
"""Paths never sent to the other site: its DR and login pages, assets, the API, metrics and docs."""
RETRY_AFTER_S = 5


class StandbyGuard:
    def __init__(self, app: ASGIApp, site: ConsoleSite) -> None:
        self.app = app
        self.site = site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = self.site.state()
        path: str = scope["path"]
        method: str = scope["method"]
        if state.acting:
            await self.app(scope, receive, send)
        elif method in WRITES and not path.startswith(OPEN_TO_WRITES):
            status = 503 if state.switching_to is not None else 409
            await _answer(send, status, {"detail": state.banner(), "site": state.site, "active_site": state.active,
                                         "active_console": state.active_console},
                          {"retry-after": str(RETRY_AFTER_S)} if status == 503 else {})
        elif (method == "GET" and state.active_console and not path.startswith(STAY)
              and b"text/html" in dict(scope["headers"]).get(b"accept", b"")):
            query = scope.get("query_string", b"").decode("latin-1")
            target = state.active_console + path + (f"?{query}" if query else "")
            await _answer(send, 303, None, {"location": target})
        else:
            await self.app(scope, receive, send)


async def _answer(send: Send, status: int, body: dict[str, object] | None, headers: dict[str, str]) -> None:
    content = json.dumps(body).encode() if body is not None else b""
    raw = [(b"content-length", str(len(content)).encode()), (b"cache-control", b"no-store"),
           *((k.encode(), v.encode()) for k, v in headers.items())]
    if body is not None:
        raw.append((b"content-type", b"application/json"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": content})
