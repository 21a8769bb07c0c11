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

Partitions are replicated: placement spreads leaders and followers over the unfenced brokers (Kafka's rack-unaware
assignment, `election.place_replicas`), and every leader or ISR change is one committed `partition` record
carrying the partition's whole new state (Kafka's PartitionChangeRecord, written in full). A broker fenced (or
shutting down) leaves every ISR that has other members and hands its leaderships to the next usable ISR replica
(`election`); a broker that registers or is unfenced again takes the leadership of every leaderless partition it
may lead. All changes of one event go in one entry. Partition leaders shrink and expand their ISR through
`alter_partition` (AlterPartition), checked against the epochs they last saw.

Leadership that moved away stays away when its broker returns (Kafka does not rebalance on unfence): ElectLeaders
(`elect_leaders`, PREFERRED or UNCLEAN) moves it back on request, and `balance_leaders`, run every
`leader.imbalance.check.interval.seconds` when `auto.leader.rebalance.enable`, does so for every broker whose share
of preferred partitions led elsewhere exceeds `leader.imbalance.per.broker.percentage` (Kafka's auto rebalance).

Replica sets change only through reassignment (`alter_partition_reassignments`, KIP-455 as KRaft runs it): a move
adds its target replicas to the partition at once, as `adding_replicas`, and completes in whichever later change
finds every target replica in the ISR, usually the AlterPartition that takes the last one in (`election.change`).

ACLs are metadata like topics (Kafka's AclControlManager): CreateAcls and DeleteAcls commit `acl` and `remove_acl`
records, each ACL with its own id, so they replicate with the log and survive restarts in it and in snapshots.
So are users' SCRAM credentials (KIP-554, Kafka's ScramControlManager): AlterUserScramCredentials commits
`user_scram_credential` and `remove_user_scram_credential` records (salt, StoredKey, ServerKey, iterations), and
`bus storage format --add-scram` has the first ones committed with the cluster id (`bootstrap_records`).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.config.broker import BROKER_CONFIGS, DYNAMIC_BROKER_KEYS
from bus.config.definitions import ConfigError
from bus.config.topic import validate_topic_configs
from bus.controller import election
from bus.controller.image import (
    MetadataImage,
    PartitionState,
    TopicImage,
    acl_record,
    broker_config_record,
    broker_record,
    difference,
    partition_record,
    remove_acl_record,
    remove_scram_credential_record,
    scram_credential_record,
)
from bus.controller.record_log import MetadataRecord, MetadataRecordLog
from bus.protocol.errors import KafkaApiError
from bus.security.acls import AclBinding, AclBindingFilter, InvalidAcl
from bus.security.scram import SCRAM_MECHANISMS, ScramCredential, ScramMechanism

log = logging.getLogger(__name__)

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_TOPIC_NAME = 249
PREFERRED = 0  # ElectLeaders' election types (Kafka's ElectionType)
UNCLEAN = 1


class ControllerError(KafkaApiError):
    """An admin operation Kafka would refuse, with the error code and message it would return."""


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
        unclean_leader_election: bool = False,
        quorum_voters: int = 1,
        broker: bool = True,
    ) -> None:
        """`unclean_leader_election`: the broker's `unclean.leader.election.enable` (a topic's own config wins);
        `quorum_voters`: how many controllers vote, which caps the internal topics' replication factor in combined
        mode;
        `broker`: whether this node is a broker too (a controller-only node never hosts a replica)."""
        self.log = metadata_log
        self.unclean_leader_election = unclean_leader_election
        self.quorum_voters = quorum_voters
        self._random = random.Random()  # where each new topic's placement starts
        self.broker_session_timeout_s = broker_session_timeout_ms / 1000.0
        self._sessions: dict[int, float] = {}  # broker id -> monotonic expiry, on the active controller
        self.node_id = node_id
        self.local_broker = {node_id} if broker else set()
        self.default_partitions = default_partitions
        self.default_replication_factor = default_replication_factor
        self.image = MetadataImage()
        self._pending: MetadataImage | None = None  # with a quorum, while active: `image` + uncommitted records
        self.listeners: list[Callable[[list[MetadataRecord]], None]] = []
        self.activation_listeners: list[Callable[[], object]] = []  # run (soon) after this node becomes active
        self._unfinished_activation: list[Callable[[], object]] = []  # refused steps, retried periodically
        # What `bus storage format` put in the metadata dir (SCRAM credentials): committed with the cluster id, once,
        # at the start of the cluster's metadata log (Kafka's bootstrap metadata).
        self.bootstrap_records: list[MetadataRecord] = []
        metadata_log.open(self)

    @property
    def active(self) -> bool:
        return self.log.active

    @property
    def working(self) -> MetadataImage:
        """The image operations validate against: committed plus this controller's pending records."""
        return self._pending if self._pending is not None else self.image

    @property
    def live_brokers(self) -> list[int]:
        """This node (when it is a broker) and every registered broker that is not fenced."""
        return sorted({*self.local_broker, *(b for b, r in self.working.brokers.items() if not r.fenced)})

    def _commit(self, records: list[MetadataRecord]) -> None:
        self.log.append(records)  # NOT_CONTROLLER unless active; without a quorum, committed (applied) here
        if self._pending is not None:
            for record in records:
                self._pending.apply(record)

    def apply_committed(self, records: list[MetadataRecord]) -> None:
        for record in records:
            self.image.apply(record)
        for listener in self.listeners:
            listener(records)

    def load_snapshot(self, records: list[MetadataRecord]) -> None:
        """Replace the committed image wholesale (at start, or a snapshot from the leader). The broker side hears
        the difference (`image.difference`) through the same `listeners` as committed records: topics the snapshot
        no longer has are removed as deleted topics are, new and changed ones are brought in line."""
        loaded = MetadataImage()
        for record in records:
            loaded.apply(record)
        changes = difference(self.image, loaded)
        self.image.replace_with(loaded)
        for listener in self.listeners:
            listener(changes)

    def snapshot_image(self) -> MetadataImage:
        return self.image.copy()

    def set_active(self, active: bool) -> None:
        # Becoming active happens once every earlier leader's records are committed and applied: the working
        # image starts as a copy of the committed one. Losing it drops what was not committed.
        self._pending = copy.deepcopy(self.image) if active else None
        expiry = time.monotonic() + self.broker_session_timeout_s
        self._sessions = dict.fromkeys(self.image.brokers, expiry) if active else {}
        self._unfinished_activation = list(self.activation_listeners) if active else []
        if active and self.activation_listeners:
            try:
                asyncio.get_running_loop().call_soon(self._activated)
            except RuntimeError:
                self._activated()

    def _activated(self) -> None:
        """Run the activation steps not done yet; one the controller refuses (an internal topic while too few
        brokers are up, as Kafka waits to create it) stays for the next call (`fence_expired_brokers`)."""
        for listener in list(self._unfinished_activation):
            if not self.active:
                return
            try:
                listener()
            except ControllerError as exc:
                log.info("controller activation step not done yet: %s", exc.message)
            else:
                self._unfinished_activation.remove(listener)

    def _check_active(self) -> None:
        if not self.active:
            raise not_controller(f"node {self.node_id} is not the active controller")

    def ensure_cluster_id(self, new_id: Callable[[], str]) -> str:
        if self.working.cluster_id is None:
            self._commit([{"type": "cluster", "cluster_id": new_id()}, *self.bootstrap_records])
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

    def register_broker(self, broker_id: int, endpoints: list[tuple[str, str, int]], rack: str | None,
                        incarnation_id: str | None = None) -> None:
        """Record where a broker serves clients (Kafka's BrokerRegistration): Metadata lists it, topics use it.

        Another incarnation (a new process) of a broker whose session still lives is refused with
        DUPLICATE_BROKER_REGISTRATION, as Kafka's ClusterControlManager does: the old one is fenced when its
        session expires, which moves its leaderships and ISR seats to replicas that have the data, and only then
        may the new one register. A broker restarted with an empty disk would otherwise go on leading its
        partitions with an empty log, and its followers would truncate acknowledged records to match it. Its own
        node's registration is the exception: the controller runs in that process, so the old one is gone."""
        self._check_active()
        registered = self.working.brokers.get(broker_id)
        if (registered is not None and broker_id != self.node_id and incarnation_id is not None
                and registered.incarnation_id not in (None, incarnation_id) and not registered.fenced):
            if self._sessions.get(broker_id, 0.0) > time.monotonic():
                raise ControllerError(ErrorCode.duplicate_broker_registration,
                                      "Another broker is registered with that broker id.")
            # Its session has expired but the periodic fencing has not run yet: fence the old one first.
            self._fence({broker_id})
            registered = self.working.brokers.get(broker_id)
        if (registered is None or registered.endpoints != tuple(endpoints) or registered.rack != rack
                or registered.fenced or registered.in_controlled_shutdown
                or registered.incarnation_id != incarnation_id):
            self._commit([broker_record(broker_id, endpoints, rack, incarnation_id),
                          *self._elect_leaderless(broker_id)])
        self._sessions[broker_id] = time.monotonic() + self.broker_session_timeout_s

    def broker_heartbeat(self, broker_id: int, want_shut_down: bool = False) -> bool:
        """Renew a registered broker's session, unfencing it if it was fenced; returns whether it may shut down.

        `want_shut_down` (controlled shutdown, Kafka's BrokerHeartbeatManager): the first such heartbeat marks the
        broker shutting down and moves its leaderships and ISR memberships to other brokers, as fencing does; a
        later one, once it leads nothing, fences it and answers True. A broker that leads nothing is fenced by the
        first one (Kafka's SHUTDOWN_NOW when it has no leaderships). Registering again ends the state.
        """
        self._check_active()
        registered = self.working.brokers.get(broker_id)
        if registered is None:
            raise ControllerError(ErrorCode.broker_id_not_registered, f"Broker {broker_id} is not registered.")
        self._sessions[broker_id] = time.monotonic() + self.broker_session_timeout_s
        if want_shut_down:
            return self._controlled_shutdown(broker_id)
        if registered.fenced and not registered.in_controlled_shutdown:
            self._commit([{"type": "broker_fence", "id": broker_id, "fenced": False},
                          *self._elect_leaderless(broker_id)])
        return False

    def _controlled_shutdown(self, broker_id: int) -> bool:
        registered = self.working.brokers[broker_id]
        if registered.fenced:
            return True
        if not registered.in_controlled_shutdown:
            leads = any(state.leader == broker_id
                        for topic in self.working.topics.values() for state in topic.partitions.values())
            log.info("broker %d is shutting down: %s", broker_id,
                     "moving its leaderships away" if leads else "it leads nothing, fenced now")
            fence: list[MetadataRecord] = [] if leads else [{"type": "broker_fence", "id": broker_id, "fenced": True}]
            self._commit([{"type": "broker_shutdown", "id": broker_id}, *self._leave({broker_id}), *fence])
            return not leads
        # It has led nothing since the previous heartbeat (it cannot be elected): the new leaders took over.
        self._commit([{"type": "broker_fence", "id": broker_id, "fenced": True}])
        return True

    def fence_expired_brokers(self) -> None:
        """Fence every unfenced broker whose session expired, moving its leaderships and ISR memberships to the
        others, and retry the activation steps not done yet (every node runs it periodically; only the active
        controller acts)."""
        if not self.active:
            return
        now = time.monotonic()
        expired = [broker_id for broker_id, registration in self.working.brokers.items()
                   if not registration.fenced and broker_id != self.node_id
                   and self._sessions.get(broker_id, now) < now]
        if expired:
            self._fence(set(expired))
        if self._unfinished_activation:
            self._activated()

    def _fence(self, expired: set[int]) -> None:
        """Fence brokers whose session expired, moving their leaderships and ISR memberships to the others."""
        for broker_id in sorted(expired):
            log.info("fencing broker %d: no heartbeat for %.1f s", broker_id, self.broker_session_timeout_s)
        self._commit([*self._leave(expired),
                      *({"type": "broker_fence", "id": broker_id, "fenced": True} for broker_id in sorted(expired))])

    # -- partition leadership -----------------------------------------------------------------

    def _usable(self) -> set[int]:
        """Brokers that may lead a partition or join its ISR: this node and the registered, unfenced ones, unless
        shutting down."""
        brokers = self.working.brokers
        return {b for b in self.live_brokers if b not in brokers or not brokers[b].in_controlled_shutdown}

    def _unclean(self, topic: TopicImage) -> bool:
        """`unclean.leader.election.enable` for the topic: its own config, else the broker's."""
        value = topic.configs.get("unclean.leader.election.enable")
        return self.unclean_leader_election if value is None else value.strip().lower() == "true"

    def _partition_changes(
        self, decide: Callable[[TopicImage, PartitionState], PartitionState | None]
    ) -> list[MetadataRecord]:
        """A full partition record for every partition `decide` changes."""
        return [self._partition_record(str(topic.topic_id), new)
                for topic in self.working.topics.values() for state in topic.partitions.values()
                if (new := decide(topic, state)) is not None]

    def _leave(self, gone: set[int]) -> list[MetadataRecord]:
        """The brokers `gone` leave every ISR with other members and every leadership (Kafka's
        handleBrokerFenced)."""
        usable = self._usable() - gone

        def decide(topic: TopicImage, state: PartitionState) -> PartitionState | None:
            if state.leader not in gone and gone.isdisjoint(state.isr):
                return None
            return election.without_brokers(state, gone, usable, self._unclean(topic))
        return self._partition_changes(decide)

    def _elect_leaderless(self, back: int) -> list[MetadataRecord]:
        """Leaders for the partitions without one, now that broker `back` is usable again (Kafka's
        handleBrokerUnfenced)."""
        usable = self._usable() | {back}
        return self._partition_changes(lambda topic, state: election.change(state, usable, self._unclean(topic))
                                       if state.leader == election.NO_LEADER else None)

    def elect_leaders(self, election_type: int, wanted: Mapping[str, Iterable[int]] | None
                      ) -> dict[str, dict[int, ControllerError | None]]:
        """Kafka's ElectLeaders (ReplicationControlManager.electLeaders): topic -> partition -> None (elected) or
        why not; every election in one entry.

        PREFERRED makes the first replica leader when it is in the ISR and usable; UNCLEAN elects a leader for a
        partition that has none, out of the ISR if it must (whatever the topic's unclean.leader.election.enable: an
        operator asked for it). `wanted` None means every partition, and then those that need no election are left
        out of the answer, as Kafka does.
        """
        self._check_active()
        if election_type not in (PREFERRED, UNCLEAN):
            raise ControllerError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
        every = wanted is None
        if wanted is None:
            wanted = {name: sorted(topic.partitions) for name, topic in self.working.topics.items()}
        usable = self._usable()
        results: dict[str, dict[int, ControllerError | None]] = {}
        elected: dict[tuple[str, int], MetadataRecord] = {}
        for name, partitions in wanted.items():
            answers = results.setdefault(name, {})
            for partition in partitions:
                try:
                    topic_id, state = self._elect_one(name, partition, election_type, usable)
                except ControllerError as exc:
                    if not (every and exc.code == ErrorCode.election_not_needed):
                        answers[partition] = exc
                    continue
                elected[(name, partition)] = self._partition_record(topic_id, state)
                answers[partition] = None
        if elected:
            log.info("%s election for %s", "preferred" if election_type == PREFERRED else "unclean",
                     ", ".join(f"{name}-{partition}" for name, partition in elected))
            self._commit(list(elected.values()))
        return results

    def _elect_one(self, name: str, partition: int, election_type: int,
                   usable: set[int]) -> tuple[str, PartitionState]:
        """One partition's new state under `election_type` (ReplicationControlManager.electLeader), or the
        ControllerError Kafka answers for it."""
        topic = self.working.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"No such topic as {name}")
        state = topic.partitions.get(partition)
        if state is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"No such partition as {name}-{partition}")
        if election_type == PREFERRED:
            if state.leader == state.replicas[0]:
                raise ControllerError(ErrorCode.election_not_needed,
                                      f"{name}-{partition} is already led by its preferred replica {state.leader}.")
            new = election.preferred(state, usable)
            if new is None:
                raise ControllerError(ErrorCode.preferred_leader_not_available,
                                      f"The preferred replica {state.replicas[0]} of {name}-{partition} is not in "
                                      f"its ISR {state.isr} or not available.")
        else:
            if state.leader != election.NO_LEADER:
                raise ControllerError(ErrorCode.election_not_needed,
                                      f"{name}-{partition} already has a leader ({state.leader}).")
            new = election.change(state, usable, unclean=True)
            if new is None:
                raise ControllerError(ErrorCode.eligible_leaders_not_available,
                                      f"None of the replicas {state.replicas} of {name}-{partition} is available.")
        return str(topic.topic_id), new

    def balance_leaders(self, imbalance_percentage: int) -> int:
        """Kafka's automatic leader rebalance (KafkaController.checkAndTriggerAutoLeaderRebalance): for every broker
        whose partitions led elsewhere exceed `imbalance_percentage` percent of those it is the preferred replica
        of, hand them back to it where it is in the ISR and usable; one entry. Returns how many moved.

        Every node runs it periodically; only the active controller acts. One pass over the partitions, no copies.
        """
        if not self.active:
            return 0
        usable = self._usable()
        partitions = ((str(topic.topic_id), state)
                      for topic in self.working.topics.values() for state in topic.partitions.values())
        records: list[MetadataRecord] = []
        for broker, share in sorted(election.imbalance(partitions).items()):
            if share.ratio <= imbalance_percentage / 100:
                continue
            moved = [self._partition_record(topic_id, new) for topic_id, state in share.led_elsewhere
                     if (new := election.preferred(state, usable)) is not None]
            if moved:
                log.info("leader imbalance of broker %d is %.0f%%: moving %d leaderships back to it", broker,
                         share.ratio * 100, len(moved))
            records += moved
        if records:
            self._commit(records)
        return len(records)

    # -- partition reassignment (KIP-455, KRaft's ReplicationControlManager) ------------------------------------

    def alter_partition_reassignments(self, wanted: Mapping[str, Mapping[int, Sequence[int] | None]],
                                      allow_replication_factor_change: bool = True
                                      ) -> dict[str, dict[int, ControllerError | None]]:
        """Kafka's AlterPartitionReassignments: per partition a target replica list to move to, or None to cancel
        the reassignment under way; topic -> partition -> None (accepted) or why not. The accepted changes go in
        one entry; a move whose target replicas are already in the ISR completes in it.

        A new target while a reassignment is under way replaces it: adding and removing are computed again
        against the current replicas (which still hold the earlier target and the replicas it removes), see
        `election.reassignment`."""
        self._check_active()
        usable = self._usable()
        results: dict[str, dict[int, ControllerError | None]] = {}
        records: list[MetadataRecord] = []
        for name, partitions in wanted.items():
            answers = results.setdefault(name, {})
            for partition, target in partitions.items():
                try:
                    topic, state = self._partition(name, partition)
                    if target is None:
                        new = self._cancel_reassignment(topic, state, usable)
                    else:
                        new = self._start_reassignment(topic, state, list(target), usable,
                                                       allow_replication_factor_change)
                except ControllerError as exc:
                    log.info("cannot reassign %s-%d: %s", name, partition, exc.message)
                    answers[partition] = exc
                    continue
                answers[partition] = None
                if new is not None:
                    records.append(self._partition_record(str(topic.topic_id), new))
        if records:
            self._commit(records)
        return results

    def _partition(self, name: str, partition: int) -> tuple[TopicImage, PartitionState]:
        topic = self.working.topics.get(name)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {name}.")
        state = topic.partitions.get(partition)
        if state is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                  f"Unable to find partition {name}:{partition}.")
        return topic, state

    def _start_reassignment(self, topic: TopicImage, state: PartitionState, target: list[int], usable: set[int],
                            allow_replication_factor_change: bool) -> PartitionState | None:
        """Kafka's changePartitionReassignment: a target of registered brokers (fenced ones too: the move waits
        for them), each once."""
        if not target:
            raise ControllerError(ErrorCode.invalid_replica_assignment,
                                  "The manual partition assignment includes an empty replica list.")
        previous = None
        for broker_id in sorted(target):
            if broker_id not in self.working.brokers and broker_id not in self.local_broker:
                raise ControllerError(ErrorCode.invalid_replica_assignment,
                                      f"The manual partition assignment includes broker {broker_id}, but no such "
                                      "broker is registered.")
            if broker_id == previous:
                raise ControllerError(ErrorCode.invalid_replica_assignment,
                                      f"The manual partition assignment includes the broker {broker_id} more than "
                                      "once.")
            previous = broker_id
        heading = {*state.replicas, *state.adding_replicas} - set(state.removing_replicas)
        if not allow_replication_factor_change and len(target) != len(heading):
            raise ControllerError(ErrorCode.invalid_replication_factor,
                                  f"The replication factor is changed from {len(heading)} to {len(target)} but "
                                  "allowReplicationFactorChange is false.")
        return election.change(state, usable, self._unclean(topic),
                               target=election.reassignment(state, target))

    def _cancel_reassignment(self, topic: TopicImage, state: PartitionState,
                             usable: set[int]) -> PartitionState | None:
        """Kafka's cancelPartitionReassignment: back to the replicas before the move, unless only the replicas
        being added are in the ISR and the topic allows no unclean election."""
        name = f"{topic.name}:{state.partition}"
        if not state.reassigning:
            raise ControllerError(ErrorCode.no_reassignment_in_progress,
                                  f"No partition reassignment is in progress for {name}.")
        assignment, isr = election.reverted(state)
        unclean = self._unclean(topic)
        if not isr and not unclean:
            raise ControllerError(ErrorCode.invalid_replica_assignment,
                                  f"Unable to revert partition assignment for {name} because it would require an "
                                  "unclean leader election.")
        return election.change(state, usable, unclean, isr, target=assignment)

    def list_partition_reassignments(self, wanted: Mapping[str, Iterable[int]] | None
                                     ) -> dict[str, dict[int, PartitionState]]:
        """Kafka's ListPartitionReassignments: topic -> partition -> state of the partitions being reassigned among
        those `wanted` (None: all); unknown topics and partitions, and those not moving, are left out."""
        self._check_active()
        topics = self.working.topics
        if wanted is None:
            wanted = {name: topic.partitions for name, topic in topics.items()}
        found: dict[str, dict[int, PartitionState]] = {}
        for name, partitions in wanted.items():
            topic = topics.get(name)
            if topic is None:
                continue
            for partition in partitions:
                state = topic.partitions.get(partition)
                if state is not None and state.reassigning:
                    found.setdefault(name, {})[partition] = state
        return found

    def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> PartitionState:
        """A partition leader's new ISR (Kafka's AlterPartition), checked in the order of Kafka's
        ReplicationControlManager; returns the partition's new (pending, then committed) state, or the current
        one when the ISR is unchanged."""
        self._check_active()
        topic = self.working.topics_by_id.get(topic_id)
        if topic is None:
            raise ControllerError(ErrorCode.unknown_topic_id, f"Topic id {topic_id} does not exist.")
        state = topic.partitions.get(partition)
        if state is None:
            raise ControllerError(ErrorCode.unknown_topic_or_partition,
                                  f"Partition {topic.name}-{partition} does not exist.")
        name = f"{topic.name}-{partition}"
        if leader_epoch != state.leader_epoch:
            raise ControllerError(ErrorCode.fenced_leader_epoch,
                                  f"{name}: leader epoch {leader_epoch} is not the current {state.leader_epoch}.")
        if broker_id != state.leader:
            raise ControllerError(ErrorCode.not_leader_or_follower,
                                  f"Broker {broker_id} is not the leader of {name} (broker {state.leader} is).")
        if partition_epoch != state.partition_epoch:
            raise ControllerError(ErrorCode.invalid_update_version,
                                  f"{name}: partition epoch {partition_epoch} is not the current "
                                  f"{state.partition_epoch}.")
        if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(state.replicas):
            raise ControllerError(ErrorCode.invalid_request,
                                  f"{name}: the ISR {new_isr} is not a set of its replicas {state.replicas}.")
        if state.leader not in new_isr:
            raise ControllerError(ErrorCode.invalid_request,
                                  f"{name}: the ISR {new_isr} leaves out its leader {state.leader}.")
        usable = self._usable()
        ineligible = [b for b in new_isr if b not in usable]
        if ineligible:
            raise ControllerError(ErrorCode.ineligible_replica,
                                  f"{name}: replicas {ineligible} are fenced, shutting down or not registered.")
        new = election.change(state, usable, self._unclean(topic), new_isr)
        if new is None:
            return state
        self._commit([self._partition_record(str(topic.topic_id), new)])
        return new

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
        brokers = sorted(self._usable())
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
        records += [self._partition_record(topic_id, _new_partition(p, replicas))
                    for p, replicas in sorted(assignment.items())]
        self._commit(records)
        return self.working.topics[spec.name]

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
        existing = self.working.topics.get(name)
        if existing is not None:
            return existing
        factor = max(1, replication_factor)
        if self.local_broker:
            factor = max(1, min(factor, self.quorum_voters))  # no voters at all: a lone node too
        if factor > 1 or not self.local_broker:
            _check_reachable(factor, sorted(self._usable()))
        created = self.create_topic(TopicSpec(name, partitions, factor, configs=configs))
        assert created is not None
        log.info("created %s with %d partitions (replication factor %d)", name, partitions, factor)
        return created

    _partition_record = staticmethod(partition_record)

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
            # Kafka continues the topic's pattern: start at partition 0's first replica, number on from `current`.
            brokers = sorted(self._usable())
            _check_reachable(factor, brokers)
            first = topic.partitions[0].replicas[0]
            start = next((i for i, b in enumerate(brokers) if b >= first), 0)
            replicas_for = election.place_replicas(brokers, len(new), factor, start, current)
        if validate_only:
            return
        topic_id = str(topic.topic_id)
        self._commit([self._partition_record(topic_id, _new_partition(p, r)) for p, r in replicas_for.items()])

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

    def alter_broker_configs(self, resource: str, changes: Mapping[str, str | None], *, replace: bool,
                             validate_only: bool = False) -> None:
        """Set (value) or delete (None) dynamic configs of broker `resource` (an id, or "" for the cluster-wide
        default), committed as BROKER ConfigRecords that every broker applies; `replace` drops keys not named.
        Only DYNAMIC_BROKER_KEYS change at run time: others are refused as Kafka refuses them."""
        self._check_active()
        if resource and not resource.isdigit():
            raise ControllerError(ErrorCode.invalid_request, f"Broker id must be an integer, but it is: {resource}")
        # INVALID_REQUEST for a bad value too, as Kafka answers (KAFKA-13609 keeps that code for compatibility).
        static = [key for key in changes if key not in DYNAMIC_BROKER_KEYS]
        if static:
            raise ControllerError(ErrorCode.invalid_request,
                                  f"Cannot update these configs dynamically: [{', '.join(sorted(static))}]")
        try:
            for key, value in changes.items():
                if value is not None:
                    BROKER_CONFIGS[key].parse(value)
        except ConfigError as exc:
            raise ControllerError(ErrorCode.invalid_request, str(exc)) from None
        current = self.working.broker_configs.get(resource, {})
        final = {} if replace else dict(current)
        for key, value in changes.items():
            if value is None:
                final.pop(key, None)
            else:
                final[key] = value
        records = [broker_config_record(resource, k, None) for k in current if k not in final]
        records += [broker_config_record(resource, k, v) for k, v in final.items() if current.get(k) != v]
        if records and not validate_only:
            self._commit(records)

    # -- ACLs (Kafka's AclControlManager) -----------------------------------------------------------------------

    def create_acls(self, acls: Sequence[AclBinding]) -> list[ControllerError | None]:
        """Add ACLs, one result each (None: created, or it existed already); every new one gets its id and all go in
        one entry. A binding Kafka refuses (an unknown code, an empty name, a CLUSTER resource not named
        kafka-cluster) fails alone with INVALID_REQUEST."""
        self._check_active()
        results: list[ControllerError | None] = []
        records: list[MetadataRecord] = []
        adding: set[AclBinding] = set()
        for acl in acls:
            try:
                acl.validate()
            except InvalidAcl as exc:
                results.append(ControllerError(ErrorCode.invalid_request, str(exc)))
                continue
            if acl not in adding and self.working.acls.id_of(acl) is None:
                adding.add(acl)
                records.append(acl_record(uuid.uuid4(), acl))
            results.append(None)
        if records:
            self._commit(records)
        return results

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | ControllerError]:
        """Remove every ACL each filter matches; per filter the ACLs it removed (an ACL two filters match is removed
        once and reported by both, as Kafka does), or INVALID_REQUEST for a filter with an UNKNOWN part. All
        removals go in one entry."""
        self._check_active()
        results: list[list[AclBinding] | ControllerError] = []
        removing: dict[uuid.UUID, None] = {}
        for acl_filter in filters:
            try:
                acl_filter.validate()
            except InvalidAcl as exc:
                results.append(ControllerError(ErrorCode.invalid_request, str(exc)))
                continue
            matched = [(acl_id, acl) for acl_id, acl in self.working.acls.items() if acl_filter.matches(acl)]
            removing.update(dict.fromkeys(acl_id for acl_id, _acl in matched))
            results.append([acl for _acl_id, acl in matched])
        if removing:
            self._commit([remove_acl_record(acl_id) for acl_id in removing])
        return results

    # -- SCRAM credentials (Kafka's ScramControlManager, KIP-554) ---------------------------------------------------

    def alter_user_scram_credentials(self, deletions: Sequence[tuple[str, int]],
                                     upsertions: Sequence[ScramUpsertion]) -> list[tuple[str, ControllerError | None]]:
        """Delete (user, mechanism type) and upsert credentials; one result per user, as Kafka answers: the deleted
        users, the upserted ones, then the refused ones. A user named twice in one request is refused
        (DUPLICATE_RESOURCE), whatever the mechanisms; the accepted changes go in one entry. The controller keeps
        StoredKey and ServerKey, computed here from the salted password the client sent (never a password)."""
        self._check_active()
        deleting: dict[str, str] = {}  # user -> mechanism name
        upserting: dict[str, tuple[ScramMechanism, ScramUpsertion]] = {}
        refused: dict[str, ControllerError] = {}
        for name, mechanism_type in deletions:
            if name in refused:
                continue
            if deleting.pop(name, None) is not None:
                refused[name] = _altered_twice()
                continue
            try:
                mechanism = _scram_mechanism(name, mechanism_type)
                if (mechanism.name, name) not in self.working.scram_credentials:
                    raise ControllerError(ErrorCode.resource_not_found,
                                          "Attempt to delete a user credential that does not exist")
            except ControllerError as exc:
                refused[name] = exc
                continue
            deleting[name] = mechanism.name
        for upsertion in upsertions:
            name = upsertion.name
            if name in refused:
                continue
            if deleting.pop(name, None) is not None or upserting.pop(name, None) is not None:
                refused[name] = _altered_twice()
                continue
            try:
                mechanism = _scram_mechanism(name, upsertion.mechanism)
                if upsertion.iterations < mechanism.min_iterations:
                    raise ControllerError(ErrorCode.unacceptable_credential, "Too few iterations")
                if upsertion.iterations > mechanism.max_iterations:
                    raise ControllerError(ErrorCode.unacceptable_credential, "Too many iterations")
            except ControllerError as exc:
                refused[name] = exc
                continue
            upserting[name] = (mechanism, upsertion)
        records = [remove_scram_credential_record(name, mechanism_name) for name, mechanism_name in deleting.items()]
        records += [scram_credential_record(name, mechanism.name, ScramCredential.from_salted_password(
                        mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations))
                    for name, (mechanism, upsertion) in upserting.items()]
        if records:
            self._commit(records)
        return [(name, None) for name in (*deleting, *upserting)] + list(refused.items())


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """One AlterUserScramCredentials upsertion: the client salted the password (`salted_password` = Hi(password,
    salt, iterations)), so the password itself never reaches the broker."""

    name: str
    mechanism: int  # Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512
    iterations: int
    salt: bytes
    salted_password: bytes


def _scram_mechanism(name: str, mechanism_type: int) -> ScramMechanism:
    """The mechanism of a type code, after Kafka's checks of the user name and the code."""
    if not name:
        raise ControllerError(ErrorCode.unacceptable_credential, "Username must not be empty")
    for mechanism in SCRAM_MECHANISMS.values():
        if mechanism.type == mechanism_type:
            return mechanism
    raise ControllerError(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")


def _altered_twice() -> ControllerError:
    return ControllerError(ErrorCode.duplicate_resource,
                           "A user credential cannot be altered twice in the same request")
