"""The HBase layout of the operator console: users, page sessions and the audit trail.

| table | row key | holds |
|---|---|---|
| ``console_user`` | ``username`` | family ``u``: role, argon2 hash, uid, created |
| ``console_session`` | ``sha256(session id)`` hex | family ``s``: username, uid, expires (epoch s) |
| ``console_audit`` | ``reversed_ms(time):id`` | family ``a``: the fields of a ``contracts.audit`` event |
| ``console_lag_history`` | ``h4(group)|group|reversed_ms(t)`` | family ``l`` (TTL 1 day): time, total, lags JSON |
| ``console_alert_ack`` | alert fingerprint | family ``k`` (TTL 30 days): the incident's startsAt, by, at |
| ``console_evidence`` | ``kind:id`` | family ``e`` (no TTL): kind, id, reason, locked_by, locked_at, record JSON |

These tables depart from the salted-prefix rule on purpose: users are a handful of rows read by name
and listed in name order; a session key is already a hash (uniform, and a dump of the table holds no
usable cookie); the audit trail is written at the pace of people reading and typing commands and is read newest
first across all users, which one unsalted, reversed-time key gives as a plain scan (its loader writes
each event under a key made from the event, so a replayed event rewrites its own row). Acknowledgements
are one row per alert fingerprint (a few dozen open alerts), read in one scan with the alert list.

Evidence locks are one row per locked item (``capture:<record id>``, ``hit:<hit id>``, ``video:<object key>``): a
case's handful of items, listed in one scan and sorted by lock time. The family has no TTL on purpose: the row
keeps a JSON copy of the item as the console showed it when it was locked (``record``), so a locked item outlives
the retention of its own table until an admin unlocks it.

Lag history follows the salted rule (one row per consumer group every 30 s, read as one group's last
hour, newest first); sample times are rounded to the sampling interval, so several consoles sampling
the same cluster rewrite the same rows instead of adding their own.

A user's ``uid`` is drawn anew each time the name is (re)created; tokens and sessions carry it, so
removing a user (and even re-adding the same name) ends every token and session issued before.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..audit import AuditEvent
from ..retention import with_ttl
from . import Families, ensure_tables, reversed_ms, salt

USER_TABLE = "console_user"
SESSION_TABLE = "console_session"
AUDIT_TABLE = "console_audit"
LAG_TABLE = "console_lag_history"
LAG_TTL_S = 24 * 3600
ACK_TABLE = "console_alert_ack"
DR_LAG_TABLE = "console_dr_lag"  # the DR mirror's lag samples: the lag-history row layout, keyed by mirror
ACK_TTL_S = 30 * 24 * 3600
EVIDENCE_TABLE = "console_evidence"
EVIDENCE_LIST_COLUMNS = [f"e:{name}".encode() for name in ("kind", "id", "reason", "locked_by", "locked_at")]
"""An evidence row's cells without its record: what the list of locks reads."""
TABLES: dict[str, Families] = {USER_TABLE: {"u": {}}, SESSION_TABLE: {"s": {}}, AUDIT_TABLE: {"a": {}},
                               LAG_TABLE: {"l": {"max_versions": 1, "time_to_live": LAG_TTL_S}},
                               ACK_TABLE: {"k": {"max_versions": 1, "time_to_live": ACK_TTL_S}},
                               DR_LAG_TABLE: {"l": {"max_versions": 1, "time_to_live": LAG_TTL_S}},
                               EVIDENCE_TABLE: {"e": {"max_versions": 1}}}  # no TTL: evidence outlives retention


def user_row_key(username: str) -> bytes:
    return username.encode()


def user_row(username: str, role: str, password_hash: str, uid: str, created: str) -> dict[bytes, bytes]:
    return {b"u:username": username.encode(), b"u:role": role.encode(), b"u:hash": password_hash.encode(),
            b"u:uid": uid.encode(), b"u:created": created.encode()}


def read_user(cells: dict[bytes, bytes]) -> dict[str, str]:
    return {key.decode().split(":", 1)[1]: value.decode() for key, value in cells.items()}


def session_row_key(session_id: str) -> bytes:
    return hashlib.sha256(session_id.encode()).hexdigest().encode()


