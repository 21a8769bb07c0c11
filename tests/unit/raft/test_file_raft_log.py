"""FileRaftLog: the same answers as InMemoryRaftLog, kept across reopen, kill -9 and interrupted snapshots.

The behavioural checks run against both logs; the persistence checks replay one history on both and
compare every answer after the file log is reopened; the simulation runs the consensus core on it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bus.log.config import LogConfig
from bus.log.log import Log
from bus.protocol.records import build_batch, scan_batches
from bus.raft.file_raft_log import DEFAULT_RETENTION_BYTES, FileRaftLog, MetadataLogError
from bus.raft.messages import FetchSnapshotRequest
from bus.raft.node import SnapshotInstalled
from bus.raft.replicated_log import (
    InMemoryRaftLog,
    LeaderChangeMessage,
    LogEntry,
    OffsetAndEpoch,
    RaftLog,
    Snapshot,
    ValidationKind,
    validate_offset_and_epoch,
)
from bus.raft.snapshots import SnapshotError, SnapshotStore, snapshot_path
from contracts.processes import spawn
from tests.unit.raft.harness import Net
from tests.unit.raft.sim import SimNode, Simulation

ROOT = Path(__file__).resolve().parents[3]
SEGMENT_BYTES = 600  # a few entries per segment: appends roll, snapshots delete whole segments
# InMemoryRaftLog keeps what metadata.max.retention.bytes=0 keeps: the file log is compared to it so.
NO_HISTORY = {"segment_bytes": SEGMENT_BYTES, "retention_bytes": 0}

LogFactory = Callable[[], RaftLog]


@pytest.fixture(params=["memory", "file"])
def new_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogFactory]:
    opened: list[FileRaftLog] = []

    def make() -> RaftLog:
        if request.param == "memory":
            return InMemoryRaftLog()
        log = FileRaftLog(tmp_path / f"log{len(opened)}", **NO_HISTORY)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


def _fill(log: RaftLog, epochs: list[int]) -> RaftLog:
    """One entry per element, each appended in that element's epoch."""
    for epoch in epochs:
        log.append_as_leader([f"e{epoch}".encode()], epoch)
    return log


def _all(log: RaftLog) -> list[LogEntry]:
    return log.read(log.start_offset(), 1 << 30)


# ---- the RaftLog contract, on both logs ----------------------------------------------------------------


def test_leader_appends_and_offsets_for_leader_epoch(new_log: LogFactory) -> None:
    log = new_log()
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (0, 0, 0)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(0, 0)
    assert log.append_as_leader([b"a", b"b"], 1) == (0, 1)
    _fill(log, [3, 3, 3, 4])  # epoch 1: 0-1, epoch 3: 2-4, epoch 4: 5
    assert [log.epoch_of(o) for o in range(6)] == [1, 1, 3, 3, 3, 4]
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(1, 2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(1, 2)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 5)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(4, 6)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    assert log.last_fetched_epoch() == 4
    with pytest.raises(IndexError):
        log.epoch_of(6)


def test_follower_appends_what_the_leader_reads(new_log: LogFactory) -> None:
    leader = _fill(new_log(), [1, 2, 2])
    leader.append_as_leader([LeaderChangeMessage(1, (1, 2, 3), (1, 2)), b"", b"x" * 300], 3)
    follower = new_log()
    follower.append_as_follower([])
    while follower.end_offset() < leader.end_offset():
        follower.append_as_follower(leader.read(follower.end_offset(), 20))
    assert _all(follower) == _all(leader)
    assert _all(follower)[3].record == LeaderChangeMessage(1, (1, 2, 3), (1, 2))
    assert follower.end_offset_for_epoch(2) == OffsetAndEpoch(2, 3)


def test_appends_reject_going_back_in_epoch_or_gaps(new_log: LogFactory) -> None:
    log = _fill(new_log(), [2])
    with pytest.raises(ValueError, match="nothing to append"):
        log.append_as_leader([], 2)
    with pytest.raises(ValueError, match="epoch"):
        log.append_as_leader([b"x"], 1)
    with pytest.raises(ValueError, match="log ends at 1"):
        log.append_as_follower(_fill(InMemoryRaftLog(), [2, 2, 2]).read(2, 100))
    with pytest.raises(ValueError, match="does not follow"):
        log.append_as_follower([LogEntry(1, 2, b"a"), LogEntry(3, 2, b"b")])


