"""Transactions against a real broker process, judged by three clients' producers and consumers.

What must hold, as in Kafka: committed records reach `read_committed` consumers in order and aborted
ones never do (they are skipped through the fetch's aborted-transaction list), while
`read_uncommitted` sees everything; an open transaction holds `read_committed` readers (and
ListOffsets) at the last stable offset; a second producer with the same transactional id fences the
first and aborts its transaction; a transaction whose producer (or the broker) died is aborted once
its timeout passes; and all of it survives kill -9 of the broker. Offsets are asserted exactly, so a
missing or extra control marker shows up as a wrong offset.
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from bus.protocol import records as rb
from contracts.processes import spawn
from deploy.processes.broker import BrokerProcess
from testkit.clients import (
    consume,
    create_topic,
    producer_config,
    stored_batches,
)
from testkit.raw_kafka import RawKafka
from tests.integration._support_transactions import (
    ABORT,
    COMMIT,
    aiokafka_view,
    committed_view,
    describe_txn,
    kafka_python_admin,
    kafka_python_view,
    list_offset,
    markers,
    produce_all,
    state_name,
    txn_producer,
    uncommitted_view,
    wait_for,
)

SWEEP = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> Iterator[str]:
    yield "txn-" + request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[5:60]


# -- commit / abort / isolation -------------------------------------------------------------------

# offsets 0-2 committed, 3 marker, 4-5 aborted, 6 marker, 7-8 committed, 9 marker
COMMITTED = [(0, b"c0"), (1, b"c1"), (2, b"c2"), (7, b"c3"), (8, b"c4")]
EVERYTHING = [(0, b"c0"), (1, b"c1"), (2, b"c2"), (4, b"a0"), (5, b"a1"), (7, b"c3"), (8, b"c4")]


def _commit_abort_commit(bootstrap: str, topic: str, txn_id: str) -> None:
    producer = txn_producer(bootstrap, txn_id)
    producer.begin_transaction()
    assert produce_all(producer, topic, [b"c0", b"c1", b"c2"]) == [0, 1, 2]
    producer.commit_transaction(10)
    producer.begin_transaction()
    assert produce_all(producer, topic, [b"a0", b"a1"]) == [4, 5]
    producer.abort_transaction(10)
    producer.begin_transaction()
    assert produce_all(producer, topic, [b"c3", b"c4"]) == [7, 8]
    producer.commit_transaction(10)


def test_confluent_commit_and_abort_by_isolation_level(shared_broker: BrokerProcess, topic_name: str) -> None:
    create_topic(shared_broker.bootstrap, topic_name)
    _commit_abort_commit(shared_broker.bootstrap, topic_name, topic_name)
    assert markers(shared_broker, topic_name) == [(3, COMMIT), (6, ABORT), (9, COMMIT)]
    assert committed_view(shared_broker.bootstrap, topic_name) == COMMITTED
    assert uncommitted_view(shared_broker.bootstrap, topic_name) == EVERYTHING
    assert list_offset(shared_broker.bootstrap, topic_name, committed=True) == 10
    assert list_offset(shared_broker.bootstrap, topic_name, committed=False) == 10
    # A read_committed consumer starting inside the aborted range still skips it.
    assert committed_view(shared_broker.bootstrap, topic_name) == COMMITTED
    assert [(m.offset(), m.value()) for m in consume(shared_broker.bootstrap, topic_name, start=5,
                                                     **{"isolation.level": "read_committed"})] == COMMITTED[3:]


def test_python_clients_read_committed(shared_broker: BrokerProcess, topic_name: str) -> None:
    """kafka-python and aiokafka must get the aborted-transaction list (and LSO) they filter by."""
    create_topic(shared_broker.bootstrap, topic_name)
    _commit_abort_commit(shared_broker.bootstrap, topic_name, topic_name)
    for view in (kafka_python_view, aiokafka_view):
        assert view(shared_broker.bootstrap, topic_name, 10, "read_committed") == COMMITTED, view.__name__
        assert view(shared_broker.bootstrap, topic_name, 10, "read_uncommitted") == EVERYTHING, view.__name__


def test_kafka_python_transactional_producer(shared_broker: BrokerProcess, topic_name: str) -> None:
    from kafka import KafkaProducer

    create_topic(shared_broker.bootstrap, topic_name)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name,
                             request_timeout_ms=10000)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        offsets = [producer.send(topic_name, b"c0", partition=0), producer.send(topic_name, b"c1", partition=0)]
        producer.commit_transaction()
        assert [f.get(5).offset for f in offsets] == [0, 1]
        producer.begin_transaction()
        aborted = producer.send(topic_name, b"a0", partition=0)
        producer.flush()
        assert aborted.get(5).offset == 3
        producer.abort_transaction()
        producer.begin_transaction()
        assert producer.send(topic_name, b"c2", partition=0).get(5).offset == 5
        producer.commit_transaction()
    finally:
        producer.close(5)
    assert markers(shared_broker, topic_name) == [(2, COMMIT), (4, ABORT), (6, COMMIT)]
    assert committed_view(shared_broker.bootstrap, topic_name) == [(0, b"c0"), (1, b"c1"), (5, b"c2")]
    assert uncommitted_view(shared_broker.bootstrap, topic_name) == [(0, b"c0"), (1, b"c1"), (3, b"a0"),
                                                                     (5, b"c2")]


def test_aiokafka_transactional_producer(shared_broker: BrokerProcess, topic_name: str) -> None:
    from aiokafka import AIOKafkaProducer

    create_topic(shared_broker.bootstrap, topic_name)

    async def run() -> list[int]:
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id=topic_name)
        await producer.start()
        try:
            async with producer.transaction():
                first = [await producer.send_and_wait(topic_name, v, partition=0) for v in (b"c0", b"c1")]
            await producer.begin_transaction()
            aborted = await producer.send_and_wait(topic_name, b"a0", partition=0)
            await producer.abort_transaction()
            async with producer.transaction():
                last = await producer.send_and_wait(topic_name, b"c2", partition=0)
            return [m.offset for m in (*first, aborted, last)]
        finally:
            await producer.stop()

    assert asyncio.run(run()) == [0, 1, 3, 5]
    assert markers(shared_broker, topic_name) == [(2, COMMIT), (4, ABORT), (6, COMMIT)]
    assert committed_view(shared_broker.bootstrap, topic_name) == [(0, b"c0"), (1, b"c1"), (5, b"c2")]


def test_topic_compression_keeps_batches_transactional(shared_broker: BrokerProcess, topic_name: str) -> None:
    """A topic with compression.type re-encodes produced batches: the transactional flag and producer
    fields must survive, or read_committed consumers would stop skipping aborted records."""
    create_topic(shared_broker.bootstrap, topic_name, config={"compression.type": "gzip"})
    _commit_abort_commit(shared_broker.bootstrap, topic_name, topic_name)
    data = [b.info for b in stored_batches(shared_broker.data_dir, topic_name) if not b.info.is_control]
    assert [(b.base_offset, b.compression, b.is_transactional, b.producer_epoch) for b in data] == [
        (0, 1, True, 0), (4, 1, True, 0), (7, 1, True, 0)]
    assert [b.base_sequence for b in data] == [0, 3, 5]
    assert committed_view(shared_broker.bootstrap, topic_name) == COMMITTED
    assert uncommitted_view(shared_broker.bootstrap, topic_name) == EVERYTHING


def test_transaction_over_two_partitions_commits_both(shared_broker: BrokerProcess, topic_name: str) -> None:
    """EndTxn writes a marker into every partition the transaction added, then answers."""
    create_topic(shared_broker.bootstrap, topic_name, partitions=2)
    producer = txn_producer(shared_broker.bootstrap, topic_name)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"p0-0", b"p0-1"], partition=0) == [0, 1]
    assert produce_all(producer, topic_name, [b"p1-0"], partition=1) == [0]
    producer.commit_transaction(10)
    assert markers(shared_broker, topic_name, 0) == [(2, COMMIT)]
    assert markers(shared_broker, topic_name, 1) == [(1, COMMIT)]
    assert committed_view(shared_broker.bootstrap, topic_name, 0) == [(0, b"p0-0"), (1, b"p0-1")]
    assert committed_view(shared_broker.bootstrap, topic_name, 1) == [(0, b"p1-0")]


def _fetch_committed(raw: RawKafka, topic: str, offset: int, partition_max_bytes: int) -> tuple[int, list[int], Any]:
    """A raw read_committed Fetch v11: (first batch offset, aborted first offsets, the partition data)."""
    from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic

    response = raw.request(FetchRequest(max_wait=datetime.timedelta(0), min_bytes=0, isolation_level=1, topics=(
        FetchTopic(topic=topic, partitions=(FetchPartition(partition=0, fetch_offset=offset,
                                                             partition_max_bytes=partition_max_bytes),)),),
        forgotten_topics_data=()))
    [part] = response.responses[0].partitions
    assert part.error_code == ErrorCode.none
    batches = rb.scan_batches_prefix(part.records)[0]
    return batches[0].base_offset, [t.first_offset for t in part.aborted_transactions or ()], part


def test_fetch_lists_only_the_aborts_its_records_overlap(shared_broker: BrokerProcess, topic_name: str) -> None:
    """A read_committed consumer catching up must get the aborted transactions of the records it was
    sent, not every abort up to the LSO (Kafka bounds the list by the fetched data): 40 aborts ahead of
    a one-batch fetch would otherwise ride along in every response."""
    create_topic(shared_broker.bootstrap, topic_name)
    producer = txn_producer(shared_broker.bootstrap, topic_name)
    for i in range(40):  # record at 2i, abort marker at 2i + 1
        producer.begin_transaction()
        assert produce_all(producer, topic_name, [f"a{i}".encode()]) == [2 * i]
        producer.abort_transaction(10)
    with RawKafka(shared_broker.bootstrap) as raw:
        assert _fetch_committed(raw, topic_name, 0, 1)[:2] == (0, [0])
        assert _fetch_committed(raw, topic_name, 31, 1)[:2] == (31, [30])  # its marker ends the one at 30
        assert _fetch_committed(raw, topic_name, 70, 1)[:2] == (70, [70])
        first, aborted, part = _fetch_committed(raw, topic_name, 0, 1 << 20)
        assert (first, aborted, part.last_stable_offset) == (0, [2 * i for i in range(40)], 80)
    assert committed_view(shared_broker.bootstrap, topic_name) == []


# -- last stable offset ---------------------------------------------------------------------------


def test_open_transaction_holds_read_committed_at_the_lso(shared_broker: BrokerProcess, topic_name: str) -> None:
    """Records after an open transaction's first offset, even non-transactional ones, wait for it."""
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic_name)
    plain = Producer(producer_config(bootstrap, **{"enable.idempotence": True}))
    assert produce_all(plain, topic_name, [b"before-0", b"before-1"]) == [0, 1]
    producer = txn_producer(bootstrap, topic_name)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"open-0", b"open-1"]) == [2, 3]
    assert produce_all(plain, topic_name, [b"after-0"]) == [4]

    assert list_offset(bootstrap, topic_name, committed=True) == 2
    assert list_offset(bootstrap, topic_name, committed=False) == 5
    assert committed_view(bootstrap, topic_name) == [(0, b"before-0"), (1, b"before-1")]
    for view in (kafka_python_view, aiokafka_view):  # positions stop at the LSO
        assert view(bootstrap, topic_name, 2, "read_committed") == [(0, b"before-0"), (1, b"before-1")]
    assert uncommitted_view(bootstrap, topic_name) == [(0, b"before-0"), (1, b"before-1"), (2, b"open-0"),
                                                       (3, b"open-1"), (4, b"after-0")]
    producer.commit_transaction(10)
    assert list_offset(bootstrap, topic_name, committed=True) == 6
    assert committed_view(bootstrap, topic_name) == [(0, b"before-0"), (1, b"before-1"), (2, b"open-0"),
                                                     (3, b"open-1"), (4, b"after-0")]


