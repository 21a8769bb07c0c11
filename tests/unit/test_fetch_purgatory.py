"""The fetch purgatory's race between a fetch's first read and its parking (Kafka's tryCompleteElseWatch)."""

from __future__ import annotations

import asyncio
import time

from bus.broker.fetch_purgatory import DelayedFetch, Watchers, wait


def test_bytes_appended_before_parking_are_found_by_the_second_look() -> None:
    """The first read found 10 of 30 bytes; 20 more landed before the fetch was parked, so no watcher
    told it. Without the recheck it waited out its whole max wait (seen in CI as an 8 s fetch)."""

    async def scenario() -> float:
        fetch = DelayedFetch(min_bytes=30, accumulated=10, committed=False)
        started = time.monotonic()
        await wait(fetch, [Watchers()], timeout=5.0, recheck=lambda: 30)
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 1.0


def test_a_parked_fetch_completes_on_appends_and_otherwise_at_its_timeout() -> None:
    async def scenario() -> tuple[float, float]:
        watchers = Watchers()
        fetch = DelayedFetch(min_bytes=30, accumulated=10, committed=False)
        started = time.monotonic()
        asyncio.get_running_loop().call_later(0.05, watchers.appended, 25, True)
        await wait(fetch, [watchers], timeout=5.0, recheck=lambda: 10)
        woken = time.monotonic() - started
        idle = DelayedFetch(min_bytes=30, accumulated=0, committed=False)
        started = time.monotonic()
        await wait(idle, [watchers], timeout=0.2, recheck=lambda: 0)
        assert not watchers.waiting, "a completed fetch leaves no watcher behind"
        return woken, time.monotonic() - started

    woken, timed_out = asyncio.run(scenario())
    assert woken < 1.0 and 0.15 < timed_out < 2.0
