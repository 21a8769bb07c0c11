"""Idempotent producers against a real broker process: exact offsets, no duplicates, across crashes.

The broker remembers, per partition and producer id, the epoch and the last five batches' sequence
ranges with their offsets. Three clients' idempotent producers must see gap-free offsets; raw
requests then pin the rules a client only hits on bad days (a retried batch answered with its
original offset and written once, a sequence gap, a stale epoch, a new epoch not starting at 0), and
the same retry after kill -9 (state rebuilt by replaying the log) and after a clean restart (state
read back from the `.snapshot` file) must still be recognised as a duplicate.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from bus.protocol import records as rb
from deploy.processes.broker import BrokerProcess
from testkit.clients import consume, create_topic, producer_config, stored_batches
from testkit.raw_kafka import RawKafka, produce_error

# -- raw-protocol helpers --------------------------------------------------------------------------


def init_producer_id(raw: RawKafka) -> tuple[int, int]:
    """An idempotent (non-transactional) producer id and epoch, as a client's first InitProducerId."""
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    response = raw.request(InitProducerIdRequest(transactional_id=None,
                                                 transaction_timeout=datetime.timedelta(seconds=60)))
    assert response.error_code == ErrorCode.none
    return int(response.producer_id), int(response.producer_epoch)


def idempotent_batch(pid: int, epoch: int, seq: int, values: list[bytes]) -> bytes:
    """One batch with the producer fields a client stamps; the broker assigns the offsets."""
    now = int(time.time() * 1000)
    records = [rb.Record(offset=i, timestamp=now, key=None, value=v) for i, v in enumerate(values)]
    return rb.build_batch(records, base_offset=0, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def log_end_offset(raw: RawKafka, topic: str, partition: int = 0) -> int:
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

    response = raw.request(ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=(
        ListOffsetsTopic(name=topic, partitions=(ListOffsetsPartition(partition_index=partition, timestamp=-1),)),
    )))
    [part] = response.topics[0].partitions
    assert part.error_code == ErrorCode.none
    return int(part.offset)