def test_a_rejected_append_writes_nothing(tmp_path: Path) -> None:
    # (InMemoryRaftLog keeps the entries before the bad one; the file log checks them all first.)
    log = _fill(FileRaftLog(tmp_path), [2])
    with pytest.raises(ValueError, match="does not follow"):
        log.append_as_follower([LogEntry(1, 2, b"a"), LogEntry(3, 2, b"b")])
    with pytest.raises(ValueError, match="epoch"):
        log.append_as_follower([LogEntry(1, 2, b"a"), LogEntry(2, 1, b"b")])
    assert log.end_offset() == 1
    log.close()
    assert FileRaftLog(tmp_path).end_offset() == 1


def test_truncate_is_exact_inside_one_append(new_log: LogFactory) -> None:
    log = new_log()
    log.append_as_leader([b"a", b"b", b"c", b"d"], 1)
    log.append_as_leader([b"e"], 3)
    log.truncate_to(2)
    assert [e.record for e in _all(log)] == [b"a", b"b"]
    assert log.last_fetched_epoch() == 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(1, 2)
    log.truncate_to(5)  # past the end: nothing to do
    assert log.end_offset() == 2
    log.append_as_leader([b"f"], 4)
    assert [(e.offset, e.epoch) for e in _all(log)] == [(0, 1), (1, 1), (2, 4)]


def test_read_respects_max_bytes_but_returns_at_least_one_entry(new_log: LogFactory) -> None:
    log = new_log()
    log.append_as_leader([b"a" * 10, b"b" * 10, b"c" * 10], 1)
    log.append_as_leader([LeaderChangeMessage(1, (1, 2, 3), (1, 2))], 1)
    assert [e.offset for e in log.read(0, 25)] == [0, 1]
    assert [e.offset for e in log.read(0, 1)] == [0]
    assert [e.offset for e in log.read(1, 36)] == [1, 2, 3]  # the control record counts 16
    assert log.read(4, 100) == []
    with pytest.raises(IndexError):
        log.read(5, 100)


def test_create_snapshot_moves_the_start_and_keeps_the_epoch_history(new_log: LogFactory) -> None:
    log = _fill(new_log(), [1, 1, 2, 2, 3])
    with pytest.raises(ValueError, match="outside the log"):
        log.create_snapshot(Snapshot(OffsetAndEpoch(3, 6), b"too far"))
    log.create_snapshot(Snapshot(OffsetAndEpoch(1, 2), b"image1"))
    assert (log.start_offset(), log.end_offset()) == (0, 5)  # the only snapshot: its history stays
    log.create_snapshot(Snapshot(OffsetAndEpoch(2, 3), b"image"))
    assert (log.start_offset(), log.end_offset()) == (3, 5)
    assert log.latest_snapshot() == Snapshot(OffsetAndEpoch(2, 3), b"image")
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 4)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 3)  # older than the log: where the snapshot ends
    assert [e.offset for e in _all(log)] == [3, 4]
    with pytest.raises(IndexError):
        log.read(2, 100)
    with pytest.raises(ValueError, match="below the log start"):
        log.truncate_to(2)
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 5), b"image2"))
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (5, 5, 3)
    assert _all(log) == []
    log.append_as_leader([b"next"], 3)
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 6)


def test_install_snapshot_replaces_the_log(new_log: LogFactory) -> None:
    log = _fill(new_log(), [1, 1])
    log.install_snapshot(Snapshot(OffsetAndEpoch(4, 10), b"image"))
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (10, 10, 4)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(4, 10)
    log.append_as_follower(_fill(InMemoryRaftLog(), [4] * 11).read(10, 100))
    assert log.end_offset() == 11
    # A snapshot that ends inside the log replaces it too (the follower's tail diverged).
    _fill(log, [4, 4, 4])
    log.install_snapshot(Snapshot(OffsetAndEpoch(5, 12), b"image2"))
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (12, 12, 5)
    assert log.latest_snapshot() == Snapshot(OffsetAndEpoch(5, 12), b"image2")


