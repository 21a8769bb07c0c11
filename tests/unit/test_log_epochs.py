"""Leader epochs in the partition log: stamped on a leader's appends, kept in leader-epoch-checkpoint across
restarts and crashes, rebuilt from the batches when the file is gone or damaged, trimmed with the log."""

from __future__ import annotations

import os
from pathlib import Path

from bus.log import files
from bus.log.leader_epoch_cache import CHECKPOINT, read_checkpoint
from bus.log.log import AppendResult, Log
from bus.protocol import records as rb
from tests.unit.test_log import batch, crash, open_log, values


def append(log: Log, epoch: int | None, count: int = 2) -> AppendResult:
    payload = bytearray(batch(values(count)))
    return log.append(payload, rb.scan_batches(payload), partition_leader_epoch=epoch)


def stamped_epochs(log: Log) -> list[int]:
    data = bytes(log.read(log.log_start_offset, 1 << 20).data)
    return [b.partition_leader_epoch for b in rb.scan_batches_prefix(data)[0]]


def epochs_log(tmp_path: Path, **config: object) -> Log:
    """Epoch 0 at 0-3, epoch 2 at 4-7, epoch 5 at 8-9."""
    log = open_log(tmp_path / "t-0", **config)
    for epoch in (0, 0, 2, 2, 5):
        append(log, epoch)
    return log


def test_a_leader_append_stamps_its_epoch_and_records_where_it_starts(tmp_path: Path) -> None:
    log = epochs_log(tmp_path)
    assert stamped_epochs(log) == [0, 0, 2, 2, 5]
    assert log.epoch_entries == [(0, 0), (2, 4), (5, 8)]
    assert log.latest_epoch == 5
    # Written by the next flush (off the event loop), not by the appends.
    assert not (tmp_path / "t-0" / CHECKPOINT).exists()
    log.flush()
    assert read_checkpoint(tmp_path / "t-0" / CHECKPOINT) == [(0, 0), (2, 4), (5, 8)]
    assert log.end_offset_for_epoch(5) == (5, 10)
    assert log.end_offset_for_epoch(2) == (2, 8)
    assert log.end_offset_for_epoch(3) == (2, 8)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert [log.epoch_for_offset(o) for o in (0, 5, 9)] == [0, 2, 5]