def stored_values(broker: BrokerProcess, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in the partition's segment files: what was really written."""
    return [(r.offset, r.value) for b in stored_batches(broker.data_dir, topic, partition) for r in b.records]


def assert_sequences_chain(broker: BrokerProcess, topic: str, partition: int) -> None:
    """Every stored batch carries one producer id at epoch 0, and sequences run 0, 1, 2... without a gap."""
    batches = [b.info for b in stored_batches(broker.data_dir, topic, partition)]
    assert batches
    assert {(b.producer_id >= 0, b.producer_epoch) for b in batches} == {(True, 0)}
    assert len({b.producer_id for b in batches}) == 1
    next_seq = 0
    for info in batches:
        assert info.base_sequence == next_seq, f"batch at {info.base_offset}: seq {info.base_sequence} != {next_seq}"
        assert info.base_sequence == info.base_offset  # one producer from offset 0: sequence == offset
        next_seq += info.last_offset_delta + 1


# -- real clients --------------------------------------------------------------------------------


def test_confluent_idempotent_producer_gets_gap_free_offsets(shared_broker: BrokerProcess) -> None:
    """librdkafka pipelines up to 5 idempotent batches per partition: each must land exactly once, in order."""
    topic = "idem-confluent"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    producer = Producer(producer_config(shared_broker.bootstrap, **{
        "enable.idempotence": True, "linger.ms": 1, "batch.num.messages": 7,
        "max.in.flight.requests.per.connection": 5,
    }))
    delivered: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    errors: list[object] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            delivered[msg.partition()].append((msg.offset(), msg.value()))

    for i in range(200):
        producer.produce(topic, value=f"v{i:03d}".encode(), partition=i % 2, on_delivery=on_delivery)
        if i % 20 == 0:
            producer.poll(0)
    assert producer.flush(15) == 0
    assert errors == []
    for partition in (0, 1):
        expected = [f"v{i:03d}".encode() for i in range(partition, 200, 2)]
        assert sorted(delivered[partition]) == list(enumerate(expected))
        got = consume(shared_broker.bootstrap, topic, partition, count=100)
        assert [(m.offset(), m.value()) for m in got] == list(enumerate(expected))
        assert stored_values(shared_broker, topic, partition) == list(enumerate(expected))
        assert_sequences_chain(shared_broker, topic, partition)


def test_kafka_python_idempotent_producer_gets_gap_free_offsets(shared_broker: BrokerProcess) -> None:
    """kafka-python 3 is idempotent by default: its batches carry a producer id and chained sequences."""
    from kafka import KafkaProducer

    topic = "idem-kafka-python"
    create_topic(shared_broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True, linger_ms=2,
                             batch_size=200, request_timeout_ms=10000)
    try:
        futures = [producer.send(topic, value=f"k{i:03d}".encode(), partition=0) for i in range(60)]
        producer.flush(15)
        offsets = [f.get(timeout=10).offset for f in futures]
    finally:
        producer.close(5)
    assert offsets == list(range(60))
    assert stored_values(shared_broker, topic) == [(i, f"k{i:03d}".encode()) for i in range(60)]
    assert len(stored_batches(shared_broker.data_dir, topic)) > 1  # really several sequenced batches
    assert_sequences_chain(shared_broker, topic, 0)


# The thread method: a client spinning inside the event loop swallows the signal method's exception
# (asyncio stores it in whichever task or callback was running), so the test would never stop.
@pytest.mark.timeout(90, method="thread")
def test_aiokafka_idempotent_producer_gets_gap_free_offsets(shared_broker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    topic = "idem-aiokafka"
    create_topic(shared_broker.bootstrap, topic)

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, enable_idempotence=True,
                                    linger_ms=2, max_batch_size=200)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=f"a{i:03d}".encode(), partition=0) for i in range(60)]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == list(range(60))
    assert stored_values(shared_broker, topic) == [(i, f"a{i:03d}".encode()) for i in range(60)]
    assert len(stored_batches(shared_broker.data_dir, topic)) > 1
    assert_sequences_chain(shared_broker, topic, 0)


# -- raw protocol --------------------------------------------------------------------------------


def test_retried_batch_is_written_once_and_answered_with_its_original_offset(shared_broker: BrokerProcess) -> None:
    """A retry (same pid/epoch/seq) after a lost response must not duplicate records, for any of the
    last five batches; one older than that can no longer be told apart and is out of order (as Kafka)."""
    topic = "idem-raw-retry"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        pid, epoch = init_producer_id(raw)
        batches = [idempotent_batch(pid, epoch, 3 * i, [f"b{i}-{j}".encode() for j in range(3)]) for i in range(6)]
        assert produce_error(raw, topic, 0, batches[0]) == (ErrorCode.none, 0)
        assert produce_error(raw, topic, 0, batches[0]) == (ErrorCode.none, 0)
        assert log_end_offset(raw, topic) == 3
        for i in range(1, 6):
            assert produce_error(raw, topic, 0, batches[i]) == (ErrorCode.none, 3 * i)
        assert log_end_offset(raw, topic) == 18
        for i in range(1, 6):  # the five cached batches are all recognised
            assert produce_error(raw, topic, 0, batches[i]) == (ErrorCode.none, 3 * i)
        code, _ = produce_error(raw, topic, 0, batches[0])  # evicted from the five-batch cache
        assert code == ErrorCode.out_of_order_sequence_number
        assert log_end_offset(raw, topic) == 18
    expected = [(3 * i + j, f"b{i}-{j}".encode()) for i in range(6) for j in range(3)]
    assert stored_values(shared_broker, topic) == expected


