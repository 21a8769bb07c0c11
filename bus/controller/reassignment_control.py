"""Partition reassignment (KIP-455, the reassignment part of KRaft's ReplicationControlManager).

Replica sets change only through reassignment (`alter_partition_reassignments`, KIP-455 as KRaft runs it): a move
adds its target replicas to the partition at once, as `adding_replicas`, and completes in whichever later change
finds every target replica in the ISR, usually the AlterPartition that takes the last one in (`election.change`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from bus.controller import election
from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import PartitionState, TopicImage, partition_record
from bus.controller.metadata_log.record_log import MetadataRecord

log = logging.getLogger(__name__)


class ReassignmentControlManager:
    def __init__(self, context: ControlContext, unclean: Callable[[TopicImage], bool]) -> None:
        """`unclean`: whether a topic allows unclean leader election (`ReplicationControlManager.unclean`)."""
        self._context = context
        self._unclean = unclean

    def alter_partition_reassignments(self, wanted: Mapping[str, Mapping[int, Sequence[int] | None]],
                                      allow_replication_factor_change: bool = True
                                      ) -> dict[str, dict[int, ControllerError | None]]:
        """Kafka's AlterPartitionReassignments: per partition a target replica list to move to, or None to cancel
        the reassignment under way; topic -> partition -> None (accepted) or why not. The accepted changes go in
        one entry; a move whose target replicas are already in the ISR completes in it.

        A new target while a reassignment is under way replaces it: adding and removing are computed again
        against the current replicas (which still hold the earlier target and the replicas it removes), see
        `election.reassignment`."""
        self._context.check_active()
        usable = self._context.usable_brokers()
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
                    records.append(partition_record(str(topic.topic_id), new))
        if records:
            self._context.commit(records)
        return results

    def _partition(self, name: str, partition: int) -> tuple[TopicImage, PartitionState]:
        topic = self._context.working.topics.get(name)
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
            if broker_id not in self._context.working.brokers and broker_id not in self._context.local_broker:
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
        self._context.check_active()
        topics = self._context.working.topics
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
