"""The audit trail: every command, every read of personal data, every login and logout, with who, when, from where,
what was asked, why, and how it ended.

Routes get an :class:`AuditLog` through ``AuditDep``. :meth:`AuditLog.record` publishes a
:class:`contracts.audit.AuditEvent` to the ``audit`` topic (a standing-by site's console to its site's own copy,
``dr.audit`` or ``primary.audit``: `web/site.py`) and waits for the bus to acknowledge it (``acks=all``):
a read of personal data is recorded *before* its data is fetched, so when the event cannot be published the read
is refused (:class:`web.backends.BackendUnavailable` "audit", a 503), never served unaudited. ``record`` blocks:
call it from a sync route, or through ``run_in_threadpool`` from an async one.

The audit loader (:mod:`web.services.audit_loader`) writes the events to HBase, where :meth:`AuditLog.page` and
:meth:`AuditLog.entries` read them, newest first, filtered by user, action, a plate or record id and a time range.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Producer
from fastapi import Request
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from contracts import audit as events
from contracts.tables import console as tables
from web.auth.table import Connect, ConsoleTable
from web.backends import BackendUnavailable
from web.models.audit import AuditEntry
from web.models.auth import UserOut

AUDIT = "audit"
AUDIT_MS = "audit_ms"
"""Where a request's scope state keeps the milliseconds its audit events took (see :class:`ServerTiming`)."""
"""The backend a 503 names when an event could not be published."""
SCAN_BUDGET = 5000
"""Rows one page request examines at most: a filter that matches little returns a short page and a cursor to go
on, instead of scanning years of audit trail in one request."""
EXPORT_LIMIT = 100_000
"""Rows a CSV export holds at most (narrow the time range for more)."""


class BadCursor(ValueError):
    pass


def encode_cursor(row_key: bytes) -> str:
    return base64.urlsafe_b64encode(row_key).decode().rstrip("=")


def decode_cursor(cursor: str) -> bytes:
    try:
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    except (binascii.Error, ValueError):
        raise BadCursor("cursor is not one this API returned") from None
    if not key or len(key) > 100:
        raise BadCursor("cursor is not one this API returned")
    return key


@dataclass(frozen=True)
class AuditFilter:
    """What the audit page and API filter by; every part optional."""

    user: str | None = None
    action: str | None = None
    q: str | None = None
    """A plate, a record id, a video URL or any text: matched in the target, the query and the reason."""
    start_ms: int | None = None
    """Inclusive."""
    end_ms: int | None = None
    """Exclusive."""

    def matches(self, entry: dict[str, Any]) -> bool:
        if self.user is not None and entry.get("user") != self.user:
            return False
        if self.action is not None and entry.get("action") != self.action:
            return False
        if self.q is not None:
            haystack = f"{entry.get('target', '')}\n{entry.get('reason') or ''}\n{entry.get('query')}"
            return self.q.casefold() in haystack.casefold()
        return True


def client_of(request: Request) -> tuple[str, str]:
    """(client address, user agent) of a request, as the audit records them."""
    return (request.client.host if request.client else ""), request.headers.get("user-agent", "")


class RequestAudit:
    """The audit log as one request's route sees it: events carry that request's client address and user agent."""

    def __init__(self, log: AuditLog, request: Request) -> None:
        self.log = log
        self._request = request

    def record(self, user: UserOut | str, action: str, target: str = "", query: dict[str, Any] | None = None,
               outcome: str = events.OUTCOMES_OK, *, reason: str | None = None) -> None:
        started = time.perf_counter()
        self.log.record(user, action, target, query, outcome, request=self._request, reason=reason)
        state = self._request.scope.setdefault("state", {})
        state[AUDIT_MS] = state.get(AUDIT_MS, 0.0) + (time.perf_counter() - started) * 1000


