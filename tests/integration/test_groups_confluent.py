"""Consumer groups with confluent-kafka (librdkafka): rebalances, commits, static members, admin.

One broker serves the module; each test uses its own topic and group id, so tests are independent.
"""

from __future__ import annotations

import datetime
import struct
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode
from kio.schema.join_group.v3.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.sync_group.v3.request import SyncGroupRequest

from testkit.clients import FAST_CLIENT, create_topic, producer_config
from testkit.raw_kafka import RawKafka
from tests.integration._support_groups import SESSION_MS, group_consumer, owned, poll_until, wait_balanced


def produce(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in range(start, start + count):
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(10) == 0


def test_two_then_three_members_rebalance_as_members_join_and_leave(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "g-join-leave", "grp-join-leave"
    create_topic(bootstrap, topic, partitions=6)
    members = [group_consumer(bootstrap, group, **{"client.id": f"m{i}"}) for i in range(3)]
    try:
        members[0].subscribe([topic])
        assert wait_balanced(members[:1], 6) == [set(range(6))]
        members[1].subscribe([topic])
        first, second = wait_balanced(members[:2], 6)
        assert len(first) == len(second) == 3
        members[2].subscribe([topic])
        assert [len(a) for a in wait_balanced(members, 6)] == [2, 2, 2]
        members[1].close()  # LeaveGroup: the others take over its partitions without waiting for a timeout
        started = time.monotonic()
        remaining = [members[0], members[2]]
        assert sorted(len(a) for a in wait_balanced(remaining, 6)) == [3, 3]
        assert time.monotonic() - started < 5
    finally:
        for consumer in (members[0], members[2]):
            consumer.close()


def test_commit_and_resume_with_no_redelivery_and_no_gap(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "g-resume", "grp-resume"
    create_topic(bootstrap, topic, partitions=3)
    produce(bootstrap, topic, 300, 3)
    seen_first: list[int] = []
    first = group_consumer(bootstrap, group)
    first.subscribe([topic])

    def take(consumer, msg) -> None:  # type: ignore[no-untyped-def]
        if len(seen_first) < 120:
            seen_first.append(int(msg.value()))
            consumer.commit(message=msg, asynchronous=False)

    poll_until([first], lambda: len(seen_first) >= 120, on_message=take)
    first.close()  # anything fetched past the last commit is simply not processed

    seen_second: list[int] = []
    second = group_consumer(bootstrap, group)
    second.subscribe([topic])
    poll_until([second], lambda: len(seen_first) + len(seen_second) >= 300,
               on_message=lambda _c, msg: seen_second.append(int(msg.value())))
    time.sleep(0.3)
    poll_until([second], lambda: True, on_message=lambda _c, msg: seen_second.append(int(msg.value())))
    second.close()
    assert not set(seen_first) & set(seen_second), "records delivered twice across the restart"
    assert sorted(seen_first + seen_second) == list(range(300)), "records lost across the restart"


@pytest.mark.slow
def test_silent_member_is_expired_after_its_session_timeout(shared_broker) -> None:  # type: ignore[no-untyped-def]
    """A member that stops heartbeating (a crashed process) loses its partitions after session.timeout.ms."""
    bootstrap, topic, group = shared_broker.bootstrap, "g-expiry", "grp-expiry"
    create_topic(bootstrap, topic, partitions=2)
    with RawKafka(bootstrap) as raw:  # joins and syncs like a consumer, then goes silent
        # ConsumerProtocolSubscription v0: version, [topic], null user data
        subscription = struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", -1)
        joined = raw.request(JoinGroupRequest(
            group_id=group, session_timeout=datetime.timedelta(milliseconds=SESSION_MS),
            rebalance_timeout=datetime.timedelta(seconds=30), member_id="", protocol_type="consumer",
            protocols=(JoinGroupRequestProtocol(name="range", metadata=subscription),)))
        assert joined.error_code == ErrorCode.none
        raw.request(SyncGroupRequest(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                                     assignments=()))
        consumer = group_consumer(bootstrap, group, **{"partition.assignment.strategy": "range"})
        consumer.subscribe([topic])
        started = time.monotonic()
        try:
            wait_balanced([consumer], 2, timeout=SESSION_MS / 1000 + 10)
            waited = time.monotonic() - started
        finally:
            consumer.close()
    assert waited > SESSION_MS / 1000 - 2, "the silent member was dropped before its session timed out"


def test_static_member_restart_keeps_assignment_without_rebalance(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "g-static", "grp-static"
    create_topic(bootstrap, topic, partitions=4)
    events: list[str] = []
    steady = group_consumer(bootstrap, group, **{"group.instance.id": "steady"})
    steady.subscribe([topic], on_assign=lambda *_: events.append("assign"),
                     on_revoke=lambda *_: events.append("revoke"))
    moving = group_consumer(bootstrap, group, **{"group.instance.id": "moving"})
    moving.subscribe([topic])
    before_steady, before_moving = wait_balanced([steady, moving], 4)
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    old_ids = {m.group_instance_id: m.member_id
               for m in admin.describe_consumer_groups([group])[group].result().members}

    moving.close()  # a static member sends no LeaveGroup: its partitions wait for it
    events.clear()
    restarted = group_consumer(bootstrap, group, **{"group.instance.id": "moving"})
    restarted.subscribe([topic])
    poll_until([steady, restarted], lambda: owned(restarted) == before_moving, timeout=15)
    quiet_until = time.monotonic() + 1.5  # three heartbeats: long enough to notice a rebalance
    poll_until([steady, restarted], lambda: time.monotonic() >= quiet_until)
    assert owned(steady) == before_steady
    assert events == [], "the other member saw a rebalance"
    described = admin.describe_consumer_groups([group])[group].result()
    new_ids = {m.group_instance_id: m.member_id for m in described.members}
    assert described.state == ConsumerGroupState.STABLE
    assert new_ids["steady"] == old_ids["steady"] and new_ids["moving"] != old_ids["moving"]
    steady.close()
    restarted.close()


def test_cooperative_sticky_moves_only_what_it_must(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "g-coop", "grp-coop"
    create_topic(bootstrap, topic, partitions=6)
    revoked: list[set[int]] = []
    config = {"partition.assignment.strategy": "cooperative-sticky"}
    first = group_consumer(bootstrap, group, **config)
    first.subscribe([topic], on_revoke=lambda _c, parts: revoked.append({p.partition for p in parts}))
    assert wait_balanced([first], 6) == [set(range(6))]
    second = group_consumer(bootstrap, group, **config)
    second.subscribe([topic])
    kept, moved = wait_balanced([first, second], 6)
    assert len(kept) == len(moved) == 3
    # Incremental: the first member gave up exactly the partitions that moved, never all of them.
    assert revoked and set().union(*revoked) == moved
    first.close()
    second.close()


def test_admin_list_describe_offsets_alter_delete(shared_broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = shared_broker.bootstrap, "g-admin", "grp-admin"
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 10, 2)
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    consumer = group_consumer(bootstrap, group, **{"client.id": "admin-test", "partition.assignment.strategy": "range"})
    consumer.subscribe([topic])
    wait_balanced([consumer], 2)
    consumer.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)

    listed = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result()
    assert group in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group].result()
    assert described.state == ConsumerGroupState.STABLE and described.partition_assignor == "range"
    [member] = described.members
    assert member.client_id == "admin-test" and member.host == "/127.0.0.1"
    assert {tp.partition for tp in member.assignment.topic_partitions} == {0, 1}

    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])]
    offsets = admin.list_consumer_group_offsets(request)[group].result()
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 3), (1, 4)]

    assert _error_code(admin.delete_consumer_groups([group])[group]) == "NON_EMPTY_GROUP"
    # Only an Empty group takes offsets from outside the group (generation -1, no member id).
    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 7)])])[group]
    assert _error_code(altered, partition_level=True) == "UNKNOWN_MEMBER_ID"
    consumer.close()

    assert admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result().valid
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 7)])])[
        group].result()
    offsets = admin.list_consumer_group_offsets(request)[group].result()
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 7), (1, 4)]

    admin.delete_consumer_groups([group])[group].result()
    assert group not in {g.group_id for g in admin.list_consumer_groups().result().valid}
    offsets = admin.list_consumer_group_offsets(request)[group].result()
    assert [tp.offset for tp in offsets.topic_partitions] == [-1001, -1001]
    assert _error_code(admin.delete_consumer_groups([group])[group]) == "GROUP_ID_NOT_FOUND"


