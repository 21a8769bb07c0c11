"""Silences as Alertmanager has them: matchers, a time window, who made it and why.

They live in the monitor's state table, so the console (which manages them, admin only) and the
monitor (which reloads them every evaluation) share them without a call between the two; a silence
mutes matching alerts' notifications while ``startsAt <= now < endsAt``. Expiring one sets
``endsAt`` to now, as Alertmanager does, so the history stays readable.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contracts.alerts import rfc3339
from contracts.tables.monitoring import STATE_TABLE, read_state, state_cells, state_key

from .matchers import Matcher, all_match

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: float
    ends_at: float
    created_by: str
    comment: str

    def active(self, now: float) -> bool:
        return self.starts_at <= now < self.ends_at

    def mutes(self, labels: Mapping[str, str], now: float) -> bool:
        return self.active(now) and all_match(self.matchers, labels)

    def state(self, now: float) -> str:
        return "pending" if now < self.starts_at else "active" if now < self.ends_at else "expired"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "matchers": [m.to_json() for m in self.matchers], "starts_at": self.starts_at,
                "ends_at": self.ends_at, "created_by": self.created_by, "comment": self.comment}

    def api(self, now: float) -> dict[str, Any]:
        """Alertmanager API v2's ``gettableSilence`` shape (what the console serves)."""
        return {"id": self.id, "matchers": [m.to_json() for m in self.matchers], "startsAt": rfc3339(self.starts_at),
                "endsAt": rfc3339(self.ends_at), "createdBy": self.created_by, "comment": self.comment,
                "status": {"state": self.state(now)}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Silence:
        return cls(str(data["id"]), tuple(Matcher.from_json(m) for m in data["matchers"]), float(data["starts_at"]),
                   float(data["ends_at"]), str(data["created_by"]), str(data["comment"]))


def new_silence(matchers: list[Matcher], starts_at: float, ends_at: float, created_by: str, comment: str) -> Silence:
    """Validate like Alertmanager: at least one matcher, and one that does not match the empty string."""
    if not matchers:
        raise ValueError("a silence needs at least one matcher")
    if all(m.matches({}) for m in matchers):
        raise ValueError("at least one matcher must not match the empty string (it would silence everything)")
    if ends_at <= starts_at:
        raise ValueError("endsAt must be after startsAt")
    if not created_by or not comment:
        raise ValueError("createdBy and comment are required")
    return Silence(uuid.uuid4().hex, tuple(matchers), starts_at, ends_at, created_by, comment)


def save_silence(connection: Any, silence: Silence) -> None:
    connection.table(STATE_TABLE).put(state_key("silence", silence.id), state_cells(silence.to_json()))


def _log_malformed(key: bytes, exc: Exception) -> None:
    log.warning("silence row %r is not a silence, left out: %r", key, exc)


def load_silences(connection: Any, malformed: Callable[[bytes, Exception], None] = _log_malformed) -> list[Silence]:
    """Every silence. A row that is not one is handed to ``malformed`` (by default: logged) and left out, so one
    damaged row never un-mutes the others."""
    found = []
    for key, cells in connection.table(STATE_TABLE).scan(row_prefix=b"silence|"):
        try:
            found.append(Silence.from_json(read_state(cells)))
        except (KeyError, TypeError, ValueError, RecursionError) as exc:
            malformed(key, exc)
    return found


def expire_silence(connection: Any, silence_id: str, now: float | None = None) -> Silence | None:
    """End a silence now; returns it, or None when there is no such silence."""
    cells = connection.table(STATE_TABLE).row(state_key("silence", silence_id))
    if not cells:
        return None
    silence = Silence.from_json(read_state(cells))
    now = time.time() if now is None else now
    if silence.ends_at > now:
        silence = Silence(silence.id, silence.matchers, min(silence.starts_at, now), now, silence.created_by,
                          silence.comment)
        save_silence(connection, silence)
    return silence
