"""The quorum controller: validates admin operations and commits metadata records.

Every change is written to the metadata log (`MetadataRecordLog`) and applied to `image`, the image the
brokers see, and announced to the broker side (`listeners`) only once the log reports it committed, the order
KRaft uses, so a crash never leaves the broker holding a topic the log does not know.

Operations run on the active controller only (`ControllerError` NOT_CONTROLLER elsewhere), one at a time
(handlers run on the event loop and append before they yield). With a quorum, a commit comes later than the
append, so the active controller validates against `working`: the committed image plus what it appended and
is still waiting for (Kafka's QuorumController keeps the same uncommitted state in its timeline structures).
Without a quorum both are the same image.

Brokers register (BrokerRegistration) and then heartbeat (BrokerHeartbeat) to the active controller; one whose
session (`broker.session.timeout.ms`) expires is fenced by a committed record and unfenced by its next heartbeat,
as Kafka's BrokerHeartbeatManager does. Sessions are the active controller's memory only: a new active controller
gives every registered broker a fresh session. Fenced brokers are left out of Metadata and of new placements.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.config.definitions import ConfigError
from bus.config.topic import validate_topic_configs
from bus.controller.image import MetadataImage, TopicImage
from bus.controller.record_log import MetadataRecord, MetadataRecordLog
from bus.protocol.errors import KafkaApiError

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249


class ControllerError(KafkaApiError):
    """An admin operation Kafka would refuse, with the error code and message it would return."""


# Partition replication (followers fetching from leaders, the ISR, acks=all waiting for it) is not built yet:
# a partition placed on three brokers would be stored by its leader alone while Metadata listed three in-sync
# replicas. Until it is, a topic gets one replica; asking for more is refused rather than pretended.
MAX_REPLICATION_FACTOR = 1


def _check_replicated(factor: int) -> None:
    if factor > MAX_REPLICATION_FACTOR:
        raise ControllerError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor {factor} is not supported yet: partitions are not replicated across brokers "
            f"(at most {MAX_REPLICATION_FACTOR}).",
        )


def not_controller(message: str) -> ControllerError:
    """This node is not (or stopped being) the active controller: retriable, the client asks the active one."""
    return ControllerError(ErrorCode.not_controller, message)


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


class QuorumController:
    def __init__(
        self,
        metadata_log: MetadataRecordLog,
        node_id: int,
        default_partitions: int,
        default_replication_factor: int,
        *,
        broker_session_timeout_ms: int = 9000,
    ) -> None:
        self.log = metadata_log
        self.broker_session_timeout_s = broker_session_timeout_ms / 1000.0
        self._sessions: dict[int, float] = {}  # broker id -> monotonic expiry, on the active controller
        self.node_id = node_id
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.image = MetadataImage()
        self._pending: MetadataImage | None = None  # with a quorum, while active: `image` + uncommitted records
        self.listeners: list[Callable[[list[MetadataRecord]], None]] = []
        self.activation_listeners: list[Callable[[], object]] = []  # run (soon) after this node becomes active
        metadata_log.open(self._on_committed, self._on_active)

    @property
    def active(self) -> bool:
        return self.log.active

    @property
    def working(self) -> MetadataImage:
        """The image operations validate against: committed plus this controller's pending records."""
        return self._pending if self._pending is not None else self.image

    @property
    def live_brokers(self) -> list[int]:
        """This node and every registered broker that is not fenced."""
        return sorted({self.node_id, *(b for b, r in self.working.brokers.items() if not r.fenced)})

    def _commit(self, records: list[MetadataRecord]) -> None:
        self.log.append(records)  # NOT_CONTROLLER unless active; without a quorum, committed (applied) here
        if self._pending is not None:
            for record in records:
                self._pending.apply(record)

    def _on_committed(self, records: list[MetadataRecord]) -> None:
        for record in records:
            self.image.apply(record)
        for listener in self.listeners:
            listener(records)

    def _on_active(self, active: bool) -> None:
        # Becoming active happens once every earlier leader's records are committed and applied: the working
        # image starts as a copy of the committed one. Losing it drops what was not committed.
        self._pending = copy.deepcopy(self.image) if active else None
        expiry = time.monotonic() + self.broker_session_timeout_s
        self._sessions = dict.fromkeys(self.image.brokers, expiry) if active else {}
        if active and self.activation_listeners:
            try:
                asyncio.get_running_loop().call_soon(self._activated)
            except RuntimeError:
                self._activated()

    def _activated(self) -> None:
        for listener in self.activation_listeners:
            if not self.active:
                return
            try:
                listener()
            except ControllerError as exc:
                log.warning("controller activation step failed: %s", exc.message)

    def _check_active(self) -> None:
        if not self.active:
            raise not_controller(f"node {self.node_id} is not the active controller")

    def ensure_cluster_id(self, new_id: Callable[[], str]) -> str:
        if self.working.cluster_id is None:
            self._commit([{"type": "cluster", "cluster_id": new_id()}])
        cluster_id = self.working.cluster_id
        assert cluster_id is not None
        return cluster_id

    def allocate_producer_ids(self, count: int = 1000) -> range:
        """Hand a block of producer ids to a broker (Kafka's AllocateProducerIds): committed first, so an id
        is never reused after a crash (with a quorum the caller awaits the log's `sync` before using it)."""
        self._check_active()
        start = self.working.next_producer_id
        self._commit([{"type": "producer_ids", "next": start + count}])
        return range(start, start + count)

    def import_records(self, records: list[MetadataRecord]) -> None:
        """Commit records kept elsewhere before (a local metadata log moving into the quorum's), as one entry."""
        self._check_active()
        self._commit(records)

    def register_broker(self, broker_id: int, endpoints: list[tuple[str, str, int]], rack: str | None) -> None:
        """Record where a broker serves clients (Kafka's BrokerRegistration): Metadata lists it, topics use it."""
        self._check_active()
        record: MetadataRecord = {"type": "broker", "id": broker_id, "endpoints": [list(e) for e in endpoints],
                                  "rack": rack}
        registered = self.working.brokers.get(broker_id)
        if (registered is None or registered.endpoints != tuple(endpoints) or registered.rack != rack
                or registered.fenced):
            self._commit([record])
        self._sessions[broker_id] = time.monotonic() + self.broker_session_timeout_s

    def broker_heartbeat(self, broker_id: int) -> None:
        """Renew a registered broker's session, unfencing it if it was fenced."""
        self._check_active()
        registered = self.working.brokers.get(broker_id)
        if registered is None:
            raise ControllerError(ErrorCode.broker_id_not_registered, f"Broker {broker_id} is not registered.")
        self._sessions[broker_id] = time.monotonic() + self.broker_session_timeout_s
        if registered.fenced:
            self._commit([{"type": "broker_fence", "id": broker_id, "fenced": False}])

    def fence_expired_brokers(self) -> None:
        """Fence every unfenced broker whose session expired (the active controller runs it periodically)."""
        if not self.active:
            return
        now = time.monotonic()
        expired = [broker_id for broker_id, registration in self.working.brokers.items()
                   if not registration.fenced and broker_id != self.node_id
                   and self._sessions.get(broker_id, now) < now]
        for broker_id in expired:
            log.info("fencing broker %d: no heartbeat for %.1f s", broker_id, self.broker_session_timeout_s)
        if expired:
            self._commit([{"type": "broker_fence", "id": broker_id, "fenced": True} for broker_id in expired])

    # -- topics -------------------------------------------------------------------------------

    def _check_new_name(self, name: str) -> None:
        validate_topic_name(name)
        if name in self.working.topics:
            raise ControllerError(ErrorCode.topic_already_exists, f"Topic '{name}' already exists.")
        normalised = name.replace(".", "_")
        for existing in self.working.topics:
            if existing.replace(".", "_") == normalised:
                raise ControllerError(
                    ErrorCode.invalid_topic_exception,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )

    def _assignment(self, spec: TopicSpec) -> dict[int, list[int]]:
        brokers = self.live_brokers
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
                        f"Partition {partition} has replicas on unknown brokers {unknown}",
                    )
                _check_replicated(len(replicas))
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
        if factor > len(brokers):
            raise ControllerError(
                ErrorCode.invalid_replication_factor,
                f"Unable to replicate the partition {factor} time(s): The target replication factor of "
                f"{factor} cannot be reached because only {len(brokers)} broker(s) are registered.",
            )
        _check_replicated(factor)
        return {p: [brokers[(p + i) % len(brokers)] for i in range(factor)] for p in range(partitions)}

    def create_topic(self, spec: TopicSpec, *, validate_only: bool = False) -> TopicImage | None:
        """Create a topic or raise ControllerError; returns the new topic unless validate_only."""
        self._check_active()
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
        records += [self._partition_record(topic_id, p, replicas) for p, replicas in sorted(assignment.items())]
        self._commit(records)
        return self.working.topics[spec.name]

    def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                              configs: Mapping[str, str]) -> TopicImage:
        """A coordinator's topic (`__consumer_offsets`, ...), created on first start with at most as many
        replicas as there are live brokers; an existing topic is returned as it is."""
        existing = self.working.topics.get(name)
        if existing is not None:
            return existing
        factor = max(1, min(replication_factor, len(self.live_brokers), MAX_REPLICATION_FACTOR))
        created = self.create_topic(TopicSpec(name, partitions, factor, configs=configs))
        assert created is not None
        log.info("created %s with %d partitions (replication factor %d)", name, partitions, factor)
        return created

    @staticmethod
    def _partition_record(topic_id: str, partition: int, replicas: list[int]) -> dict[str, Any]:
        return {
            "type": "partition",
            "topic_id": topic_id,
            "partition": partition,
            "replicas": replicas,
            "isr": replicas,
            "leader": replicas[0],
            "leader_epoch": 0,
        }

    def topic(self, name: str) -> TopicImage:
        topic = self.working.topics.get(name)
        if topic is None:
            raise ControllerError(
                ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition."
            )
        return topic

    def delete_topic(self, name: str) -> uuid.UUID:
        self._check_active()
        topic = self.topic(name)
        self._commit([{"type": "remove_topic", "topic_id": str(topic.topic_id)}])
        return topic.topic_id

    def create_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None, *, validate_only: bool = False
    ) -> None:
        self._check_active()
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
            brokers = self.live_brokers
            replicas_for = {p: [brokers[(p + i) % len(brokers)] for i in range(factor)] for p in new}
        if validate_only:
            return
        topic_id = str(topic.topic_id)
        self._commit([self._partition_record(topic_id, p, r) for p, r in replicas_for.items()])

    def alter_topic_configs(
        self, name: str, changes: Mapping[str, str | None], *, replace: bool, validate_only: bool = False
    ) -> None:
        """Set (value) or delete (None) topic configs; `replace` drops keys not named (AlterConfigs)."""
        self._check_active()
        topic = self.topic(name)
        try:
            validate_topic_configs(changes)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_config, str(exc)) from None
        final = {} if replace else dict(topic.configs)
        for key, value in changes.items():
            if value is None:
                final.pop(key, None)
            else:
                final[key] = value
        if validate_only:
            return
        records = [
            {"type": "config", "name": name, "key": k, "value": None} for k in topic.configs if k not in final
        ]
        records += [
            {"type": "config", "name": name, "key": k, "value": v}
            for k, v in final.items()
            if topic.configs.get(k) != v
        ]
        if records:
            self._commit(records)
