"""Reading back a `__consumer_offsets` partition: the groups and offsets it holds (Kafka's GroupMetadataManager
replay, on election).

The latest record per key wins and a tombstone deletes; offsets written by transactions still open when the
partition was read stay pending until their marker. Nothing here touches a live coordinator: it turns records
into groups and offsets, and the group coordinator installs them (`GroupCoordinator._load_partition`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from bus.coordinator.group import records as rec
from bus.coordinator.group.classic.group import ClassicGroup, GroupState
from bus.coordinator.group.classic.member import Member
from bus.coordinator.group.offset_store import StoredRecord
from bus.coordinator.group.offsets import Offsets
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

LOAD_CHUNK = 2000  # records replayed between two turns of the loop while a partition loads


@dataclass(slots=True)
class ReplayedPartition:
    """What one partition's records add up to: the latest metadata and offsets per group."""

    partition: int
    metadata: dict[str, rec.GroupValue | None] = field(default_factory=dict)
    offsets: dict[str, Offsets] = field(default_factory=dict)
    open_transactions: dict[int, list[Any]] = field(default_factory=dict)  # filled by the store as it reads
    count: int = 0

    def replay(self, records: Iterable[StoredRecord]) -> Iterator[None]:
        """Apply the records in log order; yields every LOAD_CHUNK records so an election's load does not hold
        up the loop."""
        for stored in records:
            self.count += 1
            self._apply(stored)
            if self.count % LOAD_CHUNK == 0:
                yield

    def _apply(self, stored: StoredRecord) -> None:
        try:
            key = rec.decode_key(stored.key)
            if isinstance(key, rec.OffsetKey):
                group_offsets = self.offsets.setdefault(key.group, {})
                tp = TopicPartition(key.topic, key.partition)
                if stored.value is None:
                    group_offsets.pop(tp, None)
                else:
                    group_offsets[tp] = rec.decode_offset_value(stored.value)
            elif isinstance(key, rec.GroupKey):
                self.metadata[key.group] = None if stored.value is None else rec.decode_group_value(stored.value)
        except rec.RecordFormatError as exc:
            log.warning("skipping unreadable __consumer_offsets-%d record at offset %d: %s",
                        stored.partition, stored.offset, exc)

    def pending_offsets(self) -> Iterator[tuple[int, str, TopicPartition, rec.OffsetValue]]:
        """Offsets of transactions still open at load, as (producer id, group, partition, offset): they stay
        pending until their marker (or abort)."""
        for producer_id, entries in self.open_transactions.items():
            for offset, key, value in entries:
                if key is None or value is None:
                    continue
                try:
                    decoded = rec.decode_key(key)
                    if isinstance(decoded, rec.OffsetKey):
                        yield (producer_id, decoded.group, TopicPartition(decoded.topic, decoded.partition),
                               rec.decode_offset_value(value))
                except rec.RecordFormatError as exc:
                    log.warning("skipping unreadable pending __consumer_offsets-%d record at offset %d: %s",
                                self.partition, offset, exc)

    def groups(self, partition_for: Callable[[str], int]) -> Iterator[tuple[str, rec.GroupValue | None, Offsets]]:
        """(group id, its last metadata, its offsets) of every group the partition holds."""
        for group_id in {*self.metadata, *self.offsets}:
            if partition_for(group_id) != self.partition:
                continue  # written under another partition count; Kafka ignores these too
            value = self.metadata.get(group_id)
            group_offsets = self.offsets.get(group_id, {})
            if value is None and not group_offsets:
                continue
            yield group_id, value, group_offsets


def restore_group(group_id: str, value: rec.GroupValue | None, clock: Callable[[], int]) -> ClassicGroup:
    """A group as its last metadata record left it; one with offsets only is an Empty (simple) group,
    as Kafka creates on replay."""
    state = GroupState.STABLE if value is not None and value.members else GroupState.EMPTY
    group = ClassicGroup(group_id, state, clock=clock)
    if value is not None:
        group.generation_id = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        group.state_timestamp = value.current_state_timestamp if value.current_state_timestamp >= 0 else None
        for m in value.members:
            protocols = ((value.protocol or "", m.subscription),)
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout,
                            m.session_timeout, value.protocol_type, protocols, m.assignment)
            group.add(member)
        group.leader_id = value.leader if value.leader in group.members else group.leader_id
        group.subscribed = group.compute_subscribed_topics()
    return group
