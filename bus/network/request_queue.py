"""Broker-wide bounds on requests read but not yet answered: `queued.max.requests` and `queued.max.request.bytes`.

Kafka's network threads hand requests to one RequestChannel of `queued.max.requests` slots and allocate
request buffers from a MemoryPool of `queued.max.request.bytes`; when either is exhausted they stop
reading sockets until handlers catch up. We have one event loop instead of threads, so the same bound
is kept by accounting: every connection reports the bytes it has buffered (partial frames included,
as Kafka's pool covers buffers being filled) and the frames it holds, and while the broker is over
either limit a connection that receives more data stops reading (it is muted) until the totals fall
back under. Like Kafka's pool, admission is checked before a read, not per byte: each connection can
overshoot by the one read already in hand, so the bound is the limit plus one socket read per connection.
"""

from __future__ import annotations

from typing import Protocol


class Mutable(Protocol):
    def unmute_queue(self) -> None: ...


class RequestQueue:
    __slots__ = ("bytes", "max_bytes", "max_requests", "requests", "waiting")

    def __init__(self, max_requests: int, max_bytes: int) -> None:
        self.max_requests = max_requests
        self.max_bytes = max_bytes if max_bytes > 0 else 1 << 62  # -1: unbounded, as in Kafka
        self.requests = 0
        self.bytes = 0
        self.waiting: dict[Mutable, None] = {}  # connections muted by the limits, in the order they waited

    @property
    def full(self) -> bool:
        return self.requests >= self.max_requests or self.bytes >= self.max_bytes

    def add(self, requests: int, size: int) -> None:
        self.requests += requests
        self.bytes += size

    def release(self, requests: int, size: int) -> None:
        self.requests -= requests
        self.bytes -= size
        if self.waiting and not self.full:
            waiting, self.waiting = self.waiting, {}
            for conn in waiting:
                conn.unmute_queue()

    def wait(self, conn: Mutable) -> None:
        self.waiting[conn] = None

    def forget(self, conn: Mutable) -> None:
        self.waiting.pop(conn, None)
