"""KIP-848 consumer groups (`group.protocol=consumer`) with librdkafka as the judge.

The server assigns: members only heartbeat their subscription and what they own. These tests check
that partitions are split between members, move safely when members join and leave (never owned by
two at once), that offsets commit under the member epoch and are resumed from, and that the group
shows up to the admin APIs as a consumer group.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from kio.schema.consumer_group_heartbeat.v0.request import ConsumerGroupHeartbeatRequest
from kio.schema.errors import ErrorCode

from deploy.processes.broker import BrokerProcess
from testkit.clients import create_topic
from testkit.raw_kafka import RawKafka

PARTITIONS = 6


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory: pytest.TempPathFactory):
    proc = BrokerProcess(tmp_path_factory.mktemp("kip848") / "data", {
        "group.consumer.heartbeat.interval.ms": "300",
        "group.consumer.session.timeout.ms": "6000",
    }).start()
    try:
        yield proc
    finally:
        proc.stop()


def _member(bootstrap: str, group: str, topic: str, **extra: object) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                        "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})
    consumer.subscribe([topic])
    return consumer


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode(), partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def _poll_until(members: list[Consumer], done: Callable[[], bool], seen: dict, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for member in members:
            message = member.poll(0.05)
            if message is not None and message.error() is None:
                key = (message.partition(), message.offset())
                assert key not in seen, f"{key} delivered twice"
                seen[key] = member


def _owned(member: Consumer) -> set[int]:
    return {tp.partition for tp in member.assignment()}


def test_two_members_split_the_partitions_and_hand_them_back(kip848_broker: BrokerProcess) -> None:
    bootstrap, topic = kip848_broker.bootstrap, "kip848-split"
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, 60)
    first = _member(bootstrap, "kip848-split-g", topic)
    second = _member(bootstrap, "kip848-split-g", topic)
    seen: dict = {}
    try:
        _poll_until([first, second], lambda: len(seen) == 60 and len(_owned(first)) == len(_owned(second)) == 3,
                    seen)
        assert _owned(first).isdisjoint(_owned(second))
        assert _owned(first) | _owned(second) == set(range(PARTITIONS))
        second.close()
        _poll_until([first], lambda: _owned(first) == set(range(PARTITIONS)), seen)
    finally:
        first.close()


def test_commit_under_the_member_epoch_and_resume(kip848_broker: BrokerProcess) -> None:
    bootstrap, topic, group = kip848_broker.bootstrap, "kip848-commit", "kip848-commit-g"
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, 30)
    member = _member(bootstrap, group, topic)
    seen: dict = {}
    try:
        _poll_until([member], lambda: len(seen) == 30, seen)
        member.commit(asynchronous=False)
    finally:
        member.close()
    _produce(bootstrap, topic, 12)
    again = _member(bootstrap, group, topic)
    resumed: dict = {}
    try:
        _poll_until([again], lambda: len(resumed) == 12, resumed)
        time.sleep(0.5)
        assert again.poll(0.5) is None  # nothing already committed is redelivered
        assert sorted(resumed) == sorted((p, o) for p in range(PARTITIONS) for o in (5, 6))
    finally:
        again.close()


def test_group_is_listed_and_described_as_a_consumer_group(kip848_broker: BrokerProcess) -> None:
    bootstrap, topic, group = kip848_broker.bootstrap, "kip848-admin", "kip848-admin-g"
    create_topic(bootstrap, topic, PARTITIONS)
    member = _member(bootstrap, group, topic)
    try:
        _poll_until([member], lambda: len(_owned(member)) == PARTITIONS, {})
        admin = AdminClient({"bootstrap.servers": bootstrap})
        listed = admin.list_consumer_groups().result(10)
        [entry] = [g for g in listed.valid if g.group_id == group]
        assert str(entry.type).endswith("CONSUMER")
    finally:
        member.close()


def test_a_consumer_protocol_member_cannot_join_an_active_classic_group(kip848_broker: BrokerProcess) -> None:
    """Kafka has one group namespace: a KIP-848 heartbeat for a classic group with members is refused
    (GROUP_ID_NOT_FOUND, "Group X is not a consumer group."), so the classic member keeps its partitions
    and nothing is delivered twice; only an Empty classic group may become a consumer group."""
    bootstrap, topic, group = kip848_broker.bootstrap, "kip848-classic", "kip848-classic-g"
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, 12)
    classic = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                        "enable.auto.commit": False})
    classic.subscribe([topic])
    seen: dict = {}
    intruder = None
    try:
        _poll_until([classic], lambda: len(seen) == 12, seen)
        intruder = _member(bootstrap, group, topic)
        _produce(bootstrap, topic, 12)
        deadline = time.monotonic() + 6  # many KIP-848 heartbeats (every 300 ms)
        while time.monotonic() < deadline:
            message = intruder.poll(0.1)
            assert message is None or message.error() is not None, "the intruder was given a partition"
            assert _owned(intruder) == set()
            classic.poll(0.1)
        assert _owned(classic) == set(range(PARTITIONS))
        with RawKafka(bootstrap) as raw:
            answer = raw.request(ConsumerGroupHeartbeatRequest(
                group_id=group, member_id="", member_epoch=0, instance_id=None, rack_id=None,
                rebalance_timeout=datetime.timedelta(seconds=30), subscribed_topic_names=(topic,),
                server_assignor=None, topic_partitions=()))
        assert answer.error_code == ErrorCode.group_id_not_found
        assert answer.error_message == f"Group {group} is not a consumer group."
    finally:
        if intruder is not None:
            intruder.close()
        classic.close()