def test_sequence_gap_is_out_of_order(shared_broker: BrokerProcess) -> None:
    topic = "idem-raw-gap"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        pid, epoch = init_producer_id(raw)
        assert produce_error(raw, topic, 0, idempotent_batch(pid, epoch, 0, [b"a", b"b"])) == (ErrorCode.none, 0)
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, epoch, 3, [b"gap"]))
        assert code == ErrorCode.out_of_order_sequence_number
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, epoch, 1, [b"overlap"]))
        assert code == ErrorCode.out_of_order_sequence_number
        assert produce_error(raw, topic, 0, idempotent_batch(pid, epoch, 2, [b"c"])) == (ErrorCode.none, 2)
        assert log_end_offset(raw, topic) == 3
    assert stored_values(shared_broker, topic) == [(0, b"a"), (1, b"b"), (2, b"c")]


def test_epochs_stale_is_fenced_and_new_must_start_at_zero(shared_broker: BrokerProcess) -> None:
    topic = "idem-raw-epoch"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        pid, _ = init_producer_id(raw)
        assert produce_error(raw, topic, 0, idempotent_batch(pid, 1, 0, [b"e1-0", b"e1-1"])) == (ErrorCode.none, 0)
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 0, 2, [b"old"]))
        assert code == ErrorCode.invalid_producer_epoch
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 0, 0, [b"old"]))
        assert code == ErrorCode.invalid_producer_epoch
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 2, 2, [b"e2-continued"]))
        assert code == ErrorCode.out_of_order_sequence_number
        assert produce_error(raw, topic, 0, idempotent_batch(pid, 2, 0, [b"e2-0"])) == (ErrorCode.none, 2)
        # The new epoch replaced the old one: a retry of the epoch-1 batch is now stale, not a duplicate.
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 1, 0, [b"e1-0", b"e1-1"]))
        assert code == ErrorCode.invalid_producer_epoch
        assert produce_error(raw, topic, 0, idempotent_batch(pid, 2, 1, [b"e2-1"])) == (ErrorCode.none, 3)
    assert stored_values(shared_broker, topic) == [(0, b"e1-0"), (1, b"e1-1"), (2, b"e2-0"), (3, b"e2-1")]


def test_idempotent_batches_come_one_per_partition(shared_broker: BrokerProcess) -> None:
    """Kafka refuses a v3+ produce with more than one batch for a partition (INVALID_RECORD). Here a
    retried batch followed by a new one must not be acknowledged while the new one is dropped, nor a
    valid sequence chain split over two batches be called out of order: both are refused whole."""
    topic = "idem-raw-multi"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        pid, epoch = init_producer_id(raw)
        first = idempotent_batch(pid, epoch, 0, [b"m0"])
        second = idempotent_batch(pid, epoch, 1, [b"m1"])
        assert produce_error(raw, topic, 0, first) == (ErrorCode.none, 0)
        for payload in (first + second, second + idempotent_batch(pid, epoch, 2, [b"m2"])):
            code, _ = produce_error(raw, topic, 0, payload)
            assert code == ErrorCode.invalid_record
        assert log_end_offset(raw, topic) == 1
        assert produce_error(raw, topic, 0, second) == (ErrorCode.none, 1)
    assert stored_values(shared_broker, topic) == [(0, b"m0"), (1, b"m1")]


def test_plain_batch_inside_an_open_transaction_is_refused(shared_broker: BrokerProcess) -> None:
    """Kafka answers INVALID_TXN_STATE to a non-transactional batch from a producer whose transaction
    is open in the partition: it would otherwise escape the transaction's commit or abort."""
    topic = "idem-raw-txn-state"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        pid, epoch = init_producer_id(raw)
        now = int(time.time() * 1000)
        txn = rb.build_batch([rb.Record(0, now, None, b"in-txn")], base_offset=0, producer_id=pid,
                             producer_epoch=epoch, base_sequence=0, is_transactional=True)
        assert produce_error(raw, topic, 0, txn) == (ErrorCode.none, 0)
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, epoch, 1, [b"plain"]))
        assert code == ErrorCode.invalid_txn_state
        assert log_end_offset(raw, topic) == 1


