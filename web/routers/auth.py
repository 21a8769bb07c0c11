"""``/api/v1/auth``: OAuth2 password flow for the API, a session cookie for the pages, logout, me; logins,
failed logins and logouts are audited.

Logins are sync routes (argon2 verification is CPU work, so it runs in the thread pool, not on the
event loop). A name locked by the throttle gets 429 with ``Retry-After``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Request, Response, status
from fastapi.security import OAuth2PasswordRequestForm

from web.audit import RequestAudit
from web.auth import COOKIE_NAME, LoginFailed, LoginThrottled, StoredUser
from web.dependencies import CSRF_HEADER, CSRF_VALUE, AuditDep, AuthDep, SettingsDep, ViewerDep, unauthorized
from web.models.auth import Token, UserOut

router = APIRouter(prefix="/api/v1/auth", tags=["auth"])

LoginForm = Annotated[OAuth2PasswordRequestForm, Depends()]
MAX_NAME = 100
"""A failed login's name is recorded up to this length (the form takes anything)."""


def _login(auth: AuthDep, audit: RequestAudit, form: OAuth2PasswordRequestForm, request: Request,
           how: str) -> StoredUser:
    """The user, once the login (or its failure) is in the audit trail: no session without its audit event."""
    address = request.client.host if request.client else ""
    name = form.username[:MAX_NAME]
    try:
        user = auth.login(form.username, form.password, address)
    except LoginThrottled as exc:
        audit.record(name, "login.failed", name, {"via": how}, "refused: throttled")
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(exc),
                            headers={"Retry-After": str(exc.retry_after)}) from None
    except LoginFailed:
        audit.record(name, "login.failed", name, {"via": how}, "refused: wrong username or password")
        raise unauthorized("wrong username or password") from None
    audit.record(UserOut(username=user.username, role=user.role), "login", user.username, {"via": how})
    return user


@router.post("/token", response_model=Token)
def token(auth: AuthDep, audit: AuditDep, form: LoginForm, request: Request) -> Token:
    user = _login(auth, audit, form, request, "token")
    return Token(access_token=auth.signer.issue(user.username, user.uid), expires_in=auth.signer.ttl_s)


@router.post("/session", response_model=UserOut)
def session(auth: AuthDep, audit: AuditDep, settings: SettingsDep, form: LoginForm, request: Request,
            response: Response) -> UserOut:
    user = _login(auth, audit, form, request, "session")
    session_id = auth.sessions.open(user.username, user.uid)
    response.set_cookie(COOKIE_NAME, session_id, max_age=settings.session_ttl_s, httponly=True, samesite="strict",
                        secure=settings.tls or settings.url.startswith("https:"), path="/")
    return UserOut(username=user.username, role=user.role)


@router.post("/logout", status_code=status.HTTP_204_NO_CONTENT)
def logout(auth: AuthDep, audit: AuditDep, request: Request, response: Response) -> None:
    """Ends the cookie's session (a bearer token simply expires); the CSRF header is required with a cookie."""
    session_id = request.cookies.get(COOKIE_NAME)
    if session_id:
        if request.headers.get(CSRF_HEADER) != CSRF_VALUE:
            raise HTTPException(status.HTTP_403_FORBIDDEN, f"missing header {CSRF_HEADER}: {CSRF_VALUE}")
        user = auth.user_for_session(session_id)
        auth.sessions.close(session_id)
        if user is not None:
            audit.record(UserOut(username=user.username, role=user.role), "logout", user.username)
    response.delete_cookie(COOKIE_NAME, path="/", httponly=True, samesite="strict")


@router.get("/me", response_model=UserOut)
def me(user: ViewerDep) -> UserOut:
    return user
