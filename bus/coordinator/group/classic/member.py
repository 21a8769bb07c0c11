"""One member of a classic group (Kafka's MemberMetadata / ClassicGroupMember).

A member is what one JoinGroup registered: its protocols (assignor names, each with opaque client
metadata the coordinator passes through unchanged), its timeouts, and the assignment the leader
gave it. While a member waits for a JoinGroup or SyncGroup answer, the callback that sends that
answer is parked here; a parked member counts as alive (its client cannot heartbeat while blocked).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

Protocols = tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup answers, independent of the API version."""

    member_id: str
    error: ErrorCode = ErrorCode.none
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    skip_assignment: bool = False
    # (member_id, group_instance_id, metadata) of every member; only the leader gets it.
    members: list[tuple[str, str | None, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class SyncResult:
    error: ErrorCode = ErrorCode.none
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


JoinCallback = Callable[[JoinResult], None]
SyncCallback = Callable[[SyncResult], None]


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    awaiting_join: JoinCallback | None = None
    awaiting_sync: SyncCallback | None = None
    # A member added by this rebalance: until its first JoinGroup answer it may still be expired
    # (its client may have given up and will retry with a fresh JoinGroup).
    is_new: bool = False
    heartbeat_satisfied: bool = False
    # The pending expiry timer (an asyncio.TimerHandle in the running coordinator).
    timer: Any = None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.awaiting_join is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.awaiting_sync is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Kafka's rule: a parked (awaiting join/sync) member is alive unless it is new."""
        if self.is_new:
            return self.heartbeat_satisfied
        if self.is_awaiting_join or self.is_awaiting_sync:
            return True
        return self.heartbeat_satisfied

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        """Same protocols, in the same order, with byte-identical metadata."""
        return tuple((n, bytes(m)) for n, m in protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol (its list is in preference order) among `candidates`."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")
