"""What the consumer reads: its subscription (topics or a pattern) and, per assigned partition, where.

Java's SubscriptionState. The group coordinator changes the assignment, the fetcher reads and moves
positions, the application seeks and pauses; all on the consumer's own thread, so there is no lock
here (KafkaConsumer is not thread-safe, as in Java). `assign()` and `subscribe()` exclude each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from bus.client.errors import IllegalStateError
from bus.protocol.topic_partition import TopicPartition


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class OffsetAndMetadata(NamedTuple):
    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(slots=True)
class PartitionState:
    """Fetch state of one assigned partition; `position` None means it must be looked up first."""

    position: int | None = None
    leader_epoch: int = -1
    paused: bool = False
    reset: str | None = None  # pending "earliest"/"latest" lookup
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    pending_revocation: bool = False

    @property
    def fetchable(self) -> bool:
        return not self.paused and self.position is not None and self.reset is None and not self.pending_revocation


class ConsumerRebalanceListener:
    """Java's listener: called from poll() (and close()) on the consumer's thread."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Before the partitions go: the last chance to commit what was processed."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """After a rebalance, with the partitions newly added (cooperative) or all of them (eager)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """The member fell out of the group: the partitions may already be someone else's; do not commit."""
        self.on_partitions_revoked(lost)


class SubscriptionState:
    """Subscribed topics or pattern, the assignment, and each assigned partition's state."""

    NONE, AUTO_TOPICS, AUTO_PATTERN, USER_ASSIGNED = range(4)

    def __init__(self, default_reset: str) -> None:
        self.default_reset = default_reset
        self.kind = self.NONE
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.listener: Any = ConsumerRebalanceListener()
        self.assignment: dict[TopicPartition, PartitionState] = {}

    # -- subscription ---------------------------------------------------------------------------

    def _set_kind(self, kind: int) -> None:
        if self.kind not in (self.NONE, kind):
            raise IllegalStateError("subscription to topics, partitions and pattern are mutually exclusive")
        self.kind = kind

    def subscribe(self, topics: Iterable[str], listener: Any) -> bool:
        self._set_kind(self.AUTO_TOPICS)
        new = set(topics)
        changed = new != self.topics
        self.topics = new
        self.listener = listener or ConsumerRebalanceListener()
        return changed

    def subscribe_pattern(self, pattern: re.Pattern[str], listener: Any) -> None:
        self._set_kind(self.AUTO_PATTERN)
        self.pattern = pattern
        self.listener = listener or ConsumerRebalanceListener()

    def match_pattern(self, all_topics: Iterable[str], exclude_internal: bool, internal: set[str]) -> bool:
        """Update the topics a pattern subscription covers; True if they changed."""
        assert self.pattern is not None
        matched = {t for t in all_topics if self.pattern.fullmatch(t) and not (exclude_internal and t in internal)}
        changed = matched != self.topics
        self.topics = matched
        return changed

    def unsubscribe(self) -> None:
        self.kind = self.NONE
        self.topics = set()
        self.pattern = None
        self.assignment = {}

    @property
    def group_managed(self) -> bool:
        return self.kind in (self.AUTO_TOPICS, self.AUTO_PATTERN)

    # -- assignment -----------------------------------------------------------------------------

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_kind(self.USER_ASSIGNED)
        wanted = [TopicPartition(*tp) for tp in partitions]
        self.topics = {tp.topic for tp in wanted}
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in wanted}
        if not wanted:
            self.kind = self.NONE

    def assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        """Set the group's assignment; partitions kept keep their position (cooperative rebalances)."""
        self.assignment = {tp: self.assignment.get(tp) or PartitionState() for tp in partitions}

    def state(self, tp: TopicPartition) -> PartitionState:
        state = self.assignment.get(tp)
        if state is None:
            raise IllegalStateError(f"no current assignment for partition {tp.topic}-{tp.partition}")
        return state

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int = -1) -> None:
        state = self.state(tp)
        state.position = offset
        state.leader_epoch = leader_epoch
        state.reset = None

    def request_reset(self, tp: TopicPartition, strategy: str | None = None) -> None:
        self.state(tp).reset = strategy or self.default_reset

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, state in self.assignment.items() if state.fetchable]

    def needs_position(self) -> list[TopicPartition]:
        return [tp for tp, state in self.assignment.items() if state.position is None and state.reset is None]

    def needs_reset(self) -> list[TopicPartition]:
        return [tp for tp, state in self.assignment.items() if state.reset is not None]

    def positions(self) -> dict[TopicPartition, int]:
        """Consumed positions of assigned partitions: what auto-commit and commit_sync() commit."""
        return {tp: state.position for tp, state in self.assignment.items()
                if state.position is not None and state.reset is None}