@pytest.mark.parametrize(
    ("fetch_offset", "last_epoch", "expected"),
    [
        (0, 0, (ValidationKind.VALID, None)),
        (2, 1, (ValidationKind.VALID, None)),
        (5, 3, (ValidationKind.VALID, None)),
        (6, 4, (ValidationKind.VALID, None)),
        (4, 2, (ValidationKind.DIVERGING, OffsetAndEpoch(1, 2))),
        (7, 3, (ValidationKind.DIVERGING, OffsetAndEpoch(3, 5))),
        (8, 4, (ValidationKind.DIVERGING, OffsetAndEpoch(4, 6))),
    ],
)
def test_fetch_validation(new_log: LogFactory, fetch_offset: int, last_epoch: int, expected: tuple) -> None:
    log = _fill(new_log(), [1, 1, 3, 3, 3, 4])
    assert validate_offset_and_epoch(log, fetch_offset, last_epoch) == expected


def test_fetch_validation_sends_followers_behind_the_snapshot_to_it(new_log: LogFactory) -> None:
    log = _fill(new_log(), [1, 1, 2, 2, 3])
    log.create_snapshot(Snapshot(OffsetAndEpoch(1, 1), b"old"))
    log.create_snapshot(Snapshot(OffsetAndEpoch(2, 4), b"image"))
    snapshot = (ValidationKind.SNAPSHOT, OffsetAndEpoch(2, 4))
    assert validate_offset_and_epoch(log, 0, 0) == snapshot
    assert validate_offset_and_epoch(log, 2, 1) == snapshot
    assert validate_offset_and_epoch(log, 4, 2) == (ValidationKind.VALID, None)
    assert validate_offset_and_epoch(log, 5, 3) == (ValidationKind.VALID, None)


# ---- persistence: the file log answers as the in-memory one after reopening ---------------------------


def _answers(log: RaftLog) -> tuple:
    return (
        log.start_offset(),
        log.end_offset(),
        log.last_fetched_epoch(),
        [log.end_offset_for_epoch(epoch) for epoch in range(8)],
        _all(log),
        log.latest_snapshot(),
    )


def _appends(log: RaftLog) -> None:
    _fill(log, [1, 1, 2])
    log.append_as_leader([f"r{i}".encode() * 20 for i in range(12)], 3)  # spans several segments
    log.append_as_leader([LeaderChangeMessage(2, (1, 2, 3), (2, 3))], 5)


def _truncation(log: RaftLog) -> None:
    _appends(log)
    log.truncate_to(9)  # inside the 12-entry append
    _fill(log, [6, 6])


def _snapshots(log: RaftLog) -> None:
    _appends(log)
    log.create_snapshot(Snapshot(OffsetAndEpoch(1, 1), b"zeroth"))
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 10), b"first"))
    _fill(log, [5, 6])
    log.create_snapshot(Snapshot(OffsetAndEpoch(5, 16), b"second"))


def _install(log: RaftLog) -> None:
    _appends(log)
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 4), b"own"))
    log.install_snapshot(Snapshot(OffsetAndEpoch(7, 40), b"leader's"))
    _fill(log, [7, 7])


@pytest.mark.parametrize("history", [_appends, _truncation, _snapshots, _install])
def test_reopen_gives_the_same_answers(tmp_path: Path, history: Callable[[RaftLog], None]) -> None:
    expected = InMemoryRaftLog()
    history(expected)
    log = FileRaftLog(tmp_path, **NO_HISTORY)
    history(log)
    assert _answers(log) == _answers(expected)
    log.close()
    reopened = FileRaftLog(tmp_path, **NO_HISTORY)
    assert _answers(reopened) == _answers(expected)
    reopened.append_as_leader([b"after"], 9)
    reopened.close()
    assert FileRaftLog(tmp_path).end_offset() == expected.end_offset() + 1


def test_retention_0_deletes_whole_segments_below_the_latest_snapshot_and_older_snapshots(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path, **NO_HISTORY)
    _appends(log)
    segments = sorted(tmp_path.glob("*.log"))
    assert len(segments) >= 3
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 10), b"first"))
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 12), b"second"))
    latest = snapshot_path(tmp_path, OffsetAndEpoch(3, 12))
    assert sorted(tmp_path.glob("*.checkpoint*")) == [latest]
    remaining = sorted(tmp_path.glob("*.log"))
    assert remaining[0] != segments[0] and int(remaining[0].name[:20]) <= 12
    log.close()


