"""The transaction coordinator without a network: its `__transaction_state` codec and its state machine.

The codec is pinned byte for byte to Kafka's TransactionLogKey/TransactionLogValue v0 (so a log
written here is what Kafka's tools would read). The state machine runs inside an in-process
`Broker` (real logs in a temp dir, no sockets), so markers, last stable offsets and reloads are the
real ones while each test stays in milliseconds.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.broker import Broker
from bus.config.broker import load_broker_config
from bus.controller.controller import TopicSpec
from bus.coordinator.transaction import records
from bus.coordinator.transaction.coordinator import MAX_EPOCH, TxnError
from bus.coordinator.transaction.state import TxnMetadata, TxnState
from bus.protocol import records as rb

FENCED = ErrorCode.producer_fenced

# -- records -------------------------------------------------------------------------------------


def test_key_is_version_0_and_a_string() -> None:
    assert records.encode_key("tx-1") == b"\x00\x00" + b"\x00\x04tx-1"
    assert records.decode_key(records.encode_key("tx-é")) == "tx-é"
    with pytest.raises(ValueError):
        records.decode_key(b"\x00\x01\x00\x01x")


def test_ongoing_value_matches_kafkas_layout_and_round_trips() -> None:
    md = TxnMetadata("tx", producer_id=42, producer_epoch=3, timeout_ms=60000, state=TxnState.ONGOING,
                     partitions={("u", 2), ("t", 1), ("t", 0)}, start_ms=1_700_000_000_000,
                     last_update_ms=1_700_000_000_500)
    expected = (
        struct.pack(">hqhib", 0, 42, 3, 60000, 1)
        + struct.pack(">i", 2)  # topics, sorted, each with its partitions
        + struct.pack(">h", 1) + b"t" + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">h", 1) + b"u" + struct.pack(">ii", 1, 2)
        + struct.pack(">qq", 1_700_000_000_500, 1_700_000_000_000)  # last update, then start
    )
    assert records.encode_value(md) == expected
    decoded = records.decode_value("tx", expected)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.timeout_ms, decoded.state, decoded.partitions,
            decoded.start_ms, decoded.last_update_ms) == (42, 3, 60000, TxnState.ONGOING,
                                                          {("t", 0), ("t", 1), ("u", 2)}, 1_700_000_000_000,
                                                          1_700_000_000_500)


@pytest.mark.parametrize(("state", "partitions"), [(TxnState.EMPTY, b"\xff\xff\xff\xff"),
                                                     (TxnState.COMPLETE_COMMIT, b"\x00\x00\x00\x00"),
                                                     (TxnState.COMPLETE_ABORT, b"\x00\x00\x00\x00")])
def test_partition_array_is_null_when_empty_and_empty_when_complete(state: TxnState, partitions: bytes) -> None:
    """Kafka writes a null partition array for Empty and an empty one for a completed transaction."""
    md = TxnMetadata("tx", 1, 0, 1000, state=state, start_ms=-1, last_update_ms=5)
    value = records.encode_value(md)
    assert value[struct.calcsize(">hqhib"):][:4] == partitions
    decoded = records.decode_value("tx", value)
    assert (decoded.state, decoded.partitions, decoded.start_ms) == (state, set(), -1)


def test_state_labels_are_kafkas() -> None:
    """ListTransactions filters and DescribeTransactions answers use exactly these names."""
    assert [s.label for s in TxnState] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                           "CompleteAbort", "Dead", "PrepareEpochFence"]
    assert [int(s) for s in TxnState] == list(range(8))


# -- state machine (in-process broker) --------------------------------------------------------------


def _open(data: Path) -> Broker:
    config = load_broker_config({
        "node.id": "1", "process.roles": "broker,controller", "controller.listener.names": "CONTROLLER",
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "controller.quorum.voters": "1@127.0.0.1:1", "log.dirs": str(data),
        "transaction.state.log.num.partitions": "3", "offsets.topic.num.partitions": "3",
        "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
        "transaction.max.timeout.ms": "60000",
    })
    return Broker(config)


def _close(broker: Broker) -> None:
    broker.logs.close()
    broker.metadata_log.close()


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    opened = _open(tmp_path / "data")
    opened.controller.create_topic(TopicSpec("t", 2, 1))
    try:
        yield opened
    finally:
        _close(opened)


def _produce(broker: Broker, pid: int, epoch: int, seq: int, count: int, partition: int = 0) -> int:
    records_ = [rb.Record(offset=i, timestamp=1, key=None, value=b"v") for i in range(count)]
    payload = rb.build_batch(records_, base_offset=0, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                             is_transactional=True)
    return broker.replicas.get("t", partition).append(payload).base_offset


def _markers(broker: Broker, partition: int = 0) -> list[tuple[int, int, int]]:
    """(offset, producer epoch, 1 commit / 0 abort) of the control batches in a partition."""
    part = broker.replicas.get("t", partition)
    data = bytes(part.read(0, 1 << 20, max_offset=part.high_watermark, min_one_batch=True).data)
    out = []
    for batch in rb.scan_batches_prefix(data)[0]:
        if batch.is_control:
            [record] = rb.iter_records(data, batch)
            out.append((batch.base_offset, batch.producer_epoch, struct.unpack(">hh", record.key)[1]))
    return out


def test_init_add_commit_writes_markers_and_releases_the_lso(broker: Broker) -> None:
    tc = broker.transactions
    pid, epoch = tc.init_producer_id("tx", 5000)
    assert (epoch, tc.txns["tx"].state) == (0, TxnState.EMPTY)
    assert tc.add_partitions("tx", pid, 0, [("t", 0), ("t", 1)], FENCED) == {("t", 0): ErrorCode.none,
                                                                               ("t", 1): ErrorCode.none}
    md = tc.txns["tx"]
    assert md.state is TxnState.ONGOING and md.start_ms > 0
    assert _produce(broker, pid, 0, 0, 3) == 0
    assert broker.replicas.get("t", 0).last_stable_offset == 0
    tc.end_txn("tx", pid, 0, True, FENCED)
    assert (md.state, md.partitions) == (TxnState.COMPLETE_COMMIT, set())
    assert _markers(broker, 0) == [(3, 0, 1)]
    assert _markers(broker, 1) == [(0, 0, 1)]  # a partition added but never written still gets its marker
    assert broker.replicas.get("t", 0).last_stable_offset == 4
    assert broker.replicas.get("t", 0).aborted_transactions(0, 4) == []
    tc.end_txn("tx", pid, 0, True, FENCED)  # a retried commit succeeds without a second marker
    assert _markers(broker, 0) == [(3, 0, 1)]
    with pytest.raises(TxnError) as err:
        tc.end_txn("tx", pid, 0, False, FENCED)
    assert err.value.code == ErrorCode.invalid_txn_state


def test_abort_is_listed_for_read_committed(broker: Broker) -> None:
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    tc.add_partitions("tx", pid, 0, [("t", 0)], FENCED)
    _produce(broker, pid, 0, 0, 2)
    tc.end_txn("tx", pid, 0, False, FENCED)
    [aborted] = broker.replicas.get("t", 0).aborted_transactions(0, 3)
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (pid, 0, 2)
    assert tc.txns["tx"].state is TxnState.COMPLETE_ABORT


def test_partition_known_only_from_a_marker_expects_sequence_zero(broker: Broker) -> None:
    """A partition added to a transaction but never written learns the producer from the marker; its
    first batch must then start at sequence 0 (Kafka: no last sequence means only 0 is in order)."""
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    tc.add_partitions("tx", pid, 0, [("t", 0), ("t", 1)], FENCED)
    _produce(broker, pid, 0, 0, 2, partition=0)
    tc.end_txn("tx", pid, 0, True, FENCED)
    assert broker.replicas.get("t", 1).producers.producers[pid].last_seq == -1
    tc.add_partitions("tx", pid, 0, [("t", 1)], FENCED)
    from bus.broker.partition import PartitionError

    with pytest.raises(PartitionError) as err:
        _produce(broker, pid, 0, 2, 1, partition=1)
    assert err.value.code == ErrorCode.out_of_order_sequence_number
    assert _produce(broker, pid, 0, 0, 1, partition=1) == 1


def test_requests_with_the_wrong_producer_are_refused(broker: Broker) -> None:
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    assert tc.add_partitions("tx", pid + 1, 0, [("t", 0)], FENCED) == {("t", 0): ErrorCode.invalid_producer_id_mapping}
    assert tc.add_partitions("tx", pid, 1, [("t", 0)], ErrorCode.invalid_producer_epoch) == {
        ("t", 0): ErrorCode.invalid_producer_epoch}
    assert tc.add_partitions("nobody", pid, 0, [("t", 0)], FENCED) == {("t", 0): ErrorCode.invalid_producer_id_mapping}
    assert tc.add_partitions("tx", pid, 0, [("t", 0), ("missing", 0)], FENCED) == {
        ("t", 0): ErrorCode.operation_not_attempted, ("missing", 0): ErrorCode.unknown_topic_or_partition}
    assert tc.txns["tx"].state is TxnState.EMPTY
    with pytest.raises(TxnError) as err:
        tc.end_txn("tx", pid, 0, True, FENCED)  # nothing to commit
    assert err.value.code == ErrorCode.invalid_txn_state
    for timeout in (0, 60001):
        with pytest.raises(TxnError) as err:
            tc.init_producer_id("tx", timeout)
        assert err.value.code == ErrorCode.invalid_transaction_timeout


def test_new_producer_fences_an_ongoing_transaction(broker: Broker) -> None:
    """InitProducerId while Ongoing aborts with a bumped epoch and asks the caller to retry (Kafka)."""
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    tc.add_partitions("tx", pid, 0, [("t", 0)], FENCED)
    _produce(broker, pid, 0, 0, 2)
    with pytest.raises(TxnError) as err:
        tc.init_producer_id("tx", 5000)
    assert err.value.code == ErrorCode.concurrent_transactions
    assert (tc.txns["tx"].state, tc.txns["tx"].producer_epoch) == (TxnState.COMPLETE_ABORT, 1)
    assert _markers(broker) == [(2, 1, 0)]
    assert tc.init_producer_id("tx", 5000) == (pid, 2)
    # The zombie at epoch 0 can neither continue nor re-initialise with its old epoch.
    assert tc.add_partitions("tx", pid, 0, [("t", 0)], FENCED) == {("t", 0): FENCED}
    with pytest.raises(TxnError) as err:
        tc.init_producer_id("tx", 5000, pid, 0)
    assert err.value.code == FENCED
    # The marker's epoch fenced the zombie in the partition too; the old epoch's batches are forgotten.
    entry = broker.replicas.get("t", 0).producers.producers[pid]
    assert (entry.epoch, entry.last_seq, entry.txn_first_offset) == (1, -1, None)


def test_init_producer_id_bump_and_retry(broker: Broker) -> None:
    """KIP-360: a producer re-initialising with its pid/epoch gets epoch + 1; a retry of that request
    (the response was lost) gets the same epoch again instead of a second bump."""
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    assert tc.init_producer_id("tx", 5000, pid, 0) == (pid, 1)
    assert tc.init_producer_id("tx", 5000, pid, 0) == (pid, 1)
    assert tc.init_producer_id("tx", 5000, pid, 1) == (pid, 2)
    with pytest.raises(TxnError) as err:
        tc.init_producer_id("tx", 5000, pid, 0)  # two epochs behind: fenced
    assert err.value.code == FENCED
    with pytest.raises(TxnError) as err:
        tc.init_producer_id("tx", 5000, pid + 7, 2)
    assert err.value.code == FENCED


def test_exhausted_epoch_rotates_the_producer_id(broker: Broker) -> None:
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    tc.txns["tx"].producer_epoch = MAX_EPOCH
    new_pid, epoch = tc.init_producer_id("tx", 5000)
    assert new_pid != pid and epoch == 0


def test_timed_out_transaction_is_aborted_only_after_its_timeout(broker: Broker) -> None:
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    tc.add_partitions("tx", pid, 0, [("t", 0)], FENCED)
    _produce(broker, pid, 0, 0, 1)
    start = tc.txns["tx"].start_ms
    assert tc.abort_expired(start + 5000) == []
    assert tc.txns["tx"].state is TxnState.ONGOING
    assert tc.abort_expired(start + 5001) == ["tx"]
    md = tc.txns["tx"]
    assert (md.state, md.producer_epoch) == (TxnState.COMPLETE_ABORT, 1)
    assert _markers(broker) == [(1, 1, 0)]
    assert broker.replicas.get("t", 0).last_stable_offset == 2
    with pytest.raises(TxnError) as err:
        tc.end_txn("tx", pid, 0, True, FENCED)
    assert err.value.code == FENCED
    assert tc.abort_expired(start + 60000) == []  # nothing left to abort


def test_state_is_reloaded_from_the_transaction_log(tmp_path: Path) -> None:
    broker = _open(tmp_path / "data")
    broker.controller.create_topic(TopicSpec("t", 2, 1))
    tc = broker.transactions
    pid_a, _ = tc.init_producer_id("a", 5000)
    tc.add_partitions("a", pid_a, 0, [("t", 0), ("t", 1)], FENCED)
    pid_b, _ = tc.init_producer_id("b", 7000)
    tc.add_partitions("b", pid_b, 0, [("t", 1)], FENCED)
    tc.end_txn("b", pid_b, 0, True, FENCED)
    pid_c, _ = tc.init_producer_id("c", 9000)
    before = {k: (md.producer_id, md.producer_epoch, md.timeout_ms, md.state, md.partitions, md.start_ms)
              for k, md in tc.txns.items()}
    _close(broker)
    broker = _open(tmp_path / "data")
    try:
        after = {k: (md.producer_id, md.producer_epoch, md.timeout_ms, md.state, md.partitions, md.start_ms)
                 for k, md in broker.transactions.txns.items()}
        assert after == before
        assert after["a"][3:5] == (TxnState.ONGOING, {("t", 0), ("t", 1)})
        assert after["b"][3] is TxnState.COMPLETE_COMMIT and after["c"][3] is TxnState.EMPTY
        # New producer ids do not collide with those handed out before the restart.
        assert broker.transactions.init_producer_id("d", 5000)[0] not in {pid_a, pid_b, pid_c}
    finally:
        _close(broker)


def test_idle_transactional_ids_expire_with_a_tombstone(tmp_path: Path) -> None:
    """transactional.id.expiration.ms: ids in Empty/CompleteCommit/CompleteAbort idle that long are
    tombstoned in __transaction_state and forgotten (also by a reload); an Ongoing one never expires."""
    broker = _open(tmp_path / "data")
    broker.controller.create_topic(TopicSpec("t", 2, 1))
    tc = broker.transactions
    expiry = tc.config.id_expiration_ms
    pid_empty, _ = tc.init_producer_id("empty", 5000)
    pid_done, _ = tc.init_producer_id("done", 5000)
    tc.add_partitions("done", pid_done, 0, [("t", 0)], FENCED)
    tc.end_txn("done", pid_done, 0, False, FENCED)
    pid_open, _ = tc.init_producer_id("open", 5000)
    tc.add_partitions("open", pid_open, 0, [("t", 1)], FENCED)
    last = max(md.last_update_ms for md in tc.txns.values())
    assert tc.expire_transactional_ids(min(md.last_update_ms for md in tc.txns.values()) + expiry - 1) == []
    assert sorted(tc.expire_transactional_ids(last + expiry)) == ["done", "empty"]
    assert set(tc.txns) == {"open"}
    _close(broker)
    broker = _open(tmp_path / "data")
    try:
        tc = broker.transactions
        assert set(tc.txns) == {"open"}  # the tombstones are in the log, not just out of memory
        pid, epoch = tc.init_producer_id("done", 5000)  # an expired id starts afresh
        assert epoch == 0 and pid not in {pid_empty, pid_done, pid_open}
    finally:
        _close(broker)


@pytest.mark.parametrize("commit", [True, False])
def test_crash_between_prepare_and_markers_is_completed_on_load(tmp_path: Path, commit: bool) -> None:
    """PrepareCommit/PrepareAbort is the decision: a coordinator that died before writing the markers
    writes them when it loads the log, and then persists the Complete state."""
    broker = _open(tmp_path / "data")
    broker.controller.create_topic(TopicSpec("t", 1, 1))
    tc = broker.transactions
    pid, _ = tc.init_producer_id("tx", 5000)
    tc.add_partitions("tx", pid, 0, [("t", 0)], FENCED)
    _produce(broker, pid, 0, 0, 2)
    md = tc.txns["tx"]
    md.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
    tc._persist(md)  # the decision is durable; the "crash" happens before any marker
    _close(broker)
    broker = _open(tmp_path / "data")
    try:
        md = broker.transactions.txns["tx"]
        assert (md.state, md.partitions) == (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT, set())
        assert _markers(broker) == [(2, 0, int(commit))]
        partition = broker.replicas.get("t", 0)
        assert partition.last_stable_offset == 3
        assert [(t.first_offset, t.last_offset) for t in partition.aborted_transactions(0, 3)] == (
            [] if commit else [(0, 2)])
    finally:
        _close(broker)
    broker = _open(tmp_path / "data")  # and the Complete state itself was persisted
    try:
        assert broker.transactions.txns["tx"].state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
        assert len(_markers(broker)) == 1
    finally:
        _close(broker)
