"""Our KafkaConsumer against a real broker process: reading, positions, groups, commits, transactions.

Records written by confluent-kafka (every codec, keys, headers, timestamps) are read back field by
field; groups mix our consumers with each other and with librdkafka's; read_committed is checked
against a confluent transactional producer that commits and aborts.

A KafkaConsumer belongs to one thread, so group members here run in their own threads (`Member`),
each polling, recording what it reads and what its rebalance listener sees.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from bus.client.consumer import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
from bus.client.errors import IllegalStateError
from bus.client.producer import KafkaProducer
from bus.protocol import compression as codecs
from deploy.processes.broker import BrokerProcess
from testkit.clients import FAST_CLIENT, create_topic, producer_config, stored_batches
from tests.integration._support_groups import HEARTBEAT_MS, SESSION_MS, group_consumer

TP = TopicPartition


def consumer(bootstrap: str, **extra: object) -> KafkaConsumer:
    return KafkaConsumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                          "fetch.max.wait.ms": 100, "retry.backoff.ms": 50, "session.timeout.ms": SESSION_MS,
                          "heartbeat.interval.ms": HEARTBEAT_MS, **extra})


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1, **extra: object) -> None:
    with KafkaProducer({"bootstrap.servers": bootstrap, "linger.ms": 5, **extra}) as p:
        for i in range(count):
            p.send(topic, b"%d-%06d" % (i % partitions, i), partition=i % partitions, timestamp=1_000_000 + i)
        p.flush(10)


def read(c: KafkaConsumer, count: int, timeout: float = 15.0) -> list[Any]:
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out.extend(c.poll(0.2))
    assert len(out) >= count, f"read {len(out)} of {count}"
    return out


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", set(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", set(lost)))


class Member(threading.Thread):
    """One of our consumers in a group, polling in its own thread until stopped (then closing)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str] | re.Pattern[str], **extra: object) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer(bootstrap, **{"group.id": group, **extra})
        self.topics = topics
        self.listener = Recorder()
        self.records: list[tuple[str, int, int]] = []
        self.assigned: set[TopicPartition] = set()
        self.stop_flag = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.consumer.subscribe(self.topics, self.listener)
            while not self.stop_flag.is_set():
                for record in self.consumer.poll(0.1):
                    self.records.append((record.topic, record.partition, record.offset))
                self.assigned = self.consumer.assignment()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc
        finally:
            self.consumer.close(10)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(20)
        assert not self.is_alive()
        if self.error:
            raise self.error


def wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout}s")


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_reads_confluent_records_of_every_codec(shared_broker: BrokerProcess, codec: str) -> None:
    bootstrap = shared_broker.bootstrap
    topic = f"c-codec-{codec}"
    create_topic(bootstrap, topic)
    rd = Producer(producer_config(bootstrap, **{"compression.type": codec}))
    for i in range(400):
        rd.produce(topic, b"value-%d " % i + b"z" * 50, key=None if i % 7 == 0 else b"key-%d" % i, partition=0,
                   timestamp=1_600_000_000_000 + i, headers=[("n", b"%d" % i), ("empty", None)] if i % 3 == 0 else None)
    assert rd.flush(10) == 0
    wanted = {"none": codecs.NONE, "gzip": codecs.GZIP, "snappy": codecs.SNAPPY, "lz4": codecs.LZ4,
              "zstd": codecs.ZSTD}[codec]
    assert {b.info.compression for b in stored_batches(shared_broker.data_dir, topic)} == {wanted}
    c = consumer(bootstrap)
    try:
        c.assign([TP(topic, 0)])
        records = read(c, 400)
    finally:
        c.close()
    assert [r.offset for r in records] == list(range(400))
    for i, r in enumerate(records):
        assert r.value == b"value-%d " % i + b"z" * 50
        assert r.key == (None if i % 7 == 0 else b"key-%d" % i)
        assert r.timestamp == 1_600_000_000_000 + i
        assert r.headers == ((("n", b"%d" % i), ("empty", None)) if i % 3 == 0 else ())


