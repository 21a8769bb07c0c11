"""Authentication of the console: users, passwords, bearer tokens, page sessions, the login throttle.

:class:`Auth` is the one object the app keeps (``app.state.auth``); ``web.dependencies`` turns it
into the ``require_role`` dependencies every API route declares.
"""

from __future__ import annotations

import threading

from web.auth.roles import Role
from web.auth.sessions import COOKIE_NAME, SessionStore
from web.auth.throttle import LoginThrottle
from web.auth.tokens import TokenSigner, load_or_create_key
from web.auth.users import StoredUser, UserStore
from web.backends import Backends
from web.settings import ConsoleSettings

__all__ = ["COOKIE_NAME", "Auth", "LoginFailed", "LoginThrottled", "Role", "StoredUser"]


class LoginFailed(Exception):
    """Wrong username or password (deliberately not saying which)."""


class LoginThrottled(Exception):
    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many failed logins; retry after {retry_after} s")
        self.retry_after = retry_after


class Auth:
    def __init__(self, settings: ConsoleSettings, backends: Backends) -> None:
        self.settings = settings
        self.users = UserStore(backends.hbase)
        self.sessions = SessionStore(backends.hbase, settings.session_ttl_s)
        self.throttle = LoginThrottle()
        self._signer: TokenSigner | None = None
        self._lock = threading.Lock()

    @property
    def signer(self) -> TokenSigner:
        with self._lock:
            if self._signer is None:
                self._signer = TokenSigner(load_or_create_key(self.settings.data_dir), self.settings.token_ttl_s)
            return self._signer

    def login(self, username: str, password: str) -> StoredUser:
        """The user for a correct password; LoginThrottled while the name is locked, LoginFailed otherwise."""
        wait = self.throttle.retry_after(username)
        if wait:
            raise LoginThrottled(wait)
        user = self.users.authenticate(username, password)
        if user is None:
            lock = self.throttle.failed(username)
            if lock:
                raise LoginThrottled(lock)
            raise LoginFailed
        self.throttle.succeeded(username)
        return user

    def _current(self, username: str, uid: str) -> StoredUser | None:
        user = self.users.get(username)
        return user if user is not None and user.uid == uid else None

    def user_for_token(self, token: str) -> StoredUser | None:
        claims = self.signer.verify(token)
        return None if claims is None else self._current(claims.username, claims.uid)

    def user_for_session(self, session_id: str) -> StoredUser | None:
        session = self.sessions.get(session_id)
        return None if session is None else self._current(session.username, session.uid)
