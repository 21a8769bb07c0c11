"""The live image walls' follower (LiveCaptures): a wall opened while the previous follower is ending still gets a
follower. The follower ends when it finds no wall open, then closes its consumer; a wall opened in that moment used to
find the old thread still alive, start none, and never receive a capture."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from web.services import capture_images
from web.services.capture_images import LiveCaptures


class SlowClosingConsumer:
    """A consumer whose close() waits until the test lets it finish, holding the ending follower in that moment."""

    made: ClassVar[list[SlowClosingConsumer]] = []
    release = threading.Event()

    def __init__(self, config: dict[str, Any]) -> None:
        self.closing = threading.Event()
        SlowClosingConsumer.made.append(self)

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={})

    def poll(self, timeout: float) -> None:
        time.sleep(timeout)

    def close(self) -> None:
        self.closing.set()
        SlowClosingConsumer.release.wait(10)


def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_wall_opened_while_the_last_follower_closes_gets_a_new_follower(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture_images, "Consumer", SlowClosingConsumer)
    SlowClosingConsumer.made.clear()
    SlowClosingConsumer.release.clear()
    live = LiveCaptures({"bootstrap.servers": "unused:9092"}, {"vehicle": "capture.vehicle"}, poll_s=0.01)

    async def scenario() -> None:
        first = live.stream("cp-1")
        waiting = asyncio.ensure_future(anext(first))
        await asyncio.to_thread(until, lambda: len(SlowClosingConsumer.made) == 1, "a follower for the first wall")
        waiting.cancel()  # the page goes away: its wall closes
        await asyncio.gather(waiting, return_exceptions=True)
        await first.aclose()
        await asyncio.to_thread(until, SlowClosingConsumer.made[0].closing.is_set, "the follower ending")
        second = live.stream("cp-2")  # opened while the old follower is still closing its consumer
        waiting = asyncio.ensure_future(anext(second))
        try:
            await asyncio.to_thread(until, lambda: len(SlowClosingConsumer.made) == 2, "a follower for the new wall")
        finally:
            SlowClosingConsumer.release.set()
            waiting.cancel()
            await asyncio.gather(waiting, return_exceptions=True)
            await second.aclose()

    asyncio.run(scenario())
    until(lambda: live.walls == 0 and all(c.closing.is_set() for c in SlowClosingConsumer.made), "followers ended")
