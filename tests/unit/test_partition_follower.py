"""A follower's partition: batches copied with the leader's offsets and epochs, truncation, and where to
truncate when the leader names a diverging epoch (Kafka's getOffsetTruncationState).

Every test runs a Partition over a real Log in tmp_path; the batches are what a leader would have stored
(built with their offsets, epochs and producer fields).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.partition import Partition, PartitionError
from bus.broker.replica_fetcher import TruncationPoint, truncation_point
from bus.controller.image import PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.log import Log
from bus.log.producer_state import write_snapshot_file
from bus.log.txn_index import AbortedTxn
from bus.protocol import records as rb
from bus.protocol.control_records import marker_batch

NOW = int(time.time() * 1000)  # producers this old are not expired by a reload
PID = 4000


def _partition(tmp_path: Path) -> Partition:
    topic = TopicImage("t", uuid.uuid4(), {0: PartitionState(0, [1, 2], [1, 2], 1, leader_epoch=3)})
    config = LogConfig()
    return Partition(topic, 0, Log(tmp_path / "t-0", config), config, leader_epoch=3)


def _data(offset: int, count: int, *, epoch: int = 0, pid: int = -1, seq: int = -1, txn: bool = False) -> bytes:
    records = [(offset + i, NOW + i, None, b"v%d" % (offset + i)) for i in range(count)]
    return rb.build_batch(records, base_offset=offset, partition_leader_epoch=epoch, producer_id=pid,
                          producer_epoch=0 if pid >= 0 else -1, base_sequence=seq, is_transactional=txn)


def _marker(offset: int, commit: bool, *, epoch: int = 0, pid: int = PID) -> bytes:
    payload = bytearray(marker_batch(pid, 0, commit, 7, NOW))
    rb.assign_offsets(payload, rb.scan_batches(payload), offset, partition_leader_epoch=epoch)
    return bytes(payload)


def _stored(partition: Partition) -> bytes:
    return bytes(partition.log.read(partition.log.log_start_offset, 1 << 20).data)


def _replayed(partition: Partition, tmp_path: Path) -> dict[str, object]:
    """The producer state a fresh load of the same directory rebuilds (the reference a fold must match)."""
    partition.log.flush()
    config = LogConfig()
    topic = TopicImage("t", partition.topic_id, {})
    fresh = Partition(topic, 0, Log(partition.log.directory, config), config, leader_epoch=3)
    try:
        return fresh.producers.to_json()
    finally:
        fresh.log.close()


# -- append_as_follower ----------------------------------------------------------------------------------------


def test_batches_keep_the_leaders_offsets_bytes_and_epochs(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    first, second = _data(0, 3, epoch=1), _data(3, 2, epoch=2)
    result = partition.append_as_follower(first + second)
    assert result is not None and (result.base_offset, result.last_offset) == (0, 4)
    third = _data(9, 1, epoch=2)  # a gap, as a compacted leader leaves
    partition.append_as_follower(third)
    assert partition.log.log_end_offset == 10
    assert _stored(partition) == first + second + third  # byte for byte: no offset, epoch or CRC rewritten
    assert [tuple(e) for e in partition.log.epoch_entries] == [(1, 0), (2, 3)]  # the leader's epochs, not ours (3)
    assert partition.producers.applied_up_to == 10
    assert partition.append_as_follower(b"") is None


def test_a_follower_append_does_not_move_the_high_watermark(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    partition.append_as_follower(_data(0, 5))
    assert partition.high_watermark == 0  # only the leader's word moves it
    partition.update_follower_high_watermark(3)
    assert partition.high_watermark == 3
    partition.update_follower_high_watermark(9)
    assert partition.high_watermark == 5  # never past our own log end
    partition.update_follower_high_watermark(2)
    assert partition.high_watermark == 5  # and never back


def test_a_corrupt_payload_is_refused_and_nothing_is_appended(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    partition.append_as_follower(_data(0, 2, pid=PID, seq=0))
    before = partition.producers.to_json()
    good, bad = _data(2, 2, pid=PID, seq=2), bytearray(_data(4, 2, pid=PID, seq=4))
    bad[-1] ^= 0xFF  # a flipped bit in the last record: the CRC no longer matches
    with pytest.raises(PartitionError) as refused:
        partition.append_as_follower(good + bytes(bad))
    assert refused.value.code == ErrorCode.corrupt_message
    assert partition.log.log_end_offset == 2  # the good batch before it was not appended either
    assert partition.producers.to_json() == before
    with pytest.raises(PartitionError) as torn:
        partition.append_as_follower(good[:-3])
    assert torn.value.code == ErrorCode.corrupt_message
    assert partition.log.log_end_offset == 2


def test_idempotent_batches_are_known_to_the_follower_and_a_retry_after_truncation_fits(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    batches = [_data(0, 5, pid=PID, seq=0), _data(5, 5, pid=PID, seq=5), _data(10, 5, pid=PID, seq=10)]
    partition.append_as_follower(b"".join(batches))
    retried = rb.scan_batches(_data(0, 5, pid=PID, seq=5))[0]  # as the producer resends it: offset not yet set
    duplicate = partition.producers.check(retried)
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (5, 9)
    assert partition.producers.to_json() == _replayed(partition, tmp_path)

    partition.truncate_to(10)  # the third batch never reached the ISR
    assert partition.log.log_end_offset == 10
    lost = rb.scan_batches(_data(0, 5, pid=PID, seq=10))[0]
    assert partition.producers.check(lost) is None  # in sequence again: the retry is appended, not refused
    assert partition.producers.producers[PID].last_seq == 9
    assert partition.producers.to_json() == _replayed(partition, tmp_path)


def test_transactions_markers_and_the_aborted_index(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    other = PID + 1
    partition.append_as_follower(_data(0, 2, pid=PID, seq=0, txn=True) + _data(2, 1, pid=other, seq=0, txn=True))
    assert partition.producers.first_unstable_offset() == 0
    partition.update_follower_high_watermark(3)
    assert partition.last_stable_offset == 0
    partition.append_as_follower(_marker(3, commit=False) + _marker(4, commit=True, pid=other))
    assert partition.producers.first_unstable_offset() is None
    aborted = partition.aborted_transactions(0, 5)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(PID, 0, 3)]
    assert aborted == [AbortedTxn(PID, 0, 3, 2)]  # Kafka's LSO of the entry: the other transaction was open at 2
    assert partition.producers.producers[PID].coordinator_epoch == 7
    assert partition.producers.to_json() == _replayed(partition, tmp_path)

    partition.truncate_to(4)  # the abort marker stays, the commit marker goes
    assert partition.aborted_transactions(0, 5) == aborted
    assert partition.producers.first_unstable_offset() == 2
    partition.truncate_to(3)  # and now the abort marker too: the transaction is open again, the entry gone
    assert partition.aborted_transactions(0, 5) == []
    assert partition.producers.first_unstable_offset() == 0
    assert partition.producers.to_json() == _replayed(partition, tmp_path)


def test_truncation_rebuilds_from_the_newest_snapshot_at_or_below_the_new_end(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    directory = partition.log.directory
    partition.append_as_follower(_data(0, 4, pid=PID, seq=0))
    snapshot = partition.producer_snapshot()
    assert snapshot is not None and snapshot[0] == 4
    write_snapshot_file(directory, *snapshot)
    partition.append_as_follower(_data(4, 4, pid=PID, seq=4) + _data(8, 4, pid=PID, seq=8))
    write_snapshot_file(directory, *partition.producer_snapshot())  # type: ignore[misc]
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [f"{12:020d}.snapshot"]
    write_snapshot_file(directory, *snapshot)  # write_snapshot_file keeps only the newest: put the older one back
    (directory / f"{12:020d}.snapshot").write_bytes(b"{}")  # and one past the cut, unreadable if ever loaded

    partition.truncate_to(8)
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [f"{4:020d}.snapshot"]
    assert partition.producers.producers[PID].last_seq == 7  # snapshot at 4, then the batch at 4 replayed
    assert partition.producers.applied_up_to == 8
    assert partition.producer_snapshot() is not None  # due again: the next pass writes one at the new end


def test_truncation_lowers_the_high_watermark_to_the_new_end(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    partition.append_as_follower(_data(0, 3, epoch=1) + _data(3, 3, epoch=2))
    partition.update_follower_high_watermark(6)
    partition.truncate_to(4)  # the batch holding 4 starts at 3 and goes whole
    assert (partition.log.log_end_offset, partition.high_watermark) == (3, 3)
    assert [tuple(e) for e in partition.log.epoch_entries] == [(1, 0)]
    partition.truncate_to(10)  # past the end: nothing to do
    assert partition.log.log_end_offset == 3


def test_truncate_fully_and_start_at_an_offset_past_the_log(tmp_path: Path) -> None:
    partition = _partition(tmp_path)
    directory = partition.log.directory
    partition.append_as_follower(_data(0, 3, pid=PID, seq=0, txn=True) + _marker(3, commit=False))
    write_snapshot_file(directory, *partition.producer_snapshot())  # type: ignore[misc]
    partition.update_follower_high_watermark(4)

    partition.truncate_fully_and_start_at(100)
    assert (partition.log.log_start_offset, partition.log.log_end_offset, partition.high_watermark) == (100, 100, 100)
    assert partition.producers.producers == {} and partition.producers.applied_up_to == 100
    assert list(directory.glob("*.snapshot")) == [] and partition.aborted_transactions(0, 200) == []
    assert partition.log.epoch_entries == []
    partition.append_as_follower(_data(100, 2, epoch=5, pid=PID, seq=40))  # the leader's sequence, whatever it is
    assert partition.log.log_end_offset == 102 and partition.producers.producers[PID].last_seq == 41

    partition.log.close()  # and it holds across a restart
    reopened = Log(directory, LogConfig())
    assert (reopened.log_start_offset, reopened.log_end_offset) == (100, 102)
    reopened.close()


def test_an_empty_log_started_inside_the_leaders_first_batch_starts_at_that_batch(tmp_path: Path) -> None:
    """DeleteRecords put the leader's log start at 8, inside its batch 7-9: the follower started over at 8, and
    the fetch from 8 answers the whole batch (Kafka's UnexpectedAppendOffsetException case)."""
    partition = _partition(tmp_path)
    partition.truncate_fully_and_start_at(8)
    partition.append_as_follower(_data(7, 3))
    assert (partition.log.log_start_offset, partition.log.log_end_offset) == (7, 10)
    partition.log.delete_records_before(8)  # the fetcher then follows the leader's log start
    assert partition.log.log_start_offset == 8
    with pytest.raises(ValueError, match="below the next offset"):  # anywhere else it is a leader's bug
        partition.append_as_follower(_data(9, 3))
    assert partition.log.log_end_offset == 10


# -- truncation_point: every case of Kafka's getOffsetTruncationState --------------------------------------------


def test_the_leader_knows_no_end_offset_keeps_the_fetch_offset() -> None:
    assert truncation_point(4, -1, (4, 50), log_end_offset=60, fetch_offset=60) == TruncationPoint(60, True)


def test_the_leader_names_no_epoch_truncates_to_its_end_offset() -> None:
    assert truncation_point(-1, 40, (-1, -1), log_end_offset=60, fetch_offset=60) == TruncationPoint(40, True)
    assert truncation_point(-1, 80, (-1, -1), log_end_offset=60, fetch_offset=60) == TruncationPoint(60, True)


def test_no_epoch_of_ours_at_or_below_the_leaders_truncates_to_its_end_offset() -> None:
    assert truncation_point(2, 40, (-1, -1), log_end_offset=60, fetch_offset=60) == TruncationPoint(40, True)
    assert truncation_point(2, 80, (-1, -1), log_end_offset=60, fetch_offset=60) == TruncationPoint(60, True)


def test_an_epoch_unknown_here_cuts_to_our_older_epochs_end_and_asks_again() -> None:
    # We hold epochs 1 and 3; the leader's diverging epoch is 2, which we never saw: cut where our epoch 1 ends.
    assert truncation_point(2, 45, (1, 30), log_end_offset=60, fetch_offset=60) == TruncationPoint(30, False)
    assert truncation_point(2, 45, (1, 70), log_end_offset=60, fetch_offset=60) == TruncationPoint(60, False)


def test_a_shared_epoch_truncates_where_the_first_of_the_two_logs_ends_it() -> None:
    assert truncation_point(3, 45, (3, 50), log_end_offset=60, fetch_offset=60) == TruncationPoint(45, True)
    assert truncation_point(3, 55, (3, 50), log_end_offset=60, fetch_offset=60) == TruncationPoint(50, True)
    assert truncation_point(3, 55, (3, 70), log_end_offset=52, fetch_offset=52) == TruncationPoint(52, True)


def test_the_point_from_a_real_log_of_epochs(tmp_path: Path) -> None:
    """Leader: epochs 1@0 and 2@5 (its epoch 1 ended at 5). Ours: epoch 1 from 0 up to our end at 8, written by a
    leader that lost its tail: the leader's fetch answer diverging (1, 5) truncates us to 5."""
    partition = _partition(tmp_path)
    partition.append_as_follower(_data(0, 5, epoch=1) + _data(5, 3, epoch=1))
    log_ = partition.log
    point = truncation_point(1, 5, log_.end_offset_for_epoch(1), log_.log_end_offset, 8)
    assert point == TruncationPoint(5, True)
    partition.truncate_to(point.offset)
    assert log_.log_end_offset == 5 and log_.latest_epoch == 1
