"""The console's background-thread helper (``web.services.background``): one thread, stopped and joined, and a
sampler whose failing step is logged while the loop goes on."""

from __future__ import annotations

import logging
import threading

import pytest

from web.services.background import BackgroundThread, Sampler

log = logging.getLogger("tests.web.background")


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


def test_start_twice_starts_one_thread_and_stop_joins_it() -> None:
    runs: list[int] = []
    worker: BackgroundThread

    def target() -> None:
        runs.append(1)
        while not worker.wait(0.01):
            pass

    worker = BackgroundThread("test-background-once", target)
    worker.start()
    worker.start()
    assert worker.running and len(_threads("test-background-once")) == 1
    worker.stop(2.0)
    assert not worker.running and worker.stopping
    assert _threads("test-background-once") == [] and runs == [1]


def test_stop_before_start_is_seen_by_a_loop_run_directly() -> None:
    worker = BackgroundThread("test-background-direct", lambda: None)
    worker.stop(1.0)
    assert worker.stopping and not worker.running


def test_a_failing_step_is_logged_and_the_sampler_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []
    went_on = threading.Event()

    def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        if len(calls) == 2:
            raise ConnectionError("backend down")
        went_on.set()

    sampler = Sampler("test-sampler", 0.01, step, log=log, what="test sample", expected=(ConnectionError,))
    with caplog.at_level(logging.DEBUG, logger=log.name):
        sampler.start()
        try:
            assert went_on.wait(2.0)  # the pause is at least MIN_PAUSE_S (0.1 s) per step
        finally:
            sampler.stop(2.0)
    assert not sampler.running
    failed = [r for r in caplog.records if r.getMessage() == "test sample failed"]
    assert len(failed) == 1 and failed[0].exc_info is not None and failed[0].levelno == logging.ERROR
    skipped = [r for r in caplog.records if r.getMessage() == "test sample skipped: backend down"]
    assert len(skipped) == 1 and skipped[0].levelno == logging.WARNING and skipped[0].exc_info is None
