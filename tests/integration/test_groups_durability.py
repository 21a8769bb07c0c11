"""Committed offsets and group membership survive kill -9: they live in `__consumer_offsets`.

The broker appends every commit to its `__consumer_offsets` partition before acknowledging it, and
rebuilds groups at start-up by replaying those partitions, so a crash loses nothing acknowledged.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from testkit.clients import FAST_CLIENT, create_topic, producer_config
from tests.integration._support_groups import group_consumer, owned, poll_until, wait_balanced


def produce(bootstrap: str, topic: str, values: range, partitions: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in values:
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(10) == 0


def test_offsets_topic_is_compacted_with_fifty_partitions(broker) -> None:  # type: ignore[no-untyped-def]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # default timeouts: a loaded CI box is slow
    topic = admin.list_topics(timeout=30).topics["__consumer_offsets"]
    assert len(topic.partitions) == 50
    resource = ConfigResource(ConfigResource.Type.TOPIC, "__consumer_offsets")
    configs = admin.describe_configs([resource], request_timeout=30)[resource].result(timeout=40)
    assert configs["cleanup.policy"].value == "compact"


def test_committed_offsets_survive_kill_and_restart(broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic = broker.bootstrap, "dur-offsets"
    create_topic(bootstrap, topic, partitions=2)
    produce(bootstrap, topic, range(20), 2)
    consumer = group_consumer(bootstrap, "dur-closed")
    consumer.subscribe([topic])
    seen: list[int] = []
    poll_until([consumer], lambda: len(seen) == 20, on_message=lambda _c, m: seen.append(int(m.value())))
    consumer.commit(asynchronous=False)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    request = [ConsumerGroupTopicPartitions("dur-admin", [TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 6)])]
    admin.alter_consumer_group_offsets(request)["dur-admin"].result()  # a standalone group's commit

    broker.kill()
    broker.start()

    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    wanted = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    for group, expected in (("dur-closed", [10, 10]), ("dur-admin", [4, 6])):
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, wanted)])[group].result()
        assert [tp.offset for tp in result.topic_partitions] == expected, group
    described = admin.describe_consumer_groups(["dur-closed"])["dur-closed"].result()
    assert described.state == ConsumerGroupState.EMPTY

    produce(bootstrap, topic, range(20, 30), 2)
    resumed = group_consumer(bootstrap, "dur-closed")
    resumed.subscribe([topic])
    after: list[int] = []
    poll_until([resumed], lambda: len(after) == 10, on_message=lambda _c, m: after.append(int(m.value())))
    resumed.close()
    assert sorted(after) == list(range(20, 30))  # no redelivery of 0-19, nothing skipped


def test_live_member_keeps_its_assignment_across_a_broker_crash(broker) -> None:  # type: ignore[no-untyped-def]
    bootstrap, topic, group = broker.bootstrap, "dur-live", "dur-live-group"
    create_topic(bootstrap, topic, partitions=3)
    revoked: list[int] = []
    consumer = group_consumer(bootstrap, group)
    consumer.subscribe([topic], on_revoke=lambda _c, parts: revoked.append(len(parts)))
    assert wait_balanced([consumer], 3) == [{0, 1, 2}]

    broker.kill()  # well within the 6 s session timeout: the reloaded group still has this member
    broker.start()

    produce(bootstrap, topic, range(9), 3)
    seen: list[int] = []
    poll_until([consumer], lambda: len(seen) == 9, timeout=20, on_message=lambda _c, m: seen.append(int(m.value())))
    assert owned(consumer) == {0, 1, 2} and revoked == []
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    assert admin.describe_consumer_groups([group])[group].result().state == ConsumerGroupState.STABLE
    consumer.close()