def test_appends_without_an_epoch_keep_the_producers_and_record_none(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    append(log, None)
    assert stamped_epochs(log) == [-1]
    assert log.epoch_entries == []
    assert not (tmp_path / "t-0" / CHECKPOINT).exists()


def test_epochs_survive_a_clean_restart_and_a_crash(tmp_path: Path) -> None:
    log = epochs_log(tmp_path)
    log.close()
    log = open_log(tmp_path / "t-0")
    assert log.epoch_entries == [(0, 0), (2, 4), (5, 8)]
    append(log, 7)
    crash(log)
    log = open_log(tmp_path / "t-0")
    assert log.epoch_entries == [(0, 0), (2, 4), (5, 8), (7, 10)]
    assert log.end_offset_for_epoch(5) == (5, 10)


def test_missing_or_corrupt_checkpoint_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    path = tmp_path / "t-0" / CHECKPOINT
    for damage in (path.unlink, lambda: path.write_text("0\n5\n0 0\n"), lambda: path.write_bytes(b"\xff" * 9)):
        log = epochs_log(tmp_path) if not path.parent.exists() else open_log(tmp_path / "t-0")
        log.close()
        damage()
        log = open_log(tmp_path / "t-0")
        assert log.epoch_entries == [(0, 0), (2, 4), (5, 8)]
        assert read_checkpoint(path) == [(0, 0), (2, 4), (5, 8)]
        log.close()


def test_entries_past_a_torn_tail_are_dropped_on_recovery(tmp_path: Path) -> None:
    log = epochs_log(tmp_path)
    segment = log.segments[-1].path
    crash(log)
    # The last batch (epoch 5, offsets 8-9) is torn: recovery cuts it, and the epoch it started goes too.
    size = os.path.getsize(segment)
    os.truncate(segment, size - 5)
    log = open_log(tmp_path / "t-0")
    assert log.log_end_offset == 8
    assert log.epoch_entries == [(0, 0), (2, 4)]
    assert read_checkpoint(tmp_path / "t-0" / CHECKPOINT) == [(0, 0), (2, 4)]


def test_recovery_reassigns_epochs_a_stale_checkpoint_lacks(tmp_path: Path) -> None:
    log = epochs_log(tmp_path)
    crash(log)
    files_dir = tmp_path / "t-0"
    (files_dir / CHECKPOINT).write_text("0\n1\n0 0\n")  # as if written before epochs 2 and 5 were appended
    log = open_log(files_dir)
    assert log.epoch_entries == [(0, 0), (2, 4), (5, 8)]


def test_truncation_trims_the_epochs(tmp_path: Path) -> None:
    log = epochs_log(tmp_path, segment_bytes=200)
    log.truncate_to(6)
    assert log.log_end_offset == 6
    assert log.epoch_entries == [(0, 0), (2, 4)]
    log.truncate_to(4)
    assert log.epoch_entries == [(0, 0)]
    append(log, 9)
    assert log.epoch_entries == [(0, 0), (9, 4)]
    log.truncate_to(0)  # below the first segment: the log restarts empty and so do the epochs
    assert log.epoch_entries == []
    assert read_checkpoint(tmp_path / "t-0" / CHECKPOINT) == []


def test_truncating_at_the_end_drops_an_epoch_led_without_a_batch(tmp_path: Path) -> None:
    """A node that led epoch 7 without appending holds (7, 10) at its log end. Truncating to the end keeps every
    batch but forgets that epoch (Kafka's truncateTo), or the follower would keep naming epoch 7 as its last
    fetched one, be told it diverges at offset 10 and truncate to 10 again, forever (seen in the fault test)."""
    log = epochs_log(tmp_path)
    log.assign_epoch_start(7)
    assert log.epoch_entries[-1] == (7, 10) and log.latest_epoch == 7
    log.truncate_to(10)
    assert log.log_end_offset == 10 and log.epoch_entries == [(0, 0), (2, 4), (5, 8)] and log.latest_epoch == 5
    assert read_checkpoint(tmp_path / "t-0" / CHECKPOINT) == [(0, 0), (2, 4), (5, 8)]


def test_delete_records_and_retention_move_the_first_epochs_start(tmp_path: Path) -> None:
    log = epochs_log(tmp_path, segment_bytes=200, retention_bytes=0, retention_ms=-1)
    assert log.delete_records_before(5) == 5
    assert log.epoch_entries == [(2, 5), (5, 8)]
    log.enforce_retention()
    start = log.log_start_offset
    assert start > 5
    assert log.epoch_entries[0][1] == start
    assert read_checkpoint(tmp_path / "t-0" / CHECKPOINT) == log.epoch_entries
    assert files.read_offset(tmp_path / "t-0" / files.LOG_START_OFFSET) == start


def test_a_follower_append_takes_the_leaders_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    payload = bytearray()
    for base, epoch in ((0, 1), (2, 1), (4, 3), (6, -1)):
        payload += rb.build_batch(
            [rb.Record(base + i, 0, None, b"x") for i in range(2)], base_offset=base, partition_leader_epoch=epoch
        )
    log.append_as_is(payload, rb.scan_batches(payload))
    assert log.epoch_entries == [(1, 0), (3, 4)]  # an unstamped batch assigns nothing


def test_a_new_leader_epoch_starts_at_the_log_end_before_any_append(tmp_path: Path) -> None:
    log = epochs_log(tmp_path)
    log.assign_epoch_start(6)
    assert log.epoch_entries[-1] == (6, 10)
    assert log.end_offset_for_epoch(6) == (6, 10)
    assert log.end_offset_for_epoch(5) == (5, 10)
    append(log, 6)
    assert log.epoch_entries[-1] == (6, 10)


def test_epochs_appended_but_never_flushed_come_back_after_a_crash(tmp_path: Path) -> None:
    """The append path leaves the checkpoint to the next flush; a crash before it loses no epoch."""
    log = epochs_log(tmp_path, segment_bytes=200)  # several segments, the first ones rolled
    entries = log.epoch_entries
    crash(log)
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    assert log.epoch_entries == entries == [(0, 0), (2, 4), (5, 8)]
    log.close()
