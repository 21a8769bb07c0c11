"""The classic group protocol's requests: JoinGroup, SyncGroup, Heartbeat and LeaveGroup (Kafka's GroupCoordinator).

A request handler calls in, the coordinator updates the group and either answers at once or parks the answer
callback on the member (JoinGroup waits for the rebalance, SyncGroup for the leader's assignment); the rebalance
(`rebalance.py`) answers the parked callbacks. Whether this node coordinates a group id at all (its
`__consumer_offsets` partition is led and loaded here) is the group coordinator's to say (`group_status_error`).
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from bus.coordinator.group.classic.group import ClassicGroup, GroupState, now_ms
from bus.coordinator.group.classic.member import JoinCallback, JoinResult, Member, SyncCallback, SyncResult
from bus.coordinator.group.classic.rebalance import ClassicRebalancer, cancel_expiry
from bus.coordinator.group.config import GroupConfig
from bus.coordinator.group.namespace import GroupNamespace
from bus.coordinator.group.offset_store import StoreError, group_error
from bus.coordinator.group.offsets import OffsetMetadataManager

log = logging.getLogger(__name__)

T = TypeVar("T")


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


class ClassicGroupProtocol(ClassicRebalancer, abc.ABC):
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup over the namespace's classic groups."""

    def __init__(self, namespace: GroupNamespace, config: GroupConfig, offsets: OffsetMetadataManager, *,
                 clock: Callable[[], int] = now_ms) -> None:
        super().__init__(namespace, config, offsets, clock=clock)
        self._stores: set[asyncio.Task[None]] = set()  # assignments waiting for their followers

    @abc.abstractmethod
    def group_status_error(self, group_id: str | None, *, allow_empty: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus: the id is valid and this broker coordinates it, loaded."""

    def _stop_timers(self) -> None:
        """Also drop the assignments still waiting for their followers."""
        for task in self._stores:
            task.cancel()
        super()._stop_timers()

    # -- JoinGroup -------------------------------------------------------------------------------

    def join_group(self, req: JoinRequest, respond: JoinCallback) -> None:
        error = self.group_status_error(req.group_id)
        if error is None and not (self.config.min_session_timeout_ms <= req.session_timeout_ms
                                  <= self.config.max_session_timeout_ms):
            error = ErrorCode.invalid_session_timeout
        if error is not None:
            respond(JoinResult(req.member_id, error))
            return
        if self.namespace.is_consumer_group(req.group_id):
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
                cancel_expiry(removed)
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
        cancel_expiry(group.members[old_id])
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
