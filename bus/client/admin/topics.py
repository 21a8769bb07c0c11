"""The admin client's topic calls: list, describe, create and delete topics, and grow their partitions.

Java's `Admin.listTopics`, `describeTopics`, `createTopics`, `deleteTopics` and `createPartitions`, which
kafka-topics is built on. Listing and describing read Metadata from any broker (a topic still being created answers
LEADER_NOT_AVAILABLE for a moment, which is retried); creation, deletion and partition growth go to the controller
the metadata names, and NOT_CONTROLLER is retried only for the topics it hit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from bus.client.admin.common import (
    CONTROLLER_ERRORS,
    AdminCalls,
    AdminError,
    Retry,
    UnknownTopicOrPartitionError,
    error_name,
    finish,
    first_error,
)
from bus.protocol.topic_partition import TopicPartition

METADATA, CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS = 3, 19, 20, 37


class TopicCalls(AdminCalls, Protocol):
    """The admin client as these calls use it: the mixins' `AdminCalls`, plus the topic descriptions."""

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISR of each topic."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int | None  # None when the partition has no leader (offline)
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = dataclasses.field(default_factory=list)
    leader_epoch: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str | None  # None when the broker does not report ids (or reports the zero UUID)
    is_internal: bool
    partitions: list[PartitionInfo]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclasses.dataclass(slots=True)
class NewTopic:
    """A topic to create; -1 partitions / replication factor take the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, list[int]] | None = None
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class NewPartitions:
    """Grow a topic to `total_count` partitions, optionally placing the new ones (one list per new partition)."""

    total_count: int
    assignments: list[list[int]] | None = None


def _metadata_request(shapes: Any, topics: Iterable[str] | None) -> Any:
    wanted = None if topics is None else [shapes.make("MetadataRequestTopic", name=t) for t in topics]
    if wanted is None and shapes.version == 0:
        wanted = []  # v0: an empty list means every topic
    return shapes.make("MetadataRequest", topics=wanted, allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False)


def _topic_metadata(admin: AdminCalls, topics: Iterable[str] | None) -> Any:
    wanted = None if topics is None else list(topics)

    def attempt() -> Any:
        response = admin._send(admin._any_node(), METADATA, lambda s: _metadata_request(s, wanted))
        admin._metadata.absorb(response)
        return response

    return admin._call(attempt, "metadata")


def _per_topic_controller_call(admin: AdminCalls, api_key: int, build: Callable[[Any], Any],
                               pending: dict[str, Any], results_field: str, what: str,
                               message: Callable[[Any], str | None] = lambda r: getattr(r, "error_message", None),
                               ) -> dict[str, AdminError | None]:
    """A per-topic request to the controller: topic name -> None or the error.

    `build` asks for the topics still in `pending`; a topic leaves it once answered, so
    NOT_CONTROLLER is retried only for the topics it hit (a retried success would otherwise come
    back as e.g. TOPIC_ALREADY_EXISTS).
    """
    results: dict[str, AdminError | None] = {}

    def attempt() -> None:
        response = admin._send(admin._controller(), api_key, build)
        retry: AdminError | None = None
        for r in getattr(response, results_field):
            code = int(r.error_code)
            if code in CONTROLLER_ERRORS:
                retry = AdminError(code)
                continue
            pending.pop(r.name, None)
            results[r.name] = AdminError.of(code, message(r)) if code else None
        if retry is not None and pending:
            raise Retry(retry)

    admin._call(attempt, what)
    return results


def _topic_description(topic: Any) -> TopicDescription:
    topic_id = getattr(topic, "topic_id", None)
    partitions = []
    for p in sorted(topic.partitions, key=lambda p: int(p.partition_index)):
        leader = int(p.leader_id)
        partitions.append(PartitionInfo(
            partition=int(p.partition_index), leader=None if leader < 0 else leader,
            replicas=[int(r) for r in p.replica_nodes], isr=[int(r) for r in p.isr_nodes],
            offline_replicas=[int(r) for r in getattr(p, "offline_replicas", ())],
            leader_epoch=int(getattr(p, "leader_epoch", -1))))
    return TopicDescription(
        name=topic.name, topic_id=None if topic_id is None or topic_id.int == 0 else _kafka_uuid(topic_id),
        is_internal=bool(getattr(topic, "is_internal", False)), partitions=partitions)


def _kafka_uuid(value: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of the 16 bytes, unpadded."""
    import base64

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


