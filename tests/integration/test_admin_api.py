"""Admin APIs against a real broker process, judged by confluent-kafka's AdminClient (librdkafka) and kcat.

All tests share one broker and each uses its own topic names, so they run in parallel.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from bus.config.broker import DYNAMIC_BROKER_KEYS
from deploy.processes.broker import BrokerProcess

TIMEOUT = 10.0


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": shared_broker.bootstrap})


@pytest.fixture
def topic(admin: AdminClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh topic name for this test, deleted afterwards if the test created it."""
    name = f"admin-{request.node.name[:40].strip('[]').replace('[', '-')}-{uuid.uuid4().hex[:6]}"
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)
    yield name
    if name in admin.list_topics(timeout=TIMEOUT).topics:
        admin.delete_topics([name])[name].result(TIMEOUT)


def error_code(future: Future[Any]) -> int:
    """The Kafka error code a failed admin future carries (fails the test if it succeeded)."""
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    return info.value.args[0].code()


def create(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> dict[str, Future[Any]]:
    return admin.create_topics(list(topics), validate_only=validate_only, operation_timeout=TIMEOUT)


def partitions_of(admin: AdminClient, name: str) -> int:
    return len(admin.list_topics(name, timeout=TIMEOUT).topics[name].partitions)


def describe_topic(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("topic", name)
    return admin.describe_configs([resource])[resource].result(TIMEOUT)


def kcat_metadata(bootstrap: str, name: str) -> dict[str, Any]:
    out = subprocess.run(["kcat", "-L", "-b", bootstrap, "-t", name, "-J"], capture_output=True, text=True,
                         timeout=TIMEOUT, check=True)
    return json.loads(out.stdout)


# -- CreateTopics -----------------------------------------------------------------------------------


def test_create_topic_with_configs_is_visible_to_kcat(admin: AdminClient, shared_broker: BrokerProcess,
                                                       topic: str) -> None:
    create(admin, NewTopic(topic, num_partitions=3, replication_factor=1,
                           config={"retention.ms": "3600000", "cleanup.policy": "compact"}))[topic].result(TIMEOUT)
    metadata = kcat_metadata(shared_broker.bootstrap, topic)
    (described,) = [t for t in metadata["topics"] if t["topic"] == topic]
    assert sorted(p["partition"] for p in described["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 1 and [r["id"] for r in p["replicas"]] == [1] for p in described["partitions"])
    configs = describe_topic(admin, topic)
    assert configs["retention.ms"].value == "3600000"
    assert configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value


def test_create_uses_broker_defaults_for_minus_one(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic))[topic].result(TIMEOUT)  # num.partitions=1, default.replication.factor=1
    assert partitions_of(admin, topic) == 1


def test_create_validate_only_creates_nothing(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 2, 1), validate_only=True)[topic].result(TIMEOUT)
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    # ... but still validates
    bad = NewTopic(topic, 2, 1, config={"retention.ms": "soon"})
    assert error_code(create(admin, bad, validate_only=True)[topic]) == KafkaError.INVALID_CONFIG


def test_create_with_replica_assignment(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 4, replica_assignment=[[1], [1], [1], [1]]))[topic].result(TIMEOUT)
    assert partitions_of(admin, topic) == 4


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"num_partitions": 1, "config": {"retention.ms": "not-a-number"}}, KafkaError.INVALID_CONFIG),
        ({"num_partitions": 1, "config": {"no.such.config": "1"}}, KafkaError.INVALID_CONFIG),
        ({"num_partitions": 1, "config": {"cleanup.policy": "shred"}}, KafkaError.INVALID_CONFIG),
        ({"num_partitions": 1, "replication_factor": 3}, KafkaError.INVALID_REPLICATION_FACTOR),
        ({"num_partitions": 0}, KafkaError.INVALID_PARTITIONS),
        ({"num_partitions": 2, "replica_assignment": [[1], [7]]}, KafkaError.INVALID_REPLICA_ASSIGNMENT),
        ({"num_partitions": 1, "replica_assignment": [[1, 1]]}, KafkaError.INVALID_REPLICA_ASSIGNMENT),
    ],
    ids=["bad-value", "unknown-key", "bad-enum", "rf-above-brokers", "zero-partitions", "unknown-broker",
         "duplicate-replica"],
)
def test_create_rejects_invalid_topics(admin: AdminClient, topic: str, kwargs: dict[str, Any],
                                       expected: int) -> None:
    assert error_code(create(admin, NewTopic(topic, **kwargs))[topic]) == expected
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics


