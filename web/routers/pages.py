"""The console's pages: server-rendered Jinja2 shells that the page scripts fill from ``/api/v1``.

A page needs a valid session cookie (else a redirect to ``/login``) and its role (else a 403 page).
The role check here only decides what is rendered: the API enforces every role again, so a button
hidden from a viewer would be refused even if a viewer forged the request.
Templates autoescape, and page scripts put data into the DOM as text only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from web import i18n
from web.auth import COOKIE_NAME, Role
from web.dependencies import get_auth, get_settings
from web.models.auth import UserOut

WEB = Path(__file__).resolve().parents[1]
STATIC_DIR = WEB / "static"
templates = Jinja2Templates(directory=WEB / "templates")

# Pages may load scripts, styles and images from the console only (no CDN, no inline script), and talk
# to the console only; Leaflet positions its layers with inline style attributes, hence style-src.
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                           "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
                           "form-action 'self'; frame-ancestors 'none'")
LANG_COOKIE_MAX_AGE = 365 * 24 * 3600
SURVEILLANCE_TOPICS = ("surveillance_hits", "surveillance_stats", "surveillance_replies", "control_watchlist",
                       "control_stats")
"""Event topics the watchlist and statistics pages follow (``Topics`` field names)."""

router = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    role: Role


PAGES = (
    Page("overview", "/", Role.VIEWER),
    Page("map", "/map", Role.VIEWER),
    Page("captures", "/captures", Role.VIEWER),
    Page("faces", "/faces", Role.VIEWER),
    Page("bus", "/bus", Role.VIEWER),
    Page("monitoring", "/monitoring", Role.VIEWER),
    Page("alerts", "/alerts", Role.VIEWER),
    Page("watchlist", "/watchlist", Role.VIEWER),
    Page("stats", "/stats", Role.VIEWER),
    Page("video", "/video", Role.VIEWER),
    Page("dr", "/dr", Role.VIEWER),
    Page("evidence", "/evidence", Role.OPERATOR),
    Page("audit", "/audit", Role.ADMIN),
    Page("users", "/users", Role.ADMIN),
)


def static_files() -> StaticFiles:
    """``/static``: the console's own CSS/JS and the npm packages' dist files copied into static/vendor."""
    return StaticFiles(directory=STATIC_DIR)


def render(request: Request, template: str, page: str, user: UserOut | None, status_code: int = 200,
           next_page: str | None = None, **context: Any) -> HTMLResponse:
    lang = i18n.language(request.cookies.get(i18n.COOKIE))
    messages = i18n.catalog(lang)
    nav = [p for p in PAGES if user is not None and user.role.allows(p.role)]
    settings = get_settings(request)
    topics = settings.topics
    page_data = {"lang": lang, "messages": messages, "page": page,
                 "user": user.model_dump(mode="json") if user else None,
                 "event_topics": {"ingest_stats": topics.ingest_stats, "alerts": topics.alerts,
                                  **{name: getattr(topics, name) for name in SURVEILLANCE_TOPICS}}}
    state = request.app.state.site.state()
    if state.site is not None:  # the banner of a standing-by console (common.js)
        page_data["site"] = {"site": state.site, "active": state.active, "switching_to": state.switching_to,
                             "acting": state.acting, "active_console": state.active_console}
    if next_page is not None:
        page_data["next"] = next_page  # the login page's target, already checked by safe_next
    response = templates.TemplateResponse(request, template, {
        "t": lambda key, **params: i18n.translate(lang, key, **params),
        "lang": lang, "languages": i18n.LANGUAGES, "page": page, "user": user, "nav": nav,
        "is_admin": user is not None and user.role.allows(Role.ADMIN), "page_data": page_data,
        "prometheus_url": settings.prometheus_url, **context,
    }, status_code=status_code)
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Cache-Control"] = "no-store"
    return response


def session_user(request: Request) -> UserOut | None:
    """The user of the request's session cookie, or None (no cookie, expired, logged out, user removed)."""
    session_id = request.cookies.get(COOKIE_NAME)
    if not session_id:
        return None
    user = get_auth(request).user_for_session(session_id)
    return None if user is None else UserOut(username=user.username, role=user.role)


def _page_route(page: Page) -> None:
    # Sync: the session lookup may reach HBase, so FastAPI runs it in the thread pool.
    def handler(request: Request) -> Response:
        user = session_user(request)
        if user is None:
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)
        if not user.role.allows(page.role):
            return render(request, "forbidden.html", "forbidden", user, status_code=403, required_role=page.role.value)
        return render(request, f"{page.name}.html", page.name, user, roles=[r.value for r in Role])

    handler.__name__ = f"page_{page.name}"
    router.add_api_route(page.path, handler, methods=["GET"], response_class=HTMLResponse, name=f"page_{page.name}")


for _page in PAGES:
    _page_route(_page)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request) -> Response:
    """The login form; someone already logged in goes straight on."""
    target = safe_next(request.query_params.get("next"))
    if session_user(request) is not None:
        return RedirectResponse(target, status_code=303)
    return render(request, "login.html", "login", None, next_page=target)


def safe_next(target: str | None) -> str:
    """A redirect target on this site only (a path, never ``//host`` or a scheme): no open redirector.

    Browsers drop tabs and newlines from a URL and read ``\\`` as ``/``, so ``/\t/evil``, ``/\\evil`` and the
    like would leave the site: any whitespace, control character or backslash refuses the target, and what is
    left must parse as a path with neither scheme nor host.
    """
    if (not target or not target.startswith("/") or target.startswith("//") or len(target) > 2000
            or any(c == "\\" or c.isspace() or not c.isprintable() for c in target)):
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith("/") or parts.path.startswith("//"):
        return "/"
    return target


@router.get("/lang/{code}")
def switch_language(code: str, next_: Annotated[str | None, Query(alias="next")] = None) -> Response:
    """Remember the language in the ``lang`` cookie (a preference, not a secret) and go back to the page."""
    response = RedirectResponse(safe_next(next_), status_code=303)
    if code in i18n.LANGUAGES:
        response.set_cookie(i18n.COOKIE, code, max_age=LANG_COOKIE_MAX_AGE, samesite="lax", path="/")
    return response
