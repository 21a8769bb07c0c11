"""The audit trail: every command a user issues, with who, when, what, on what, and how it ended.

Routes get an :class:`AuditLog` through ``AuditDep`` and call :meth:`AuditLog.record` after the
command (``outcome`` "ok" or what went wrong). ``record`` is a blocking HBase put: call it from a
sync route, or through ``run_in_threadpool`` from an async one.
"""

from __future__ import annotations

import base64
import binascii
import time
from datetime import UTC, datetime
from typing import Any

from contracts.tables import console as tables
from web.auth.table import Connect, ConsoleTable
from web.models.audit import AuditEntry
from web.models.auth import UserOut


class BadCursor(ValueError):
    pass


def encode_cursor(row_key: bytes) -> str:
    return base64.urlsafe_b64encode(row_key).decode().rstrip("=")


def decode_cursor(cursor: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise BadCursor("cursor is not one this API returned") from None
    if not key or len(key) > 64:
        raise BadCursor("cursor is not one this API returned")
    return key


class AuditLog:
    def __init__(self, connect: Connect) -> None:
        self._table = ConsoleTable(connect, tables.AUDIT_TABLE)

    def record(self, user: UserOut | str, action: str, target: str, detail: dict[str, Any] | None = None,
               outcome: str = "ok") -> None:
        ms = time.time_ns() // 1_000_000
        when = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
        name = user.username if isinstance(user, UserOut) else user
        with self._table.open() as table:
            table.put(tables.audit_row_key(ms),
                                        tables.audit_row(when, name, action, target, detail or {}, outcome))

    def page(self, limit: int, cursor: str | None = None) -> tuple[list[AuditEntry], str | None]:
        """Up to ``limit`` entries, newest first, from ``cursor`` on; and the cursor of the next page."""
        start = decode_cursor(cursor) if cursor else None
        with self._table.open() as table:
            rows = list(table.scan(row_start=start, limit=limit + 1))
        entries = [AuditEntry(**tables.read_audit(cells)) for _key, cells in rows[:limit]]
        following = encode_cursor(rows[limit][0]) if len(rows) > limit else None
        return entries, following
