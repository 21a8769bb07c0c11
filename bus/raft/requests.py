"""Outbound request bookkeeping (KRaft's RequestManager): one request in flight per destination.

A response counts only if it answers the request still in flight to its sender; anything else (a
duplicate, a response to a request given up after `request_timeout_ms`, one from before a role change)
is ignored. A failed or timed-out request is retried after `retry_backoff_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class _Connection:
    in_flight: int | None = None
    sent_ms: int = 0
    backoff_until: int = 0


class RequestManager:
    def __init__(self, request_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self._connections: dict[int, _Connection] = {}
        self._next_correlation = 0

    def is_ready(self, destination: int, now_ms: int) -> bool:
        """No request in flight (or it timed out) and not backing off."""
        connection = self._connections.get(destination)
        if connection is None:
            return True
        if self._timed_out(connection, now_ms):
            connection.in_flight = None
            connection.backoff_until = now_ms + self.retry_backoff_ms
        return connection.in_flight is None and now_ms >= connection.backoff_until

    def any_in_flight(self, now_ms: int) -> bool:
        return any(c.in_flight is not None and not self._timed_out(c, now_ms) for c in self._connections.values())

    def on_sent(self, destination: int, now_ms: int) -> int:
        """Record a request to `destination`; returns its correlation id."""
        self._next_correlation += 1
        connection = self._connections.setdefault(destination, _Connection())
        connection.in_flight = self._next_correlation
        connection.sent_ms = now_ms
        return self._next_correlation

    def take_response(self, source: int, correlation_id: int) -> bool:
        """True if this answers the request in flight to `source` (which is then no longer in flight)."""
        connection = self._connections.get(source)
        if connection is None or connection.in_flight != correlation_id:
            return False
        connection.in_flight = None
        return True

    def on_failed(self, destination: int, now_ms: int) -> None:
        self._connections.setdefault(destination, _Connection()).backoff_until = now_ms + self.retry_backoff_ms

    def reset(self) -> None:
        """Forget every request: after a role change no earlier response is expected."""
        self._connections.clear()

    def _timed_out(self, connection: _Connection, now_ms: int) -> bool:
        return connection.in_flight is not None and now_ms >= connection.sent_ms + self.request_timeout_ms