def test_torn_tail_is_dropped_on_reopen(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path)
    log.append_as_leader([b"one", b"two"], 1)
    log.append_as_leader([b"three" * 10], 1)
    log.close()
    segment = tmp_path / "00000000000000000000.log"
    os.truncate(segment, segment.stat().st_size - 7)  # the crash cut the last batch mid-write
    log = FileRaftLog(tmp_path)
    assert [e.record for e in _all(log)] == [b"one", b"two"]
    log.append_as_leader([b"again"], 2)
    assert [e.record for e in _all(log)] == [b"one", b"two", b"again"]
    log.close()


def test_corrupt_snapshot_is_refused(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path)
    _fill(log, [1, 1, 1])
    log.create_snapshot(Snapshot(OffsetAndEpoch(1, 2), b"the image of two entries"))
    log.close()
    path = snapshot_path(tmp_path, OffsetAndEpoch(1, 2))
    good = path.read_bytes()
    flipped = bytearray(good)
    flipped[-3] ^= 0x40
    path.write_bytes(flipped)
    with pytest.raises(SnapshotError, match="corrupt"):
        FileRaftLog(tmp_path)
    path.write_bytes(good[:10])
    with pytest.raises(SnapshotError, match="truncated"):
        FileRaftLog(tmp_path)
    path.write_bytes(good)
    snapshot_path(tmp_path, OffsetAndEpoch(1, 3)).write_bytes(good)  # a copy under another id
    with pytest.raises(SnapshotError, match="not the one its name says"):
        FileRaftLog(tmp_path)
    snapshot_path(tmp_path, OffsetAndEpoch(1, 3)).unlink()
    log = FileRaftLog(tmp_path)
    assert log.latest_snapshot() == Snapshot(OffsetAndEpoch(1, 2), b"the image of two entries")
    log.close()


def test_a_partial_snapshot_is_deleted_on_open(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path)
    _fill(log, [1, 1])
    log.close()
    part = tmp_path / (snapshot_path(tmp_path, OffsetAndEpoch(1, 2)).name + ".part")
    part.write_bytes(b"half a snapshot")
    log = FileRaftLog(tmp_path)
    assert not part.exists()
    assert (log.latest_snapshot(), log.start_offset(), log.end_offset()) == (None, 0, 2)
    log.close()


def test_a_leader_epoch_checkpoint_write_cut_by_a_crash_does_not_make_the_log_a_stranger(tmp_path: Path) -> None:
    """Log writes `leader-epoch-checkpoint` through a `.tmp` file; a crash mid-write leaves it behind."""
    log = FileRaftLog(tmp_path)
    _fill(log, [1, 1])
    log.close()
    (tmp_path / "leader-epoch-checkpoint.tmp").write_text("0\n1\n")
    log = FileRaftLog(tmp_path)
    assert (log.start_offset(), log.end_offset()) == (0, 2)
    log.close()


def test_a_clean_cut_by_a_crash_after_the_log_start_moved_is_finished_on_open(tmp_path: Path) -> None:
    """Cleaning moves the log start (durably) before it deletes the snapshots below it; a crash in between
    leaves those snapshots, which the next open deletes."""
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)  # the default retention: nothing is cleaned
    _snapshots(log)
    assert (log.start_offset(), len(list(tmp_path.glob("*.checkpoint")))) == (0, 3)
    log.close()
    # The crash: the Log's start moved to the latest snapshot's end (segments below gone), no snapshot deleted.
    data = Log(tmp_path, LogConfig(segment_bytes=SEGMENT_BYTES))
    data.delete_records_before(16)
    data.close()
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)
    expected = InMemoryRaftLog()
    _snapshots(expected)
    assert _answers(log) == _answers(expected)
    assert sorted(tmp_path.glob("*.checkpoint*")) == [snapshot_path(tmp_path, OffsetAndEpoch(5, 16))]
    log.close()


def test_a_log_start_no_snapshot_ends_at_is_refused(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)
    _snapshots(log)
    log.close()
    data = Log(tmp_path, LogConfig(segment_bytes=SEGMENT_BYTES))
    data.delete_records_before(12)
    data.close()
    with pytest.raises(MetadataLogError, match="the log starts at offset 12 but no snapshot ends there"):
        FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)


@pytest.mark.parametrize("snapshot_id", [OffsetAndEpoch(7, 40), OffsetAndEpoch(7, 6)])
def test_install_snapshot_interrupted_before_the_log_was_replaced_is_finished_on_open(
    tmp_path: Path, snapshot_id: OffsetAndEpoch
) -> None:
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)
    _appends(log)
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 4), b"own"))
    log.close()
    SnapshotStore(tmp_path).save(Snapshot(snapshot_id, b"leader's image"))
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (snapshot_id.offset,) * 2 + (7,)
    assert _all(log) == []
    assert sorted(tmp_path.glob("*.checkpoint*")) == [snapshot_path(tmp_path, snapshot_id)]
    log.close()


