"""The disk's slowness never reaches the event loop through a log's lock: while a worker thread is inside an
fsync (the flusher, the cleaner's swap), appends and reads of the same log go on. A slow disk is simulated
by an fsync that blocks until released."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bus.log import files
from bus.log.cleaner import clean
from bus.log.config import LogConfig
from bus.log.log import Log
from tests.unit.test_log import TS, Clock, append, batch


class StuckDisk:
    """Replaces an fsync function by one that blocks until `release`, recording that it was entered."""

    def __init__(self, real: Callable[..., None]) -> None:
        self.real = real
        self.entered = threading.Event()
        self.released = threading.Event()

    def __call__(self, *args: object) -> None:
        self.entered.set()
        assert self.released.wait(10), "the test never released the disk"
        self.real(*args)


@pytest.fixture
def stuck_fsync(monkeypatch: pytest.MonkeyPatch) -> Iterator[StuckDisk]:
    disk = StuckDisk(os.fsync)
    monkeypatch.setattr(os, "fsync", disk)
    yield disk
    disk.released.set()


def _completes_while_stuck(work: Callable[[], object]) -> bool:
    done = threading.Event()

    def run() -> None:
        work()
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return done.wait(3)


def test_appends_and_reads_proceed_while_the_flusher_fsyncs(tmp_path: Path, stuck_fsync: StuckDisk) -> None:
    clock = Clock()
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=200), now_ms=clock)
    for i in range(6):
        append(log, batch([b"value-%d" % i]))  # rolls: sealed segments are due for the flusher
    flusher = threading.Thread(target=log.flush_if_due, args=(clock.now,), daemon=True)
    flusher.start()
    assert stuck_fsync.entered.wait(3)
    assert _completes_while_stuck(lambda: append(log, batch([b"during the fsync"])))
    assert _completes_while_stuck(lambda: log.read(0, 1000))
    stuck_fsync.released.set()
    flusher.join(5)
    recovery_point = files.read_offset(log.directory / files.RECOVERY_POINT)
    assert recovery_point is not None and 0 < recovery_point <= log.segments[-1].base_offset


def test_appends_proceed_while_the_cleaner_makes_its_swap_durable(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    disk = StuckDisk(files.fsync_dir)
    monkeypatch.setattr(files, "fsync_dir", disk)
    log = Log(tmp_path / "c-0", LogConfig(segment_bytes=200, cleanup_policy=frozenset({"compact"}),
                                          min_cleanable_dirty_ratio=0), now_ms=Clock())
    for i in range(8):
        append(log, batch([b"v%d" % i], keys=[b"same"]))
    cleaner = threading.Thread(target=clean, args=(log, TS), kwargs={"force": True}, daemon=True)
    cleaner.start()
    assert disk.entered.wait(5)
    try:
        assert _completes_while_stuck(lambda: append(log, batch([b"during the swap"], keys=[b"other"])))
    finally:
        disk.released.set()
    cleaner.join(5)
    assert not cleaner.is_alive()
