"""The election states of a KRaft replica (QuorumState's EpochState classes) and the leader's bookkeeping.

Each role holds only what matters while it lasts; timers are absolute deadlines in the caller's
milliseconds, because the core never reads a clock. `RaftNode` moves between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from bus.raft.messages import ReplicaState
from bus.raft.replicated_log import OffsetAndEpoch


class Role(Enum):
    UNATTACHED = "Unattached"
    VOTED = "Voted"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


@dataclass(slots=True)
class Unattached:
    """An epoch without a known leader and without a vote cast: grants a vote to an up-to-date candidate."""

    epoch: int
    election_deadline: int
    role = Role.UNATTACHED


@dataclass(slots=True)
class Voted:
    """Voted for `voted_id` in this epoch: grants that candidate again (a resent request), nobody else."""

    epoch: int
    voted_id: int
    election_deadline: int
    role = Role.VOTED


@dataclass(slots=True)
class Candidate:
    """Asking for votes in `epoch`; after a lost or timed-out election, backs off, then tries epoch + 1."""

    epoch: int
    retries: int
    election_deadline: int
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)
    backoff_deadline: int | None = None
    role = Role.CANDIDATE


@dataclass(slots=True)
class Follower:
    """Fetches from `leader_id`; without a successful fetch until `fetch_deadline`, a voter starts an election."""

    epoch: int
    leader_id: int
    fetch_deadline: int
    # A snapshot being fetched chunk by chunk: its id and the bytes so far.
    fetching_snapshot: tuple[OffsetAndEpoch, bytearray] | None = None
    role = Role.FOLLOWER


@dataclass(slots=True)
class Resigned:
    """A leader stepping down: tells the voters (EndQuorumEpoch) and waits one election timeout."""

    epoch: int
    election_deadline: int
    unacknowledged: set[int]
    preferred_successors: tuple[int, ...]
    role = Role.RESIGNED


@dataclass(slots=True)
class ReplicaProgress:
    """What the leader knows of one replica in its epoch (LeaderState.ReplicaState)."""

    replica_id: int
    end_offset: int | None = None
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    # The leader's end offset when this replica last fetched: reaching it later means "was caught up then".
    leader_end_at_last_fetch: int | None = None

    def update(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = now_ms
        elif self.leader_end_at_last_fetch is not None and fetch_offset >= self.leader_end_at_last_fetch:
            self.last_caught_up_ms = self.last_fetch_ms
        self.end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end_offset

    def describe(self) -> ReplicaState:
        return ReplicaState(
            replica_id=self.replica_id,
            log_end_offset=-1 if self.end_offset is None else self.end_offset,
            last_fetch_timestamp=self.last_fetch_ms,
            last_caught_up_timestamp=self.last_caught_up_ms,
        )


@dataclass(slots=True)
class Leader:
    """Leading `epoch`: tracks replicas, computes the high watermark, checks that a majority still follows."""

    epoch: int
    local_id: int
    voters: frozenset[int]
    # Log end offset when leadership began: the LeaderChange record sits here; the high watermark must pass
    # it before anything is exposed (Raft's rule: commit an entry of your own epoch first).
    epoch_start_offset: int
    check_quorum_deadline: int
    replicas: dict[int, ReplicaProgress] = field(default_factory=dict)
    observers: dict[int, ReplicaProgress] = field(default_factory=dict)
    acknowledged: set[int] = field(default_factory=set)
    fetched_since_check: set[int] = field(default_factory=set)
    resign_requested: bool = False
    role = Role.LEADER

    def __post_init__(self) -> None:
        self.replicas = {voter: ReplicaProgress(voter) for voter in self.voters}
        self.acknowledged = {self.local_id}

    def progress(self, replica_id: int) -> ReplicaProgress:
        if replica_id in self.replicas:
            return self.replicas[replica_id]
        return self.observers.setdefault(replica_id, ReplicaProgress(replica_id))

    def candidate_high_watermark(self) -> int | None:
        """The largest offset a majority of voters has, if it is past the start of this epoch."""
        offsets = sorted((-1 if p.end_offset is None else p.end_offset for p in self.replicas.values()), reverse=True)
        offset = offsets[len(self.voters) // 2]
        return offset if offset > self.epoch_start_offset else None

    def record_voter_contact(self, replica_id: int, majority: int, timeout_ms: int, now_ms: int) -> None:
        """Check quorum: a majority (the leader included) fetched within the timeout, so leadership holds."""
        if replica_id not in self.voters or replica_id == self.local_id:
            return
        self.fetched_since_check.add(replica_id)
        if len(self.fetched_since_check) + 1 >= majority:
            self.fetched_since_check.clear()
            self.check_quorum_deadline = now_ms + timeout_ms

    def successors_by_fetch_offset(self) -> tuple[int, ...]:
        """The other voters, most caught-up first: EndQuorumEpoch's preferred successors."""
        others = [p for voter, p in self.replicas.items() if voter != self.local_id]
        others.sort(key=lambda p: (-1 if p.end_offset is None else p.end_offset, -p.replica_id), reverse=True)
        return tuple(p.replica_id for p in others)


State = Unattached | Voted | Candidate | Follower | Leader | Resigned