def test_read_committed_long_poll_wakes_on_commit(shared_broker: BrokerProcess, topic_name: str) -> None:
    """A read_committed consumer waiting at the LSO gets the records as soon as the marker is written."""
    from confluent_kafka import Consumer

    from testkit.clients import consumer_config

    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic_name)
    producer = txn_producer(bootstrap, topic_name)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"x0", b"x1"]) == [0, 1]
    consumer = Consumer(consumer_config(bootstrap, **{"isolation.level": "read_committed", "fetch.wait.max.ms": 5000}))
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # nothing may leak before the commit
            msg = consumer.poll(0.1)
            assert msg is None or msg.error() is not None, (msg.offset(), msg.value())
        producer.commit_transaction(10)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append((msg.offset(), msg.value()))
        assert got == [(0, b"x0"), (1, b"x1")]
    finally:
        consumer.close()


# -- fencing --------------------------------------------------------------------------------------


def test_second_producer_fences_the_first_and_aborts_its_transaction(shared_broker: BrokerProcess,
                                                                      topic_name: str) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic_name)
    first = txn_producer(bootstrap, topic_name)
    first.begin_transaction()
    assert produce_all(first, topic_name, [b"zombie-0", b"zombie-1"]) == [0, 1]
    old = describe_txn(bootstrap, topic_name)
    assert state_name(old) == "Ongoing"

    second = txn_producer(bootstrap, topic_name)  # InitProducerId aborts the open transaction first
    new = describe_txn(bootstrap, topic_name)
    assert (state_name(new), new.producer_id) == ("Empty", old.producer_id)
    assert new.producer_epoch == old.producer_epoch + 2  # one bump to fence and abort, one for the new producer
    assert markers(shared_broker, topic_name) == [(2, ABORT)]
    second.begin_transaction()
    assert produce_all(second, topic_name, [b"new-0"]) == [3]
    second.commit_transaction(10)

    with pytest.raises(KafkaException) as excinfo:
        first.produce(topic_name, value=b"zombie-2", partition=0)
        first.flush(5)
        first.commit_transaction(10)
    error = excinfo.value.args[0]
    assert error.fatal(), error
    assert "fenced" in error.str().lower() or "epoch" in error.str().lower(), error
    assert markers(shared_broker, topic_name) == [(2, ABORT), (4, COMMIT)]
    assert committed_view(bootstrap, topic_name) == [(3, b"new-0")]
    assert uncommitted_view(bootstrap, topic_name) == [(0, b"zombie-0"), (1, b"zombie-1"), (3, b"new-0")]


