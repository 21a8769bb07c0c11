"""Waiting fetches (Kafka's DelayedFetch in its fetch purgatory).

A fetch that found fewer than `fetch.min.bytes` registers one DelayedFetch with each partition it reads.
Appends hand it the bytes they added, so it completes once the total reaches `min_bytes` without any
partition being read again meanwhile; a partition error (the topic deleted, the leader changed, the log
start moved past what it reads) completes it at once, and the caller's timer at `max.wait.ms`. The caller
then reads all its partitions once to build the response.

A read_committed fetch cannot see transactional bytes before their marker: appends count for it only
while no transaction is open, and a marker (which may advance the last stable offset over bytes it never
counted) completes it, as a conservative stand-in for Kafka's position arithmetic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class DelayedFetch:
    __slots__ = ("accumulated", "committed", "future", "min_bytes")

    def __init__(self, min_bytes: int, accumulated: int, committed: bool) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.min_bytes = min_bytes
        self.accumulated = accumulated
        self.committed = committed

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
        for fetch in list(self.waiting):
            if visible_to_committed or not fetch.committed:
                fetch.add_bytes(count)

    def marker_appended(self, count: int) -> None:
        for fetch in list(self.waiting):
            if fetch.committed:
                fetch.complete()
            else:
                fetch.add_bytes(count)

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
