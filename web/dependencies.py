"""What routes ask for: settings, backends, the app's services, the current user with its role, the audit log.

Everything here comes from ``app.state``, set once by :func:`web.app.create_app` (or, for the services made at
their first use, here), so nothing deep inside a route reads a file or a global. This is the one module that reads
``app.state``: routers take these dependencies as parameters, and code that is not a route (middleware, page
rendering) calls the ``get_*`` functions directly.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import OAuth2PasswordBearer

from contracts.records import Kind
from web.audit import RequestAudit
from web.auth import COOKIE_NAME, Auth, Role
from web.backends import Backends
from web.events import EventHub
from web.models.auth import UserOut
from web.overview import Overview
from web.services.capture_images import CaptureImages, LiveCaptures
from web.services.dr import DrService
from web.services.evidence import Evidence
from web.services.face_follow import FaceSearch
from web.services.runtime import DataServices
from web.services.surveillance import SurveillanceConsole
from web.services.video import VideoService
from web.settings import ConsoleSettings

__all__ = ["AdminDep", "AuditDep", "BackendsDep", "DataDep", "DrDep", "EvidenceDep", "FacesDep", "HubDep",
           "ImagesDep", "LiveDep", "OperatorDep", "OverviewDep", "SettingsDep", "SurveillanceDep", "UserOut",
           "VideoDep", "ViewerDep", "require_role"]

CSRF_HEADER = "X-Requested-With"
CSRF_VALUE = "console"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def get_settings(request: Request) -> ConsoleSettings:
    return request.app.state.settings


def get_backends(request: Request) -> Backends:
    return request.app.state.backends


# Annotated aliases keep route signatures short and free of call-in-default (ruff B008).
SettingsDep = Annotated[ConsoleSettings, Depends(get_settings)]
BackendsDep = Annotated[Backends, Depends(get_backends)]


def get_auth(request: Request) -> Auth:
    return request.app.state.auth


def get_audit(request: Request) -> RequestAudit:
    return RequestAudit(request.app.state.audit, request)


AuthDep = Annotated[Auth, Depends(get_auth)]
AuditDep = Annotated[RequestAudit, Depends(get_audit)]
"""``audit.record(user, action, target, query, outcome, reason=...)`` for every command a user issues and every
read of personal data (before its data is fetched); the event carries the request's client address and agent."""


# -- the app's services (made by create_app) --------------------------------------------------------------------
def get_data(request: Request) -> DataServices:
    return request.app.state.data


def get_dr(request: Request) -> DrService:
    return request.app.state.dr


def get_hub(request: Request) -> EventHub:
    return request.app.state.hub


def get_faces(request: Request) -> FaceSearch:
    return request.app.state.faces


def get_overview(request: Request) -> Overview:
    return request.app.state.overview


def get_surveillance(request: Request) -> SurveillanceConsole:
    return request.app.state.surveillance


DataDep = Annotated[DataServices, Depends(get_data)]
DrDep = Annotated[DrService, Depends(get_dr)]
HubDep = Annotated[EventHub, Depends(get_hub)]
FacesDep = Annotated[FaceSearch, Depends(get_faces)]
OverviewDep = Annotated[Overview, Depends(get_overview)]
SurveillanceDep = Annotated[SurveillanceConsole, Depends(get_surveillance)]


# -- the app's services made at their first use ------------------------------------------------------------------
_made_lock = threading.Lock()
T = TypeVar("T")


def _made_once(request: Request, name: str, make: Callable[[], T]) -> T:
    """The app's one ``name`` service (``app.state.<name>``), made by ``make`` at its first use: it lives as long
    as the app."""
    state = request.app.state
    with _made_lock:
        if getattr(state, name, None) is None:
            setattr(state, name, make())
        return getattr(state, name)


def get_video(request: Request, settings: SettingsDep) -> VideoService:
    """The app's one VideoService (its bus producer and transcode state live as long as the app)."""
    return _made_once(request, "video", lambda: VideoService(settings, get_backends(request)))


def get_evidence(request: Request) -> Evidence:
    """The app's one Evidence service (made at its first use)."""
    return _made_once(request, "evidence", lambda: Evidence(get_backends(request)))


def get_images(request: Request, settings: SettingsDep) -> CaptureImages:
    """The app's one CaptureImages (its decode slots and its memory of checked images live as long as the app)."""
    return _made_once(request, "capture_images", lambda: CaptureImages(
        get_backends(request), settings.max_image_bytes, settings.thumbnail_width))


def get_live(request: Request, settings: SettingsDep) -> LiveCaptures:
    """The app's one follower of the capture topics (it runs only while a wall is open)."""
    topics = settings.topics
    return _made_once(request, "live_captures", lambda: LiveCaptures(
        settings.bus, {Kind.VEHICLE.value: topics.vehicle, Kind.FACE.value: topics.face}))


VideoDep = Annotated[VideoService, Depends(get_video)]
EvidenceDep = Annotated[Evidence, Depends(get_evidence)]
ImagesDep = Annotated[CaptureImages, Depends(get_images)]
LiveDep = Annotated[LiveCaptures, Depends(get_live)]

# The bearer scheme shows up in OpenAPI (the "Authorize" button of /docs); auto_error=False because a
# page may authenticate with the session cookie instead.
bearer_scheme = OAuth2PasswordBearer(tokenUrl="/api/v1/auth/token", auto_error=False)


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def _role_dependency(minimum: Role) -> Callable[..., UserOut]:
    def current_user(request: Request, auth: AuthDep,
                     token: Annotated[str | None, Depends(bearer_scheme)]) -> UserOut:
        if token:
            user = auth.user_for_token(token)
            if user is None:
                raise unauthorized("invalid or expired token")
        else:
            session_id = request.cookies.get(COOKIE_NAME)
            if not session_id:
                raise unauthorized("not authenticated")
            user = auth.user_for_session(session_id)
            if user is None:
                raise unauthorized("session expired or logged out")
            if request.method not in SAFE_METHODS and request.headers.get(CSRF_HEADER) != CSRF_VALUE:
                raise HTTPException(status.HTTP_403_FORBIDDEN, f"missing header {CSRF_HEADER}: {CSRF_VALUE}")
        if not user.role.allows(minimum):
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"requires role {minimum.value}")
        return UserOut(username=user.username, role=user.role)

    current_user.required_role = minimum  # type: ignore[attr-defined]  # read by the roles-matrix test
    return current_user


_ROLE_DEPENDENCIES = {role: _role_dependency(role) for role in Role}


def require_role(role: Role | str) -> Callable[..., UserOut]:
    """A dependency returning the caller (bearer token, else session cookie) if its role is at least ``role``.

    401 (``WWW-Authenticate: Bearer``) without valid credentials, 403 when the role is too low, and 403
    for a cookie-authenticated state-changing request without ``X-Requested-With: console`` (CSRF
    guard: a cross-site form cannot set that header). A sync function: FastAPI runs it in the thread
    pool, since a lookup may reach HBase (cached for a few seconds, see ``web.auth.cache``).

    The same function for the same role every time, so a router may declare its role for all its routes
    (``APIRouter(dependencies=[Depends(require_role(Role.VIEWER))])``) while a route that uses the caller also
    takes ``ViewerDep``: FastAPI runs it once per request.
    """
    return _ROLE_DEPENDENCIES[Role(role)]


ViewerDep = Annotated[UserOut, Depends(require_role(Role.VIEWER))]
OperatorDep = Annotated[UserOut, Depends(require_role(Role.OPERATOR))]
AdminDep = Annotated[UserOut, Depends(require_role(Role.ADMIN))]
