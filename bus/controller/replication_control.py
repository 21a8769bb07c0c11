"""Partition leadership and ISRs (the leadership half of Kafka's ReplicationControlManager).

Every leader or ISR change is one committed `partition` record carrying the partition's whole new state (Kafka's
PartitionChangeRecord, written in full). A broker fenced (or shutting down) leaves every ISR that has other members
and hands its leaderships to the next usable ISR replica (`leave`, `election`); a broker that registers or is
unfenced again takes the leadership of every leaderless partition it may lead (`elect_leaderless`). All changes of
one event go in one entry. Partition leaders shrink and expand their ISR through `alter_partition` (AlterPartition),
checked against the epochs they last saw.

Leadership that moved away stays away when its broker returns (Kafka does not rebalance on unfence): ElectLeaders
(`elect_leaders`, PREFERRED or UNCLEAN) moves it back on request, and `balance_leaders`, run every
`leader.imbalance.check.interval.seconds` when `auto.leader.rebalance.enable`, does so for every broker whose share
of preferred partitions led elsewhere exceeds `leader.imbalance.per.broker.percentage` (Kafka's auto rebalance).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping

from kio.schema.errors import ErrorCode

from bus.controller import election
from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import PartitionState, TopicImage, partition_record
from bus.controller.metadata_log.record_log import MetadataRecord

log = logging.getLogger(__name__)

PREFERRED = 0  # ElectLeaders' election types (Kafka's ElectionType)
UNCLEAN = 1


class ReplicationControlManager:
    def __init__(self, context: ControlContext, unclean_leader_election: bool) -> None:
        """`unclean_leader_election`: the broker's `unclean.leader.election.enable` (a topic's own config wins)."""
        self._context = context
        self.unclean_leader_election = unclean_leader_election

    def unclean(self, topic: TopicImage) -> bool:
        """`unclean.leader.election.enable` for the topic: its own config, else the broker's."""
        value = topic.configs.get("unclean.leader.election.enable")
        return self.unclean_leader_election if value is None else value.strip().lower() == "true"

    def _partition_changes(
        self, decide: Callable[[TopicImage, PartitionState], PartitionState | None]
    ) -> list[MetadataRecord]:
        """A full partition record for every partition `decide` changes."""
        return [partition_record(str(topic.topic_id), new)
                for topic in self._context.working.topics.values() for state in topic.partitions.values()
                if (new := decide(topic, state)) is not None]

    def leave(self, gone: set[int]) -> list[MetadataRecord]:
        """The brokers `gone` leave every ISR with other members and every leadership (Kafka's
        handleBrokerFenced)."""
        usable = self._context.usable_brokers() - gone

        def decide(topic: TopicImage, state: PartitionState) -> PartitionState | None:
            if state.leader not in gone and gone.isdisjoint(state.isr):
                return None
            return election.without_brokers(state, gone, usable, self.unclean(topic))
        return self._partition_changes(decide)

    def elect_leaderless(self, back: int) -> list[MetadataRecord]:
        """Leaders for the partitions without one, now that broker `back` is usable again (Kafka's
        handleBrokerUnfenced)."""
        usable = self._context.usable_brokers() | {back}
        return self._partition_changes(lambda topic, state: election.change(state, usable, self.unclean(topic))
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
        self._context.check_active()
        if election_type not in (PREFERRED, UNCLEAN):
            raise ControllerError(ErrorCode.invalid_request, f"Unknown election type {election_type}")
        every = wanted is None
        if wanted is None:
            wanted = {name: sorted(topic.partitions) for name, topic in self._context.working.topics.items()}
        usable = self._context.usable_brokers()
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
                elected[(name, partition)] = partition_record(topic_id, state)
                answers[partition] = None
        if elected:
            log.info("%s election for %s", "preferred" if election_type == PREFERRED else "unclean",
                     ", ".join(f"{name}-{partition}" for name, partition in elected))
            self._context.commit(list(elected.values()))
        return results

    def _elect_one(self, name: str, partition: int, election_type: int,
                   usable: set[int]) -> tuple[str, PartitionState]:
        """One partition's new state under `election_type` (ReplicationControlManager.electLeader), or the
        ControllerError Kafka answers for it."""
        topic = self._context.working.topics.get(name)
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
        if not self._context.active:
            return 0
        usable = self._context.usable_brokers()
        partitions = ((str(topic.topic_id), state)
                      for topic in self._context.working.topics.values() for state in topic.partitions.values())
        records: list[MetadataRecord] = []
        for broker, share in sorted(election.imbalance(partitions).items()):
            if share.ratio <= imbalance_percentage / 100:
                continue
            moved = [partition_record(topic_id, new) for topic_id, state in share.led_elsewhere
                     if (new := election.preferred(state, usable)) is not None]
            if moved:
                log.info("leader imbalance of broker %d is %.0f%%: moving %d leaderships back to it", broker,
                         share.ratio * 100, len(moved))
            records += moved
        if records:
            self._context.commit(records)
        return len(records)

    def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> PartitionState:
        """A partition leader's new ISR (Kafka's AlterPartition), checked in the order of Kafka's
        ReplicationControlManager; returns the partition's new (pending, then committed) state, or the current
        one when the ISR is unchanged."""
        self._context.check_active()
        topic = self._context.working.topics_by_id.get(topic_id)
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
        usable = self._context.usable_brokers()
        ineligible = [b for b in new_isr if b not in usable]
        if ineligible:
            raise ControllerError(ErrorCode.ineligible_replica,
                                  f"{name}: replicas {ineligible} are fenced, shutting down or not registered.")
        new = election.change(state, usable, self.unclean(topic), new_isr)
        if new is None:
            return state
        self._context.commit([partition_record(str(topic.topic_id), new)])
        return new
