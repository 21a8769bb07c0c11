"""A KIP-848 consumer group: epochs, target assignment and per-member reconciliation.

Kafka's CurrentAssignmentBuilder in small: a member first gives up the partitions the target takes
away from it (it keeps its epoch while they are "unrevoked"), then moves to the target epoch and
receives whichever of its new partitions no other member still holds ("unreleased" ones follow on
later heartbeats). No partition is ever owned by two members at once.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field

from bus.coordinator.group.consumer.assignors import Assignment


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


def _copy(assignment: Assignment) -> Assignment:
    return {t: set(p) for t, p in assignment.items() if p}


def _minus(a: Assignment, b: Assignment) -> Assignment:
    return {t: parts - b.get(t, set()) for t, parts in a.items() if parts - b.get(t, set())}


def _intersect(a: Assignment, b: Assignment) -> Assignment:
    return {t: parts & b[t] for t, parts in a.items() if t in b and parts & b[t]}


def _union(a: Assignment, b: Assignment) -> Assignment:
    out = _copy(a)
    for t, parts in b.items():
        out.setdefault(t, set()).update(parts)
    return out


def overlaps(a: Assignment, b: Assignment) -> bool:
    return any(parts & b.get(t, set()) for t, parts in a.items())


@dataclass(slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topics: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    last_sent: Assignment | None = None
    revocation_deadline: float | None = None


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = "uniform"
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscribed_partitions: dict[uuid.UUID, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """The state DescribeGroups/ListGroups report for a consumer group."""
        if not self.members:
            return "Empty"
        if self.assignment_epoch < self.group_epoch:
            return "Assigning"
        if any(m.member_epoch != self.assignment_epoch or m.state is not MemberState.STABLE
               for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def owned_elsewhere(self, member_id: str) -> Assignment:
        """Partitions held (assigned or still being revoked) by members other than `member_id`."""
        out: Assignment = {}
        for other in self.members.values():
            if other.member_id != member_id:
                out = _union(out, _union(other.assigned, other.pending_revocation))
        return out

    def reconcile(self, member: ConsumerMember, owned: Assignment | None) -> None:
        """Move `member` one safe step towards its target; `owned` is what the client says it holds."""
        target = self.target.get(member.member_id, {})
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or overlaps(owned, member.pending_revocation):
                return  # still waiting for the client to revoke
            member.pending_revocation = {}
            member.revocation_deadline = None
        revoke = _minus(member.assigned, target)
        if revoke:
            member.assigned = _intersect(member.assigned, target)
            member.pending_revocation = revoke
            member.state = MemberState.UNREVOKED_PARTITIONS
            return
        wanted = _minus(target, member.assigned)
        free = _minus(wanted, self.owned_elsewhere(member.member_id))
        member.assigned = _union(member.assigned, free)
        if member.member_epoch != self.assignment_epoch:
            member.previous_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
        member.state = MemberState.STABLE if free == wanted else MemberState.UNRELEASED_PARTITIONS