def test_a_directory_that_is_not_a_metadata_log_is_refused_untouched(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(MetadataLogError, match="not a directory"):
        FileRaftLog(not_a_dir)
    log_root = tmp_path / "root"
    (log_root / "topic-0").mkdir(parents=True)
    (log_root / "meta.properties").write_text("node.id=1\n")
    with pytest.raises(MetadataLogError, match=r"meta\.properties"):
        FileRaftLog(log_root)
    assert sorted(p.name for p in log_root.iterdir()) == ["meta.properties", "topic-0"]
    # A topic's partition: keyed records with null values (tombstones) are no metadata records.
    partition = tmp_path / "topic-0"
    data = Log(partition, LogConfig())
    payload = build_batch([(0, 0, b"key", None)], base_offset=0, partition_leader_epoch=0)
    data.append_as_is(payload, scan_batches(payload))
    data.close()
    before = {p.name: p.read_bytes() for p in partition.iterdir()}
    with pytest.raises(MetadataLogError, match="is not a KRaft metadata log"):
        FileRaftLog(partition)
    assert {p.name: p.read_bytes() for p in partition.iterdir()} == before


# ---- retention: metadata.max.retention.bytes / .ms ----------------------------------------------------


def test_a_snapshot_keeps_the_history_it_covers_within_retention(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)  # Kafka's defaults: 100 MiB, 7 days
    _snapshots(log)
    assert (log.start_offset(), log.end_offset(), log.latest_snapshot()) == (
        0, 18, Snapshot(OffsetAndEpoch(5, 16), b"second"))  # fmt: skip
    assert log.earliest_snapshot_id() == OffsetAndEpoch(1, 1)
    assert [e.offset for e in log.read(15, 1 << 20)] == [15, 16, 17]
    assert validate_offset_and_epoch(log, 15, 5) == (ValidationKind.VALID, None)  # one entry behind the snapshot
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)
    log.close()
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert (log.start_offset(), log.end_offset(), len(list(tmp_path.glob("*.checkpoint")))) == (0, 18, 3)
    log.close()


def _snapshot_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in directory.glob("*.checkpoint"))


def test_retention_bytes_deletes_history_only_a_newer_snapshot_covers(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES, retention_bytes=0)
    _appends(log)
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 10), b"only"))
    assert (log.start_offset(), log.maybe_clean()) == (0, False)  # over the limit, but no newer snapshot
    log.retention_bytes = 1 << 30
    _fill(log, [5, 6])
    log.create_snapshot(Snapshot(OffsetAndEpoch(5, 16), b"newer"))
    assert log.start_offset() == 0  # within the limit
    total = sum(path.stat().st_size for path in tmp_path.glob("*.log")) + _snapshot_bytes(tmp_path)
    log.retention_bytes = total
    assert (log.maybe_clean(), log.start_offset()) == (False, 0)
    log.retention_bytes = total - 1
    assert log.maybe_clean()
    assert (log.start_offset(), log.end_offset(), log.earliest_snapshot_id()) == (16, 18, OffsetAndEpoch(5, 16))
    assert sorted(tmp_path.glob("*.checkpoint*")) == [snapshot_path(tmp_path, OffsetAndEpoch(5, 16))]
    assert min(int(path.name[:20]) for path in tmp_path.glob("*.log")) > 0  # whole segments went
    assert validate_offset_and_epoch(log, 15, 5) == (ValidationKind.SNAPSHOT, OffsetAndEpoch(5, 16))
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(5, 16)
    log.close()
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES)
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (16, 18, 6)
    log.close()


def test_retention_ms_deletes_history_whose_snapshot_is_older_once_a_newer_covers_it(tmp_path: Path) -> None:
    log = FileRaftLog(tmp_path, segment_bytes=SEGMENT_BYTES, retention_bytes=-1, retention_ms=60_000)
    _snapshots(log)
    now = time.time_ns() // 1_000_000
    assert not log.maybe_clean(now)
    old = (now - 120_000) / 1000
    for snapshot_id in (OffsetAndEpoch(1, 1), OffsetAndEpoch(3, 10)):
        os.utime(snapshot_path(tmp_path, snapshot_id), (old, old))
    assert log.maybe_clean(now)
    # Both expired snapshots' history went; the newest is kept however old it gets.
    assert (log.start_offset(), log.earliest_snapshot_id()) == (16, OffsetAndEpoch(5, 16))
    os.utime(snapshot_path(tmp_path, OffsetAndEpoch(5, 16)), (old, old))
    assert not log.maybe_clean(now)
    assert log.start_offset() == 16
    log.close()