# -- timeouts: dead producers and crashed brokers ----------------------------------------------------

PRODUCER_SCRIPT = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    bootstrap, topic, txn_id, timeout_ms = sys.argv[1:5]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                  "transaction.timeout.ms": int(timeout_ms), "message.timeout.ms": 3000, "linger.ms": 0})
    p.init_transactions(10)
    p.begin_transaction()
    offsets = []
    for v in (b"doomed-0", b"doomed-1"):
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, msg: offsets.append(msg.offset()))
    assert p.flush(10) == 0
    print("ready", *offsets, flush=True)
    sys.stdin.read()  # hold the transaction open until killed
""")


def _wait_for_abort_after_timeout(bootstrap: str, txn_id: str, started_ms: int, timeout_ms: int) -> Any:
    """Poll DescribeTransactions until CompleteAbort; it must not have happened before the timeout."""
    description = wait_for(lambda: (d := describe_txn(bootstrap, txn_id)) and state_name(d) != "Ongoing" and d,
                           timeout=15, what=f"{txn_id} to be aborted")
    assert state_name(description) == "CompleteAbort"
    assert int(time.time() * 1000) >= started_ms + timeout_ms
    return description


def test_transaction_of_a_killed_producer_is_aborted_after_its_timeout(make_broker, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    """No EndTxn will ever come from a client killed with -9: the coordinator's sweeper must abort its
    transaction once transaction.timeout.ms has passed (not before), with a bumped epoch, and unblock
    read_committed readers."""
    broker = make_broker(SWEEP)
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name)
    # 6 s: long enough that the checks below run before the sweeper aborts even on a loaded machine (with 3 s,
    # CI once saw the transaction aborted already, last stable offset 3 instead of 0)
    timeout_ms = 6000
    with spawn([sys.executable, "-c", PRODUCER_SCRIPT, bootstrap, topic_name, topic_name, str(timeout_ms)],
               subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.PIPE) as child:
        try:
            assert child.stdout is not None and child.stderr is not None
            line = child.stdout.readline().decode()
            assert line.split() == ["ready", "0", "1"], (line, child.stderr.read() if child.poll() is not None else "")
        finally:
            child.send_signal(signal.SIGKILL)  # kill -9 of the client, mid-transaction
            child.wait(10)
    ongoing = describe_txn(bootstrap, topic_name)
    assert state_name(ongoing) == "Ongoing"
    assert ongoing.topic_partitions == {_ktp(topic_name, 0)}
    assert list_offset(bootstrap, topic_name, committed=True) == 0
    aborted = _wait_for_abort_after_timeout(bootstrap, topic_name, ongoing.transaction_start_time_ms, timeout_ms)
    assert aborted.producer_epoch == ongoing.producer_epoch + 1  # fenced: the zombie can no longer write
    assert markers(broker, topic_name) == [(2, ABORT)]
    admin = kafka_python_admin(bootstrap)
    try:
        [state] = admin.describe_producers([_ktp(topic_name, 0)])[_ktp(topic_name, 0)].active_producers
    finally:
        admin.close()
    # The abort marker carried the bumped epoch, which drops the old epoch's sequences (as Kafka).
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.current_transaction_start_offset) == (
        ongoing.producer_id, ongoing.producer_epoch + 1, -1, -1)
    assert list_offset(bootstrap, topic_name, committed=True) == 3
    assert committed_view(bootstrap, topic_name) == []
    assert uncommitted_view(bootstrap, topic_name) == [(0, b"doomed-0"), (1, b"doomed-1")]


def _ktp(topic: str, partition: int) -> Any:
    from kafka import TopicPartition as KTP

    return KTP(topic, partition)


def test_broker_kill_9_mid_transaction_aborts_it_after_the_timeout(make_broker, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    """The Ongoing state is read back from `__transaction_state` and the open records from the log, so
    the restarted broker both hides them (LSO) and aborts them once the timeout has passed."""
    broker = make_broker(SWEEP)
    create_topic(broker.bootstrap, topic_name)
    producer = txn_producer(broker.bootstrap, topic_name, timeout_ms=3000)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"kept"]) == [0]
    producer.commit_transaction(10)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"lost-0", b"lost-1"]) == [2, 3]
    ongoing = describe_txn(broker.bootstrap, topic_name)
    assert state_name(ongoing) == "Ongoing"
    broker.kill()
    broker.start()
    try:
        assert committed_view(broker.bootstrap, topic_name) == [(0, b"kept")]
        _wait_for_abort_after_timeout(broker.bootstrap, topic_name, ongoing.transaction_start_time_ms, 3000)
        assert markers(broker, topic_name) == [(1, COMMIT), (4, ABORT)]
        assert list_offset(broker.bootstrap, topic_name, committed=True) == 5
        assert committed_view(broker.bootstrap, topic_name) == [(0, b"kept")]
    finally:
        producer.purge()
        del producer


def test_idle_transactional_ids_expire(make_broker, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    """transactional.id.expiration.ms (small here): ids with no transaction in progress are forgotten
    once idle that long, through a tombstone in __transaction_state, so a restart does not bring them
    back; an open transaction's id stays; an expired id's next InitProducerId gets a new producer id."""
    broker = make_broker({"transactional.id.expiration.ms": "1500",
                          "transaction.remove.expired.transaction.cleanup.interval.ms": "200"})
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name)
    idle = txn_producer(bootstrap, f"{topic_name}-idle")
    done = txn_producer(bootstrap, f"{topic_name}-done")
    done.begin_transaction()
    produce_all(done, topic_name, [b"committed"])
    done.commit_transaction(10)
    old_pid = describe_txn(bootstrap, f"{topic_name}-done").producer_id
    open_ = txn_producer(bootstrap, f"{topic_name}-open", timeout_ms=60000)
    open_.begin_transaction()
    produce_all(open_, topic_name, [b"open"])

    def remaining() -> set[str]:
        admin = kafka_python_admin(bootstrap)
        try:
            return {t.transactional_id for t in _listed(admin) if t.transactional_id.startswith(topic_name)}
        finally:
            admin.close()

    wait_for(lambda: remaining() == {f"{topic_name}-open"}, 15, "the idle ids to expire")
    open_.abort_transaction(10)
    del idle, done, open_
    broker.stop()
    broker.start()
    assert f"{topic_name}-done" not in remaining()
    again = txn_producer(broker.bootstrap, f"{topic_name}-done")
    described = describe_txn(broker.bootstrap, f"{topic_name}-done")
    assert (state_name(described), described.producer_epoch) == ("Empty", 0)
    assert described.producer_id != old_pid
    del again


def test_transaction_open_across_broker_kill_9_can_still_commit(make_broker, topic_name: str) -> None:  # type: ignore[no-untyped-def]
    """A broker that comes back within the transaction's timeout resumes it: the producer (same
    instance, same epoch) adds more records and commits, and everything becomes visible at once."""
    broker = make_broker()
    create_topic(broker.bootstrap, topic_name, partitions=2)
    producer = txn_producer(broker.bootstrap, topic_name, timeout_ms=30000)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"before-0", b"before-1"]) == [0, 1]
    broker.kill()
    broker.start()
    assert list_offset(broker.bootstrap, topic_name, committed=True) == 0
    assert produce_all(producer, topic_name, [b"after-0"]) == [2]
    assert produce_all(producer, topic_name, [b"other"], partition=1) == [0]
    producer.commit_transaction(15)
    assert markers(broker, topic_name, 0) == [(3, COMMIT)]
    assert markers(broker, topic_name, 1) == [(1, COMMIT)]
    assert committed_view(broker.bootstrap, topic_name) == [(0, b"before-0"), (1, b"before-1"), (2, b"after-0")]
    assert committed_view(broker.bootstrap, topic_name, 1) == [(0, b"other")]


@pytest.mark.parametrize("restart", ["kill", "stop"])
def test_committed_transactions_and_producer_state_survive_restart(make_broker, topic_name: str,
                                                                    restart: str) -> None:  # type: ignore[no-untyped-def]
    """After kill -9 the aborted-transaction list is rebuilt by replaying markers; after a clean stop it
    comes from the snapshot. Either way the same records are hidden and the producer is remembered."""
    broker = make_broker()
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name)
    _commit_abort_commit(bootstrap, topic_name, topic_name)
    before = describe_txn(bootstrap, topic_name)
    broker.kill() if restart == "kill" else broker.stop()
    broker.start()
    bootstrap = broker.bootstrap
    assert committed_view(bootstrap, topic_name) == COMMITTED
    assert uncommitted_view(bootstrap, topic_name) == EVERYTHING
    assert aiokafka_view(bootstrap, topic_name, 10, "read_committed") == COMMITTED
    after = describe_txn(bootstrap, topic_name)
    assert (state_name(after), after.producer_id, after.producer_epoch) == (
        "CompleteCommit", before.producer_id, before.producer_epoch)
    admin = kafka_python_admin(bootstrap)
    try:
        [state] = admin.describe_producers([_ktp(topic_name, 0)])[_ktp(topic_name, 0)].active_producers
    finally:
        admin.close()
    # 7 records in sequence 0..6 at one epoch; no transaction open.
    assert (state.producer_id, state.producer_epoch, state.last_sequence, state.current_transaction_start_offset) == (
        before.producer_id, before.producer_epoch, 6, -1)
    # The transactional id carries on: a new producer instance gets the next epoch and commits.
    producer = txn_producer(bootstrap, topic_name)
    producer.begin_transaction()
    assert produce_all(producer, topic_name, [b"c5"]) == [10]
    producer.commit_transaction(10)
    assert committed_view(bootstrap, topic_name) == [*COMMITTED, (10, b"c5")]
    assert describe_txn(bootstrap, topic_name).producer_epoch == before.producer_epoch + 1


# -- admin: ListTransactions / DescribeTransactions / DescribeProducers -----------------------------


def _listed(admin: Any, **filters: Any) -> list[Any]:
    """ListTransactions from every broker (kafka-python answers per broker id), flattened."""
    return [t for listings in admin.list_transactions(**filters).values() for t in listings]


def test_list_and_describe_transactions_and_producers(shared_broker: BrokerProcess, topic_name: str) -> None:
    """confluent-kafka 2.16's AdminClient has no transaction APIs: kafka-python's admin speaks them."""
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    ids = {state: f"{topic_name}-{state}" for state in ("Empty", "Ongoing", "CompleteCommit", "CompleteAbort")}
    producers = {state: txn_producer(bootstrap, txn_id) for state, txn_id in ids.items()}
    producers["CompleteCommit"].begin_transaction()
    assert produce_all(producers["CompleteCommit"], topic_name, [b"committed"]) == [0]
    producers["CompleteCommit"].commit_transaction(10)
    producers["CompleteAbort"].begin_transaction()
    assert produce_all(producers["CompleteAbort"], topic_name, [b"aborted"]) == [2]
    producers["CompleteAbort"].abort_transaction(10)
    producers["Ongoing"].begin_transaction()
    assert produce_all(producers["Ongoing"], topic_name, [b"open-0", b"open-1"]) == [4, 5]
    assert produce_all(producers["Ongoing"], topic_name, [b"open-p1"], partition=1) == [0]

    admin = kafka_python_admin(bootstrap)
    try:
        listed = {t.transactional_id: (state_name(t), t.producer_id) for t in _listed(admin)
                  if t.transactional_id.startswith(topic_name)}
        assert {txn_id: state for txn_id, (state, _pid) in listed.items()} == {v: k for k, v in ids.items()}
        pids = {state: listed[txn_id][1] for state, txn_id in ids.items()}
        assert len(set(pids.values())) == 4
        ongoing_only = [t.transactional_id for t in _listed(admin, state_filters=["Ongoing"])
                        if t.transactional_id.startswith(topic_name)]
        assert ongoing_only == [ids["Ongoing"]]
        by_pid = _listed(admin, producer_id_filters=[pids["CompleteCommit"]])
        assert [(t.transactional_id, state_name(t)) for t in by_pid] == [(ids["CompleteCommit"], "CompleteCommit")]

        described = admin.describe_transactions(list(ids.values()))
        ongoing = described[ids["Ongoing"]]
        assert (state_name(ongoing), ongoing.producer_id, ongoing.producer_epoch, ongoing.transaction_timeout_ms) == (
            "Ongoing", pids["Ongoing"], 0, 10000)
        assert ongoing.topic_partitions == {_ktp(topic_name, 0), _ktp(topic_name, 1)}
        assert abs(ongoing.transaction_start_time_ms - time.time() * 1000) < 60000
        for state in ("Empty", "CompleteCommit", "CompleteAbort"):
            assert (state_name(described[ids[state]]), described[ids[state]].topic_partitions) == (state, set())

        states = admin.describe_producers([_ktp(topic_name, 0), _ktp(topic_name, 1)])
        p0 = {s.producer_id: (s.producer_epoch, s.last_sequence, s.current_transaction_start_offset)
              for s in states[_ktp(topic_name, 0)].active_producers}
        assert p0 == {pids["CompleteCommit"]: (0, 0, -1), pids["CompleteAbort"]: (0, 0, -1),
                      pids["Ongoing"]: (0, 1, 4)}
        p1 = [(s.producer_id, s.last_sequence, s.current_transaction_start_offset)
              for s in states[_ktp(topic_name, 1)].active_producers]
        assert p1 == [(pids["Ongoing"], 0, 0)]
    finally:
        admin.close()
        producers["Ongoing"].abort_transaction(10)


def test_describe_unknown_transactional_id_and_bad_timeouts(shared_broker: BrokerProcess) -> None:
    """Kafka answers an unknown id with TRANSACTIONAL_ID_NOT_FOUND (start time -1, which kio cannot
    decode, hence kafka-python) and a timeout outside (0, transaction.max.timeout.ms] with
    INVALID_TRANSACTION_TIMEOUT."""
    from kafka.errors import TransactionalIdNotFoundError
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    with pytest.raises(TransactionalIdNotFoundError):
        describe_txn(shared_broker.bootstrap, "txn-never-seen")
    with RawKafka(shared_broker.bootstrap) as raw:
        for timeout_ms in (0, 900001):
            response = raw.request(InitProducerIdRequest(transactional_id="txn-bad-timeout",
                                                         transaction_timeout=datetime.timedelta(milliseconds=timeout_ms)))
            assert (response.error_code, response.producer_id) == (ErrorCode.invalid_transaction_timeout, -1)


# -- TxnOffsetCommit: consume-transform-produce ------------------------------------------------------


def _committed(bootstrap: str, group: str, topic: str, isolation: str = "read_committed") -> int:
    """The group's committed offset; read_committed asks for stable offsets (waits out pending ones)."""
    from confluent_kafka import Consumer

    from testkit.clients import consumer_config

    consumer = Consumer(consumer_config(bootstrap, **{"group.id": group, "isolation.level": isolation}))
    try:
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        return committed.offset
    finally:
        consumer.close()