def test_positions_seeks_and_offset_lookups(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-seek", 1)
    produce(bootstrap, "c-seek", 100)
    tp = TP("c-seek", 0)
    c = consumer(bootstrap, **{"max.poll.records": 7})
    try:
        with pytest.raises(IllegalStateError):
            c.poll(0)
        c.assign([tp])
        assert c.beginning_offsets([tp]) == {tp: 0} and c.end_offsets([tp]) == {tp: 100}
        assert c.position(tp) == 0
        batch = read(c, 1)
        assert 1 <= len(batch) <= 7 and batch[0].offset == 0
        found = c.offsets_for_times({tp: 1_000_042})[tp]
        assert found is not None and (found.offset, found.timestamp) == (42, 1_000_042)
        assert c.offsets_for_times({tp: 9_999_999})[tp] is None
        c.seek(tp, 90)
        assert [r.offset for r in read(c, 10)][:10] == list(range(90, 100))
        assert c.position(tp) == 100
        c.seek_to_beginning([tp])
        assert c.position(tp) == 0
        c.seek_to_end()
        assert c.position(tp) == 100
        c.seek(tp, 50)
        c.pause([tp])
        assert c.paused() == {tp}
        assert not c.poll(0.3)
        c.resume([tp])
        assert read(c, 1)[0].offset == 50
    finally:
        c.close()


def test_reset_latest_reads_only_new_records(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-latest", 1)
    produce(bootstrap, "c-latest", 10)
    c = consumer(bootstrap, **{"auto.offset.reset": "latest"})
    try:
        c.assign([TP("c-latest", 0)])
        assert not c.poll(0.3)
        produce(bootstrap, "c-latest", 3)
        assert [r.offset for r in read(c, 3)] == [10, 11, 12]
    finally:
        c.close()


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_two_members_share_partitions_and_hear_rebalances(shared_broker: BrokerProcess, strategy: str) -> None:
    bootstrap = shared_broker.bootstrap
    topic = f"c-group-{strategy}"
    create_topic(bootstrap, topic, 6)
    produce(bootstrap, topic, 600, partitions=6)
    group = f"g-{strategy}"
    first = Member(bootstrap, group, [topic], **{"partition.assignment.strategy": strategy,
                                                 "auto.commit.interval.ms": 100})
    try:
        wait_for(lambda: len(first.assigned) == 6 and len(first.records) == 600, what="first member reads all")
        second = Member(bootstrap, group, [topic], **{"partition.assignment.strategy": strategy})
        try:
            wait_for(lambda: len(first.assigned) == 3 and len(second.assigned) == 3, what="3 + 3")
            assert not first.assigned & second.assigned
            produce(bootstrap, topic, 600, partitions=6)
            wait_for(lambda: len(first.records) + len(second.records) >= 1200, what="second round read")
            time.sleep(0.3)
        finally:
            second.stop()
    finally:
        first.stop()
    everything = first.records + second.records
    assert len(everything) == len(set(everything)) == 1200  # committed before revocation: no re-reads
    kinds = [kind for kind, _ in first.listener.events]
    if strategy == "cooperative-sticky":
        # KIP-429: the first member only ever gives up what moves, and keeps reading the rest.
        revoked = [parts for kind, parts in first.listener.events if kind == "revoked"]
        assert revoked[0] and len(revoked[0]) == 3
        assert first.listener.events[0] == ("assigned", {TP(topic, p) for p in range(6)})
    else:
        assert kinds[:3] == ["assigned", "revoked", "assigned"]
        assert first.listener.events[1][1] == {TP(topic, p) for p in range(6)}  # eager: everything revoked


def test_mixed_group_with_a_confluent_consumer(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-mixed", 4)
    produce(bootstrap, "c-mixed", 400, partitions=4)
    ours = Member(bootstrap, "g-mixed", ["c-mixed"], **{"partition.assignment.strategy": "range",
                                                       "enable.auto.commit": False})
    theirs = group_consumer(bootstrap, "g-mixed", **{"partition.assignment.strategy": "range"})
    theirs.subscribe(["c-mixed"])
    their_records: list[tuple[int, int]] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = theirs.poll(0.05)
            if msg is not None and not msg.error():
                their_records.append((msg.partition(), msg.offset()))
            their_parts = {tp.partition for tp in theirs.assignment()}
            our_parts = {tp.partition for tp in ours.assigned}
            if len(their_parts) == 2 and len(our_parts) == 2 and not their_parts & our_parts:
                break
        assert len({tp.partition for tp in theirs.assignment()}) == 2
        their_parts = {tp.partition for tp in theirs.assignment()}
        our_parts = {tp.partition for tp in ours.assigned}
        assert their_parts | our_parts == {0, 1, 2, 3}
        # Whoever leads, range gives the member with the lower member id partitions 0-1.
        assert our_parts in ({0, 1}, {2, 3})
        while time.monotonic() < deadline:
            msg = theirs.poll(0.05)
            if msg is not None and not msg.error():
                their_records.append((msg.partition(), msg.offset()))
            if {p for p, _ in their_records} >= their_parts and \
                    sum(1 for _, p, _ in ours.records if p in our_parts) >= 200:
                break
    finally:
        ours.stop()
        theirs.close()
    assert {p for _, p, _ in ours.records if p in our_parts} == our_parts


def test_commit_then_resume_has_no_gap_and_no_duplicate(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-resume", 2)
    produce(bootstrap, "c-resume", 200, partitions=2)
    seen: list[tuple[int, int]] = []
    c = consumer(bootstrap, **{"group.id": "g-resume", "enable.auto.commit": False, "max.poll.records": 30})
    try:
        c.subscribe(["c-resume"])
        while len(seen) < 90:
            seen += [(r.partition, r.offset) for r in c.poll(0.5)]
        c.commit_sync()
        committed = c.committed([TP("c-resume", 0), TP("c-resume", 1)])
        assert sum(om.offset for om in committed.values() if om) == len(seen)
    finally:
        c.close()
    c2 = consumer(bootstrap, **{"group.id": "g-resume", "enable.auto.commit": False})
    try:
        c2.subscribe(["c-resume"])
        deadline = time.monotonic() + 15
        while len(seen) < 200 and time.monotonic() < deadline:
            seen += [(r.partition, r.offset) for r in c2.poll(0.2)]
        done: list[Any] = []
        c2.commit_async(callback=lambda offsets, exc: done.append((offsets, exc)))
        wait_for(lambda: c2.poll(0.05) is not None and bool(done), what="async commit callback")
        assert done[0][1] is None and done[0][0][TP("c-resume", 0)] == OffsetAndMetadata(100, "", -1)
    finally:
        c2.close()
    assert sorted(seen) == [(p, o) for p in range(2) for o in range(100)]


def test_auto_commit_and_close_commit_consumed_positions(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-auto", 1)
    produce(bootstrap, "c-auto", 50)
    c = consumer(bootstrap, **{"group.id": "g-auto", "auto.commit.interval.ms": 100})
    try:
        c.subscribe(["c-auto"])
        read(c, 50)
        wait_for(lambda: (c.poll(0.05), c.committed([TP("c-auto", 0)])[TP("c-auto", 0)])[1] is not None,
                 what="auto-commit")
    finally:
        c.close()
    checker = consumer(bootstrap, **{"group.id": "g-auto"})
    try:
        assert checker.committed([TP("c-auto", 0)])[TP("c-auto", 0)].offset == 50  # type: ignore[union-attr]
    finally:
        checker.close()


def test_close_final_commit_is_not_overwritten_by_queued_auto_commits(shared_broker: BrokerProcess) -> None:
    """Auto-commits still queued at close() (older positions) go out before its final commit, never after."""
    bootstrap = shared_broker.bootstrap
    tp = TP("c-close-order", 0)
    create_topic(bootstrap, tp.topic, 1)
    c = consumer(bootstrap, **{"group.id": "g-close-order", "auto.commit.interval.ms": 0, "max.poll.records": 1})
    coordinator = c._coordinator
    assert coordinator is not None
    send_queued = coordinator._send_async_commits

    def not_from_the_heartbeat_thread(**kwargs: Any) -> None:
        # Hold the async commits back (as under load) so they are still queued when close() runs.
        if threading.current_thread() is not coordinator._heartbeat:
            send_queued(**kwargs)

    coordinator._send_async_commits = not_from_the_heartbeat_thread  # type: ignore[method-assign]
    try:
        c.subscribe([tp.topic])
        wait_for(lambda: c.poll(0.05) is not None and bool(c.assignment()), what="assignment")
        assert c.position(tp) == 0
        produce(bootstrap, tp.topic, 3)
        assert [r.offset for r in read(c, 3)] == [0, 1, 2]  # each poll queued an auto-commit of an older position
        queued = [offsets[tp].offset for offsets, _ in coordinator._async_commits]
        assert queued and max(queued) < 3
    finally:
        c.close()
    assert not coordinator._async_commits
    checker = consumer(bootstrap, **{"group.id": "g-close-order"})
    try:
        assert checker.committed([tp])[tp] == OffsetAndMetadata(3, "", -1)
    finally:
        checker.close()


def test_close_leaves_the_group_so_others_take_over_at_once(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-leave", 4)
    slow_session = {"session.timeout.ms": 30000, "heartbeat.interval.ms": 500}
    a = Member(bootstrap, "g-leave", ["c-leave"], **slow_session)
    b = Member(bootstrap, "g-leave", ["c-leave"], **slow_session)
    try:
        wait_for(lambda: len(a.assigned) == 2 and len(b.assigned) == 2, what="2 + 2")
        started = time.monotonic()
        b.stop()
        wait_for(lambda: len(a.assigned) == 4, timeout=10, what="take-over")
        assert time.monotonic() - started < 10  # far below the 30 s session timeout
        assert ("revoked", {TP("c-leave", p) for p in range(4)} & b.listener.events[-1][1]) == b.listener.events[-1]
    finally:
        a.stop()


def test_pattern_subscription_follows_new_topics(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-pat-a", 1)
    produce(bootstrap, "c-pat-a", 5)
    member = Member(bootstrap, "g-pattern", re.compile(r"c-pat-.*"), **{"metadata.max.age.ms": 300})
    try:
        wait_for(lambda: len(member.records) == 5, what="first topic read")
        create_topic(bootstrap, "c-pat-b", 1)
        produce(bootstrap, "c-pat-b", 5)
        wait_for(lambda: TP("c-pat-b", 0) in member.assigned and len(member.records) == 10, what="new topic read")
    finally:
        member.stop()


def _transactional(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5,
                         "transaction.timeout.ms": 30000, **FAST_CLIENT})
    producer.init_transactions(15)
    return producer


def test_read_committed_skips_aborted_transactions(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "c-txn", 1)
    txn = _transactional(bootstrap, "c-txn-producer")
    plain = Producer(producer_config(bootstrap))
    for round_number, commit in enumerate([True, False, True, False, True]):
        txn.begin_transaction()
        for i in range(5):
            txn.produce("c-txn", b"txn-%d-%d" % (round_number, i), partition=0)
        plain.produce("c-txn", b"plain-%d" % round_number, partition=0)
        plain.flush(10)
        txn.flush(10)  # librdkafka drops unsent records on abort; these must reach the log first
        (txn.commit_transaction if commit else txn.abort_transaction)(15)
    txn.begin_transaction()
    txn.produce("c-txn", b"open", partition=0)
    txn.flush(10)  # an open transaction: read_committed stops at its first offset
    tp = TP("c-txn", 0)
    committed = consumer(bootstrap, **{"isolation.level": "read_committed"})
    uncommitted = consumer(bootstrap)
    try:
        committed.assign([tp])
        uncommitted.assign([tp])
        everything = [r.value for r in read(uncommitted, 31)]
        assert len(everything) == 31 and b"open" in everything
        visible = [r.value for r in read(committed, 20)]
        time.sleep(0.3)
        visible += [r.value for r in committed.poll(0.3)]
        assert visible == [v for v in everything if not v.startswith((b"txn-1-", b"txn-3-")) and v != b"open"]
        assert committed.end_offsets([tp])[tp] < uncommitted.end_offsets([tp])[tp]
        txn.commit_transaction(15)
        assert [r.value for r in read(committed, 1)] == [b"open"]
    finally:
        committed.close()
        uncommitted.close()
