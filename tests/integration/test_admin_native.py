"""Our AdminClient against a broker process, cross-checked with confluent-kafka (librdkafka).

The tools tests cover the admin client through the command line; these pin the Python API itself:
return shapes, Kafka's error names, routing to coordinators and leaders, and KIP-848 groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CTopicPartition

from bus.client.admin import (
    AdminClient,
    AdminError,
    AlterConfigOp,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    GroupIdNotFoundError,
    InvalidConfigError,
    NewPartitions,
    NewTopic,
    NonEmptyGroupError,
    OffsetSpec,
    TopicAlreadyExistsError,
    TopicPartition,
    UnknownTopicOrPartitionError,
)
from deploy.processes.broker import BrokerProcess
from tests.integration._support_groups import group_consumer, poll_until
from tests.integration._support_tools import unique


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> Iterator[AdminClient]:
    with AdminClient(bootstrap_servers=shared_broker.bootstrap, client_id="native-admin-test") as client:
        yield client


def produce(broker: BrokerProcess, topic: str, partitions: int, per_partition: int, start_ts: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(per_partition):
            kwargs = {"timestamp": start_ts + i} if start_ts else {}
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p, **kwargs)
    assert producer.flush(10) == 0


def test_topic_lifecycle(admin: AdminClient) -> None:
    name = unique("native-topic")
    assert admin.create_topics([NewTopic(name, 2, 1, configs={"retention.ms": "60000"})], validate_only=True) == {
        name: None}
    assert name not in admin.list_topics()  # validate_only created nothing
    admin.create_topics([NewTopic(name, 2, 1, configs={"retention.ms": "60000"})])
    described = admin.describe_topics([name])[name]
    assert [p.partition for p in described.partitions] == [0, 1]
    assert all(p.leader == 1 and p.replicas == [1] and p.isr == [1] for p in described.partitions)
    assert described.topic_id and not described.is_internal and described.replication_factor == 1

    with pytest.raises(TopicAlreadyExistsError) as exists:
        admin.create_topics([NewTopic(name, 1, 1)])
    assert exists.value.name == "TOPIC_ALREADY_EXISTS" and name in exists.value.message

    results = admin.create_topics([NewTopic(name, 1, 1), NewTopic(unique("native-ok"), 1, 1)],
                                  raise_on_error=False)
    assert isinstance(results[name], TopicAlreadyExistsError) and list(results.values())[1] is None

    admin.create_partitions({name: NewPartitions(5)})
    assert len(admin.describe_topics([name])[name].partitions) == 5
    with pytest.raises(AdminError) as shrink:
        admin.create_partitions({name: NewPartitions(3)})
    assert shrink.value.name == "INVALID_PARTITIONS"

    admin.delete_topics([name])
    deadline = time.monotonic() + 10
    while name in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.describe_topics([name])
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([name])


def test_configs(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    name = unique("native-cfg")
    admin.create_topics([NewTopic(name, 1, 1)])
    resource = ConfigResource(ConfigResourceType.TOPIC, name)
    admin.incremental_alter_configs({resource: [AlterConfigOp.set("retention.ms", "120000"),
                                                AlterConfigOp.set("cleanup.policy", "compact")]})
    entries = admin.describe_configs([resource], include_synonyms=True)[resource]
    assert entries["retention.ms"].value == "120000"
    assert entries["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [s.source for s in entries["retention.ms"].synonyms] == [ConfigSource.DYNAMIC_TOPIC_CONFIG,
                                                                    ConfigSource.DEFAULT_CONFIG]
    assert entries["segment.bytes"].is_default

    admin.incremental_alter_configs({resource: [AlterConfigOp.delete("retention.ms")]})
    assert admin.describe_configs([resource])[resource]["retention.ms"].is_default
    with pytest.raises(InvalidConfigError):
        admin.incremental_alter_configs({resource: [AlterConfigOp.set("retention.ms", "never")]})

    broker = ConfigResource(ConfigResourceType.BROKER, "1")
    log_dirs = admin.describe_configs([broker])[broker]["log.dirs"]
    assert log_dirs.source is ConfigSource.STATIC_BROKER_CONFIG and log_dirs.value == str(shared_broker.data_dir)


def test_offsets_and_delete_records(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    name = unique("native-offsets")
    admin.create_topics([NewTopic(name, 2, 1)])
    base = 1_700_000_000_000
    produce(shared_broker, name, 2, 10, start_ts=base)
    tps = admin.partitions_for([name])
    assert tps == [TopicPartition(name, 0), TopicPartition(name, 1)]
    assert {tp: i.offset for tp, i in admin.list_offsets({tp: OffsetSpec.EARLIEST for tp in tps}).items()} == {
        tp: 0 for tp in tps}
    assert {tp: i.offset for tp, i in admin.list_offsets({tp: OffsetSpec.LATEST for tp in tps}).items()} == {
        tp: 10 for tp in tps}
    by_time = admin.list_offsets({tp: base + 4 for tp in tps})
    assert all(i.offset == 4 and i.timestamp == base + 4 for i in by_time.values())
    assert all(i.offset == -1 for i in admin.list_offsets({tp: base + 99 for tp in tps}).values())
    newest = admin.list_offsets({tps[0]: OffsetSpec.MAX_TIMESTAMP})[tps[0]]
    assert (newest.offset, newest.timestamp) == (9, base + 9)

    assert admin.delete_records({tps[0]: 6}) == {tps[0]: 6}
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "watermarks"})
    try:
        assert consumer.get_watermark_offsets(CTopicPartition(name, 0), timeout=10) == (6, 10)
    finally:
        consumer.close()
    with pytest.raises(AdminError) as beyond:
        admin.delete_records({tps[1]: 50})
    assert beyond.value.name == "OFFSET_OUT_OF_RANGE"
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.list_offsets({TopicPartition(name, 7): OffsetSpec.LATEST})


def test_classic_group(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    name = unique("native-classic")
    admin.create_topics([NewTopic(name, 3, 1)])
    produce(shared_broker, name, 3, 4)
    group = unique("native-group")
    consumer = group_consumer(shared_broker.bootstrap, group, **{"client.id": "native-member"})
    consumer.subscribe([name])
    seen: list[bytes] = []
    try:
        poll_until([consumer], lambda: len(seen) == 12, on_message=lambda _c, m: seen.append(m.value()))
        consumer.commit(asynchronous=False)

        assert group in [g.group_id for g in admin.list_consumer_groups(states=["Stable"])]
        described = admin.describe_consumer_groups([group])[group]
        assert (described.type, described.state, described.partition_assignor) == ("classic", "Stable", "range")
        assert described.coordinator.node_id == 1
        (member,) = described.members
        assert member.client_id == "native-member"
        assert sorted(member.assignment) == [TopicPartition(name, p) for p in range(3)]

        lag = admin.list_consumer_group_lag(group)
        assert {tp: (v.committed, v.log_end, v.lag) for tp, v in lag.items()} == {
            TopicPartition(name, p): (4, 4, 0) for p in range(3)}

        # An outsider cannot commit into (or delete) a live group.
        with pytest.raises(AdminError) as live:
            admin.alter_consumer_group_offsets(group, {TopicPartition(name, 0): 0})
        assert live.value.name in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION")
        with pytest.raises(NonEmptyGroupError):
            admin.delete_consumer_groups([group])
    finally:
        consumer.close()

    assert admin.describe_consumer_groups([group])[group].state == "Empty"
    admin.alter_consumer_group_offsets(group, {TopicPartition(name, 0): 1, TopicPartition(name, 2): 3})
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp: om.offset for tp, om in offsets.items()} == {
        TopicPartition(name, 0): 1, TopicPartition(name, 1): 4, TopicPartition(name, 2): 3}
    assert admin.list_consumer_group_offsets(group, [TopicPartition(name, 1)]) == {
        TopicPartition(name, 1): offsets[TopicPartition(name, 1)]}
    assert admin.delete_consumer_group_offsets(group, [TopicPartition(name, 2)]) == {TopicPartition(name, 2): None}
    assert TopicPartition(name, 2) not in admin.list_consumer_group_offsets(group)

    assert admin.delete_consumer_groups([group]) == {group: None}
    assert admin.describe_consumer_groups([group])[group].state == "Dead"
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_consumer_groups([group])


def test_kip848_group(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    name = unique("native-848")
    admin.create_topics([NewTopic(name, 2, 1)])
    group = unique("native-848-group")
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group,
                         "group.protocol": "consumer", "client.id": "native-848", "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    try:
        poll_until([consumer], lambda: len(consumer.assignment()) == 2)
        listing = {g.group_id: g for g in admin.list_consumer_groups(types=["consumer"])}
        assert listing[group].type == "consumer"
        described = admin.describe_consumer_groups([group])[group]
        assert described.type == "consumer" and described.state == "Stable"
        assert described.group_epoch is not None and described.target_assignment_epoch is not None
        (member,) = described.members
        assert member.client_id == "native-848" and member.member_epoch is not None
        assert member.assignment == member.target_assignment == [TopicPartition(name, 0), TopicPartition(name, 1)]
    finally:
        consumer.close()


def test_missing_group_and_topic_errors(admin: AdminClient) -> None:
    group = unique("native-none")
    assert admin.describe_consumer_groups([group])[group].state == "Dead"
    assert admin.list_consumer_group_offsets(group) == {}
    results = admin.delete_consumer_groups([group], raise_on_error=False)
    assert isinstance(results[group], GroupIdNotFoundError) and results[group].name == "GROUP_ID_NOT_FOUND"
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.partitions_for([unique("native-no-topic")])