def _send_offsets(bootstrap: str, producer: Producer, group: str, topic: str, offset: int) -> None:
    from confluent_kafka import Consumer

    from testkit.clients import consumer_config

    consumer = Consumer(consumer_config(bootstrap, **{"group.id": group}))
    try:
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], consumer.consumer_group_metadata(),
                                             10)
    finally:
        consumer.close()


def test_send_offsets_to_transaction_commits_with_the_transaction(broker: BrokerProcess, topic_name: str) -> None:
    """Offsets sent in a transaction appear only when it commits, vanish when it aborts, and a committed
    transactional offset survives kill -9 (it is replayed through its commit marker)."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = topic_name + "-g"
    producer = txn_producer(bootstrap, topic_name)
    producer.begin_transaction()
    produce_all(producer, topic_name, [b"a"])
    _send_offsets(bootstrap, producer, group, topic_name, 5)
    assert _committed(bootstrap, group, topic_name, "read_uncommitted") < 0  # not before the commit
    producer.commit_transaction(10)
    assert _committed(bootstrap, group, topic_name) == 5

    producer.begin_transaction()
    produce_all(producer, topic_name, [b"b"])
    _send_offsets(bootstrap, producer, group, topic_name, 9)
    producer.abort_transaction(10)
    assert _committed(bootstrap, group, topic_name) == 5

    broker.kill()
    broker.start()
    assert _committed(bootstrap, group, topic_name) == 5


def test_open_transactional_offset_is_unstable_then_committed_after_restart(
        broker: BrokerProcess, topic_name: str) -> None:
    """A transactional offset still pending at a crash stays pending (require_stable fetches get
    UNSTABLE_OFFSET_COMMIT and wait); the producer commits after the restart and the offset appears."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic_name)
    group = topic_name + "-g"
    producer = txn_producer(bootstrap, topic_name)
    producer.begin_transaction()
    produce_all(producer, topic_name, [b"a"])
    _send_offsets(bootstrap, producer, group, topic_name, 3)
    broker.kill()
    broker.start()
    with RawKafka(bootstrap) as raw:
        response = raw.request(_request(
            "offset_fetch", 7, "OffsetFetchRequest", group_id=group, require_stable=True,
            topics=(_request("offset_fetch", 7, "OffsetFetchRequestTopic", name=topic_name, partition_indexes=(0,)),)))
        [topic] = response.topics
        assert topic.partitions[0].error_code == ErrorCode.unstable_offset_commit
    producer.commit_transaction(30)
    assert _committed(bootstrap, group, topic_name) == 3