def test_create_existing_and_illegal_names(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 1))[topic].result(TIMEOUT)
    assert error_code(create(admin, NewTopic(topic, 1))[topic]) == KafkaError.TOPIC_ALREADY_EXISTS
    illegal = topic + "!*"
    assert error_code(create(admin, NewTopic(illegal, 1))[illegal]) == KafkaError.TOPIC_EXCEPTION


def test_create_reports_each_topic_separately(admin: AdminClient, topic: str) -> None:
    good, bad = topic + "-ok", topic + "-bad"
    try:
        futures = create(admin, NewTopic(good, 1), NewTopic(bad, 1, config={"segment.bytes": "1"}))
        futures[good].result(TIMEOUT)
        assert error_code(futures[bad]) == KafkaError.INVALID_CONFIG
    finally:
        admin.delete_topics([good])[good].result(TIMEOUT)


# -- DeleteTopics -----------------------------------------------------------------------------------


def test_delete_topic(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 2))[topic].result(TIMEOUT)
    admin.delete_topics([topic], operation_timeout=TIMEOUT)[topic].result(TIMEOUT)
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    # the name is free again, with fresh (empty) partitions
    create(admin, NewTopic(topic, 1))[topic].result(TIMEOUT)
    assert partitions_of(admin, topic) == 1


def test_delete_unknown_topic(admin: AdminClient, topic: str) -> None:
    assert error_code(admin.delete_topics([topic])[topic]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_disabled(make_broker: Any) -> None:
    broker = make_broker({"delete.topic.enable": "false"})
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    create(client, NewTopic("kept", 1))["kept"].result(TIMEOUT)
    assert error_code(client.delete_topics(["kept"])["kept"]) == KafkaError.TOPIC_DELETION_DISABLED
    assert "kept" in client.list_topics(timeout=TIMEOUT).topics


# -- CreatePartitions -------------------------------------------------------------------------------


def test_create_partitions(admin: AdminClient, shared_broker: BrokerProcess, topic: str) -> None:
    create(admin, NewTopic(topic, 1))[topic].result(TIMEOUT)
    admin.create_partitions([NewPartitions(topic, 3)], validate_only=True)[topic].result(TIMEOUT)
    assert partitions_of(admin, topic) == 1
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT)
    assert partitions_of(admin, topic) == 3
    admin.create_partitions([NewPartitions(topic, 5, replica_assignment=[[1], [1]])])[topic].result(TIMEOUT)
    described = kcat_metadata(shared_broker.bootstrap, topic)["topics"][0]
    assert len(described["partitions"]) == 5


@pytest.mark.parametrize(
    ("count", "assignment", "expected"),
    [
        (1, None, KafkaError.INVALID_PARTITIONS),  # fewer than now
        (2, None, KafkaError.INVALID_PARTITIONS),  # same as now
        (4, [[1]], KafkaError.INVALID_REPLICA_ASSIGNMENT),  # two new partitions, one assignment
        (3, [[9]], KafkaError.INVALID_REPLICA_ASSIGNMENT),  # unknown broker
    ],
    ids=["fewer", "same", "assignment-count", "unknown-broker"],
)
def test_create_partitions_errors(admin: AdminClient, topic: str, count: int, assignment: Any,
                                  expected: int) -> None:
    create(admin, NewTopic(topic, 2))[topic].result(TIMEOUT)
    extra = {} if assignment is None else {"replica_assignment": assignment}  # librdkafka refuses an explicit None
    grow = NewPartitions(topic, count, **extra)
    future = admin.create_partitions([grow])[topic]
    assert error_code(future) == expected
    assert partitions_of(admin, topic) == 2


