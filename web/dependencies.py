"""What routes ask for: settings, backends, an HBase connection, the current user with its role, the audit log.

Everything here comes from ``app.state``, set once by :func:`web.app.create_app`, so nothing deep
inside a route reads a file or a global.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import OAuth2PasswordBearer

from web.audit import RequestAudit
from web.auth import COOKIE_NAME, Auth, Role
from web.backends import Backends
from web.models.auth import UserOut
from web.settings import ConsoleSettings

__all__ = ["AdminDep", "AuditDep", "BackendsDep", "OperatorDep", "SettingsDep", "UserOut",
           "ViewerDep", "require_role"]

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

# The bearer scheme shows up in OpenAPI (the "Authorize" button of /docs); auto_error=False because a
# page may authenticate with the session cookie instead.
bearer_scheme = OAuth2PasswordBearer(tokenUrl="/api/v1/auth/token", auto_error=False)


def unauthorized(detail: str) -> HTTPException:
    return HTTPException(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


def require_role(role: Role | str) -> Callable[..., UserOut]:
    """A dependency returning the caller (bearer token, else session cookie) if its role is at least ``role``.

    401 (``WWW-Authenticate: Bearer``) without valid credentials, 403 when the role is too low, and 403
    for a cookie-authenticated state-changing request without ``X-Requested-With: console`` (CSRF
    guard: a cross-site form cannot set that header). A sync function: FastAPI runs it in the thread
    pool, since a lookup may reach HBase (cached for a few seconds, see ``web.auth.cache``).
    """
    minimum = Role(role)

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


ViewerDep = Annotated[UserOut, Depends(require_role(Role.VIEWER))]
OperatorDep = Annotated[UserOut, Depends(require_role(Role.OPERATOR))]
AdminDep = Annotated[UserOut, Depends(require_role(Role.ADMIN))]
