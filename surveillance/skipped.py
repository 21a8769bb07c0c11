"""Records a stage sets aside: one record never stops a job.

Any topic a stage reads may carry a malformed or foreign record: a client bug, a tool run against the
wrong topic, a producer of another version. The stage sets such a record aside, counts it
(``surveillance_records_skipped{stage, reason}``), logs why, and goes on with the next one. It never
raises on one: the supervisor would restart the stage into the same record, a crash loop, and on a
compacted control topic (read whole at every start) one that no restart ends.
"""

from __future__ import annotations

import logging
import threading
import time

from confluent_kafka import Message

from contracts.commands import CommandError
from contracts.records import Checked, Kind, Status, parse

from . import metrics

log = logging.getLogger(__name__)

UNREADABLE: tuple[type[Exception], ...] = (ValueError, TypeError, KeyError, RecursionError)
"""What reading a foreign value raises. ``json.loads`` alone raises ValueError (bad UTF-8, bad JSON, an
integer past Python's 4,300-digit limit) and RecursionError (arrays nested deeper than the interpreter's
stack), so catching ``JSONDecodeError`` is not enough; a wrong shape raises TypeError or KeyError."""

FUTURE_TOLERANCE_MS = 60_000
"""A capture time further ahead of this host's clock than this is no real capture's (device clocks agree
to seconds): it would move a stage's event time past every real record, closing every window or
forgetting every plate at once, so it is set aside as ``future``."""

QUIET = frozenset({"unrecognized"})
"""Reasons counted but not logged: a plate or face the recogniser could not read is a camera's everyday."""

LOG_INTERVAL_S = 10.0
"""At most one log line per stage and reason this often: a producer spraying garbage must not turn every
record into a line on the stage's own thread (the counter still counts each one)."""


def read_capture(kind: Kind, raw: bytes | None) -> Checked:
    """:func:`contracts.records.parse` that never raises: what ``json.loads`` raises beyond JSONDecodeError
    (see :data:`UNREADABLE`) makes an INVALID record here too, whichever errors the contract catches."""
    try:
        return parse(kind, raw)
    except UNREADABLE as exc:
        return Checked(Status.INVALID, reason=f"not JSON: {type(exc).__name__}")


def where(message: Message) -> str:
    return f"{message.topic()}[{message.partition()}]@{message.offset()}"


class _Throttle:
    """Which (stage, reason) may log now, and how many went unlogged since its last line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # stages are threads of one process
        self._next: dict[tuple[str, str], float] = {}
        self._unlogged: dict[tuple[str, str], int] = {}

    def due(self, key: tuple[str, str]) -> int | None:
        """None when ``key`` logged recently (counted), else how many went unlogged before this one."""
        now = time.monotonic()
        with self._lock:
            if now < self._next.get(key, float("-inf")):
                self._unlogged[key] = self._unlogged.get(key, 0) + 1
                return None
            self._next[key] = now + LOG_INTERVAL_S
            return self._unlogged.pop(key, 0)


_throttle = _Throttle()


def skip(stage: str, reason: str, position: str, detail: str = "") -> None:
    """Count one record set aside by ``stage`` (``reason`` is the label) and log it (throttled)."""
    metrics.SKIPPED.labels(stage, reason).inc()
    if reason in QUIET:
        return
    unlogged = _throttle.due((stage, reason))
    if unlogged is not None:
        more = f" ({unlogged} more since the last such line)" if unlogged else ""
        log.warning("%s: set aside %s: %s%s%s", stage, position, reason, f" ({detail[:200]})" if detail else "",
                    more)


def refusal(exc: Exception) -> str:
    """The reason a command is rejected with: the contract's ``field: reason``, else what made it unreadable."""
    if isinstance(exc, CommandError):
        return str(exc)
    return f"value: unreadable ({type(exc).__name__}: {exc})"[:200]
