"""The event loop's stall diagnostics: the figure, the stack that explains it, GC pauses, schema preloading."""

from __future__ import annotations

import asyncio
import gc
import logging
import subprocess
import sys
import time

import pytest

from bus.broker.apis import handlers
from bus.broker.metrics import LoopMonitor
from bus.protocol import messages


def blocking_work() -> None:
    time.sleep(0.35)


async def _stall_once(monitor: LoopMonitor) -> None:
    monitor.start()
    await asyncio.sleep(0.05)
    blocking_work()  # what a synchronous fsync or a lazy import does to every connection
    await asyncio.sleep(0.05)
    gc.collect()
    await asyncio.sleep(0.02)
    monitor.stop()


def test_a_stall_is_measured_and_its_stack_logged(caplog: pytest.LogCaptureFixture) -> None:
    monitor = LoopMonitor(log_threshold=0.1)
    with caplog.at_level(logging.WARNING, logger="bus.broker.metrics"):
        asyncio.run(_stall_once(monitor))
    assert 0.3 <= monitor.worst < 1.0
    assert monitor.recent_worst() == monitor.worst
    stacks = [r.getMessage() for r in caplog.records if "blocking_work" in r.getMessage()]
    assert len(stacks) == 2, caplog.text  # at 0.1 and 0.2 s of the 0.35 s stall, not once per watchdog poll
    assert all("so far, in:" in stack and "time.sleep(0.35)" in stack for stack in stacks)
    assert monitor.gc.seconds[2] > 0 and monitor.gc.worst > 0  # the explicit full collection was timed
    assert monitor.gc._callback not in gc.callbacks  # stop() removed it


def test_preload_loads_every_served_version_once() -> None:
    served = [(h.api_key, h.min_version, h.max_version) for h in handlers().values()]
    loaded = messages.preload(served)
    # Produce is served from v3 but advertised from v0 (no class is missing for a served version).
    assert loaded == 2 * sum(high - low + 1 for _key, low, high in served)
    before = messages.request_class.cache_info().hits
    messages.preload(served)
    assert messages.request_class.cache_info().hits > before  # the second pass only hits the caches


def test_preload_imports_the_versions_a_builder_may_look_names_up_in() -> None:
    """`Shapes.make` checks a field name the version lacks against every version kio knows; those modules
    must be loaded at start, not by the first request that names such a field (Fetch v17-v18 imported on the
    loop stalled it for 50-60 ms). A fresh interpreter, so other tests' imports do not hide a gap."""
    script = (
        "import sys\n"
        "from bus.broker.apis import handlers\n"
        "from bus.protocol import messages\n"
        "messages.preload([(h.api_key, h.min_version, h.max_version) for h in handlers().values()])\n"
        "before = set(sys.modules)\n"
        "shapes = messages.shapes(1, 4)\n"
        "shapes.make('FetchResponse', throttle_time=0, responses=(), session_id=0)  # v4 has no session_id\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('kio.schema')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_watchdog_sleeps_while_the_loop_keeps_ticking() -> None:
    """It used to poll every 10 ms: a hundred GIL-taking wake-ups a second on an idle broker."""
    monitor = LoopMonitor(log_threshold=0.1)
    waits: list[float] = []

    async def idle_loop() -> None:
        monitor.start()
        assert monitor._watchdog is not None
        real_wait = monitor._watchdog._stop_event.wait

        def counted(timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            return real_wait(timeout)

        monitor._watchdog._stop_event.wait = counted  # type: ignore[method-assign]
        await asyncio.sleep(1.0)
        monitor.stop()

    asyncio.run(idle_loop())
    assert len(waits) <= 15, waits  # about one wake-up per log threshold, not one per 10 ms
    assert max(waits) >= 0.09