def test_producers_are_tracked_separately(shared_broker: BrokerProcess) -> None:
    """Two producer ids on one partition each keep their own sequence; one's retry is not the other's."""
    topic = "idem-raw-two"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        pid_a, _ = init_producer_id(raw)
        pid_b, _ = init_producer_id(raw)
        assert pid_a != pid_b
        assert produce_error(raw, topic, 0, idempotent_batch(pid_a, 0, 0, [b"a0"])) == (ErrorCode.none, 0)
        assert produce_error(raw, topic, 0, idempotent_batch(pid_b, 0, 0, [b"b0"])) == (ErrorCode.none, 1)
        assert produce_error(raw, topic, 0, idempotent_batch(pid_a, 0, 0, [b"a0"])) == (ErrorCode.none, 0)
        assert produce_error(raw, topic, 0, idempotent_batch(pid_a, 0, 1, [b"a1"])) == (ErrorCode.none, 2)
        assert produce_error(raw, topic, 0, idempotent_batch(pid_b, 0, 0, [b"b0"])) == (ErrorCode.none, 1)
        assert log_end_offset(raw, topic) == 3


# -- restarts ------------------------------------------------------------------------------------


def _write_two_batches(broker: BrokerProcess, topic: str) -> tuple[int, bytes, bytes]:
    create_topic(broker.bootstrap, topic)
    with RawKafka(broker.bootstrap) as raw:
        pid, _ = init_producer_id(raw)
        # Epoch 1 (as after a client-side bump) so that a stale epoch 0 can be tried after the restart.
        first = idempotent_batch(pid, 1, 0, [b"r0", b"r1", b"r2"])
        second = idempotent_batch(pid, 1, 3, [b"r3", b"r4"])
        assert produce_error(raw, topic, 0, first) == (ErrorCode.none, 0)
        assert produce_error(raw, topic, 0, second) == (ErrorCode.none, 3)
    return pid, first, second


def _assert_state_survived(broker: BrokerProcess, topic: str, pid: int, first: bytes, second: bytes) -> None:
    with RawKafka(broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, second) == (ErrorCode.none, 3)
        assert produce_error(raw, topic, 0, first) == (ErrorCode.none, 0)
        assert log_end_offset(raw, topic) == 5
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 1, 9, [b"gap"]))
        assert code == ErrorCode.out_of_order_sequence_number
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 0, 5, [b"stale"]))
        assert code == ErrorCode.invalid_producer_epoch
        assert produce_error(raw, topic, 0, idempotent_batch(pid, 1, 5, [b"r5"])) == (ErrorCode.none, 5)
    assert stored_values(broker, topic) == [(i, f"r{i}".encode()) for i in range(6)]


def test_dedup_survives_kill_9(make_broker) -> None:  # type: ignore[no-untyped-def]
    """Without a snapshot the restarted broker must rebuild the producer's last batches by replaying
    the log's batch headers, so the client's retry is still a duplicate."""
    broker = make_broker()
    topic = "idem-kill9"
    pid, first, second = _write_two_batches(broker, topic)
    broker.kill()
    # Snapshots are taken every 30 s; drop one a slow run may have written, so the replay path is what runs.
    for snapshot in (broker.data_dir / f"{topic}-0").glob("*.snapshot"):
        snapshot.unlink()
    broker.start()
    _assert_state_survived(broker, topic, pid, first, second)