def session_row(username: str, uid: str, expires: int) -> dict[bytes, bytes]:
    return {b"s:username": username.encode(), b"s:uid": uid.encode(), b"s:expires": str(expires).encode()}


def audit_row_key(event: AuditEvent) -> bytes:
    """Newest first; the event's id keeps two events of the same millisecond apart and a replay on its own row."""
    return f"{reversed_ms(event.time_ms)}:{event.id}".encode()


def audit_time_key(ms: int) -> bytes:
    """Where events at ``ms`` and before start in a scan (the page's ``to``, exclusive, and ``from``)."""
    return reversed_ms(ms).encode()


def audit_row(event: AuditEvent) -> dict[bytes, bytes]:
    row = {f"a:{name}".encode(): str(value).encode() for name, value in event.to_json().items()
           if name not in ("query", "reason")}
    row[b"a:query"] = json.dumps(event.query, ensure_ascii=False).encode()
    if event.reason is not None:
        row[b"a:reason"] = event.reason.encode()
    return row


def read_audit(cells: dict[bytes, bytes]) -> dict[str, Any]:
    """An audit row as the API's entry; rows written before the query was recorded carry it as ``detail``."""
    entry: dict[str, Any] = {key.decode().split(":", 1)[1]: value.decode() for key, value in cells.items()}
    entry["query"] = json.loads(entry.pop("query", None) or entry.pop("detail", None) or "{}")
    entry.pop("detail", None)
    return entry


def lag_prefix(group_id: str) -> bytes:
    return f"{salt(group_id)}|{group_id}|".encode()


def lag_row_key(group_id: str, ms: int) -> bytes:
    return lag_prefix(group_id) + reversed_ms(ms).encode()


def lag_row(ms: int, partitions: list[tuple[str, int, int | None]]) -> dict[bytes, bytes]:
    """One sample: (topic, partition, lag or None when nothing is committed) for each partition of the group."""
    total = sum(lag for _, _, lag in partitions if lag is not None)
    return {b"l:time": str(ms).encode(), b"l:total": str(total).encode(),
            b"l:partitions": json.dumps([list(p) for p in partitions]).encode()}


def read_lag(cells: dict[bytes, bytes]) -> dict[str, Any]:
    return {"time_ms": int(cells[b"l:time"]), "total": int(cells[b"l:total"]),
            "partitions": [tuple(p) for p in json.loads(cells[b"l:partitions"])]}


def ack_row(starts_at: str, by: str, at: str) -> dict[bytes, bytes]:
    """Who acknowledged an alert's incident and when; ``starts_at`` tells this incident from a later one."""
    return {b"k:starts_at": starts_at.encode(), b"k:by": by.encode(), b"k:at": at.encode()}


def read_ack(cells: dict[bytes, bytes]) -> dict[str, str]:
    return {key.decode().split(":", 1)[1]: value.decode() for key, value in cells.items()}


def evidence_row_key(kind: str, ident: str) -> bytes:
    return f"{kind}:{ident}".encode()


def evidence_row(kind: str, ident: str, reason: str, locked_by: str, locked_at: str,
                 record: dict[str, Any]) -> dict[bytes, bytes]:
    """A lock: who locked which item when and why, with the item as the console showed it then."""
    return {b"e:kind": kind.encode(), b"e:id": ident.encode(), b"e:reason": reason.encode(),
            b"e:locked_by": locked_by.encode(), b"e:locked_at": locked_at.encode(),
            b"e:record": json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()}


def read_evidence(cells: dict[bytes, bytes]) -> dict[str, Any]:
    """A lock row as the API's lock; ``record`` (parsed) only when the row was read with it."""
    lock: dict[str, Any] = {key.decode().split(":", 1)[1]: value.decode() for key, value in cells.items()}
    if "record" in lock:
        lock["record"] = json.loads(lock["record"])
    return lock


def ensure_console_tables(connection: Any, audit_ttl_s: int) -> None:
    """Create the console's tables that are missing, the audit trail's cells kept ``audit_ttl_s`` (``[retention]
    audit_days``); existing ones are kept as they are."""
    ensure_tables(connection, {**TABLES, **with_ttl({AUDIT_TABLE: TABLES[AUDIT_TABLE]}, audit_ttl_s)})
