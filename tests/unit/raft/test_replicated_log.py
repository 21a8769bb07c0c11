"""The in-memory replicated log: OffsetsForLeaderEpoch, truncation, snapshots and KIP-595's fetch validation."""

import pytest

from bus.raft.replicated_log import (
    InMemoryRaftLog,
    LeaderChangeMessage,
    OffsetAndEpoch,
    Snapshot,
    ValidationKind,
    validate_offset_and_epoch,
)


def _log(epochs: list[int]) -> InMemoryRaftLog:
    """A log with one entry per element, each appended in that element's epoch."""
    log = InMemoryRaftLog()
    for epoch in epochs:
        log.append_as_leader([f"e{epoch}".encode()], epoch)
    return log


def test_end_offset_for_epoch_answers_like_offsets_for_leader_epoch() -> None:
    log = _log([1, 1, 3, 3, 3, 4])  # epoch 1: 0-1, epoch 3: 2-4, epoch 4: 5
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(1, 2)
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(1, 2)  # largest epoch <= 2 is 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(3, 5)
    assert log.end_offset_for_epoch(4) == OffsetAndEpoch(4, 6)
    assert log.end_offset_for_epoch(9) == OffsetAndEpoch(4, 6)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)


def test_truncate_forgets_epochs_above_the_offset() -> None:
    log = _log([1, 1, 3, 3])
    log.truncate_to(2)
    assert log.end_offset() == 2
    assert log.last_fetched_epoch() == 1
    assert log.end_offset_for_epoch(3) == OffsetAndEpoch(1, 2)


def test_append_rejects_going_back_in_epoch_or_gaps() -> None:
    log = _log([2])
    with pytest.raises(ValueError, match="epoch"):
        log.append_as_leader([b"x"], 1)
    with pytest.raises(ValueError, match="log ends at 1"):
        log.append_as_follower(_log([2, 2, 2]).read(2, 100))


def test_read_respects_max_bytes_but_returns_at_least_one_entry() -> None:
    log = InMemoryRaftLog()
    log.append_as_leader([b"a" * 10, b"b" * 10, b"c" * 10], 1)
    assert [e.offset for e in log.read(0, 25)] == [0, 1]
    assert [e.offset for e in log.read(0, 1)] == [0]
    assert log.read(3, 100) == []


def test_a_first_snapshot_keeps_the_log_and_a_second_moves_its_start() -> None:
    """Retention 0 as Kafka applies it: the history a snapshot covers goes once a newer snapshot covers it."""
    log = _log([1, 1, 2, 2, 3])
    log.create_snapshot(Snapshot(OffsetAndEpoch(1, 2), b"image1"))
    assert (log.start_offset(), log.end_offset(), len(log.entries())) == (0, 5, 5)
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(0, 0)  # older than the log: it starts at 0
    log.create_snapshot(Snapshot(OffsetAndEpoch(2, 3), b"image"))
    assert log.start_offset() == 3
    assert log.end_offset() == 5
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 4)
    assert log.end_offset_for_epoch(1) == OffsetAndEpoch(2, 3)  # older than the log: where the snapshot ends
    log.create_snapshot(Snapshot(OffsetAndEpoch(3, 5), b"image2"))
    assert log.last_fetched_epoch() == 3
    assert log.entries() == []


def test_install_snapshot_replaces_the_log() -> None:
    log = _log([1, 1])
    log.install_snapshot(Snapshot(OffsetAndEpoch(4, 10), b"image"))
    assert (log.start_offset(), log.end_offset(), log.last_fetched_epoch()) == (10, 10, 4)
    log.append_as_follower(_log([4] * 11).read(10, 100))
    assert log.end_offset() == 11


@pytest.mark.parametrize(
    ("fetch_offset", "last_epoch", "expected"),
    [
        (0, 0, (ValidationKind.VALID, None)),
        (2, 1, (ValidationKind.VALID, None)),
        (5, 3, (ValidationKind.VALID, None)),
        (6, 4, (ValidationKind.VALID, None)),
        # The follower's epoch 2 never existed on the leader: truncate to where epoch 1 ended.
        (4, 2, (ValidationKind.DIVERGING, OffsetAndEpoch(1, 2))),
        # The follower has more of epoch 3 than the leader kept.
        (7, 3, (ValidationKind.DIVERGING, OffsetAndEpoch(3, 5))),
        # The follower is ahead of the leader's log in the leader's own last epoch.
        (8, 4, (ValidationKind.DIVERGING, OffsetAndEpoch(4, 6))),
    ],
)
def test_fetch_validation(fetch_offset: int, last_epoch: int, expected: tuple) -> None:
    log = _log([1, 1, 3, 3, 3, 4])
    assert validate_offset_and_epoch(log, fetch_offset, last_epoch) == expected


def test_fetch_validation_sends_followers_behind_the_snapshot_to_it() -> None:
    log = _log([1, 1, 2, 2, 3])
    log.create_snapshot(Snapshot(OffsetAndEpoch(1, 1), b"old"))
    log.create_snapshot(Snapshot(OffsetAndEpoch(2, 4), b"image"))
    snapshot = (ValidationKind.SNAPSHOT, OffsetAndEpoch(2, 4))
    assert validate_offset_and_epoch(log, 0, 0) == snapshot
    assert validate_offset_and_epoch(log, 2, 1) == snapshot
    assert validate_offset_and_epoch(log, 4, 1) == snapshot  # at the log start in another epoch
    assert validate_offset_and_epoch(log, 4, 2) == (ValidationKind.VALID, None)
    assert validate_offset_and_epoch(log, 5, 3) == (ValidationKind.VALID, None)


def test_fetch_validation_serves_entries_the_latest_snapshot_covers_while_the_log_holds_them() -> None:
    log = _log([1, 1, 2, 2, 3])
    log.create_snapshot(Snapshot(OffsetAndEpoch(2, 4), b"image"))
    assert log.start_offset() == 0
    assert validate_offset_and_epoch(log, 0, 0) == (ValidationKind.VALID, None)
    assert validate_offset_and_epoch(log, 3, 2) == (ValidationKind.VALID, None)  # one entry behind the snapshot
    # Kafka's third rule: a follower whose last epoch is older than the oldest snapshot's gets the snapshot.
    assert validate_offset_and_epoch(log, 2, 1) == (ValidationKind.SNAPSHOT, OffsetAndEpoch(2, 4))


def test_control_records_have_a_size() -> None:
    log = InMemoryRaftLog()
    log.append_as_leader([LeaderChangeMessage(1, (1, 2, 3), (1, 2))], 1)
    assert log.read(0, 1)[0].size == 16