def test_dedup_survives_clean_restart_through_the_snapshot(make_broker) -> None:  # type: ignore[no-untyped-def]
    """A clean stop writes `<log end>.snapshot`; the restarted broker trusts it instead of replaying.

    DeleteRecords past every batch of the producer proves the snapshot is what is read: the log from
    the new start offset holds nothing of the producer, so only the snapshot can remember it (Kafka
    also keeps producer state when the log start moves)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    broker = make_broker()
    topic = "idem-clean"
    pid, _first, second = _write_two_batches(broker, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = TopicPartition(topic, 0, 5)
    assert admin.delete_records([tp])[tp].result(10).low_watermark == 5
    assert broker.stop() == 0
    [snapshot] = (broker.data_dir / f"{topic}-0").glob("*.snapshot")
    assert snapshot.name == f"{5:020d}.snapshot"
    saved = json.loads(snapshot.read_text())
    [entry] = [p for p in saved["producers"] if p["id"] == pid]
    assert (entry["epoch"], entry["batches"][-1][:4]) == (1, [3, 4, 3, 4])
    broker.start()
    with RawKafka(broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, second) == (ErrorCode.none, 3)
        assert log_end_offset(raw, topic) == 5
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 1, 9, [b"gap"]))
        assert code == ErrorCode.out_of_order_sequence_number
        code, _ = produce_error(raw, topic, 0, idempotent_batch(pid, 0, 5, [b"stale"]))
        assert code == ErrorCode.invalid_producer_epoch
        assert produce_error(raw, topic, 0, idempotent_batch(pid, 1, 5, [b"r5"])) == (ErrorCode.none, 5)


@pytest.mark.parametrize("restart", ["kill", "stop"])
def test_confluent_producer_keeps_its_sequence_across_broker_restart(make_broker, restart: str) -> None:  # type: ignore[no-untyped-def]
    """The same idempotent client instance keeps producing after the broker comes back: its next
    sequence must be accepted (the broker rebuilt the state), and the log stays gap-free."""
    broker = make_broker()
    topic = f"idem-restart-{restart}"
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, **{"enable.idempotence": True, "message.timeout.ms": 20000}))
    offsets: list[int] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        offsets.append(msg.offset())

    for i in range(10):
        producer.produce(topic, value=f"p{i}".encode(), partition=0, on_delivery=on_delivery)
    assert producer.flush(10) == 0
    broker.kill() if restart == "kill" else broker.stop()
    broker.start()
    for i in range(10, 20):
        producer.produce(topic, value=f"p{i}".encode(), partition=0, on_delivery=on_delivery)
    assert producer.flush(20) == 0
    assert offsets == list(range(20))
    assert stored_values(broker, topic) == [(i, f"p{i}".encode()) for i in range(20)]
    assert_sequences_chain(broker, topic, 0)


def test_confluent_stream_through_kill_9_has_no_duplicates(make_broker) -> None:  # type: ignore[no-untyped-def]
    """The real case dedup exists for: batches the broker wrote but never acknowledged (it was killed)
    are retried by librdkafka after the restart, and every record must still be stored exactly once,
    in order, with the offsets the delivery reports claim."""
    import threading

    broker = make_broker()
    topic = "idem-stream-kill9"
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, **{
        "enable.idempotence": True, "linger.ms": 2, "batch.num.messages": 25, "message.timeout.ms": 30000,
    }))
    acked: dict[bytes, int] = {}
    errors: list[object] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(err)
        else:
            acked[msg.value()] = msg.offset()

    total = 3000
    restarted = threading.Event()

    def crash_and_restart() -> None:
        deadline = time.monotonic() + 20
        while len(acked) < 500 and time.monotonic() < deadline:
            time.sleep(0.002)
        broker.kill()
        broker.start()
        restarted.set()

    thread = threading.Thread(target=crash_and_restart, daemon=True)
    thread.start()
    values = [f"s{i:05d}".encode() for i in range(total)]
    for value in values:
        while True:
            try:
                producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    deadline = time.monotonic() + 30
    while not restarted.is_set() and time.monotonic() < deadline:
        producer.poll(0.05)  # serve delivery reports: the crash waits for 500 of them
    thread.join(5)
    assert restarted.is_set()
    assert producer.flush(30) == 0
    assert errors == []
    assert [acked[v] for v in values] == list(range(total))
    assert stored_values(broker, topic) == list(enumerate(values))
