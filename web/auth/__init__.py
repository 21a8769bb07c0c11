"""Authentication of the console: users, passwords, bearer tokens, page sessions, the login throttle.

:class:`Auth` is the one object the app keeps (``app.state.auth``); ``web.dependencies`` turns it
into the ``require_role`` dependencies every API route declares.
"""

from __future__ import annotations

import ipaddress
import threading

from web.auth.roles import Role
from web.auth.sessions import COOKIE_NAME, SessionStore
from web.auth.throttle import LoginThrottle
from web.auth.tokens import TokenSigner, load_or_create_key
from web.auth.users import StoredUser, UserStore
from web.backends import Backends
from web.settings import ConsoleSettings

__all__ = ["COOKIE_NAME", "Auth", "LoginFailed", "LoginThrottled", "Role", "StoredUser", "is_loopback"]


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback; False for anything else, names included."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


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
        self.throttle = LoginThrottle(free_failures=settings.login_free_failures)
        """Keyed by (client address, username)."""
        self.address_throttle = LoginThrottle(free_failures=settings.login_address_free_failures, forget_s=900.0)
        """Keyed by client address, whatever the name (password spraying)."""
        self._signer: TokenSigner | None = None
        self._lock = threading.Lock()

    @property
    def signer(self) -> TokenSigner:
        with self._lock:
            if self._signer is None:
                self._signer = TokenSigner(load_or_create_key(self.settings.data_dir), self.settings.token_ttl_s)
            return self._signer

    def login(self, username: str, password: str, address: str = "") -> StoredUser:
        """The user for a correct password; LoginThrottled while the name (from ``address``) or the address is
        locked, LoginFailed otherwise.

        Failures count per (address, name), so an attacker's failures never lock the account's owner out when
        they log in from another address, and per address (loopback excepted: a local reverse proxy makes every
        client one address), so one address spraying many names is slowed. A success resets its own pair only.
        """
        pair = f"{address}\0{username}"
        counts_address = not is_loopback(address)
        wait = max(self.throttle.retry_after(pair),
                   self.address_throttle.retry_after(address) if counts_address else 0)
        if wait:
            raise LoginThrottled(wait)
        user = self.users.authenticate(username, password)
        if user is None:
            lock = max(self.throttle.failed(pair), self.address_throttle.failed(address) if counts_address else 0)
            if lock:
                raise LoginThrottled(lock)
            raise LoginFailed
        self.throttle.succeeded(pair)
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
