"""The admin client's calls about the cluster as a whole: its brokers, their features and their log dirs.

Java's `Admin.describeCluster`, `describeFeatures` and `describeLogDirs`, which kafka-features and kafka-log-dirs
are built on. DescribeCluster (or Metadata, from a broker too old for it) and ApiVersions, which carries the
features, go to any broker; DescribeLogDirs goes to each broker asked about.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import Any

from bus.client.admin.common import AdminCalls, AdminError, BrokerInfo, check_error
from bus.client.connection import UnsupportedVersionError
from bus.protocol.topic_partition import TopicPartition

DESCRIBE_CLUSTER, API_VERSIONS, DESCRIBE_LOG_DIRS = 60, 18, 35


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """One partition's replica in one log dir (Java's `ReplicaInfo`)."""

    size: int
    offset_lag: int
    is_future: bool


@dataclasses.dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log dir of one broker: its error (None if healthy), replicas and space (-1: unknown)."""

    path: str
    error: AdminError | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int = -1
    usable_bytes: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class SupportedVersionRange:
    min_version: int
    max_version: int


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """What `describeFeatures` answers: supported ranges, finalized levels and their epoch (None: unknown)."""

    supported: dict[str, SupportedVersionRange]
    finalized: dict[str, int]
    finalized_epoch: int | None


class ClusterAdmin:
    """The cluster calls `AdminClient` inherits."""

    def describe_cluster(self: AdminCalls) -> ClusterDescription:
        """Cluster id, controller and live brokers (DescribeCluster, or Metadata on older brokers)."""

        def attempt() -> ClusterDescription:
            node = self._any_node()
            try:
                response = self._send(node, DESCRIBE_CLUSTER, lambda s: s.make(
                    "DescribeClusterRequest", include_cluster_authorized_operations=False, endpoint_type=1))
            except UnsupportedVersionError:
                self._refresh_brokers()
                view = self._metadata.view
                return ClusterDescription(view.cluster_id, view.controller_id, sorted(
                    self._brokers.values(), key=lambda b: b.node_id))
            check_error(response.error_code, getattr(response, "error_message", None))
            brokers = [BrokerInfo(int(b.broker_id), b.host, int(b.port), b.rack) for b in response.brokers]
            return ClusterDescription(response.cluster_id, int(response.controller_id),
                                      sorted(brokers, key=lambda b: b.node_id))

        return self._call(attempt, "describe cluster")

    def describe_features(self: AdminCalls) -> FeatureMetadata:
        """The features any broker supports and the cluster-wide finalized levels (from ApiVersions v3+)."""

        def attempt() -> FeatureMetadata:
            response = self._send(self._any_node(), API_VERSIONS, lambda s: s.make(
                "ApiVersionsRequest", client_software_name="bus-client", client_software_version="0.1"))
            check_error(response.error_code)
            epoch = int(getattr(response, "finalized_features_epoch", -1))
            return FeatureMetadata(
                {f.name: SupportedVersionRange(int(f.min_version), int(f.max_version))
                 for f in getattr(response, "supported_features", ())},
                {f.name: int(f.max_version_level) for f in getattr(response, "finalized_features", ())},
                None if epoch < 0 else epoch)

        return self._call(attempt, "describe features")

    def describe_log_dirs(self: AdminCalls, broker_ids: Iterable[int]) -> dict[int, list[LogDirDescription]]:
        """Every log dir of each broker, with the replicas it holds (all topics)."""
        brokers = list(dict.fromkeys(int(b) for b in broker_ids))

        def build(s: Any) -> Any:
            return s.make("DescribeLogDirsRequest", topics=None)

        def describe(broker: int) -> list[LogDirDescription]:
            response = self._send(broker, DESCRIBE_LOG_DIRS, build)
            check_error(getattr(response, "error_code", 0))
            out = []
            for result in response.results:
                code = int(result.error_code)
                replicas = {TopicPartition(topic.name, int(p.partition_index)):
                            ReplicaInfo(int(p.partition_size), int(p.offset_lag), bool(p.is_future_key))
                            for topic in result.topics for p in topic.partitions}
                out.append(LogDirDescription(result.log_dir, AdminError.of(code) if code else None, replicas,
                                             int(getattr(result, "total_bytes", -1)),
                                             int(getattr(result, "usable_bytes", -1))))
            return out

        out: dict[int, list[LogDirDescription]] = {}
        for broker in brokers:
            out[broker] = self._call(functools.partial(describe, broker), "describe log dirs")
        return out