class TopicAdmin:
    """The topic calls `AdminClient` inherits."""

    def list_topics(self: TopicCalls, include_internal: bool = False) -> list[str]:
        """Topic names, sorted; internal topics (__consumer_offsets, ...) only when asked for."""
        response = _topic_metadata(self, None)
        return sorted(t.name for t in response.topics
                      if t.name is not None and int(t.error_code) == 0 and (include_internal or not t.is_internal))

    def describe_topics(self: TopicCalls, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISR of each topic; raises UnknownTopicOrPartitionError.

        A topic still being created answers LEADER_NOT_AVAILABLE for a moment; that is retried.
        """
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}

        def attempt() -> dict[str, TopicDescription]:
            response = self._send(self._any_node(), METADATA, lambda s: _metadata_request(s, wanted))
            self._metadata.absorb(response)
            out: dict[str, TopicDescription] = {}
            errors: dict[str, AdminError | None] = {}
            for topic in response.topics:
                code = int(topic.error_code)
                if code == int(ErrorCode.leader_not_available):
                    raise Retry(AdminError(code, f"Topic '{topic.name}' has no leader yet"), refresh=False)
                if code == int(ErrorCode.unknown_topic_or_partition):
                    errors[topic.name] = UnknownTopicOrPartitionError(code, f"Topic '{topic.name}' does not exist.")
                    continue
                if code:
                    errors[topic.name] = AdminError.of(code, f"Topic '{topic.name}': {error_name(code)}")
                    continue
                out[topic.name] = _topic_description(topic)
            failure = first_error(errors)
            if failure is not None:
                raise failure
            return {name: out[name] for name in wanted if name in out}

        return self._call(attempt, "describe topics")

    def partitions_for(self: TopicCalls, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of the given topics, sorted."""
        described = self.describe_topics(topics)
        return sorted(TopicPartition(name, p.partition) for name, d in described.items() for p in d.partitions)

    def create_topics(self: TopicCalls, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                      timeout_ms: int | None = None, raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Create topics on the controller; returns name -> None (created) or the error.

        With `raise_on_error` (the default) the first failure is raised instead, carrying all of
        them in `.errors`. Only NOT_CONTROLLER is retried, and only for the topics it hit: a retried
        success would otherwise come back as TOPIC_ALREADY_EXISTS.
        """
        pending = {t.name: t for t in new_topics}
        timeout = self._timeout_ms(timeout_ms)

        def build(shapes: Any) -> Any:
            topics = []
            for t in pending.values():
                assignment = [shapes.make("CreatableReplicaAssignment", partition_index=p, broker_ids=list(ids))
                              for p, ids in sorted((t.replica_assignment or {}).items())]
                configs = [shapes.make("CreatableTopicConfig", name=k, value=v) for k, v in t.configs.items()]
                topics.append(shapes.make(
                    "CreatableTopic", name=t.name,
                    num_partitions=-1 if assignment else t.num_partitions,
                    replication_factor=-1 if assignment else t.replication_factor,
                    assignments=assignment, configs=configs))
            return shapes.make("CreateTopicsRequest", topics=topics, timeout=timeout, validate_only=validate_only)

        results = _per_topic_controller_call(self, CREATE_TOPICS, build, pending, "topics", "create topics")
        return finish(results, raise_on_error)

    def delete_topics(self: TopicCalls, names: Iterable[str], *, timeout_ms: int | None = None,
                      raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Delete topics by name; name -> None or the error (UNKNOWN_TOPIC_OR_PARTITION, ...)."""
        pending = dict.fromkeys(names)
        timeout = self._timeout_ms(timeout_ms)

        def build(shapes: Any) -> Any:
            return shapes.make("DeleteTopicsRequest", topic_names=list(pending),
                               topics=[shapes.make("DeleteTopicState", name=n) for n in pending], timeout=timeout)

        def message(r: Any) -> str | None:
            text = getattr(r, "error_message", None)
            if int(r.error_code) == int(ErrorCode.unknown_topic_or_partition) and not text:
                return f"Topic '{r.name}' does not exist."
            return text

        results = _per_topic_controller_call(self, DELETE_TOPICS, build, pending, "responses", "delete topics",
                                             message)
        return finish(results, raise_on_error)

    def create_partitions(self: TopicCalls, new_partitions: Mapping[str, NewPartitions], *, validate_only: bool = False,
                          timeout_ms: int | None = None,
                          raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Grow topics' partition counts (never shrink: INVALID_PARTITIONS)."""
        pending = dict(new_partitions)
        timeout = self._timeout_ms(timeout_ms)

        def build(shapes: Any) -> Any:
            topics = [shapes.make("CreatePartitionsTopic", name=name, count=np.total_count,
                                  assignments=None if np.assignments is None else [
                                      shapes.make("CreatePartitionsAssignment", broker_ids=list(ids))
                                      for ids in np.assignments])
                      for name, np in pending.items()]
            return shapes.make("CreatePartitionsRequest", topics=topics, timeout=timeout, validate_only=validate_only)

        results = _per_topic_controller_call(self, CREATE_PARTITIONS, build, pending, "results",
                                             "create partitions")
        return finish(results, raise_on_error)
