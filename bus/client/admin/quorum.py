"""The admin client's call about the KRaft metadata quorum: Java's `Admin.describeMetadataQuorum`.

DescribeQuorum goes to any broker and answers for the one partition of `__cluster_metadata`: its leader, epoch and
high watermark, and how far each voter and observer has caught up. It is what kafka-metadata-quorum is built on;
while the quorum has no leader the call is retried.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from bus.client.admin.common import LEADER_ERRORS, AdminCalls, AdminError, Retry, check_error

DESCRIBE_QUORUM = 55
METADATA_TOPIC = "__cluster_metadata"  # the KRaft quorum's one partition


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumReplicaState:
    """One replica of the metadata quorum as its leader sees it (Kafka's QuorumInfo.ReplicaState)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int | None  # wall-clock ms, None if unknown
    last_caught_up_timestamp: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplicaState]
    observers: list[QuorumReplicaState]


def _timestamp(replica: Any, name: str) -> int | None:
    """A DescribeQuorum replica timestamp (v1+; -1 or absent: unknown)."""
    value = int(getattr(replica, name, -1))
    return None if value < 0 else value


class QuorumAdmin:
    """The metadata quorum call `AdminClient` inherits."""

    def describe_metadata_quorum(self: AdminCalls) -> QuorumInfo:
        """The KRaft quorum's leader, epoch, high watermark and replicas (DescribeQuorum, as Kafka's
        Admin.describeMetadataQuorum); retried while the quorum has no leader."""

        def build(s: Any) -> Any:
            partition = s.make("PartitionData", partition_index=0)
            return s.make("DescribeQuorumRequest", topics=(s.make("TopicData", topic_name=METADATA_TOPIC,
                                                                   partitions=(partition,)),))

        def replicas(states: Any) -> list[QuorumReplicaState]:
            return [QuorumReplicaState(int(r.replica_id), int(r.log_end_offset), _timestamp(r, "last_fetch_timestamp"),
                                       _timestamp(r, "last_caught_up_timestamp")) for r in states]

        def attempt() -> QuorumInfo:
            response = self._send(self._any_node(), DESCRIBE_QUORUM, build)
            check_error(response.error_code, getattr(response, "error_message", None))
            partition = response.topics[0].partitions[0]
            if partition.error_code in LEADER_ERRORS:
                raise Retry(AdminError.of(partition.error_code), refresh=False)
            check_error(partition.error_code, getattr(partition, "error_message", None))
            return QuorumInfo(int(partition.leader_id), int(partition.leader_epoch), int(partition.high_watermark),
                              replicas(partition.current_voters), replicas(partition.observers))

        return self._call(attempt, "describe metadata quorum")
