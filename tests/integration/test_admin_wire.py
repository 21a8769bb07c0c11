"""Admin APIs at the wire level: request shapes and versions the client libraries never send.

Duplicate entries, topic-id deletion (DeleteTopics v6), the v5+ CreateTopics result, documentation
in DescribeConfigs and the controller endpoint type of DescribeCluster, decoded exactly as sent.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer
from kio.schema.alter_configs.v2 import request as alter_v2
from kio.schema.create_partitions.v3 import request as partitions_v3
from kio.schema.create_topics.v2 import request as create_v2
from kio.schema.create_topics.v7 import request as create_v7
from kio.schema.delete_records.v2 import request as delete_records_v2
from kio.schema.delete_topics.v1 import request as delete_v1
from kio.schema.delete_topics.v6 import request as delete_v6
from kio.schema.describe_cluster.v1 import request as cluster_v1
from kio.schema.describe_configs.v1 import request as describe_v1
from kio.schema.describe_configs.v4 import request as describe_v4
from kio.schema.describe_log_dirs.v1 import request as log_dirs_v1
from kio.schema.describe_log_dirs.v4 import request as log_dirs_v4
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as incremental_v1

from deploy.processes.broker import BrokerProcess
from testkit.raw_kafka import RawKafka

TOPIC = 2
BROKER = 4
NULL_ID = uuid.UUID(int=0)
TIMEOUT = datetime.timedelta(seconds=10)


@pytest.fixture
def raw(shared_broker: BrokerProcess) -> Iterator[RawKafka]:
    with RawKafka(shared_broker.bootstrap) as client:
        yield client


@pytest.fixture
def name() -> str:
    return f"wire-{uuid.uuid4().hex[:10]}"


def _creatable(module: Any, name: str, partitions: int = 1, **configs: str) -> Any:
    return module.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=-1, assignments=(),
        configs=tuple(module.CreatableTopicConfig(name=k.replace("_", "."), value=v) for k, v in configs.items()),
    )


def _create(raw: RawKafka, *topics: Any, module: Any = create_v7, validate_only: bool = False) -> Any:
    return raw.request(module.CreateTopicsRequest(topics=topics, timeout=TIMEOUT, validate_only=validate_only))


def _delete(raw: RawKafka, *names: str) -> Any:
    return raw.request(delete_v1.DeleteTopicsRequest(topic_names=names, timeout=TIMEOUT))


def test_create_topics_v7_describes_the_new_topic(raw: RawKafka, name: str) -> None:
    (result,) = _create(raw, _creatable(create_v7, name, 3, retention_ms="1000")).topics
    try:
        assert (result.error_code, result.num_partitions, result.replication_factor) == (ErrorCode.none, 3, 1)
        assert result.topic_id != NULL_ID
        configs = {c.name: c for c in result.configs}
        assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == ("1000", 1)
        assert (configs["segment.ms"].value, configs["segment.ms"].config_source) == ("604800000", 5)
    finally:
        _delete(raw, name)


def test_create_topics_v7_validate_only_describes_without_creating(raw: RawKafka, name: str) -> None:
    (result,) = _create(raw, _creatable(create_v7, name, 2), validate_only=True).topics
    assert (result.error_code, result.num_partitions) == (ErrorCode.none, 2)
    assert result.topic_id in (None, NULL_ID)  # no id for a topic not created (kio reads the zero id as None)
    (result,) = _create(raw, _creatable(create_v7, name, 2)).topics  # the name was still free
    assert result.error_code == ErrorCode.none
    _delete(raw, name)


def test_create_topics_v2_and_error_messages(raw: RawKafka, name: str) -> None:
    results = _create(raw, _creatable(create_v2, name), _creatable(create_v2, name + "-x", unknown_key="1"),
                      module=create_v2).topics
    try:
        assert [(r.name, r.error_code) for r in results] == [
            (name, ErrorCode.none), (name + "-x", ErrorCode.invalid_config)]
        assert "unknown.key" in results[1].error_message
    finally:
        _delete(raw, name)


def test_create_topics_duplicate_names_are_refused(raw: RawKafka, name: str) -> None:
    other = name + "-single"
    twice = _creatable(create_v7, name)
    results = _create(raw, twice, _creatable(create_v7, other), twice).topics
    try:
        assert [(r.name, r.error_code) for r in results] == [
            (name, ErrorCode.invalid_request), (other, ErrorCode.none)]
        assert results[0].error_message == "Duplicate topic name."
    finally:
        _delete(raw, other)
    assert _delete(raw, name).responses[0].error_code == ErrorCode.unknown_topic_or_partition


def test_create_topics_null_config_value(raw: RawKafka, name: str) -> None:
    topic = create_v7.CreatableTopic(name=name, num_partitions=1, replication_factor=1, assignments=(),
                                     configs=(create_v7.CreatableTopicConfig(name="retention.ms", value=None),))
    (result,) = _create(raw, topic).topics
    assert result.error_code == ErrorCode.invalid_config


def test_delete_topics_v6_by_id_and_name(raw: RawKafka, name: str) -> None:
    (first,) = _create(raw, _creatable(create_v7, name + "-a")).topics
    _create(raw, _creatable(create_v7, name + "-b"))
    missing = uuid.uuid4()
    response = raw.request(delete_v6.DeleteTopicsRequest(timeout=TIMEOUT, topics=(
        delete_v6.DeleteTopicState(name=None, topic_id=first.topic_id),
        delete_v6.DeleteTopicState(name=name + "-b", topic_id=NULL_ID),
        delete_v6.DeleteTopicState(name=None, topic_id=missing),
        delete_v6.DeleteTopicState(name=name + "-b", topic_id=first.topic_id),
    )))
    assert [(r.name, r.topic_id, r.error_code) for r in response.responses] == [
        (name + "-a", first.topic_id, ErrorCode.none),
        (name + "-b", response.responses[1].topic_id, ErrorCode.none),
        (None, missing, ErrorCode.unknown_topic_id),
        (name + "-b", first.topic_id, ErrorCode.invalid_request),  # both name and id
    ]
    assert response.responses[1].topic_id != NULL_ID


def test_create_partitions_duplicates(raw: RawKafka, name: str) -> None:
    _create(raw, _creatable(create_v7, name))
    try:
        topic = partitions_v3.CreatePartitionsTopic(name=name, count=2, assignments=None)
        response = raw.request(partitions_v3.CreatePartitionsRequest(topics=(topic, topic), timeout=TIMEOUT,
                                                                     validate_only=False))
        assert [(r.name, r.error_code) for r in response.results] == [(name, ErrorCode.invalid_request)]
    finally:
        _delete(raw, name)


def _describe_v4(raw: RawKafka, resource_type: int, resource_name: str, *keys: str) -> Any:
    resource = describe_v4.DescribeConfigsResource(resource_type=resource_type, resource_name=resource_name,
                                                   configuration_keys=keys or None)
    request = describe_v4.DescribeConfigsRequest(resources=(resource,), include_synonyms=True,
                                                 include_documentation=True)
    (result,) = raw.request(request).results
    return result


def test_describe_configs_v4_types_documentation_and_filter(raw: RawKafka, name: str) -> None:
    _create(raw, _creatable(create_v7, name, cleanup_policy="compact"))
    try:
        result = _describe_v4(raw, TOPIC, name, "cleanup.policy", "retention.ms", "not.a.key")
        configs = {c.name: c for c in result.configs}
        assert sorted(configs) == ["cleanup.policy", "retention.ms"]
        policy = configs["cleanup.policy"]
        assert (policy.value, policy.config_source, policy.config_type) == ("compact", 1, 7)  # LIST
        assert policy.documentation
        assert configs["retention.ms"].config_type == 5  # LONG
    finally:
        _delete(raw, name)


def test_describe_configs_v1_all_keys(raw: RawKafka, name: str) -> None:
    _create(raw, _creatable(create_v7, name))
    try:
        resource = describe_v1.DescribeConfigsResource(resource_type=TOPIC, resource_name=name,
                                                       configuration_keys=None)
        (result,) = raw.request(describe_v1.DescribeConfigsRequest(resources=(resource,))).results
        assert result.error_code == ErrorCode.none
        assert {"cleanup.policy", "retention.ms", "segment.bytes", "min.insync.replicas"} <= {
            c.name for c in result.configs}
    finally:
        _delete(raw, name)


@pytest.mark.parametrize(
    ("resource_type", "resource_name", "expected"),
    [
        (TOPIC, "no-such-topic-anywhere", ErrorCode.unknown_topic_or_partition),
        (TOPIC, "bad/name", ErrorCode.invalid_topic_exception),
        (BROKER, "2", ErrorCode.invalid_request),  # another broker's configs
        (BROKER, "one", ErrorCode.invalid_request),
        (8, "1", ErrorCode.invalid_request),  # BROKER_LOGGER
    ],
)
def test_describe_configs_errors(raw: RawKafka, resource_type: int, resource_name: str,
                                 expected: ErrorCode) -> None:
    result = _describe_v4(raw, resource_type, resource_name)
    assert (result.error_code, result.configs) == (expected, ())


def test_describe_default_broker_resource_is_empty(raw: RawKafka) -> None:
    result = _describe_v4(raw, BROKER, "")  # dynamic cluster-wide defaults: there are none
    assert (result.error_code, result.configs) == (ErrorCode.none, ())


def test_alter_configs_duplicate_resources(raw: RawKafka, name: str) -> None:
    _create(raw, _creatable(create_v7, name))
    try:
        resource = alter_v2.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=(
            alter_v2.AlterableConfig(name="retention.ms", value="1"),))
        response = raw.request(alter_v2.AlterConfigsRequest(resources=(resource, resource), validate_only=False))
        assert [(r.resource_name, r.error_code) for r in response.responses] == [(name, ErrorCode.invalid_request)]
    finally:
        _delete(raw, name)


def test_incremental_alter_duplicate_keys_and_bad_operation(raw: RawKafka, name: str) -> None:
    _create(raw, _creatable(create_v7, name))
    try:
        op = incremental_v1.AlterableConfig
        duplicate = incremental_v1.AlterConfigsResource(resource_type=TOPIC, resource_name=name, configs=(
            op(name="retention.ms", config_operation=0, value="1"), op(name="retention.ms", config_operation=1,
                                                                      value=None)))
        bad_op = incremental_v1.AlterConfigsResource(resource_type=TOPIC, resource_name=name + "-2", configs=(
            op(name="retention.ms", config_operation=9, value="1"),))
        default_topic = incremental_v1.AlterConfigsResource(resource_type=TOPIC, resource_name="", configs=())
        response = raw.request(incremental_v1.IncrementalAlterConfigsRequest(
            resources=(duplicate, bad_op, default_topic), validate_only=False))
        assert [r.error_code for r in response.responses] == [
            ErrorCode.invalid_request, ErrorCode.unknown_topic_or_partition, ErrorCode.invalid_request]
    finally:
        _delete(raw, name)


def test_describe_cluster_controller_endpoints_are_refused(raw: RawKafka) -> None:
    response = raw.request(cluster_v1.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                             endpoint_type=2))
    assert response.error_code == ErrorCode.unsupported_endpoint_type
    response = raw.request(cluster_v1.DescribeClusterRequest(include_cluster_authorized_operations=False,
                                                             endpoint_type=1))
    assert (response.error_code, response.endpoint_type, [b.broker_id for b in response.brokers]) == (
        ErrorCode.none, 1, [1])
    assert response.cluster_authorized_operations == -(2**31)  # not asked for


def test_delete_records_unknown_partition(raw: RawKafka, name: str) -> None:
    _create(raw, _creatable(create_v7, name))
    try:
        topic = delete_records_v2.DeleteRecordsTopic(name=name, partitions=(
            delete_records_v2.DeleteRecordsPartition(partition_index=0, offset=0),
            delete_records_v2.DeleteRecordsPartition(partition_index=5, offset=0),
            delete_records_v2.DeleteRecordsPartition(partition_index=0, offset=-2),
        ))
        response = raw.request(delete_records_v2.DeleteRecordsRequest(topics=(topic,), timeout=TIMEOUT))
        assert [(p.partition_index, p.low_watermark, p.error_code) for p in response.topics[0].partitions] == [
            (0, 0, ErrorCode.none), (5, -1, ErrorCode.unknown_topic_or_partition),
            (0, -1, ErrorCode.offset_out_of_range)]
    finally:
        _delete(raw, name)


def test_describe_log_dirs_v1_and_v4(raw: RawKafka, shared_broker: BrokerProcess, name: str) -> None:
    _create(raw, _creatable(create_v7, name, 2))
    try:
        producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
        for _ in range(3):
            producer.produce(name, value=b"x" * 100, partition=1)
        assert producer.flush(10) == 0
        wanted = (log_dirs_v4.DescribableLogDirTopic(topic=name, partitions=(1,)),)
        (result,) = raw.request(log_dirs_v4.DescribeLogDirsRequest(topics=wanted)).results
        assert result.log_dir == str(shared_broker.data_dir.resolve())
        assert result.total_bytes > 0 and 0 <= result.usable_bytes <= result.total_bytes
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [(name, [1])]
        assert result.topics[0].partitions[0].partition_size >= 300
        (result,) = raw.request(log_dirs_v1.DescribeLogDirsRequest(topics=None)).results
        assert name in {t.name for t in result.topics}
    finally:
        _delete(raw, name)