def _error_code(future, partition_level: bool = False) -> str:  # type: ignore[no-untyped-def]
    """The Kafka error name a group admin future ended with: raised, or carried on its partitions."""
    try:
        result = future.result()
    except Exception as exc:  # KafkaException wraps the KafkaError
        return exc.args[0].name()
    if partition_level:
        errors = {tp.error.name() for tp in result.topic_partitions if tp.error is not None}
        return errors.pop() if errors else "NONE"
    return "NONE"


def test_kip848_consumer_group_commits_and_is_listed(shared_broker) -> None:  # type: ignore[no-untyped-def]
    """A `group.protocol=consumer` group's offsets go through this coordinator, and it lists as type consumer."""
    bootstrap, topic, group = shared_broker.bootstrap, "g-kip848", "grp-kip848"
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, 10, 2)
    # Session and heartbeat timing are the broker's under KIP-848: the client may not set them.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **FAST_CLIENT})
    consumer.subscribe([topic])
    seen: list[int] = []
    poll_until([consumer], lambda: len(seen) == 10, on_message=lambda _c, m: seen.append(int(m.value())))
    consumer.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    [listed] = [g for g in admin.list_consumer_groups().result().valid if g.group_id == group]
    assert listed.state == ConsumerGroupState.STABLE
    consumer.close()
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0), TopicPartition(topic, 1)])]
    offsets = admin.list_consumer_group_offsets(request)[group].result()
    assert [tp.offset for tp in offsets.topic_partitions] == [5, 5]
    admin.delete_consumer_groups([group])[group].result()
    assert group not in {g.group_id for g in admin.list_consumer_groups().result().valid}