# -- wire: every version's fencing error ------------------------------------------------------------


def _request(api: str, version: int, cls: str, **fields: Any) -> Any:
    import importlib

    return getattr(importlib.import_module(f"kio.schema.{api}.v{version}.request"), cls)(**fields)


def _init(raw: RawKafka, txn_id: str, version: int = 4, pid: int = -1, epoch: int = -1) -> tuple[ErrorCode, int, int]:
    extra = {"producer_id": pid, "producer_epoch": epoch} if version >= 3 else {}
    response = raw.request(_request("init_producer_id", version, "InitProducerIdRequest", transactional_id=txn_id,
                                    transaction_timeout=datetime.timedelta(seconds=10), **extra))
    return response.error_code, int(response.producer_id), int(response.producer_epoch)


def test_stale_epoch_gets_each_versions_fencing_error(shared_broker: BrokerProcess, topic_name: str) -> None:
    """KIP-588 added PRODUCER_FENCED in InitProducerId v4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn v2;
    older versions must get INVALID_PRODUCER_EPOCH, the only fencing error their clients know."""
    create_topic(shared_broker.bootstrap, topic_name)
    with RawKafka(shared_broker.bootstrap) as raw:
        code, pid, epoch = _init(raw, topic_name)
        assert (code, epoch) == (ErrorCode.none, 0)
        assert _init(raw, topic_name) == (ErrorCode.none, pid, 1)
        assert _init(raw, topic_name) == (ErrorCode.none, pid, 2)
        stale = 0

        def fenced(version: int, first_with_fenced: int) -> ErrorCode:
            return ErrorCode.producer_fenced if version >= first_with_fenced else ErrorCode.invalid_producer_epoch

        for version in range(0, 4):
            topics = (_request("add_partitions_to_txn", version, "AddPartitionsToTxnTopic", name=topic_name,
                               partitions=(0,)),)
            response = raw.request(_request(
                "add_partitions_to_txn", version, "AddPartitionsToTxnRequest", v3_and_below_transactional_id=topic_name,
                v3_and_below_producer_id=pid, v3_and_below_producer_epoch=stale, v3_and_below_topics=topics))
            [topic] = response.results_by_topic_v3_and_below
            assert [(p.partition_index, p.partition_error_code) for p in topic.results_by_partition] == [
                (0, fenced(version, 2))], version
        for version in range(0, 5):
            response = raw.request(_request("add_offsets_to_txn", version, "AddOffsetsToTxnRequest",
                                            transactional_id=topic_name, producer_id=pid, producer_epoch=stale,
                                            group_id="g"))
            assert response.error_code == fenced(version, 2), version
        for version in range(0, 5):
            response = raw.request(_request("end_txn", version, "EndTxnRequest", transactional_id=topic_name,
                                            producer_id=pid, producer_epoch=stale, committed=True))
            assert response.error_code == fenced(version, 2), version
        for version in (3, 4, 5):
            assert _init(raw, topic_name, version, pid, stale) == (fenced(version, 4), -1, -1), version
        # Nothing of that changed the transactional id: the current epoch still works.
        assert describe_txn(shared_broker.bootstrap, topic_name).producer_epoch == 2
        topics = (_request("add_partitions_to_txn", 3, "AddPartitionsToTxnTopic", name=topic_name, partitions=(0,)),)
        response = raw.request(_request("add_partitions_to_txn", 3, "AddPartitionsToTxnRequest",
                                        v3_and_below_transactional_id=topic_name, v3_and_below_producer_id=pid,
                                        v3_and_below_producer_epoch=2, v3_and_below_topics=topics))
        assert response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.none
        response = raw.request(_request("end_txn", 0, "EndTxnRequest", transactional_id=topic_name, producer_id=pid,
                                        producer_epoch=2, committed=False))
        assert response.error_code == ErrorCode.none
    assert state_name(describe_txn(shared_broker.bootstrap, topic_name)) == "CompleteAbort"
    assert markers(shared_broker, topic_name) == [(0, ABORT)]
