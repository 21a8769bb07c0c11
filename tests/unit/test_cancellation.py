"""The broker's tasks end when cancelled: no `asyncio.wait_for` in `bus/`.

On Python 3.11 `wait_for` returns the inner result instead of raising CancelledError when the awaited future
completes in the same loop iteration as the cancellation. A task in a loop (a raft sender, a fetcher, a
coordinator write) then carries on after its cancel, and a shutdown that awaits it waits for ever: a broker
once hung on SIGTERM after its controlled shutdown. `asyncio.timeout` has no such window.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

BUS = Path(__file__).resolve().parents[2] / "bus"


async def _cancel_as_it_completes(wait: object) -> bool:
    """True when a task awaiting `wait(future)` ends cancelled although the future completed just before."""
    future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(wait(future))  # type: ignore[operator]
    await asyncio.sleep(0)  # the task now waits on the future
    future.set_result(1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        return True
    return False


async def _with_timeout(future: asyncio.Future[int]) -> int:
    async with asyncio.timeout(10):
        return await asyncio.shield(future)


async def _with_wait_for(future: asyncio.Future[int]) -> int:
    return await asyncio.wait_for(asyncio.shield(future), 10)


def test_a_timeout_block_lets_the_cancellation_through() -> None:
    assert asyncio.run(_cancel_as_it_completes(_with_timeout))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="wait_for was rebuilt on asyncio.timeout in 3.12")
def test_wait_for_swallows_that_cancellation_on_this_python() -> None:
    assert not asyncio.run(_cancel_as_it_completes(_with_wait_for))


def test_the_broker_does_not_use_wait_for() -> None:
    users = [str(path.relative_to(BUS)) for path in sorted(BUS.rglob("*.py"))
             if "asyncio.wait_for(" in path.read_text()]
    assert not users, f"use `async with asyncio.timeout(...)` instead of asyncio.wait_for in {users}"
