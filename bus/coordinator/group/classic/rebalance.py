"""The timers and rebalance steps of classic groups (Kafka's GroupCoordinator purgatories and rebalance core).

Everything runs on the broker's event loop, so there are no locks. Kafka's purgatories become
`loop.call_later` timers:

* heartbeat expiry, one per member (session timeout; 5 minutes for a member still in its first join);
* pending-member expiry for ids handed out with MEMBER_ID_REQUIRED;
* the join timer of a rebalance (rebalance timeout, completed early once every member rejoined;
  the first rebalance of an empty group waits `group.initial.rebalance.delay.ms`, extended while
  new members keep arriving);
* the sync timer (members that never send SyncGroup are removed and the group rebalances again).

A rebalance moves a group through its states (`group.py`) and answers the members parked on it; the group's
metadata is written to `__consumer_offsets` as the rebalance completes. The requests that start and feed
rebalances are `protocol.py`'s, built on this.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.coordinator.group import records as rec
from bus.coordinator.group.classic.group import ClassicGroup, GroupState, now_ms
from bus.coordinator.group.classic.member import JoinResult, Member, SyncResult
from bus.coordinator.group.config import GroupConfig
from bus.coordinator.group.namespace import GroupNamespace
from bus.coordinator.group.offset_store import StoreError
from bus.coordinator.group.offsets import OffsetMetadataManager

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _JoinTimer:
    handle: asyncio.TimerHandle
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


class ClassicRebalancer:
    """The classic groups of the namespace (`groups`), their timers, and the steps of a rebalance."""

    def __init__(self, namespace: GroupNamespace, config: GroupConfig, offsets: OffsetMetadataManager, *,
                 clock: Callable[[], int] = now_ms) -> None:
        self.namespace = namespace
        self.groups = namespace.classic
        self.config = config
        self.offsets = offsets
        self.clock = clock
        self._join_timers: dict[str, _JoinTimer] = {}
        self._sync_timers: dict[str, asyncio.TimerHandle] = {}
        self._pending_timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    # -- timers ----------------------------------------------------------------------------------

    @staticmethod
    def _later(delay_ms: int, callback: Callable[..., None], *args: Any) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(max(delay_ms, 0) / 1000.0, _guarded, callback, *args)

    def _reschedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        """Kafka's completeAndScheduleNextExpiration: the member proved alive; expect it again in time."""
        cancel_expiry(member)
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
                    cancel_expiry(member)
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
                cancel_expiry(member)
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
        cancel_expiry(member)
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

    # -- groups arriving and leaving -------------------------------------------------------------

    def _adopt(self, group: ClassicGroup) -> None:
        """Serve a group restored from the log: its members are expected to heartbeat within their sessions."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._reschedule_heartbeat(group, member, member.session_timeout_ms)

    def _abandon(self, group: ClassicGroup) -> None:
        """This node no longer coordinates the group: members waiting on a join or sync are told NOT_COORDINATOR
        (they rediscover the coordinator), its timers stop and it is forgotten."""
        for member in group.members.values():
            cancel_expiry(member)
            group.complete_join(member, JoinResult(member.member_id, ErrorCode.not_coordinator))
            group.complete_sync(member, SyncResult(ErrorCode.not_coordinator))
        self._forget(group)

    def _forget(self, group: ClassicGroup) -> None:
        group.transition_to(GroupState.DEAD)
        self._cancel_join_timer(group)
        self._cancel_sync_timer(group)
        for key in [k for k in self._pending_timers if k[0] == group.group_id]:
            self._pending_timers.pop(key).cancel()
        if self.groups.get(group.group_id) is group:
            del self.groups[group.group_id]

    def _stop_timers(self) -> None:
        """The coordinator stops: no timer fires afterwards."""
        for timer in self._join_timers.values():
            timer.handle.cancel()
        for handle in [*self._sync_timers.values(), *self._pending_timers.values()]:
            handle.cancel()
        for group in self.groups.values():
            for member in group.members.values():
                cancel_expiry(member)


def cancel_expiry(member: Member) -> None:
    """Stop the member's heartbeat (or first-join) expiry timer."""
    if member.timer is not None:
        member.timer.cancel()
        member.timer = None


def _guarded(callback: Callable[..., None], *args: Any) -> None:
    """Timer callbacks run outside any request: log a failure instead of losing it in the loop."""
    try:
        callback(*args)
    except Exception:
        log.exception("group coordinator timer %s failed", getattr(callback, "__name__", callback))
