import dataclasses

import pytest
from kio.schema.errors import ErrorCode

from bus.log.producer_state import (
    INT32_MAX,
    ProducerStateError,
    ProducerStateManager,
    load_snapshot,
    write_snapshot,
)
from bus.log.txn_index import AbortedTxn
from bus.protocol.records import BatchInfo


def batch(pid=7, epoch=0, seq=0, count=3, base_offset=0, transactional=False) -> BatchInfo:
    return BatchInfo(position=0, size=100, base_offset=base_offset, last_offset_delta=count - 1,
                     partition_leader_epoch=0, attributes=0x10 if transactional else 0, base_timestamp=1,
                     max_timestamp=1, producer_id=pid, producer_epoch=epoch, base_sequence=seq, records_count=count)


def appended(state: ProducerStateManager, b: BatchInfo, offset: int) -> BatchInfo:
    assert state.check(b) is None
    placed = dataclasses.replace(b, base_offset=offset)
    state.update(placed)
    return placed


def test_in_order_sequences_are_accepted_and_retries_are_duplicates():
    state = ProducerStateManager()
    appended(state, batch(seq=0), 0)
    appended(state, batch(seq=3), 3)
    duplicate = state.check(batch(seq=0))
    assert duplicate is not None and duplicate.first_offset == 0 and duplicate.last_offset == 2


def test_gap_is_out_of_order():
    state = ProducerStateManager()
    appended(state, batch(seq=0), 0)
    with pytest.raises(ProducerStateError) as err:
        state.check(batch(seq=5))
    assert err.value.code == ErrorCode.out_of_order_sequence_number


def test_stale_epoch_is_fenced_and_new_epoch_restarts_at_zero():
    state = ProducerStateManager()
    appended(state, batch(epoch=1, seq=0), 0)
    with pytest.raises(ProducerStateError) as err:
        state.check(batch(epoch=0, seq=3))
    assert err.value.code == ErrorCode.invalid_producer_epoch
    with pytest.raises(ProducerStateError):
        state.check(batch(epoch=2, seq=3))
    appended(state, batch(epoch=2, seq=0), 3)


def test_unknown_producer_accepts_any_sequence_and_wraparound():
    state = ProducerStateManager()
    appended(state, batch(seq=INT32_MAX, count=1), 0)
    appended(state, batch(seq=0, count=1), 1)


def test_only_five_batches_are_remembered():
    state = ProducerStateManager()
    for i in range(6):
        appended(state, batch(seq=i, count=1), i)
    assert state.check(batch(seq=1, count=1)) is not None
    with pytest.raises(ProducerStateError):
        state.check(batch(seq=0, count=1))


def test_transactions_bound_the_stable_offset_and_record_aborts():
    state = ProducerStateManager()
    appended(state, batch(pid=1, transactional=True), 10)
    appended(state, batch(pid=2, transactional=True), 13)
    assert state.first_unstable_offset() == 10
    aborted = state.complete_txn(1, 0, marker_offset=20, aborted=True)
    assert state.first_unstable_offset() == 13
    # The transaction index entry: its last stable offset is the first offset still undecided.
    assert aborted == AbortedTxn(1, 10, 20, last_stable_offset=13)
    assert state.complete_txn(2, 0, marker_offset=21, aborted=False) is None
    assert state.first_unstable_offset() is None


def test_first_unstable_offset_follows_transactions_in_offset_order_without_a_scan():
    state = ProducerStateManager()
    for pid in range(1, 6):
        appended(state, batch(pid=pid, transactional=True, count=1), pid * 10)
    state.complete_txn(3, 0, marker_offset=60, aborted=False)
    state.complete_txn(1, 0, marker_offset=61, aborted=True)
    assert state.first_unstable_offset() == 20
    assert list(state.ongoing) == [20, 40, 50]


def test_idle_producers_expire_but_open_transactions_do_not():
    state = ProducerStateManager()
    appended(state, dataclasses.replace(batch(pid=1), max_timestamp=1_000), 0)
    appended(state, dataclasses.replace(batch(pid=2, transactional=True), max_timestamp=1_000), 3)
    appended(state, dataclasses.replace(batch(pid=3), max_timestamp=5_000), 6)
    assert state.remove_expired(now_ms=5_000, expiration_ms=4_000) == 1
    assert sorted(state.producers) == [2, 3]  # 2 is idle too, but its transaction is open
    # An expired producer is new again: any sequence is accepted.
    assert state.check(batch(pid=1, seq=77)) is None


def test_expired_producers_are_not_restored_from_a_snapshot(tmp_path):
    state = ProducerStateManager()
    appended(state, dataclasses.replace(batch(pid=1), max_timestamp=1_000), 0)
    appended(state, dataclasses.replace(batch(pid=2), max_timestamp=9_000), 3)
    write_snapshot(tmp_path, state)
    loaded = load_snapshot(tmp_path, log_end_offset=6, now_ms=10_000, expiration_ms=5_000)
    assert loaded is not None and sorted(loaded.producers) == [2]
    assert sorted(load_snapshot(tmp_path, log_end_offset=6).producers) == [1, 2]


def test_snapshot_round_trip(tmp_path):
    state = ProducerStateManager()
    appended(state, batch(seq=0), 0)
    appended(state, batch(pid=3, transactional=True), 3)
    appended(state, batch(pid=4, transactional=True), 6)
    write_snapshot(tmp_path, state)
    loaded = load_snapshot(tmp_path, log_end_offset=9)
    assert loaded is not None and loaded.to_json() == state.to_json()
    assert list(loaded.ongoing.items()) == [(3, 3), (6, 4)]
    assert load_snapshot(tmp_path, log_end_offset=8) is None  # past a truncated tail: unusable