@pytest.mark.parametrize(("retention_bytes", "sends_snapshot"), [(DEFAULT_RETENTION_BYTES, False), (0, True)])
def test_a_follower_one_entry_behind_a_leaders_snapshot_is_caught_up_by_fetch(
    tmp_path: Path, retention_bytes: int, sends_snapshot: bool
) -> None:
    """With the history kept, the follower gets the one entry it misses; with none kept, the whole snapshot."""
    net = Net({1, 2, 3})
    for node_id in net.logs:
        net.logs[node_id] = FileRaftLog(tmp_path / str(node_id), retention_bytes=retention_bytes)  # type: ignore[assignment]
        net.start(node_id)
    try:
        leader = net.elect()
        net.append([b"a", b"b"])
        net.advance(100)
        leader.create_snapshot(leader.high_watermark, b"image of a, b")
        behind = next(i for i in net.nodes if i != leader.node_id)
        net.down.add(behind)
        net.append([b"c"])
        net.advance(100)
        snapshot = leader.create_snapshot(leader.high_watermark, b"image of a, b, c")
        assert net.logs[behind].end_offset() == snapshot.snapshot_id.offset - 1
        net.down.discard(behind)
        net.advance(200)
        assert net.logs[behind].end_offset() == net.logs[leader.node_id].end_offset()
        installed = [e for e in net.events[behind] if isinstance(e, SnapshotInstalled)]
        fetched_snapshot = [e for e in net.delivered if isinstance(e.body, FetchSnapshotRequest)]
        assert bool(installed) == bool(fetched_snapshot) == sends_snapshot
    finally:
        for raft_log in net.logs.values():
            raft_log.close()  # type: ignore[attr-defined]


# ---- kill -9 ------------------------------------------------------------------------------------------

_APPENDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from bus.raft.file_raft_log import FileRaftLog

    log = FileRaftLog(Path(sys.argv[1]), segment_bytes=4096)
    i = log.end_offset()
    while True:
        first, last = log.append_as_leader([b"r%d" % (i + k) for k in range(3)], 1)
        i = last + 1
        print(last, flush=True)
    """
)


def test_every_offset_acknowledged_before_kill_9_is_there_after(tmp_path: Path) -> None:
    acknowledged = -1
    for _round in range(2):
        proc = spawn([sys.executable, "-c", _APPENDER, str(tmp_path)], subprocess.PIPE)
        assert proc.stdout is not None
        try:
            for _ in range(150):
                line = proc.stdout.readline()
                assert line, f"the appender died: exit {proc.poll()}"
                acknowledged = int(line)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        log = FileRaftLog(tmp_path)
        entries = _all(log)
        log.close()
        assert log.end_offset() > acknowledged
        assert [e.record for e in entries] == [b"r%d" % i for i in range(len(entries))]


# ---- the consensus core on the file log ---------------------------------------------------------------


class DiskSimulation(Simulation):
    """The seeded simulation with every node's log on disk; a restarted node reopens its directory."""

    def __init__(self, root: Path, seed: int, voters: int, observers: int) -> None:
        self.root = root
        super().__init__(seed, voters=voters, observers=observers)

    def _start(self, node: SimNode) -> None:
        if isinstance(node.log, FileRaftLog):
            node.log.close()
        node.log = FileRaftLog(self.root / str(node.node_id), segment_bytes=4096)  # type: ignore[assignment]
        super()._start(node)

    def close(self) -> None:
        for node in self.nodes.values():
            node.log.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(6))
def test_quorum_survives_faults_on_the_file_log(tmp_path: Path, seed: int) -> None:
    sim = DiskSimulation(tmp_path, seed, voters=3 if seed % 2 == 0 else 5, observers=seed % 3 == 0)
    try:
        sim.run(4000)
        assert sim.run_until_progress(limit_ms=5000) < 5000
        assert sim.committed
    finally:
        sim.close()
