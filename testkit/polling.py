"""Waiting for a condition with a deadline instead of a fixed sleep (the machine is shared), for the tests and the
benchmarks that watch a process's progress."""

from __future__ import annotations

import time
from collections.abc import Callable


def poll(condition: Callable[[], bool], timeout: float, interval: float = 0.5, what: str = "condition") -> None:
    """Wait for ``condition`` with a deadline (the machine is shared: no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s")
        time.sleep(interval)
