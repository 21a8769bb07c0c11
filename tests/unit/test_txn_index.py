"""Aborted-transaction indexes (`.txnindex`): Kafka's file format, collection across segments, and their
lifecycle with the segments (retention deletes them, the cleaner carries them, reopening reads them)."""

from __future__ import annotations

import struct
from pathlib import Path

from bus.log import files
from bus.log.cleaner import clean
from bus.log.config import LogConfig
from bus.log.log import Log
from bus.log.txn_index import AbortedTxn, TransactionIndex
from tests.unit.test_log import TS, Clock, append, batch


def test_entries_use_kafkas_layout_and_survive_a_reopen_with_a_torn_tail_cut(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    index = TransactionIndex(path)
    assert not path.exists()  # created with its first entry, as Kafka does
    index.append(AbortedTxn(7, 10, 20, 21))
    index.append(AbortedTxn(8, 15, 30, 31))
    index.close()
    data = path.read_bytes()
    assert data[:34] == struct.pack(">hqqqq", 0, 7, 10, 20, 21) and len(data) == 68
    path.write_bytes(data + b"\x00\x00\x00")  # a crash mid-entry
    reopened = TransactionIndex(path)
    assert reopened.entries == [AbortedTxn(7, 10, 20, 21), AbortedTxn(8, 15, 30, 31)]
    assert path.stat().st_size == 68


def test_collect_stops_once_the_last_stable_offset_passes_the_bound(tmp_path: Path) -> None:
    index = TransactionIndex(tmp_path / "x.txnindex")
    for txn in (AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 12, 20, 40), AbortedTxn(4, 30, 50, 51)):
        index.append(txn)
    found, complete = index.collect(6, 15)
    assert [t.producer_id for t in found] == [2, 3] and complete
    found, complete = index.collect(0, 100)
    assert len(found) == 4 and not complete
    index.truncate_to(20)
    assert [t.producer_id for t in index.entries] == [1, 2]


def _log(path: Path, clock: Clock, **config: object) -> Log:
    return Log(path, LogConfig(**config), now_ms=clock)  # type: ignore[arg-type]


def test_entries_live_in_the_marker_segment_and_go_with_it(tmp_path: Path) -> None:
    clock = Clock()
    log = _log(tmp_path / "t-0", clock, segment_bytes=300, retention_ms=1000)
    for i in range(8):
        append(log, batch([b"v%d" % i, b"w%d" % i, b"x%d" % i]))
        log.add_aborted_txn(AbortedTxn(i, log.log_end_offset - 3, log.log_end_offset - 1, log.log_end_offset))
    segments = log.segments
    assert len(segments) > 2
    assert log.collect_aborted_txns(0, log.log_end_offset) == [
        AbortedTxn(i, 3 * i, 3 * i + 2, 3 * i + 3) for i in range(8)]
    # A fetch from the middle sees only the transactions overlapping it.
    assert [t.producer_id for t in log.collect_aborted_txns(10, 14)] == [3, 4]
    first = segments[0]
    assert files.txn_index_path(first.path.parent, first.base_offset).exists()
    clock.now = TS + 10_000
    assert log.enforce_retention() >= 1
    assert not files.txn_index_path(first.path.parent, first.base_offset).exists()
    remaining = log.collect_aborted_txns(log.log_start_offset, log.log_end_offset)
    assert remaining and all(t.last_offset >= log.log_start_offset for t in remaining)
    log.close()
    reopened = _log(tmp_path / "t-0", clock, segment_bytes=300, retention_ms=1000)
    assert reopened.collect_aborted_txns(reopened.log_start_offset, reopened.log_end_offset) == remaining
    reopened.truncate_aborted_txns(remaining[-1].last_offset)
    assert reopened.collect_aborted_txns(0, reopened.log_end_offset) == remaining[:-1]


def test_the_cleaner_carries_the_entries_of_the_segments_it_merges(tmp_path: Path) -> None:
    clock = Clock()
    log = _log(tmp_path / "c-0", clock, segment_bytes=300, cleanup_policy=frozenset({"compact"}),
               min_cleanable_dirty_ratio=0)
    for i in range(8):
        append(log, batch([b"v%d" % i], keys=[b"same"]))
        log.add_aborted_txn(AbortedTxn(i, i, i, i + 1))
    before = log.collect_aborted_txns(0, log.log_end_offset)
    assert clean(log, TS, force=True) is not None
    assert log.collect_aborted_txns(0, log.log_end_offset) == before
    log.close()
    names = sorted(p.name for p in (tmp_path / "c-0").iterdir() if p.name.endswith(files.TXN_INDEX))
    assert names and not any(files.CLEANED in n for n in names)
    assert _log(tmp_path / "c-0", clock).collect_aborted_txns(0, 100) == before
