"""Inspecting the bus through standard Kafka APIs: brokers, topics (partitions, leaders, replicas, size, retention).

Everything here works against our broker and a real Kafka alike: Metadata and DescribeCluster for
the layout, DescribeConfigs for retention, ListOffsets for the offsets, DescribeLogDirs for sizes,
CreateTopics / DeleteTopics for the admin commands. A topics page with thousands of topics costs
one Metadata, one DescribeConfigs and one DescribeLogDirs per broker, never a request per topic.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import ClusterMetadata, ConfigResource, ConfigSource, NewTopic, OffsetSpec

from ..backends import BUS, Backends, BackendUnavailable
from .errors import NotFound
from .kafka_calls import wait, wait_all
from .log_dirs import LogDirs

RETENTION_KEYS = ("retention.ms", "retention.bytes", "cleanup.policy")


def metadata(backends: Backends) -> ClusterMetadata:
    try:
        return backends.bus_admin().list_topics(timeout=backends.settings.backend_timeout_s)
    except KafkaException as exc:
        raise BackendUnavailable(BUS, str(exc.args[0] if exc.args else exc)) from None


def brokers(backends: Backends) -> dict[str, Any]:
    cluster = wait(backends, backends.bus_admin().describe_cluster(
        request_timeout=backends.settings.backend_timeout_s))
    controller = cluster.controller.id if cluster.controller is not None else None
    return {"cluster_id": cluster.cluster_id, "controller_id": controller,
            "brokers": [{"id": n.id, "host": n.host, "port": n.port, "rack": n.rack,
                         "is_controller": n.id == controller} for n in sorted(cluster.nodes, key=lambda n: n.id)]}


def _broker_addresses(md: ClusterMetadata) -> list[tuple[str, int]]:
    return [(b.host, b.port) for b in md.brokers.values()]


def _configs(backends: Backends, names: list[str], keys: tuple[str, ...] | None) -> dict[str, dict[str, Any]]:
    """Topic configs (all, or only ``keys``) as name -> {value, source, default}, one DescribeConfigs for all."""
    if not names:
        return {}
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    answers = wait_all(backends, backends.bus_admin().describe_configs(
        resources, request_timeout=backends.settings.backend_timeout_s))
    return {resource.name: {entry.name: {"value": None if entry.is_sensitive else entry.value,
                                         "source": _source(entry.source),
                                         "default": bool(entry.is_default)}
                            for entry in entries.values() if keys is None or entry.name in keys}
            for resource, entries in answers.items()}


def _source(source: Any) -> str:
    """``dynamic_topic_config``, ``default_config``...: librdkafka gives an int or the enum depending on the call."""
    try:
        return ConfigSource(int(source.value if isinstance(source, ConfigSource) else source)).name.lower()
    except ValueError:
        return "unknown_config"


def _retention(configs: dict[str, Any]) -> dict[str, Any]:
    def value(key: str) -> str | None:
        return configs.get(key, {}).get("value")

    def number(key: str) -> int | None:
        text = value(key)
        return int(text) if text is not None and text.lstrip("-").isdigit() else None

    return {"retention_ms": number("retention.ms"), "retention_bytes": number("retention.bytes"),
            "cleanup_policy": value("cleanup.policy")}


def topics(backends: Backends, log_dirs: LogDirs, include_internal: bool = False) -> list[dict[str, Any]]:
    """Every topic: partition count, replication factor, size in bytes (all partitions), retention."""
    md = metadata(backends)
    chosen = {name: t for name, t in md.topics.items() if include_internal or not name.startswith("__")}
    configs = _configs(backends, sorted(chosen), RETENTION_KEYS)
    sizes = log_dirs.sizes(_broker_addresses(md), {name: list(t.partitions) for name, t in chosen.items()})
    out = []
    for name in sorted(chosen):
        parts = chosen[name].partitions.values()
        out.append({
            "name": name,
            "internal": name.startswith("__"),
            "partitions": len(parts),
            "replication_factor": max((len(p.replicas) for p in parts), default=0),
            "under_replicated": sum(len(p.isrs) < len(p.replicas) for p in parts),
            "size_bytes": sum(sizes.get((name, p.id), 0) for p in parts),
            **_retention(configs.get(name, {})),
        })
    return out


def offsets(backends: Backends, partitions: list[TopicPartition], spec: OffsetSpec) -> dict[tuple[str, int], int]:
    """One ListOffsets for many partitions: (topic, partition) -> offset."""
    if not partitions:
        return {}
    answers = wait_all(backends, backends.bus_admin().list_offsets(
        {TopicPartition(tp.topic, tp.partition): spec for tp in partitions},
        request_timeout=backends.settings.backend_timeout_s))
    return {(tp.topic, tp.partition): info.offset for tp, info in answers.items()}


def topic(backends: Backends, log_dirs: LogDirs, name: str) -> dict[str, Any]:
    """One topic: per partition its leader, replicas, in-sync replicas, size and offsets; all its configs."""
    md = metadata(backends)
    described = md.topics.get(name)
    if described is None:
        raise NotFound("topic", name)
    parts = sorted(described.partitions.values(), key=lambda p: p.id)
    tps = [TopicPartition(name, p.id) for p in parts]
    earliest = offsets(backends, tps, OffsetSpec.earliest())
    latest = offsets(backends, tps, OffsetSpec.latest())
    sizes = log_dirs.sizes(_broker_addresses(md), {name: [p.id for p in parts]})
    configs = _configs(backends, [name], None).get(name, {})
    return {
        "name": name,
        "internal": name.startswith("__"),
        **_retention(configs),
        "size_bytes": sum(sizes.get((name, p.id), 0) for p in parts),
        "partitions": [{"partition": p.id, "leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs),
                        "size_bytes": sizes.get((name, p.id), 0), "start_offset": earliest[(name, p.id)],
                        "end_offset": latest[(name, p.id)]} for p in parts],
        "configs": configs,
    }


def create_topic(backends: Backends, name: str, partitions: int, replication_factor: int | None,
                 config: dict[str, str]) -> None:
    """``replication_factor`` None leaves it to the brokers' ``default.replication.factor``."""
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor or -1, config=config)
    futures = backends.bus_admin().create_topics([new], request_timeout=backends.settings.backend_timeout_s,
                                                 operation_timeout=backends.settings.backend_timeout_s)
    wait(backends, futures[name], name, f"create topic {name}")


def created_topic(backends: Backends, log_dirs: LogDirs, name: str) -> dict[str, Any]:
    """A topic just created, as :func:`topic` describes it. CreateTopics answers once the controller has committed
    the topic; each broker learns it when it applies the metadata log a moment later and answers
    UNKNOWN_TOPIC_OR_PARTITION until then (Kafka's KRaft brokers alike), so a not-found is asked again for up to the
    backend timeout: the 201 describes a topic every broker serves. So is a partition's leader that has not taken
    up the leadership yet (ListOffsets answers NOT_LEADER_OR_FOLLOWER on a cluster)."""
    deadline = time.monotonic() + backends.settings.backend_timeout_s
    while True:
        try:
            return topic(backends, log_dirs, name)
        except (NotFound, BackendUnavailable):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def delete_topic(backends: Backends, name: str) -> None:
    if name not in metadata(backends).topics:
        raise NotFound("topic", name)
    futures = backends.bus_admin().delete_topics([name], request_timeout=backends.settings.backend_timeout_s,
                                                 operation_timeout=backends.settings.backend_timeout_s)
    wait(backends, futures[name], name, f"delete topic {name}")
