"""Topics and their partitions (the topic half of Kafka's ReplicationControlManager): create, delete, add partitions.

Placement spreads leaders and followers over the usable brokers (Kafka's rack-unaware assignment,
`election.place_replicas`); a new partition has every replica in sync and its first replica leads. A topic, its
configs and its partitions go in one entry. The coordinators' internal topics (`create_internal_topic`) wait until
enough brokers are up, as Kafka's do.
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.config.definitions import ConfigError
from bus.config.topic import validate_topic_configs
from bus.controller import election
from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import PartitionState, TopicImage, partition_record

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


def validate_topic_name(name: str) -> None:
    if not name:
        raise ControllerError(ErrorCode.invalid_topic_exception, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise ControllerError(ErrorCode.invalid_topic_exception, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters",
        )
    if not _LEGAL_TOPIC.match(name):
        raise ControllerError(
            ErrorCode.invalid_topic_exception,
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, "
            "'.', '_' and '-'",
        )


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: Mapping[int, Sequence[int]] | None = None
    configs: Mapping[str, str] | None = None


def _check_reachable(factor: int, brokers: Sequence[int]) -> None:
    if factor > len(brokers):
        raise ControllerError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {factor} time(s): The target replication factor of "
            f"{factor} cannot be reached because only {len(brokers)} broker(s) are registered.",
        )


def _new_partition(partition: int, replicas: list[int]) -> PartitionState:
    """A new partition: every replica in sync (placement names usable brokers only), the first one leads."""
    return PartitionState(partition, list(replicas), list(replicas), replicas[0])


class TopicControlManager:
    def __init__(self, context: ControlContext, default_partitions: int, default_replication_factor: int,
                 quorum_voters: int) -> None:
        """`quorum_voters`: how many controllers vote, which caps the internal topics' replication factor in
        combined mode."""
        self._context = context
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.quorum_voters = quorum_voters
        self._random = random.Random()  # where each new topic's placement starts

    def _check_new_name(self, name: str) -> None:
        validate_topic_name(name)
        if name in self._context.working.topics:
            raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        normalised = name.replace(".", "_")
        for existing in self._context.working.topics:
            if existing.replace(".", "_") == normalised:
                raise ControllerError(
                    ErrorCode.invalid_topic_exception,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )

    def _assignment(self, spec: TopicSpec) -> dict[int, list[int]]:
        brokers = sorted(self._context.usable_brokers())
        if spec.assignments:
            if spec.num_partitions != -1 or spec.replication_factor != -1:
                raise ControllerError(
                    ErrorCode.invalid_request,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            result: dict[int, list[int]] = {}
            sizes = set()
            for partition, replicas in sorted(spec.assignments.items()):
                replicas = list(replicas)
                if not replicas or len(set(replicas)) != len(replicas):
                    raise ControllerError(
                        ErrorCode.invalid_replica_assignment,
                        f"Duplicate or empty replica assignment for partition {partition}",
                    )
                unknown = [b for b in replicas if b not in brokers]
                if unknown:
                    raise ControllerError(
                        ErrorCode.invalid_replica_assignment,
                        f"Partition {partition} has replicas on brokers that are not registered, fenced or shutting "
                        f"down: {unknown}",
                    )
                sizes.add(len(replicas))
                result[partition] = replicas
            if sorted(result) != list(range(len(result))):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment, "Partitions must be numbered consecutively from 0"
                )
            if len(sizes) > 1:
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment, "All partitions must have the same number of replicas"
                )
            return result
        partitions = self.default_partitions if spec.num_partitions == -1 else spec.num_partitions
        factor = self.default_replication_factor if spec.replication_factor == -1 else spec.replication_factor
        if partitions <= 0:
            raise ControllerError(ErrorCode.invalid_partitions, "Number of partitions must be larger than 0.")
        if factor <= 0:
            raise ControllerError(
                ErrorCode.invalid_replication_factor, "Replication factor must be larger than 0."
            )
        _check_reachable(factor, brokers)
        return election.place_replicas(brokers, partitions, factor, self._random.randrange(len(brokers)))

    def create_topic(self, spec: TopicSpec, *, validate_only: bool = False) -> TopicImage | None:
        """Create a topic or raise ControllerError; returns the new topic unless validate_only."""
        self._context.check_active()
        self._check_new_name(spec.name)
        assignment = self._assignment(spec)
        configs = dict(spec.configs or {})
        try:
            validate_topic_configs(configs)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return None
        topic_id = str(uuid.uuid4())
        records: list[dict[str, Any]] = [{"type": "topic", "name": spec.name, "topic_id": topic_id}]
        records += [
            {"type": "config", "name": spec.name, "key": k, "value": v} for k, v in sorted(configs.items())
        ]
        records += [partition_record(topic_id, _new_partition(p, replicas))
                    for p, replicas in sorted(assignment.items())]
        self._context.commit(records)
        return self._context.working.topics[spec.name]

    def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                              configs: Mapping[str, str]) -> TopicImage:
        """A coordinator's topic (`__consumer_offsets`, ...), created by the active controller; an existing topic
        is returned as it is.

        In a cluster it gets its configured replication factor; while fewer brokers are registered and unfenced
        than that, it is refused (INVALID_REPLICATION_FACTOR) and the caller tries again later, as Kafka leaves the
        topic uncreated (and its coordinators unavailable) until enough brokers are up. Where the voters are the
        brokers (combined mode), the factor is capped by their number, and a lone node gives it one replica; with
        separate roles the controllers say nothing about how many brokers there are, so only the config counts.
        """
        existing = self._context.working.topics.get(name)
        if existing is not None:
            return existing
        factor = max(1, replication_factor)
        if self._context.local_broker:
            factor = max(1, min(factor, self.quorum_voters))  # no voters at all: a lone node too
        if factor > 1 or not self._context.local_broker:
            _check_reachable(factor, sorted(self._context.usable_brokers()))
        created = self.create_topic(TopicSpec(name, partitions, factor, configs=configs))
        assert created is not None
        log.info("created %s with %d partitions (replication factor %d)", name, partitions, factor)
        return created

    def topic(self, name: str) -> TopicImage:
        topic = self._context.working.topics.get(name)
        if topic is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            )
        return topic

    def delete_topic(self, name: str) -> uuid.UUID:
        self._context.check_active()
        topic = self.topic(name)
        self._context.commit([{"type": "remove_topic", "topic_id": str(topic.topic_id)}])
        return topic.topic_id

    def create_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None, *, validate_only: bool = False
    ) -> None:
        self._context.check_active()
        topic = self.topic(name)
        current = len(topic.partitions)
        if count < current:
            raise ControllerError(
                ErrorCode.invalid_partitions,
                f"Topic currently has {current} partitions, which is higher than the requested {count}.",
            )
        if count == current:
            raise ControllerError(
                ErrorCode.invalid_partitions, f"Topic already has {current} partitions."
            )
        factor = len(topic.partitions[0].replicas)
        new = list(range(current, count))
        if assignments is not None:
            if len(assignments) != len(new):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"Increasing the number of partitions by {len(new)} but {len(assignments)} "
                    "assignments provided.",
                )
            spec = TopicSpec(name, assignments={i: list(a) for i, a in enumerate(assignments)})
            planned = self._assignment(spec)
            if any(len(r) != factor for r in planned.values()):
                raise ControllerError(
                    ErrorCode.invalid_replica_assignment,
                    f"Inconsistent replication factor between partitions, expected {factor}",
                )
            replicas_for = {p: planned[i] for i, p in enumerate(new)}
        else:
            # Kafka continues the topic's pattern: start at partition 0's first replica, number on from `current`.
            brokers = sorted(self._context.usable_brokers())
            _check_reachable(factor, brokers)
            first = topic.partitions[0].replicas[0]
            start = next((i for i, b in enumerate(brokers) if b >= first), 0)
            replicas_for = election.place_replicas(brokers, len(new), factor, start, current)
        if validate_only:
            return
        topic_id = str(topic.topic_id)
        self._context.commit([partition_record(topic_id, _new_partition(p, r)) for p, r in replicas_for.items()])
