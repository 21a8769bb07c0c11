"""Waiting fetches (Kafka's DelayedFetch in its fetch purgatory).

A fetch that found fewer than `fetch.min.bytes` registers one DelayedFetch with each partition it reads.
Appends hand it the bytes they added, so it completes once the total reaches `min_bytes` without any
partition being read again meanwhile; a partition error (the topic deleted, the leader changed, the log
start moved past what it reads) completes it at once, and the caller's timer at `max.wait.ms`. The caller
then reads all its partitions once to build the response.

A read_committed fetch cannot see transactional bytes before their marker: appends count for it only
while no transaction is open, and a marker (which may advance the last stable offset over bytes it never
counted) completes it, as a conservative stand-in for Kafka's position arithmetic.

With followers, a consumer reads only up to the high watermark: bytes count for consumers' fetches when the
high watermark passes them (`committed`), and for followers' fetches (which read to the log end) at once.
Alone in its ISR, a leader's appends are committed as they land and reach both kinds together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class DelayedFetch:
    __slots__ = ("accumulated", "committed", "future", "min_bytes", "replica")

    def __init__(self, min_bytes: int, accumulated: int, committed: bool, *, replica: bool = False) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.min_bytes = min_bytes
        self.accumulated = accumulated
        self.committed = committed
        self.replica = replica  # a follower's fetch: reads up to the log end, not the high watermark

    def add_bytes(self, count: int) -> None:
        self.accumulated += count
        if self.accumulated >= self.min_bytes:
            self.complete()

    def complete(self) -> None:
        if not self.future.done():
            self.future.set_result(None)


class Watchers:
    """The delayed fetches watching one partition."""

    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: set[DelayedFetch] = set()

    def appended(self, count: int, visible_to_committed: bool) -> None:
        """Bytes appended and committed at once (the leader alone in its ISR): every fetch's news."""
        for fetch in list(self.waiting):
            if visible_to_committed or not fetch.committed:
                fetch.add_bytes(count)

    def marker_appended(self, count: int) -> None:
        for fetch in list(self.waiting):
            if fetch.committed:
                fetch.complete()
            else:
                fetch.add_bytes(count)

    def replicated(self, count: int) -> None:
        """Bytes appended but not committed yet: news for followers only."""
        for fetch in list(self.waiting):
            if fetch.replica:
                fetch.add_bytes(count)

    def committed(self, count: int, invisible_to_committed: int, markers: int) -> None:
        """The high watermark passed `count` bytes, of which `invisible_to_committed` were in open transactions
        and `markers` were transaction markers: news for consumers."""
        for fetch in list(self.waiting):
            if fetch.replica:
                continue
            if fetch.committed and markers:
                fetch.complete()
            else:
                fetch.add_bytes(count - invisible_to_committed if fetch.committed else count)

    def complete_all(self) -> None:
        for fetch in list(self.waiting):
            fetch.complete()


async def wait(fetch: DelayedFetch, watched: list[Watchers], timeout: float, recheck: Callable[[], int]) -> None:
    """Park `fetch` on every partition in `watched` until it completes or `timeout` seconds pass.

    `recheck` reads the fetch again once it is parked and returns the bytes it finds (Kafka's
    tryCompleteElseWatch): an append that landed between the first read and the parking reached no
    watcher, and without the second look the fetch would sit out its whole max wait.
    """
    for watchers in watched:
        watchers.waiting.add(fetch)
    found = recheck()
    if found > fetch.accumulated:
        fetch.add_bytes(found - fetch.accumulated)
    handle = asyncio.get_running_loop().call_later(timeout, fetch.complete)
    try:
        await fetch.future
    finally:
        handle.cancel()
        for watchers in watched:
            watchers.waiting.discard(fetch)
