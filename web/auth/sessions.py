"""Page sessions: an opaque random id in the ``console_session`` cookie, its state in HBase.

Server-side state (rather than a second JWT) is what lets logout end a session for good. The row
is keyed by the id's SHA-256, so the table holds nothing a reader could replay as a cookie.
Expired rows are deleted when next looked up or on logout.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass

from contracts.tables import console as tables
from web.auth.cache import TTLCache
from web.auth.table import Connect, ConsoleTable

COOKIE_NAME = "console_session"


@dataclass(frozen=True)
class Session:
    username: str
    uid: str
    expires: int


class SessionStore:
    def __init__(self, connect: Connect, ttl_s: int, cache_ttl_s: float = 2.0) -> None:
        self._table = ConsoleTable(connect, tables.SESSION_TABLE)
        self.ttl_s = ttl_s
        self._cache: TTLCache[Session | None] = TTLCache(cache_ttl_s)

    def open(self, username: str, uid: str) -> str:
        session_id = secrets.token_urlsafe(32)
        expires = int(time.time()) + self.ttl_s
        with self._table.open() as table:
            table.put(tables.session_row_key(session_id),
                                        tables.session_row(username, uid, expires))
        return session_id

    def _load(self, session_id: str) -> Session | None:
        with self._table.open() as table:
            cells = table.row(tables.session_row_key(session_id))
            if not cells:
                return None
            session = Session(cells[b"s:username"].decode(), cells[b"s:uid"].decode(), int(cells[b"s:expires"]))
            if session.expires <= time.time():
                table.delete(tables.session_row_key(session_id))
                return None
        return session

    def get(self, session_id: str) -> Session | None:
        if not session_id or len(session_id) > 128:
            return None
        session = self._cache.get(session_id, lambda: self._load(session_id))
        if session is not None and session.expires <= time.time():
            return None
        return session

    def close(self, session_id: str) -> None:
        if not session_id or len(session_id) > 128:
            return
        with self._table.open() as table:
            table.delete(tables.session_row_key(session_id))
        self._cache.invalidate(session_id)
