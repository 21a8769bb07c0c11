"""The classic group coordinator (Kafka's GroupCoordinator): join, sync, heartbeat, leave, and the
checks in front of offsets (kept apart, by `OffsetMetadataManager`, as Kafka keeps them).

Everything runs on the broker's event loop, so there are no locks: a request handler calls in, the
coordinator updates the group and either answers at once or parks the answer callback on the member
(JoinGroup waits for the rebalance, SyncGroup for the leader's assignment). Kafka's purgatories become
`loop.call_later` timers:

* heartbeat expiry, one per member (session timeout; 5 minutes for a member still in its first join);
* pending-member expiry for ids handed out with MEMBER_ID_REQUIRED;
* the join timer of a rebalance (rebalance timeout, completed early once every member rejoined;
  the first rebalance of an empty group waits `group.initial.rebalance.delay.ms`, extended while
  new members keep arriving);
* the sync timer (members that never send SyncGroup are removed and the group rebalances again).

Group metadata and offsets are written to `__consumer_offsets` before the answer; when the partition has
followers, the answer (and the in-memory change) waits until its high watermark covers the write. The
coordinator serves the groups of the partitions this node leads: it loads a partition when it becomes its
leader and drops its groups when it stops (`loads`, Kafka's onElection / onResignation).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from bus.coordinator.group import records as rec
from bus.coordinator.group.group import (
    CONSUMER_PROTOCOL_TYPE,
    ClassicGroup,
    GroupState,
    expired_by_commit_time,
    now_ms,
)
from bus.coordinator.group.member import JoinCallback, JoinResult, Member, SyncCallback, SyncResult
from bus.coordinator.group.offset_store import OFFSETS_TOPIC, StoredRecord, StoreError, group_error, offset_error
from bus.coordinator.group.offsets import CommitResults, OffsetMetadataManager, Offsets
from bus.coordinator.partition_loads import PartitionLoads
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")
GROUP_TYPE_CLASSIC = "classic"
GROUP_TYPE_CONSUMER = "consumer"
LOAD_CHUNK = 2000  # records replayed between two turns of the loop while a partition loads


class Store(Protocol):
    """What the coordinator needs of `__consumer_offsets` (OffsetStore, or a fake in unit tests)."""

    @property
    def num_partitions(self) -> int: ...

    def partition_for(self, group_id: str) -> int: ...

    def ensure_topic(self) -> None: ...

    def is_local(self, partition: int) -> bool: ...

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int: ...

    def written(self, partition: int, next_offset: int) -> Awaitable[None] | None: ...

    def read_partition(self, partition: int, open_transactions: dict[int, list[Any]] | None = None) -> Any: ...


class ModernGroups(Protocol):
    """The KIP-848 consumer-group coordinator, as far as offsets and the admin APIs need it.

    Kafka has one group namespace: a group id belongs either to a classic group (this coordinator)
    or to a consumer group (ConsumerGroupHeartbeat); offsets of both live in `__consumer_offsets`
    and are kept here.
    """

    @property
    def groups(self) -> Mapping[str, Any]:  # group id -> group with `.state` and `.members`
        ...

    def is_consumer_group(self, group_id: str) -> bool: ...

    def validate_member(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None: ...

    def delete(self, group_id: str) -> ErrorCode: ...


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    new_member_join_timeout_ms: int = 300000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    max_group_size: int = 2**31 - 1

    @classmethod
    def from_broker(cls, config: Any) -> GroupConfig:
        return cls(
            min_session_timeout_ms=int(config["group.min.session.timeout.ms"]),
            max_session_timeout_ms=int(config["group.max.session.timeout.ms"]),
            initial_rebalance_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
            offsets_retention_ms=int(config["offsets.retention.minutes"]) * 60 * 1000,
            offsets_retention_check_interval_ms=int(config["offsets.retention.check.interval.ms"]),
            offset_metadata_max_bytes=int(config["offset.metadata.max.bytes"]),
            max_group_size=int(config["group.max.size"]),
        )


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = False  # JoinGroup v4+, dynamic members
    supports_skip_assignment: bool = False  # JoinGroup v9+
    reason: str | None = None


@dataclass(slots=True)
class _JoinTimer:
    handle: asyncio.TimerHandle
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


def pending_answer() -> tuple[asyncio.Future[T], Callable[[T], None]]:
    """A future and the callback that resolves it; resolving twice, or after cancellation, is a no-op.

    The connection cancels its task (and so the awaited future) when the client disconnects while a
    JoinGroup or SyncGroup is parked; the coordinator may still answer later and must not fail.
    """
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()

    def respond(value: T) -> None:
        if not future.done():
            future.set_result(value)

    return future, respond


class GroupCoordinator:
    def __init__(self, store: Store, config: GroupConfig, *, clock: Callable[[], int] = now_ms) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.groups: dict[str, ClassicGroup] = {}
        self.active = False
        self.loads = PartitionLoads(OFFSETS_TOPIC, self._load_partition, self._unload_partition)
        self._join_timers: dict[str, _JoinTimer] = {}
        self._sync_timers: dict[str, asyncio.TimerHandle] = {}
        self._pending_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}
        self._expiry_task: asyncio.Task[None] | None = None
        self._stores: set[asyncio.Task[None]] = set()  # assignments waiting for their followers
        # The KIP-848 coordinator sharing the group namespace, wired in by the broker.
        self.modern: ModernGroups | None = None
        self.offsets = OffsetMetadataManager(store, config.offset_metadata_max_bytes)
        self.offsets.serves = lambda group_id: self.loads.error(self.store.partition_for(group_id)) is None

    def is_active_classic_group(self, group_id: str) -> bool:
        """A classic group with members owns its id: KIP-848 heartbeats for it are refused (as in Kafka,
        which only converts an Empty classic group into a consumer group)."""
        group = self.groups.get(group_id)
        return group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD)

    def _is_consumer_group(self, group_id: str) -> bool:
        return self.modern is not None and self.modern.is_consumer_group(group_id)

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create `__consumer_offsets` if needed and load every partition led here before serving; from then
        on partitions load and unload as leadership moves (`loads.on_leadership`)."""
        self.store.ensure_topic()
        self.active = True
        await self.loads.load_all(p for p in range(self.store.num_partitions) if self.store.is_local(p))
        self._expiry_task = asyncio.create_task(self._expire_forever())

    async def stop(self) -> None:
        self.active = False
        self.loads.close()
        if self._expiry_task:
            self._expiry_task.cancel()
        for task in self._stores:
            task.cancel()
        for timer in self._join_timers.values():
            timer.handle.cancel()
        for handle in [*self._sync_timers.values(), *self._pending_timers.values()]:
            handle.cancel()
        for group in self.groups.values():
            for member in group.members.values():
                _cancel(member)

    def _load_partition(self, partition: int) -> Iterator[None]:
        """Replay one `__consumer_offsets` partition (the latest record per key wins) and install its groups;
        yields every LOAD_CHUNK records so an election's load does not hold up the loop."""
        metadata: dict[str, rec.GroupValue | None] = {}
        offsets: dict[str, Offsets] = {}
        open_transactions: dict[int, list[Any]] = {}
        count = 0
        for stored in self.store.read_partition(partition, open_transactions):
            count += 1
            self._replay(stored, metadata, offsets)
            if count % LOAD_CHUNK == 0:
                yield
        self._unload_partition(partition)  # a reload (resigned and elected again) starts from the log alone
        self._restore_pending(partition, open_transactions)
        loaded = 0
        for group_id in {*metadata, *offsets}:
            if self.store.partition_for(group_id) != partition:
                continue  # written under another partition count; Kafka ignores these too
            value = metadata.get(group_id)
            group_offsets = offsets.get(group_id, {})
            if value is None and not group_offsets:
                continue
            self._install(group_id, value)
            self.offsets.load(group_id, group_offsets)
            loaded += 1
        if count:
            log.info("loaded %d groups from %d records of __consumer_offsets-%d", loaded, count, partition)

    def _unload_partition(self, partition: int) -> None:
        """This node no longer coordinates the partition's groups: members waiting on a join or sync are told
        NOT_COORDINATOR (they rediscover the coordinator), timers stop, groups and offsets are forgotten."""
        for group_id in [g for g in self.groups if self.store.partition_for(g) == partition]:
            group = self.groups[group_id]
            for member in group.members.values():
                _cancel(member)
                group.complete_join(member, JoinResult(member.member_id, ErrorCode.not_coordinator))
                group.complete_sync(member, SyncResult(ErrorCode.not_coordinator))
            self._forget(group)
        self.offsets.unload(g for g in self.offsets.group_ids() if self.store.partition_for(g) == partition)

    def _restore_pending(self, partition: int, open_transactions: dict[int, list[Any]]) -> None:
        """Offsets of transactions still open at load stay pending until their marker (or abort)."""
        for producer_id, entries in open_transactions.items():
            for offset, key, value in entries:
                if key is None or value is None:
                    continue
                try:
                    decoded = rec.decode_key(key)
                    if isinstance(decoded, rec.OffsetKey):
                        self.offsets.load_pending(producer_id, decoded.group,
                                                  TopicPartition(decoded.topic, decoded.partition),
                                                  rec.decode_offset_value(value))
                except rec.RecordFormatError as exc:
                    log.warning("skipping unreadable pending __consumer_offsets-%d record at offset %d: %s",
                                partition, offset, exc)

    @staticmethod
    def _replay(stored: StoredRecord, metadata: dict[str, rec.GroupValue | None],
                offsets: dict[str, Offsets]) -> None:
        try:
            key = rec.decode_key(stored.key)
            if isinstance(key, rec.OffsetKey):
                group_offsets = offsets.setdefault(key.group, {})
                tp = TopicPartition(key.topic, key.partition)
                if stored.value is None:
                    group_offsets.pop(tp, None)
                else:
                    group_offsets[tp] = rec.decode_offset_value(stored.value)
            elif isinstance(key, rec.GroupKey):
                metadata[key.group] = None if stored.value is None else rec.decode_group_value(stored.value)
        except rec.RecordFormatError as exc:
            log.warning("skipping unreadable __consumer_offsets-%d record at offset %d: %s",
                        stored.partition, stored.offset, exc)

    def _install(self, group_id: str, value: rec.GroupValue | None) -> None:
        """A group as its last metadata record left it; one with offsets only is an Empty (simple) group,
        as Kafka creates on replay."""
        state = GroupState.STABLE if value is not None and value.members else GroupState.EMPTY
        group = ClassicGroup(group_id, state, clock=self.clock)
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
        self.groups[group_id] = group
        for member in group.members.values():
            self._reschedule_heartbeat(group, member, member.session_timeout_ms)

    # -- shared checks ---------------------------------------------------------------------------

    def group_status_error(self, group_id: str | None, *, allow_empty: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus: the id is valid and this broker coordinates it, loaded."""
        if group_id is None or (not allow_empty and not group_id):
            return ErrorCode.invalid_group_id
        if not self.active:
            return ErrorCode.coordinator_not_available
        return self.loads.error(self.store.partition_for(group_id))

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """FindCoordinator's answer for a group key: None if this broker is its coordinator."""
        if not self.active or self.loads.error(self.store.partition_for(group_id)) is not None:
            return ErrorCode.coordinator_not_available
        return None

    # -- timers ----------------------------------------------------------------------------------

    @staticmethod
    def _later(delay_ms: int, callback: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, _guarded, callback, *args)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        """Kafka's completeAndScheduleNextExpiration: the member proved alive; expect it again in time."""
        _cancel(member)
        member.heartbeat_satisfied = False
        member.timer = self._later(timeout_ms, self._on_heartbeat_expired, group, member)

    def _on_heartbeat_expired(self, group: ClassicGroup, member: Member) -> None:
        member.timer = None
        if group.is_(GroupState.DEAD) or group.members.get(member.member_id) is not member:
            return
        if not member.has_satisfied_heartbeat():
            log.info("member %s in group %s has failed, removing it from the group", member.member_id,
                     group.group_id)
            self._remove_member_and_update_group(group, member, "heartbeat expiration")

    def _schedule_pending_expiry(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        key = (group.group_id, member_id)
        old = self._pending_timers.pop(key, None)
        if old:
            old.cancel()
        self._pending_timers[key] = self._later(timeout_ms, self._on_pending_expired, group, member_id)

    def _on_pending_expired(self, group: ClassicGroup, member_id: str) -> None:
        self._pending_timers.pop((group.group_id, member_id), None)
        if group.is_(GroupState.DEAD) or member_id not in group.pending_members:
            return
        log.info("pending member %s in group %s has been removed after session timeout", member_id, group.group_id)
        self._remove_pending_member(group, member_id)

    def _schedule_join(self, group: ClassicGroup, timeout_ms: int) -> None:
        self._cancel_join_timer(group)
        handle = self._later(timeout_ms, self._on_join_timeout, group)
        self._join_timers[group.group_id] = _JoinTimer(handle, initial=False)

    def _schedule_initial_join(self, group: ClassicGroup, delay_ms: int, remaining_ms: int) -> None:
        self._cancel_join_timer(group)
        handle = self._later(delay_ms, self._on_join_timeout, group)
        self._join_timers[group.group_id] = _JoinTimer(handle, True, delay_ms, remaining_ms)

    def _cancel_join_timer(self, group: ClassicGroup) -> None:
        timer = self._join_timers.pop(group.group_id, None)
        if timer:
            timer.handle.cancel()

    def _on_join_timeout(self, group: ClassicGroup) -> None:
        timer = self._join_timers.pop(group.group_id, None)
        if timer is None or self.groups.get(group.group_id) is not group:
            return
        if timer.initial and group.new_member_added and timer.remaining_ms != 0:
            # InitialDelayedJoin: members are still arriving, wait a little longer (bounded).
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, timer.remaining_ms)
            self._schedule_initial_join(group, delay, max(timer.remaining_ms - timer.delay_ms, 0))
            return
        self._complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        """DelayedJoin.tryComplete: finish the join phase early once every member has rejoined."""
        timer = self._join_timers.get(group.group_id)
        if timer is None or timer.initial or not group.is_(GroupState.PREPARING_REBALANCE):
            return
        if group.has_all_members_joined():
            self._cancel_join_timer(group)
            self._complete_join(group)

    def _schedule_sync_timeout(self, group: ClassicGroup) -> None:
        self._cancel_sync_timer(group)
        self._sync_timers[group.group_id] = self._later(
            group.rebalance_timeout_ms(), self._on_sync_timeout, group, group.generation_id
        )

    def _cancel_sync_timer(self, group: ClassicGroup) -> None:
        handle = self._sync_timers.pop(group.group_id, None)
        if handle:
            handle.cancel()

    def _on_sync_timeout(self, group: ClassicGroup, generation_id: int) -> None:
        self._sync_timers.pop(group.group_id, None)
        if generation_id != group.generation_id or group.state not in (GroupState.COMPLETING_REBALANCE,
                                                                      GroupState.STABLE):
            return
        if group.pending_sync:
            missing = sorted(group.pending_sync)
            for member_id in missing:
                member = group.remove(member_id)
                if member:
                    _cancel(member)
            log.info("group %s removed members who never sent SyncGroup: %s", group.group_id, missing)
            self._prepare_rebalance(group, f"removing {missing} on pending sync request expiration")

    # -- rebalance core --------------------------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.is_(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        group.pending_sync.clear()
        self._cancel_sync_timer(group)
        initial = group.is_(GroupState.EMPTY)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info("preparing to rebalance group %s with old generation %d (reason: %s)", group.group_id,
                 group.generation_id, reason)
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, max(group.rebalance_timeout_ms() - delay, 0))
        else:
            self._schedule_join(group, group.rebalance_timeout_ms())
            self._try_complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """onCompleteJoin: drop dynamic members that did not rejoin, start the next generation."""
        for member in group.not_yet_rejoined():
            if not member.is_static:
                group.remove(member.member_id)
                _cancel(member)
        if group.is_(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            log.warning("group %s could not complete rebalance because no members rejoined", group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms())
            return
        group.init_next_generation()
        if group.is_(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)
            try:
                self._store_group(group, {})
            except StoreError as exc:
                log.warning("failed to write empty metadata for group %s: %s", group.group_id, exc)
            return
        log.info("stabilized group %s generation %d with %d members", group.group_id, group.generation_id,
                 len(group.members))
        for member in list(group.members.values()):
            is_leader = group.is_leader(member.member_id)
            group.complete_join(member, self._current_join_result(group, member.member_id, with_members=is_leader))
            self._reschedule_heartbeat(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        self._schedule_sync_timeout(group)

    @staticmethod
    def _current_join_result(group: ClassicGroup, member_id: str, *, with_members: bool,
                             leader: str | None = None, skip_assignment: bool = False) -> JoinResult:
        return JoinResult(
            member_id=member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=(leader if leader is not None else group.leader_id) or "",
            skip_assignment=skip_assignment,
            members=group.member_metadata() if with_members else [],
        )

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error == ErrorCode.none
        for member in list(group.members.values()):
            result = SyncResult(error, group.protocol_type if ok else None, group.protocol_name if ok else None,
                                member.assignment)
            if group.complete_sync(member, result):
                # Answering the sync proves the member alive: restart its session clock.
                self._reschedule_heartbeat(group, member, member.session_timeout_ms)

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _remove_member_and_update_group(self, group: ClassicGroup, member: Member, reason: str) -> None:
        group.complete_join(member, JoinResult("", ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        _cancel(member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, reason)
        elif group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        group.remove(member_id)
        handle = self._pending_timers.pop((group.group_id, member_id), None)
        if handle:
            handle.cancel()
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # -- persistence -----------------------------------------------------------------------------

    def _store_group(self, group: ClassicGroup, assignment: Mapping[str, bytes]) -> int:
        """Write the group's GroupMetadata record (members with subscription and assignment); returns the
        offset after it (`offsets.written` waits for its replication)."""
        protocol = group.protocol_name
        members = tuple(
            rec.MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                            m.session_timeout_ms, m.metadata(protocol) if protocol else b"",
                            assignment.get(m.member_id, b""))
            for m in group.members.values()
        )
        value = rec.GroupValue(group.protocol_type or "", group.generation_id, protocol, group.leader_id,
                               group.state_timestamp if group.state_timestamp is not None else -1, members)
        return self.offsets.append(group.group_id,
                                   [(rec.encode_group_key(group.group_id), rec.encode_group_value(value))])

    # -- JoinGroup -------------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, respond: JoinCallback) -> None:
        error = self.group_status_error(req.group_id)
        if error is None and not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                                  <= self.config.max_session_timeout_ms):
            error = ErrorCode.invalid_session_timeout
        if error is not None:
            respond(JoinResult(req.member_id, error))
            return
        modern = self.modern
        if modern is not None and modern.is_consumer_group(req.group_id):
            # Classic members cannot join a KIP-848 group (no online migration between the protocols).
            respond(JoinResult(req.member_id, ErrorCode.inconsistent_group_protocol))
            return
        is_unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not is_unknown:
                respond(JoinResult(req.member_id, ErrorCode.unknown_member_id))
                return
            group = self.groups[req.group_id] = ClassicGroup(req.group_id, clock=self.clock)
        if not self._accepts_joining_member(group, req.member_id):
            removed = group.remove(req.member_id)
            if removed is not None:
                _cancel(removed)
            respond(JoinResult("", ErrorCode.group_max_size_reached))
        elif is_unknown:
            self._join_new_member(group, req, respond)
        else:
            self._join_existing_member(group, req, respond)
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """`group.max.size`: existing members stay; newcomers only while there is room.

        While rebalancing, room is counted in members that have already rejoined, so that when the
        limit was lowered the members rejoining last are the ones turned away.
        """
        limit = self.config.max_group_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_(GroupState.PREPARING_REBALANCE):
            current = group.members.get(member_id)
            return (current is not None and current.is_awaiting_join) or group.num_awaiting_join() < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group: ClassicGroup, req: JoinRequest, respond: JoinCallback) -> None:
        names = [name for name, _ in req.protocols]
        if group.is_(GroupState.DEAD):
            respond(JoinResult("", ErrorCode.coordinator_not_available))
        elif not group.supports_protocols(req.protocol_type, names):
            respond(JoinResult("", ErrorCode.inconsistent_group_protocol))
        else:
            new_id = group.generate_member_id(req.client_id, req.group_instance_id)
            if req.group_instance_id is not None:
                existing = group.static_member_id(req.group_instance_id)
                if existing is not None:
                    log.info("static member %s of group %s rejoins with a new member id %s, replacing %s",
                             req.group_instance_id, group.group_id, new_id, existing)
                    self._update_static_member_and_rebalance(group, existing, new_id, req, respond)
                else:
                    self._add_member_and_rebalance(group, new_id, req, respond)
            elif req.require_known_member_id:
                group.pending_members.add(new_id)
                self._schedule_pending_expiry(group, new_id, req.session_timeout_ms)
                respond(JoinResult(new_id, ErrorCode.member_id_required))
            else:
                self._add_member_and_rebalance(group, new_id, req, respond)

    def _join_existing_member(self, group: ClassicGroup, req: JoinRequest, respond: JoinCallback) -> None:
        member_id = req.member_id
        if group.is_(GroupState.DEAD):
            respond(JoinResult(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(req.protocol_type, [name for name, _ in req.protocols]):
            respond(JoinResult(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if member_id in group.pending_members:
            if req.group_instance_id is not None:
                # Pending ids are only handed to dynamic members; Kafka fails such a request outright.
                respond(JoinResult(member_id, ErrorCode.unknown_server_error))
                return
            handle = self._pending_timers.pop((group.group_id, member_id), None)
            if handle:
                handle.cancel()
            self._add_member_and_rebalance(group, member_id, req, respond)
            return
        error = group.validate_member(member_id, req.group_instance_id)
        if error is not None:
            respond(JoinResult(member_id, error))
            return
        member = group.members[member_id]
        if group.is_(GroupState.PREPARING_REBALANCE):
            self._update_member_and_rebalance(group, member, req, respond, "member joining during rebalance")
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            if member.matches(req.protocols):
                # The member lost our JoinGroup answer; repeat it for the current generation.
                is_leader = group.is_leader(member_id)
                respond(self._current_join_result(group, member_id, with_members=is_leader))
            else:
                self._update_member_and_rebalance(group, member, req, respond, "metadata changed")
        elif group.is_(GroupState.STABLE):
            if group.is_leader(member_id) or not member.matches(req.protocols):
                # A leader's JoinGroup is how a client asks for a rebalance (e.g. new topics matched).
                self._update_member_and_rebalance(group, member, req, respond, "leader or metadata change")
            else:
                respond(self._current_join_result(group, member_id, with_members=False))
        else:
            respond(JoinResult(member_id, ErrorCode.unknown_member_id))

    def _add_member_and_rebalance(self, group: ClassicGroup, member_id: str, req: JoinRequest,
                                  respond: JoinCallback) -> None:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host, req.rebalance_timeout_ms,
                        req.session_timeout_ms, req.protocol_type, tuple(req.protocols), is_new=True)
        if group.is_(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, respond)
        # A new member cannot heartbeat until it has its first answer; if its client gives up and
        # retries, the abandoned id must not hold up rebalances forever.
        self._reschedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_member_and_rebalance(self, group: ClassicGroup, member: Member, req: JoinRequest,
                                     respond: JoinCallback, reason: str) -> None:
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        self._maybe_prepare_rebalance(group, reason)

    def _update_static_member_and_rebalance(self, group: ClassicGroup, old_id: str, new_id: str, req: JoinRequest,
                                            respond: JoinCallback) -> None:
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        _cancel(group.members[old_id])
        member = group.replace_static_member(instance_id, old_id, new_id)
        self._reschedule_heartbeat(group, member, member.session_timeout_ms)
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        group.update_member(member, req.protocols, req.rebalance_timeout_ms, req.session_timeout_ms, respond)
        if group.is_(GroupState.STABLE):
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance(group, f"static member {instance_id} changed the group protocol")
                return
            # Same protocol: no rebalance. Persist the new member id, then hand back the current generation.
            try:
                self._store_group(group, {m.member_id: m.assignment for m in group.members.values()})
            except StoreError as exc:
                group.update_member(member, old[0], old[1], old[2], None)
                restored = group.replace_static_member(instance_id, new_id, old_id)
                self._reschedule_heartbeat(group, restored, restored.session_timeout_ms)
                respond(JoinResult("", group_error(exc.code), group.generation_id, group.protocol_type,
                                   group.protocol_name, current_leader or ""))
                return
            if req.supports_skip_assignment:
                # v9+: tell a static leader it leads, but that the assignment stands (skip_assignment).
                is_leader = group.is_leader(new_id)
                result = self._current_join_result(group, new_id, with_members=is_leader, skip_assignment=is_leader)
            else:
                # Older clients: answer with the old leader id, so a returning leader does not re-assign
                # (a Stable group would not broadcast that assignment anyway).
                result = self._current_join_result(group, new_id, with_members=False, leader=current_leader or "")
            group.complete_join(member, result)
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning with the old member id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined during CompletingRebalance")

    # -- SyncGroup -------------------------------------------------------------------------------

    def sync_group(self, group_id: str, generation_id: int, member_id: str, instance_id: str | None,
                   protocol_type: str | None, protocol_name: str | None, assignments: Mapping[str, bytes],
                   respond: SyncCallback) -> None:
        error = self.group_status_error(group_id)
        if error is not None:
            # A loading coordinator has lost the rebalance: make the member rejoin, not rediscover.
            respond(SyncResult(ErrorCode.rebalance_in_progress if error == ErrorCode.coordinator_load_in_progress
                               else error))
            return
        group = self.groups.get(group_id)
        if group is None:
            respond(SyncResult(ErrorCode.unknown_member_id))
            return
        if group.is_(GroupState.DEAD):
            respond(SyncResult(ErrorCode.coordinator_not_available))
            return
        error = group.validate_member(member_id, instance_id)
        if error is None and generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        if error is None and ((protocol_type is not None and protocol_type != group.protocol_type)
                              or (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error is not None:
            respond(SyncResult(error))
            return
        member = group.members[member_id]
        if group.is_(GroupState.EMPTY):
            respond(SyncResult(ErrorCode.unknown_member_id))
        elif group.is_(GroupState.PREPARING_REBALANCE):
            respond(SyncResult(ErrorCode.rebalance_in_progress))
        elif group.is_(GroupState.COMPLETING_REBALANCE):
            member.awaiting_sync = respond
            self._remove_pending_sync(group, member_id)
            if group.is_leader(member_id):
                self._apply_leader_assignment(group, assignments)
        else:  # Stable: repeat the member's current assignment
            self._remove_pending_sync(group, member_id)
            respond(SyncResult(ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment))
            self._reschedule_heartbeat(group, member, member.session_timeout_ms)

    def _apply_leader_assignment(self, group: ClassicGroup, assignments: Mapping[str, bytes]) -> None:
        assignment = {m: bytes(assignments.get(m, b"")) for m in group.members}
        missing = [m for m in group.members if m not in assignments]
        if missing:
            log.warning("setting empty assignments for members %s of group %s generation %d", missing,
                        group.group_id, group.generation_id)
        try:
            pending = self.offsets.written(group.group_id, self._store_group(group, assignment))
        except StoreError as exc:
            self._assignment_failed(group, exc)
            return
        if pending is None:
            self._assignment_stored(group, assignment)
            return
        # Followers have to copy it first (Kafka's coordinator writes with acks=-1): the members keep waiting.
        task = asyncio.get_running_loop().create_task(self._store_replicated(group, assignment, pending))
        self._stores.add(task)
        task.add_done_callback(self._stores.discard)

    async def _store_replicated(self, group: ClassicGroup, assignment: dict[str, bytes],
                                pending: Awaitable[None]) -> None:
        """Complete the sync once the assignment is committed, if the group is still in that generation here."""
        generation = group.generation_id
        try:
            await pending
        except StoreError as exc:
            if self._same_round(group, generation):
                self._assignment_failed(group, exc)
            return
        if self._same_round(group, generation):
            self._assignment_stored(group, assignment)

    def _same_round(self, group: ClassicGroup, generation: int) -> bool:
        return (self.groups.get(group.group_id) is group and group.generation_id == generation
                and group.is_(GroupState.COMPLETING_REBALANCE))

    def _assignment_failed(self, group: ClassicGroup, exc: StoreError) -> None:
        self._reset_and_propagate_assignment_error(group, group_error(exc.code))
        self._maybe_prepare_rebalance(group, "error storing the group assignment")

    def _assignment_stored(self, group: ClassicGroup, assignment: Mapping[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = assignment.get(member.member_id, b"")
        self._propagate_assignment(group, ErrorCode.none)
        group.transition_to(GroupState.STABLE)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel_sync_timer(group)

    # -- Heartbeat / LeaveGroup ------------------------------------------------------------------

    def heartbeat(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int) -> ErrorCode:
        error = self.group_status_error(group_id)
        if error is not None:
            return ErrorCode.none if error == ErrorCode.coordinator_load_in_progress else error
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = group.validate_member(member_id, instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        member = group.members[member_id]
        self._reschedule_heartbeat(group, member, member.session_timeout_ms)
        if group.is_(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave_group(self, group_id: str,
                    leaving: Sequence[tuple[str, str | None]]) -> tuple[ErrorCode, list[ErrorCode]]:
        """(member_id, group_instance_id) pairs; an empty member id removes a static member by instance id."""
        error = self.group_status_error(group_id)
        if error is not None:
            return error, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in leaving]
        if group.is_(GroupState.DEAD):
            return ErrorCode.coordinator_not_available, []
        results = []
        for member_id, instance_id in leaving:
            if member_id == "":
                current = group.static_member_id(instance_id) if instance_id is not None else None
                if current is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
                member_id = current
            elif member_id in group.pending_members:
                self._remove_pending_member(group, member_id)
                results.append(ErrorCode.none)
                continue
            else:
                error = group.validate_member(member_id, instance_id)
                if error is not None:
                    results.append(error)
                    continue
            log.info("member %s has left group %s through LeaveGroup", member_id, group_id)
            self._remove_member_and_update_group(group, group.members[member_id], "LeaveGroup")
            results.append(ErrorCode.none)
        return ErrorCode.none, results

    # -- offsets ---------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, rec.OffsetValue],
                       api_version: int) -> CommitResults:
        def everywhere(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        error = self.group_status_error(group_id, allow_empty=True)
        if error is not None:
            return everywhere(error)
        modern = self.modern
        if modern is not None and modern.is_consumer_group(group_id):
            # A KIP-848 member commits with its member epoch; its group validates it, we store.
            error = modern.validate_member(group_id, member_id, generation_id)
            if error is not None:
                return everywhere(error)
            return self.offsets.commit(group_id, offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # v9+ says so plainly; older versions keep the ILLEGAL_GENERATION clients expect.
                return everywhere(ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation)
            # A "simple" group: offsets stored for a consumer that assigns partitions itself.
            group = self.groups[group_id] = ClassicGroup(group_id, clock=self.clock)
        error = group.validate_offset_commit(member_id, instance_id, generation_id)
        if error is not None:
            return everywhere(error)
        if generation_id >= 0 and member_id in group.members:
            member = group.members[member_id]
            self._reschedule_heartbeat(group, member, member.session_timeout_ms)
        return self.offsets.commit(group_id, offsets)

    # -- transactional offsets (TxnOffsetCommit) ----------------------------------------------------

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                           instance_id: str | None, generation_id: int,
                           offsets: Mapping[TopicPartition, rec.OffsetValue]) -> CommitResults:
        """Write offsets as part of a transaction: appended now (transactional), visible at the commit marker."""
        error = self.group_status_error(group_id, allow_empty=True)
        group = self.groups.get(group_id)
        if error is None and generation_id >= 0 and group is not None:
            # KIP-447: a consumer-group-aware producer is fenced like a member committing its offsets.
            error = group.validate_offset_commit(member_id, instance_id, generation_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return self.offsets.commit_transactional(group_id, producer_id, producer_epoch, offsets)

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The transaction coordinator wrote this producer's marker: its offsets become committed or vanish.

        A group id that only has offsets becomes an Empty (simple) group, as on replay.
        """
        for group_id in self.offsets.complete_transaction(producer_id, commit):
            if group_id not in self.groups and not self._is_consumer_group(group_id):
                self.groups[group_id] = ClassicGroup(group_id, clock=self.clock)

    def has_pending_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return self.offsets.has_pending(group_id, tp)

    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[ErrorCode, dict[TopicPartition, rec.OffsetValue | None]]:
        """Committed offsets (None where there is none); all of the group's when `partitions` is None.

        Offsets are answered regardless of group state: a group may use Kafka only to store offsets.
        Commits are written before they are acknowledged, so there is never a pending (unstable)
        offset here and `require_stable` needs no waiting.
        """
        error = self.group_status_error(group_id, allow_empty=True)
        if error is None and member_id:
            modern = self.modern  # OffsetFetch v9+ from a KIP-848 member carries its epoch
            if modern is not None and modern.is_consumer_group(group_id):
                error = modern.validate_member(group_id, member_id, member_epoch)
        if error is not None:
            return error, {}
        return ErrorCode.none, self.offsets.fetch(group_id, partitions)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error = self.group_status_error(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        if not group.is_(GroupState.EMPTY) and not group.is_consumer_group:
            return ErrorCode.non_empty_group, {}
        results = {tp: ErrorCode.group_subscribed_to_topic if group.is_subscribed_to(tp[0]) else ErrorCode.none
                   for tp in partitions}
        try:
            self.offsets.delete(group_id, [tp for tp, code in results.items() if code == ErrorCode.none])
        except StoreError as exc:
            return offset_error(exc.code), {}
        return ErrorCode.none, results

    # -- admin -----------------------------------------------------------------------------------

    def list_groups(self, states: set[str], types: set[str]) -> tuple[ErrorCode, list[GroupListing]]:
        """Classic and KIP-848 groups whose state and type match the filters (case-insensitively)."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.coordinator_load_in_progress if self.loads.loading else ErrorCode.none
        modern = self.modern
        modern_groups: Mapping[str, Any] = modern.groups if modern is not None else {}
        listings = [GroupListing(g.group_id, g.protocol_type or "", g.state.value, GROUP_TYPE_CLASSIC)
                    for g in self.groups.values() if not g.is_(GroupState.DEAD) and g.group_id not in modern_groups]
        listings += [GroupListing(group_id, CONSUMER_PROTOCOL_TYPE, g.state, GROUP_TYPE_CONSUMER)
                     for group_id, g in modern_groups.items()]
        states = {s.lower() for s in states}
        types = {t.lower() for t in types}
        return error, sorted((g for g in listings if (not states or g.state.lower() in states)
                              and (not types or g.group_type in types)), key=lambda g: g.group_id)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | None]:
        error = self.group_status_error(group_id, allow_empty=True)
        if error is not None:
            return error, None
        modern = self.modern
        if modern is not None and group_id in modern.groups:
            return ErrorCode.none, None  # not a classic group: Kafka describes it as Dead here
        group = self.groups.get(group_id)
        return ErrorCode.none, group if group is not None and not group.is_(GroupState.DEAD) else None

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        modern = self.modern
        for group_id in group_ids:
            error = self.group_status_error(group_id, allow_empty=True)
            group = self.groups.get(group_id)
            if error is None and modern is not None and group_id in modern.groups:
                error = modern.delete(group_id)  # NON_EMPTY_GROUP while it has members
                if error == ErrorCode.none:
                    error = self._delete_offsets_of(group_id)  # its committed offsets go too
                results[group_id] = error
                continue
            if error is None and (group is None or group.is_(GroupState.DEAD)):
                error = ErrorCode.group_id_not_found
            elif error is None and not group.is_(GroupState.EMPTY):  # type: ignore[union-attr]
                error = ErrorCode.non_empty_group
            if error is None:
                assert group is not None
                error = self._delete_group(group)
            results[group_id] = error
        return results

    def _delete_group(self, group: ClassicGroup) -> ErrorCode:
        """Tombstone the group and all its offsets, then forget it (Dead)."""
        error = self._delete_offsets_of(group.group_id, [(rec.encode_group_key(group.group_id), None)])
        if error == ErrorCode.none:
            self._forget(group)
            log.info("deleted group %s", group.group_id)
        return error

    def _delete_offsets_of(self, group_id: str, extra: list[tuple[bytes, bytes | None]] | None = None) -> ErrorCode:
        try:
            self.offsets.delete_group(group_id, extra or [])
        except StoreError as exc:
            return offset_error(exc.code)
        return ErrorCode.none

    def _forget(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD)
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for key in [k for k in self._pending_timers if k[0] == group.group_id]:
            self._pending_timers.pop(key).cancel()
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    # -- deleted topics --------------------------------------------------------------------------

    def on_metadata(self, records: Sequence[Mapping[str, Any]], live_topics: set[str]) -> None:
        """Controller publisher: when topics are deleted, their committed offsets go too (as in Kafka).

        A topic later re-created under the same name is a new topic and must not inherit old offsets.
        """
        if not self.active or not any(r.get("type") == "remove_topic" for r in records):
            return
        removed = self.offsets.remove_topics(live_topics)
        if removed:
            log.info("removed %d offsets of deleted topics", removed)

    # -- offset expiry ---------------------------------------------------------------------------

    async def _expire_forever(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiration pass failed")

    def expire_offsets(self) -> int:
        """Kafka's cleanupGroupMetadata: drop expired offsets; Empty groups left with none go Dead."""
        now = self.clock()
        retention = self.config.offsets_retention_ms
        removed = 0
        for group_id in sorted({*self.offsets.group_ids(), *self.groups}):
            if self._is_consumer_group(group_id):
                continue  # a live KIP-848 group still consumes what it committed
            group = self.groups.get(group_id)
            stored = self.offsets.of(group_id)
            expired = group.expired_offsets(stored, now, retention) if group else expired_by_commit_time(
                stored, now, retention)
            dies = group is not None and group.is_(GroupState.EMPTY) and len(stored) == len(expired)
            extra = [(rec.encode_group_key(group_id), None)] if dies and group and group.generation_id > 0 else []
            try:
                self.offsets.delete(group_id, expired, extra)
            except StoreError as exc:
                log.warning("could not expire offsets of group %s: %s", group_id, exc)
                continue
            removed += len(expired)
            if dies and group is not None:
                self._forget(group)
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed


def _cancel(member: Member) -> None:
    if member.timer is not None:
        member.timer.cancel()
        member.timer = None


def _guarded(callback: Callable[..., None], *args: Any) -> None:
    """Timer callbacks run outside any request: log a failure instead of losing it in the loop."""
    try:
        callback(*args)
    except Exception:
        log.exception("group coordinator timer %s failed", getattr(callback, "__name__", callback))
