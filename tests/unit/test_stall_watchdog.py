"""The stall watchdog reports where the loop thread is without keeping any of its frames (and their locals)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from bus.broker.metrics import LoopMonitor, StallWatchdog


def test_a_stall_report_names_the_stalled_call_and_pins_none_of_its_buffers(caplog: pytest.LogCaptureFixture) -> None:
    """The CI failure: the watchdog kept the last frame it reported, whose memoryview pinned an offset index's
    pending bytes, and every later append to that partition failed with BufferError."""
    monitor = LoopMonitor(interval=0.005, log_threshold=0.02)
    monitor.last_tick = time.monotonic()  # the "loop" (this thread) ticked now, then stalls
    watchdog = StallWatchdog(monitor, threading.get_ident())
    pending = bytearray(b"entries")

    def stalled_holding_a_view() -> int:
        view = memoryview(pending)
        time.sleep(0.3)  # reported at about 25, 45, 85 and 165 ms of stall
        return len(view)

    watchdog.start()
    try:
        with caplog.at_level(logging.WARNING, logger="bus.broker.metrics"):
            stalled_holding_a_view()
            monitor.last_tick = time.monotonic() + 3600  # the loop moved on: no report for a long while
        reports = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
        assert reports and all("in stalled_holding_a_view" in r for r in reports), reports
        pending.clear()  # BufferError while a reported frame is still referenced
        assert pending == b""
    finally:
        watchdog.stop()
        watchdog.join(5)
