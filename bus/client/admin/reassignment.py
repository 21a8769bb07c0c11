"""The admin client's calls that place partitions on brokers: move replicas and elect leaders.

Java's `Admin.alterPartitionReassignments`, `listPartitionReassignments` and `electLeaders`, which
kafka-reassign-partitions and kafka-leader-election are built on. All three go to the controller the metadata
names, and NOT_CONTROLLER (for the whole request or any partition) is retried.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.admin.common import CONTROLLER_ERRORS, AdminCalls, AdminError, Retry, check_error, partition_indexes
from bus.client.connection import KafkaConnectionError, request_for
from bus.protocol.topic_partition import TopicPartition

ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 43, 45, 46


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A partition being moved (Java's PartitionReassignment): its replicas now (the target, then those it
    removes), and the replicas being added and removed."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class ElectionType(enum.IntEnum):
    """Kafka's ElectionType: the preferred replica, or any live replica for a partition without a leader."""

    PREFERRED = 0
    UNCLEAN = 1


def _wanted(partitions: Iterable[TopicPartition] | None) -> list[TopicPartition] | None:
    """The partitions asked for, deduplicated and sorted, or None for all of them."""
    return None if partitions is None else sorted({TopicPartition(tp.topic, int(tp.partition)) for tp in partitions})


class ReassignmentAdmin:
    """The replica placement and leader election calls `AdminClient` inherits."""

    def elect_leaders(self: AdminCalls, election_type: ElectionType,
                      partitions: Iterable[TopicPartition] | None = None, *,
                      timeout_ms: int | None = None) -> dict[TopicPartition, AdminError | None]:
        """Elect leaders (ElectLeaders, Java's Admin.electLeaders): partition -> None (elected) or its error,
        ELECTION_NOT_NEEDED when a valid leader is already in place. `partitions` None asks for every partition, and
        then the controller reports only those it tried to elect. NOT_CONTROLLER is retried."""
        wanted = _wanted(partitions)
        timeout = self._timeout_ms(timeout_ms)

        def build(s: Any) -> Any:
            topics = None
            if wanted is not None:
                topics = [s.make("TopicPartitions", topic=t, partitions=ps)
                          for t, ps in partition_indexes(wanted).items()]
            return s.make("ElectLeadersRequest", election_type=int(election_type), topic_partitions=topics,
                          timeout=timeout)

        def attempt() -> dict[TopicPartition, AdminError | None]:
            versions = range(1, 3) if election_type == ElectionType.UNCLEAN else None  # v0 elects preferred only
            node = self._controller()
            try:
                response = request_for(self._conn(node), ELECT_LEADERS, build, versions)
            except KafkaConnectionError:
                self._drop(node)
                raise
            top = int(getattr(response, "error_code", 0))
            results = {TopicPartition(r.topic, int(p.partition_id)): (
                AdminError.of(p.error_code, p.error_message) if int(p.error_code) else None)
                for r in response.replica_election_results for p in r.partition_result}
            if top in CONTROLLER_ERRORS or any(e is not None and e.code in CONTROLLER_ERRORS
                                                for e in results.values()):
                raise Retry(AdminError(ErrorCode.not_controller))
            check_error(top)
            return results

        return self._call(attempt, "elect leaders")

    def alter_partition_reassignments(self: AdminCalls, reassignments: Mapping[TopicPartition, Iterable[int] | None], *,
                                      allow_replication_factor_change: bool = True,
                                      timeout_ms: int | None = None) -> dict[TopicPartition, AdminError | None]:
        """Move partitions to new replicas, or cancel a move with None (AlterPartitionReassignments, Java's
        Admin.alterPartitionReassignments): partition -> None (started) or its error. The moves complete later
        (`list_partition_reassignments` shows them until then). `allow_replication_factor_change` False refuses a
        target of another size (KIP-860, v1). NOT_CONTROLLER is retried."""
        wanted = {TopicPartition(tp.topic, int(tp.partition)): None if r is None else [int(b) for b in r]
                  for tp, r in reassignments.items()}
        timeout = self._timeout_ms(timeout_ms)

        def build(s: Any) -> Any:
            by_topic: dict[str, list[Any]] = {}
            for tp, replicas in wanted.items():
                by_topic.setdefault(tp.topic, []).append(
                    s.make("ReassignablePartition", partition_index=tp.partition, replicas=replicas))
            return s.make("AlterPartitionReassignmentsRequest", timeout=timeout,
                          allow_replication_factor_change=allow_replication_factor_change, topics=[
                s.make("ReassignableTopic", name=name, partitions=ps) for name, ps in by_topic.items()])

        def attempt() -> dict[TopicPartition, AdminError | None]:
            node = self._controller()
            versions = None if allow_replication_factor_change else range(1, 2)  # v0 always allows it
            try:
                response = request_for(self._conn(node), ALTER_PARTITION_REASSIGNMENTS, build, versions)
            except KafkaConnectionError:
                self._drop(node)
                raise
            results = {TopicPartition(t.name, int(p.partition_index)): (
                AdminError.of(p.error_code, p.error_message) if int(p.error_code) else None)
                for t in response.responses for p in t.partitions}
            top = int(response.error_code)
            if top in CONTROLLER_ERRORS or any(e is not None and e.code in CONTROLLER_ERRORS
                                                for e in results.values()):
                raise Retry(AdminError(ErrorCode.not_controller))
            check_error(top, response.error_message)
            return results

        return self._call(attempt, "alter partition reassignments")

    def list_partition_reassignments(self: AdminCalls, partitions: Iterable[TopicPartition] | None = None, *,
                                     timeout_ms: int | None = None) -> dict[TopicPartition, PartitionReassignment]:
        """The moves under way among `partitions` (None: all), Java's Admin.listPartitionReassignments;
        partitions that do not exist or are not moving are left out. NOT_CONTROLLER is retried."""
        wanted = _wanted(partitions)
        timeout = self._timeout_ms(timeout_ms)

        def build(s: Any) -> Any:
            topics = None
            if wanted is not None:
                topics = [s.make("ListPartitionReassignmentsTopics", name=t, partition_indexes=ps)
                          for t, ps in partition_indexes(wanted).items()]
            return s.make("ListPartitionReassignmentsRequest", timeout=timeout, topics=topics)

        def attempt() -> dict[TopicPartition, PartitionReassignment]:
            response = self._send(self._controller(), LIST_PARTITION_REASSIGNMENTS, build)
            top = int(response.error_code)
            if top in CONTROLLER_ERRORS:
                raise Retry(AdminError(top))
            check_error(top, response.error_message)
            return {TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
                [int(r) for r in p.replicas], [int(r) for r in p.adding_replicas],
                [int(r) for r in p.removing_replicas]) for t in response.topics for p in t.partitions}

        return self._call(attempt, "list partition reassignments")
