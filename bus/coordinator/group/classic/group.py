"""A classic group's state machine and bookkeeping (Kafka's GroupMetadata / ClassicGroup).

States and the transitions Kafka allows:

    Empty ---------------------> PreparingRebalance <------------------+
      ^                           |        ^                           |
      | (all members left)        v        | (join / leave / failure)  |
      +-------------------- CompletingRebalance ----> Stable ----------+
    any state -> Dead (deleted, or expired with no offsets left)

This module holds no timers and does no I/O: the classic protocol (`rebalance.py`, `protocol.py`) drives it and
decides when to persist. Committed offsets live apart (`group/offsets.py`); their expiry depends on the group's
state, decided here.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

from kio.schema.errors import ErrorCode

from bus.coordinator.group.classic.member import JoinResult, Member, SyncResult
from bus.coordinator.group.records import OffsetValue
from bus.protocol.consumer_protocol import subscribed_topics
from bus.protocol.topic_partition import TopicPartition

CONSUMER_PROTOCOL_TYPE = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
}


class IllegalTransition(RuntimeError):
    """A transition the state machine forbids: a coordinator bug, never a client error."""


def now_ms() -> int:
    return int(time.time() * 1000)


class ClassicGroup:
    def __init__(self, group_id: str, state: GroupState = GroupState.EMPTY,
                 clock: Callable[[], int] = now_ms) -> None:
        self.group_id = group_id
        self.clock = clock
        self.state = state
        self.state_timestamp: int | None = clock()
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: set[str] = set()  # got MEMBER_ID_REQUIRED, not yet rejoined
        self.pending_sync: set[str] = set()  # joined this generation, not yet sent SyncGroup
        self.supported_protocols: Counter[str] = Counter()
        self.subscribed: set[str] | None = None
        # Set when a member joins during the initial (delayed) rebalance, to extend the delay.
        self.new_member_added = False

    def __repr__(self) -> str:
        return (f"ClassicGroup({self.group_id!r}, {self.state.value}, generation={self.generation_id}, "
                f"members={list(self.members)})")

    # -- queries ---------------------------------------------------------------------------------

    def is_(self, state: GroupState) -> bool:
        return self.state is state

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def is_consumer_group(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE

    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.num_awaiting_join() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def generate_member_id(self, client_id: str, instance_id: str | None) -> str:
        return f"{instance_id if instance_id is not None else client_id}-{uuid.uuid4()}"

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's validateMember: a static member's request must carry its current member id."""
        if instance_id is not None:
            existing = self.static_members.get(instance_id)
            if existing is None:
                return ErrorCode.unknown_member_id
            if existing != member_id:
                return ErrorCode.fenced_instance_id
        if member_id not in self.members:
            return ErrorCode.unknown_member_id
        return None

    def supports_protocols(self, protocol_type: str, protocols: Iterable[str]) -> bool:
        """A joiner must speak the group's protocol type and one protocol every member supports."""
        names = set(protocols)
        if self.is_(GroupState.EMPTY):
            return bool(protocol_type) and bool(names)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(self.supported_protocols[n] == size for n in names)

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol among those all members support."""
        if not self.members:
            raise IllegalTransition(f"cannot select a protocol for empty group {self.group_id}")
        size = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == size}
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return votes.most_common(1)[0][0]

    def is_subscribed_to(self, topic: str) -> bool:
        """Unknown subscriptions count as subscribed for consumer groups (safe for OffsetDelete)."""
        if self.subscribed is None:
            return self.is_consumer_group
        return topic in self.subscribed

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return set()
        if self.protocol_name is None:
            return None
        try:
            topics: set[str] = set()
            for member in self.members.values():
                topics |= subscribed_topics(member.metadata(self.protocol_name))
            return topics
        except (ValueError, KeyError):
            return None

    def member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """The member list the leader gets in its JoinGroup answer (metadata of the chosen protocol)."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or self.protocol_name is None:
            raise IllegalTransition(f"no member metadata for group {self.group_id} in {self.state.value}")
        name = self.protocol_name
        return [(m.member_id, m.group_instance_id, m.metadata(name)) for m in self.members.values()]

    # -- transitions -----------------------------------------------------------------------------

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(f"group {self.group_id}: {self.state.value} -> {state.value} is not allowed")
        self.state = state
        self.state_timestamp = self.clock()

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.subscribed = self.compute_subscribed_topics()
            self.transition_to(GroupState.EMPTY)
        self.pending_sync.clear()

    # -- membership ------------------------------------------------------------------------------

    def add(self, member: Member, callback: Callable[[JoinResult], None] | None = None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise IllegalTransition(f"static member {member.group_instance_id} is already in the group")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names())
        member.awaiting_join = callback
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.supported_protocols.subtract(member.protocol_names())
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)
        return member

    def update_member(self, member: Member, protocols: Sequence[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, callback: Callable[[JoinResult], None] | None) -> None:
        self.supported_protocols.subtract(member.protocol_names())
        member.protocols = tuple((name, bytes(metadata)) for name, metadata in protocols)
        self.supported_protocols.update(member.protocol_names())
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.awaiting_join = callback

    def replace_static_member(self, instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """A static member came back with a fresh member id: it takes over the old one's place.

        Whoever still waits under the old id is answered FENCED_INSTANCE_ID at once, so a zombie
        duplicate of the instance shuts down instead of fighting over the assignment.
        """
        old = self.members.pop(old_member_id)
        self.complete_join(old, JoinResult(old_member_id, ErrorCode.fenced_instance_id))
        self.complete_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        new = Member(new_member_id, old.group_instance_id, old.client_id, old.client_host, old.rebalance_timeout_ms,
                     old.session_timeout_ms, old.protocol_type, old.protocols, old.assignment)
        self.members[new_member_id] = new
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[instance_id] = new_member_id
        if old_member_id in self.pending_sync:
            self.pending_sync.discard(old_member_id)
            self.pending_sync.add(new_member_id)
        return new

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False if nobody rejoined."""
        if self.leader_id is None:
            return False
        if self.members[self.leader_id].is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    def complete_join(self, member: Member, result: JoinResult) -> bool:
        callback, member.awaiting_join = member.awaiting_join, None
        if callback is None:
            return False
        callback(result)
        return True

    def complete_sync(self, member: Member, result: SyncResult) -> bool:
        callback, member.awaiting_sync = member.awaiting_sync, None
        if callback is None:
            return False
        callback(result)
        return True

    # -- offsets ---------------------------------------------------------------------------------

    def validate_offset_commit(self, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode | None:
        """Kafka 4's ClassicGroup.validateOffsetCommit (non-transactional)."""
        if self.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if generation_id < 0 and self.is_(GroupState.EMPTY):
            return None  # admin client, or a consumer managing its own assignment
        if generation_id >= 0 or member_id or instance_id is not None:
            error = self.validate_member(member_id, instance_id)
            if error is not None:
                return error
            if generation_id != self.generation_id:
                return ErrorCode.illegal_generation
        elif not self.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        if self.is_(GroupState.COMPLETING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return None

    def expired_offsets(self, offsets: Mapping[TopicPartition, OffsetValue], now: int,
                        retention_ms: int) -> list[TopicPartition]:
        """The group's offsets past retention, with Kafka 2.1+ (KIP-211) semantics.

        An Empty group's offsets expire `retention` after the group became Empty; a Stable consumer
        group's offsets of topics it no longer subscribes to expire `retention` after their commit;
        a standalone (no protocol) group's by commit time; an explicit v1 expire timestamp wins.
        """
        if self.protocol_type is None:
            return expired_by_commit_time(offsets, now, retention_ms)
        if self.is_(GroupState.EMPTY):
            state_ts = self.state_timestamp
            return _expired(offsets, now, retention_ms,
                            lambda value: state_ts if state_ts is not None else value.commit_timestamp)
        if self.is_consumer_group and self.subscribed is not None and self.is_(GroupState.STABLE):
            subscribed = self.subscribed
            return _expired({tp: v for tp, v in offsets.items() if tp[0] not in subscribed}, now, retention_ms,
                            lambda value: value.commit_timestamp)
        return []


def expired_by_commit_time(offsets: Mapping[TopicPartition, OffsetValue], now: int,
                           retention_ms: int) -> list[TopicPartition]:
    """Offsets of a group with no protocol (or no classic group at all) expire `retention` after their commit."""
    return _expired(offsets, now, retention_ms, lambda value: value.commit_timestamp)


def _expired(offsets: Mapping[TopicPartition, OffsetValue], now: int, retention_ms: int,
             base: Callable[[OffsetValue], int]) -> list[TopicPartition]:
    expired = []
    for tp, value in offsets.items():
        if value.expire_timestamp is not None:
            if now >= value.expire_timestamp:
                expired.append(tp)
        elif now - base(value) >= retention_ms:
            expired.append(tp)
    return expired
