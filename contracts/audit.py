"""An audit event: who asked the console for what, from where, why, and how it ended.

The console publishes one to the ``audit`` topic (key: its id) for every command, every read of personal data
(plates, faces, capture records, hits, video, raw topic messages), every login, failed login and logout, and
refuses the read when the event cannot be published. A loader writes the events to HBase (``console_audit``),
where the audit page reads them; the topic is mirrored to the DR site like every data topic.

An event records what was asked, never what was answered: a plate search carries the plate and the reason
(a case number), not the trajectory found. Anything may be written to the topic, so :func:`decode` checks
every field and the loader sets aside what it refuses.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from .json_values import parse_object

MAX_TEXT = 1000
"""Longest user, action, target, reason, client or user agent kept (a longer one is cut, not refused)."""
MAX_QUERY_BYTES = 8192
"""Largest JSON of the query an event carries; the console's own queries are far below it."""
REASON_MAX = 200
"""Longest reason (a case number, a short justification) the console accepts from a user."""
OUTCOMES_OK = "ok"


class InvalidAuditEvent(ValueError):
    """A record on the audit topic that is not an audit event (or not one this version reads)."""


@dataclass(frozen=True)
class AuditEvent:
    user: str
    """The user name as given; for a failed login, the name that was tried."""
    action: str
    """A fixed dotted name: ``captures.search``, ``video.view``, ``login.failed``, ``topic.create``, ..."""
    target: str = ""
    """What the action was on: a plate, a record id, a video URL, a topic, a user."""
    query: dict[str, Any] = field(default_factory=dict)
    """What was asked (the request's parameters or body), never the result."""
    reason: str | None = None
    """Why, as the user typed it: required for searches by plate or face and for video export."""
    role: str = ""
    client: str = ""
    """The client's address as the console saw it."""
    user_agent: str = ""
    outcome: str = OUTCOMES_OK
    """``ok``, ``refused: ...`` (the user's error) or ``failed: ...`` (a backend)."""
    time_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    id: str = field(default_factory=lambda: secrets.token_hex(16))

    @property
    def time(self) -> str:
        """ISO-8601 UTC with milliseconds: what the page shows and the CSV export carries."""
        return datetime.fromtimestamp(self.time_ms / 1000, UTC).isoformat(timespec="milliseconds")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "time": self.time}


def encode(event: AuditEvent) -> bytes:
    return json.dumps(event.to_json(), ensure_ascii=False, separators=(",", ":")).encode()


def _text(raw: dict[str, Any], name: str, *, required: bool = True) -> str:
    value = raw.get(name, None if required else "")
    if not isinstance(value, str) or (required and not value):
        raise InvalidAuditEvent(f"{name}: {'missing' if value is None else 'not a non-empty string'}")
    return value[:MAX_TEXT]


def decode(value: bytes | None) -> AuditEvent:
    """The event a record's value holds; InvalidAuditEvent naming the first problem otherwise."""
    try:
        raw = parse_object(value)
    except ValueError as exc:
        raise InvalidAuditEvent(str(exc)) from None
    event_id = raw.get("id")
    if not isinstance(event_id, str) or not (8 <= len(event_id) <= 64) or not event_id.isalnum():
        raise InvalidAuditEvent("id: not 8 to 64 letters and digits")
    time_ms = raw.get("time_ms")
    if not isinstance(time_ms, int) or isinstance(time_ms, bool) or not 0 < time_ms < 10**13:
        raise InvalidAuditEvent("time_ms: not a time in epoch milliseconds")
    query = raw.get("query", {})
    if not isinstance(query, dict) or len(json.dumps(query, ensure_ascii=False)) > MAX_QUERY_BYTES:
        raise InvalidAuditEvent("query: not a JSON object of at most 8 KiB")
    reason = raw.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise InvalidAuditEvent("reason: not a string")
    return AuditEvent(user=_text(raw, "user"), action=_text(raw, "action"), target=_text(raw, "target", required=False),
                      query=query, reason=None if reason is None else reason[:MAX_TEXT],
                      role=_text(raw, "role", required=False), client=_text(raw, "client", required=False),
                      user_agent=_text(raw, "user_agent", required=False), outcome=_text(raw, "outcome"),
                      time_ms=time_ms, id=event_id)
