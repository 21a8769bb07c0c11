"""Admin APIs judged by kafka-python's KafkaAdminClient, which picks newer API versions than librdkafka.

Shares one broker with distinct topic names per test, so the tests run in parallel.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

from deploy.processes.broker import BrokerProcess


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap, request_timeout_ms=10_000)
    yield client
    client.close()


@pytest.fixture
def topic(admin: KafkaAdminClient) -> Iterator[str]:
    name = f"kp-{uuid.uuid4().hex[:10]}"
    yield name
    if name in admin.list_topics():
        admin.delete_topics([name])


def _partition_count(admin: KafkaAdminClient, name: str) -> int:
    (described,) = admin.describe_topics([name])
    return len(described["partitions"])


def test_create_describe_delete(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1,
                                 "configs": {"retention.ms": "120000"}}})
    assert topic in admin.list_topics()
    assert _partition_count(admin, topic) == 2
    with pytest.raises(TopicAlreadyExistsError):
        admin.create_topics({topic: {"num_partitions": 1}})
    admin.delete_topics([topic])
    assert topic not in admin.list_topics()
    with pytest.raises(UnknownTopicOrPartitionError):
        admin.delete_topics([topic])


def test_create_validate_only_and_errors(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 3}}, validate_only=True)
    assert topic not in admin.list_topics()
    with pytest.raises(InvalidConfigurationError):
        admin.create_topics({topic: {"num_partitions": 1, "configs": {"segment.ms": "0"}}})
    with pytest.raises(InvalidReplicationFactorError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 2}})
    assert topic not in admin.list_topics()


def test_describe_configs_with_synonyms(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 1, "configs": {"retention.ms": "120000"}}})
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], config_filter="all", include_synonyms=True)["topic"][topic]
    retention = configs["retention.ms"]
    assert (retention["value"], retention["config_source"], retention["config_type"]) == (
        "120000", "DYNAMIC_TOPIC_CONFIG", "LONG")
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("retention.ms", "120000", "DYNAMIC_TOPIC_CONFIG"), ("retention.ms", "604800000", "DEFAULT_CONFIG")]
    assert configs["cleanup.policy"]["value"] == "delete"
    assert configs["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    modified = admin.describe_configs([resource])["topic"][topic]
    assert set(modified) == {"retention.ms"}  # the default filter keeps only overridden keys


def test_describe_broker_configs(admin: KafkaAdminClient) -> None:
    resource = ConfigResource(ConfigResourceType.BROKER, "1")
    configs = admin.describe_configs([resource], config_filter="all", include_synonyms=True)["broker"]["1"]
    assert configs["delete.topic.enable"]["value"] == "true"
    assert configs["node.id"]["value"] == "1"
    assert configs["listeners"]["config_source"] == "STATIC_BROKER_CONFIG"
    # the hour/minute/ms spellings of retention are synonyms of one another
    assert [s["name"] for s in configs["log.retention.ms"]["synonyms"]] == ["log.retention.hours"]
    assert configs["log.retention.ms"]["value"] is None  # unset; log.retention.hours=168 decides


def test_create_partitions(admin: KafkaAdminClient, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 1}})
    admin.create_partitions({topic: NewPartitions(total_count=4)})
    assert _partition_count(admin, topic) == 4
    with pytest.raises(InvalidPartitionsError):
        admin.create_partitions({topic: NewPartitions(total_count=2)})


def test_describe_cluster(admin: KafkaAdminClient, shared_broker: BrokerProcess) -> None:
    cluster = admin.describe_cluster()
    assert cluster["controller_id"] == 1
    assert [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]] == [
        (1, "127.0.0.1", shared_broker.port)]
    assert cluster["cluster_id"]
    assert "ALTER_CONFIGS" in cluster["authorized_operations"]  # no authorizer: everything allowed


def test_describe_log_dirs(admin: KafkaAdminClient, shared_broker: BrokerProcess, topic: str) -> None:
    admin.create_topics({topic: {"num_partitions": 2}})
    (broker,) = admin.describe_log_dirs(topic_partitions=[topic])
    (log_dir,) = broker["log_dirs"]
    assert (broker["broker"], log_dir["error_code"]) == (1, 0)
    assert log_dir["log_dir"] == str(shared_broker.data_dir.resolve())
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    assert [(t["name"], sorted(p["partition_index"] for p in t["partitions"])) for t in log_dir["topics"]] == [
        (topic, [0, 1])]
