"""Consumer groups with kafka-python and aiokafka, and a group mixing librdkafka and kafka-python members.

Both Python clients implement the group protocol (and their assignors) themselves, independently of
librdkafka: agreeing with all three is what "any Kafka client works" means for the coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Producer
from kafka import KafkaConsumer
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import KafkaError
from kafka.structs import TopicPartition as KpTopicPartition

from testkit.clients import create_topic, producer_config, wait_until
from tests.integration._support_groups import HEARTBEAT_MS, SESSION_MS, balanced, group_consumer, owned


def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(10) == 0


# kafka-python heartbeats from a Python thread that competes for the GIL with its own poll loop; a
# longer session keeps a busy CI machine from expiring a member that is merely slow.
PYTHON_SESSION_MS = 2 * SESSION_MS


def kafka_python_member(bootstrap: str, topic: str, group: str, **extra: object) -> KafkaConsumer:
    """A kafka-python group member that knows the topic's partitions before it first joins.

    Without that, its first assignment is empty and the leader rejoins as soon as metadata arrives;
    kafka-python 3.0 can pipeline that JoinGroup before it has handled its own SyncGroup reply and then
    never resumes heartbeating (seen with every request answered in order by the broker).
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
        session_timeout_ms=PYTHON_SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS, request_timeout_ms=15000,
        fetch_max_wait_ms=100, **extra,
    )
    assert consumer.partitions_for_topic(topic), f"no metadata for {topic}"
    consumer.subscribe([topic])
    return consumer


def kp_owned(consumer: KafkaConsumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


class KafkaPythonMember(threading.Thread):
    """A kafka-python consumer polling in its own thread.

    kafka-python rejoins a group inside `poll()` and blocks there until the rebalance completes, so
    two members driven from one thread would wait on each other; real applications run one per thread.
    """

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.consumer = kafka_python_member(bootstrap, topic, group)
        self.values: list[int] = []
        self.owned: set[int] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for records in self.consumer.poll(timeout_ms=100).values():
                self.values += [int(r.value) for r in records]
            self.owned = kp_owned(self.consumer)
            if self.values:
                with contextlib.suppress(KafkaError):  # CommitFailed / RebalanceInProgress mid-rebalance: retry
                    self.consumer.commit()

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)
        self.consumer.close()


def test_kafka_python_group_shares_partitions_and_commits(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "gp-kafka-python", "grp-kafka-python"
    create_topic(bootstrap, topic, partitions=4)
    produce(bootstrap, topic, 40, 4)
    first = KafkaPythonMember(bootstrap, topic, group)
    first.start()
    members = [first]
    try:
        assert wait_until(lambda: len(set(first.values)) == 40 and first.owned == set(range(4)), timeout=30), \
            (sorted(first.owned), len(first.values))
        members.append(KafkaPythonMember(bootstrap, topic, group))
        members[1].start()
        assert wait_until(lambda: balanced([m.owned for m in members], set(range(4))), timeout=30), \
            [(sorted(m.owned), len(m.values), m.is_alive()) for m in members]
    finally:
        for member in members:
            member.stop()
    # The newcomer resumes from the first member's commits: nothing was left for it to read again.
    assert members[1].values == []
    checker = kafka_python_member(bootstrap, topic, group)
    try:
        assert {p: checker.committed(KpTopicPartition(topic, p)) for p in range(4)} == dict.fromkeys(range(4), 10)
    finally:
        checker.close()


def test_aiokafka_group_rebalances_and_commits(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "gp-aiokafka", "grp-aiokafka"
    create_topic(bootstrap, topic, partitions=4)
    produce(bootstrap, topic, 20, 4)

    def member() -> AIOKafkaConsumer:
        return AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                enable_auto_commit=False, session_timeout_ms=PYTHON_SESSION_MS,
                                heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=100)

    async def scenario() -> None:
        first, second = member(), member()
        await first.start()
        try:
            got: list[int] = []
            while len(got) < 20:
                for records in (await first.getmany(timeout_ms=200)).values():
                    got += [int(r.value) for r in records]
            assert sorted(got) == list(range(20))
            await first.commit()
            await second.start()
            try:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    await asyncio.gather(first.getmany(timeout_ms=100), second.getmany(timeout_ms=100))
                    owned_sets = [{tp.partition for tp in c.assignment()} for c in (first, second)]
                    if balanced(owned_sets, set(range(4))):
                        break
                assert balanced(owned_sets, set(range(4)))
                # The newcomer resumes from the commit: nothing left to read.
                assert await second.getmany(timeout_ms=300) == {}
                for p in range(4):
                    assert await second.committed(AioTopicPartition(topic, p)) == 5
            finally:
                await second.stop()
        finally:
            await first.stop()

    asyncio.run(scenario())


def test_mixed_confluent_and_kafka_python_group_with_range(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "gp-mixed", "grp-mixed"
    create_topic(bootstrap, topic, partitions=6)
    native = group_consumer(bootstrap, group, **{"partition.assignment.strategy": "range"})
    native.subscribe([topic])
    python = kafka_python_member(bootstrap, topic, group, partition_assignment_strategy=[RangePartitionAssignor])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            native.poll(0.05)
            python.poll(timeout_ms=50)
            if balanced([owned(native), kp_owned(python)], set(range(6))):
                break
        assert balanced([owned(native), kp_owned(python)], set(range(6)))
        assert len(owned(native)) == len(kp_owned(python)) == 3  # range: contiguous halves
    finally:
        native.close()
        python.close()