def test_create_partitions_unknown_topic(admin: AdminClient, topic: str) -> None:
    future = admin.create_partitions([NewPartitions(topic, 3)])[topic]
    assert error_code(future) == KafkaError.UNKNOWN_TOPIC_OR_PART


# -- DescribeConfigs --------------------------------------------------------------------------------


def test_describe_topic_configs(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 1, config={"retention.ms": "1000"}))[topic].result(TIMEOUT)
    configs = describe_topic(admin, topic)
    retention = configs["retention.ms"]
    assert (retention.value, retention.is_default, retention.is_read_only) == ("1000", False, False)
    assert retention.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].is_default


def test_describe_unknown_topic(admin: AdminClient, topic: str) -> None:
    resource = ConfigResource("topic", topic)
    assert error_code(admin.describe_configs([resource])[resource]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_broker_configs(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    resource = ConfigResource("broker", "1")
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["log.dirs"].value == str(shared_broker.data_dir)
    assert configs["log.dirs"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert configs["num.partitions"].value == "1"
    assert configs["num.partitions"].source == ConfigSource.DEFAULT_CONFIG.value
    # Only the replication throttles change at run time (dynamic broker configs); the rest needs a restart.
    assert {name for name, entry in configs.items() if not entry.is_read_only} == set(DYNAMIC_BROKER_KEYS)
    assert configs["leader.replication.throttled.rate"].source == ConfigSource.DEFAULT_CONFIG.value


# -- AlterConfigs / IncrementalAlterConfigs -----------------------------------------------------------


def test_alter_configs_replaces_all_overrides(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 1, config={"retention.ms": "1000", "segment.ms": "60000"}))[topic].result(TIMEOUT)
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "2000"})
    admin.alter_configs([resource])[resource].result(TIMEOUT)
    configs = describe_topic(admin, topic)
    assert configs["retention.ms"].value == "2000"
    assert configs["segment.ms"].value == "604800000"  # not named: back to the default
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_alter_configs_validate_only_and_errors(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 1))[topic].result(TIMEOUT)
    resource = ConfigResource("topic", topic, set_config={"retention.ms": "2000"})
    admin.alter_configs([resource], validate_only=True)[resource].result(TIMEOUT)
    assert describe_topic(admin, topic)["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    bad = ConfigResource("topic", topic, set_config={"min.insync.replicas": "0"})
    assert error_code(admin.alter_configs([bad])[bad]) == KafkaError.INVALID_CONFIG
    unknown = ConfigResource("topic", topic + "-missing", set_config={"retention.ms": "1"})
    assert error_code(admin.alter_configs([unknown])[unknown]) == KafkaError.UNKNOWN_TOPIC_OR_PART


def _incremental(admin: AdminClient, topic: str, *ops: tuple[str, str | None, AlterConfigOpType],
                 validate_only: bool = False) -> Future[Any]:
    entries = [ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops]
    resource = ConfigResource("topic", topic, incremental_configs=entries)
    return admin.incremental_alter_configs([resource], validate_only=validate_only)[resource]


def test_incremental_alter_configs(admin: AdminClient, topic: str) -> None:
    create(admin, NewTopic(topic, 1, config={"segment.ms": "60000"}))[topic].result(TIMEOUT)
    _incremental(admin, topic, ("retention.ms", "5000", AlterConfigOpType.SET),
                 ("cleanup.policy", "compact", AlterConfigOpType.APPEND)).result(TIMEOUT)
    configs = describe_topic(admin, topic)
    assert configs["retention.ms"].value == "5000"
    assert configs["segment.ms"].value == "60000"  # untouched, unlike AlterConfigs
    assert configs["cleanup.policy"].value == "delete,compact"  # appended to the inherited default

    _incremental(admin, topic, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                 ("segment.ms", None, AlterConfigOpType.DELETE)).result(TIMEOUT)
    configs = describe_topic(admin, topic)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value

    _incremental(admin, topic, ("retention.ms", "1", AlterConfigOpType.SET), validate_only=True).result(TIMEOUT)
    assert describe_topic(admin, topic)["retention.ms"].value == "5000"


@pytest.mark.parametrize(
    "op",
    [
        ("retention.ms", "-7", AlterConfigOpType.SET),  # below -1
        ("no.such.config", "1", AlterConfigOpType.SET),
        ("retention.ms", "1", AlterConfigOpType.APPEND),  # not a list
        ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),  # would leave the policy empty
    ],
    ids=["bad-value", "unknown-key", "append-non-list", "empty-list"],
)
def test_incremental_alter_configs_errors(admin: AdminClient, topic: str, op: Any) -> None:
    create(admin, NewTopic(topic, 1))[topic].result(TIMEOUT)
    # all operations of a resource apply together: the valid SET must not happen either
    future = _incremental(admin, topic, ("segment.ms", "70000", AlterConfigOpType.SET), op)
    assert error_code(future) == KafkaError.INVALID_CONFIG
    assert describe_topic(admin, topic)["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_broker_configs_are_not_alterable(admin: AdminClient) -> None:
    entry = ConfigEntry("log.retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("broker", "1", incremental_configs=[entry])
    assert error_code(admin.incremental_alter_configs([resource])[resource]) == KafkaError.INVALID_REQUEST


# -- DescribeCluster ----------------------------------------------------------------------------------


def test_describe_cluster(admin: AdminClient, shared_broker: BrokerProcess) -> None:
    # librdkafka answers this from Metadata (v10), not DescribeCluster; see test_admin_wire for the latter
    cluster = admin.describe_cluster().result(TIMEOUT)
    assert cluster.cluster_id == admin.list_topics(timeout=TIMEOUT).cluster_id
    assert cluster.controller.id == 1
    assert [(n.id, f"{n.host}:{n.port}") for n in cluster.nodes] == [(1, shared_broker.bootstrap)]


# -- DeleteRecords ------------------------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    assert producer.flush(TIMEOUT) == 0


def test_delete_records(admin: AdminClient, shared_broker: BrokerProcess, topic: str) -> None:
    create(admin, NewTopic(topic, 2))[topic].result(TIMEOUT)
    _produce(shared_broker.bootstrap, topic, 10)
    deleted = admin.delete_records([TopicPartition(topic, 0, 4)])[TopicPartition(topic, 0, 4)].result(TIMEOUT)
    assert deleted.low_watermark == 4
    earliest = admin.list_offsets({TopicPartition(topic, 0): _earliest()})
    assert earliest[TopicPartition(topic, 0)].result(TIMEOUT).offset == 4
    backwards = TopicPartition(topic, 0, 2)  # below the low watermark: nothing to do, nothing undone
    assert admin.delete_records([backwards])[backwards].result(TIMEOUT).low_watermark == 4
    # -1 means "up to the high watermark"
    everything = TopicPartition(topic, 0, -1)
    assert admin.delete_records([everything])[everything].result(TIMEOUT).low_watermark == 10
    # past the high watermark is out of range; an empty partition's watermark is 0
    too_far = TopicPartition(topic, 0, 11)
    assert error_code(admin.delete_records([too_far])[too_far]) == KafkaError.OFFSET_OUT_OF_RANGE
    empty = TopicPartition(topic, 1, -1)
    assert admin.delete_records([empty])[empty].result(TIMEOUT).low_watermark == 0


def test_delete_records_refused_on_compacted_topic(admin: AdminClient, shared_broker: BrokerProcess,
                                                   topic: str) -> None:
    create(admin, NewTopic(topic, 1, config={"cleanup.policy": "compact"}))[topic].result(TIMEOUT)
    _produce(shared_broker.bootstrap, topic, 3)
    request = TopicPartition(topic, 0, 2)
    assert error_code(admin.delete_records([request])[request]) == KafkaError.POLICY_VIOLATION


def _earliest() -> Any:
    from confluent_kafka.admin import OffsetSpec

    return OffsetSpec.earliest()