class ServerTiming:
    """Adds ``Server-Timing: audit;dur=<ms>`` to a response whose request published an audit event: what auditing
    added to that request, for the browser's devtools and for the benchmark that compares latency with and
    without it (there is deliberately no switch that turns auditing off)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def timed(message: Message) -> None:
            spent = scope.get("state", {}).get(AUDIT_MS)
            if message["type"] == "http.response.start" and spent is not None:
                timing = (b"server-timing", f"audit;dur={spent:.2f}".encode())
                message["headers"] = [*message.get("headers", []), timing]
            await send(message)

        await self.app(scope, receive, timed)


class AuditLog:
    def __init__(self, connect: Connect, bus: dict[str, str], topic: Callable[[], str], timeout_s: float,
                 ttl_s: int) -> None:
        """``bus``: the console's bus client settings (``ConsoleSettings.bus``); ``topic``: where an event goes now
        (``audit``, or a standing-by site's own copy: `web.site.ConsoleSite.audit_topic`)."""
        self._table = ConsoleTable(connect, tables.AUDIT_TABLE, ttl_s)
        self._topic = topic
        self._timeout_s = timeout_s
        self._bus = bus
        self._producer: Producer | None = None
        self._lock = threading.Lock()
        # What auditing adds to each audited request, and how often it refused one: what an operator watches.
        self.publish_seconds = Histogram("console_audit_publish_seconds",
                                         "Time to publish an audit event and have the bus acknowledge it",
                                         buckets=(.001, .002, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5),
                                         registry=None)
        self.publish_failures = Counter("console_audit_publish_failures",
                                        "Audit events the bus did not acknowledge (their requests were refused)",
                                        registry=None)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        registry.register(self.publish_seconds)
        registry.register(self.publish_failures)

    def _open(self) -> Producer:
        with self._lock:
            if self._producer is None:
                # Idempotent and acks=all: an acknowledged event is on every in-sync replica, once. A message that
                # cannot be delivered within the timeout fails in librdkafka too, so no event reaches the topic
                # after its read was refused.
                self._producer = Producer({
                    **self._bus, "enable.idempotence": True, "acks": "all",
                    "linger.ms": 0, "message.timeout.ms": max(1000, int(self._timeout_s * 1000)),
                    "logger": logging.getLogger("web.audit.bus")})
            return self._producer

    def publish(self, event: events.AuditEvent) -> None:
        """Publish ``event`` and wait until the bus acknowledged it; BackendUnavailable("audit") otherwise."""
        started = time.monotonic()
        try:
            self._publish(event)
        except BackendUnavailable:
            self.publish_failures.inc()
            raise
        self.publish_seconds.observe(time.monotonic() - started)

    def _publish(self, event: events.AuditEvent) -> None:
        producer = self._open()
        done = threading.Event()
        failure: list[KafkaError] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            if error is not None:
                failure.append(error)
            done.set()

        try:
            producer.produce(self._topic(), events.encode(event), key=event.id.encode(), on_delivery=delivered)
        except (BufferError, KafkaError) as exc:
            raise BackendUnavailable(AUDIT, f"cannot publish: {exc}") from None
        deadline = time.monotonic() + self._timeout_s + 1.0
        while not done.is_set() and time.monotonic() < deadline:
            producer.poll(0.01)  # serves every thread's callbacks, this one's among them
        if not done.is_set():
            raise BackendUnavailable(AUDIT, f"not acknowledged within {self._timeout_s:g} s")
        if failure:
            raise BackendUnavailable(AUDIT, failure[0].str())

    def record(self, user: UserOut | str, action: str, target: str = "", query: dict[str, Any] | None = None,
               outcome: str = events.OUTCOMES_OK, *, request: Request | None = None,
               reason: str | None = None) -> None:
        """Publish one event: ``user`` did ``action`` on ``target``, asking ``query``, for ``reason``."""
        name, role = (user.username, user.role.value) if isinstance(user, UserOut) else (user, "")
        client, agent = client_of(request) if request is not None else ("", "")
        self.publish(events.AuditEvent(user=name, role=role, action=action, target=target, query=query or {},
                                       reason=reason, client=client, user_agent=agent, outcome=outcome))

    def _scan(self, where: AuditFilter, start: bytes | None) -> Iterator[tuple[bytes, dict[str, Any]]]:
        row_start = start
        if where.end_ms is not None:  # newest first: the end of the range is where the scan starts
            end_key = tables.audit_time_key(where.end_ms - 1)
            row_start = max(row_start or b"", end_key)
        row_stop = tables.audit_time_key(where.start_ms - 1) if where.start_ms is not None else None
        with self._table.open() as table:
            for key, cells in table.scan(row_start=row_start, row_stop=row_stop, batch_size=500):
                yield key, tables.read_audit(cells)

    def page(self, limit: int, cursor: str | None = None,
             where: AuditFilter = AuditFilter()) -> tuple[list[AuditEntry], str | None]:
        """Up to ``limit`` matching entries, newest first, from ``cursor`` on; and the cursor to go on from (None at
        the end). At most SCAN_BUDGET rows are examined: a sparse filter may give a short page with a cursor."""
        start = decode_cursor(cursor) if cursor else None
        found: list[AuditEntry] = []
        for examined, (key, entry) in enumerate(self._scan(where, start)):
            if len(found) == limit or examined == SCAN_BUDGET:
                return found, encode_cursor(key)
            if where.matches(entry):
                found.append(AuditEntry.model_validate(entry))
        return found, None

    def entries(self, where: AuditFilter, limit: int = EXPORT_LIMIT) -> list[AuditEntry]:
        """Every matching entry, newest first, up to ``limit`` (the CSV export). A list, read in the caller's
        thread: happybase's pool lends connections per thread, and a streamed response iterates in several."""
        found: list[AuditEntry] = []
        for _key, entry in self._scan(where, None):
            if len(found) == limit:
                break
            if where.matches(entry):
                found.append(AuditEntry.model_validate(entry))
        return found

    def close(self) -> None:
        with self._lock:
            if self._producer is not None:
                self._producer.flush(self._timeout_s)
                self._producer = None
