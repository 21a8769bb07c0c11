"""The KRaft RPC payloads the consensus core consumes and emits.

One metadata partition (`__cluster_metadata`-0) is replicated, so the topic/partition nesting of the
wire messages is flattened away; every other field keeps kio's name (kio.schema.<api>.v<n>), so the
transport maps these 1:1 onto kio request and response objects. Names follow the lowest version
with the field (Vote v0's replica_id/replica_epoch, EndQuorumEpoch v0's preferred_successors); the
KIP-853 fields (directory ids, endpoints, pre_vote) are out of scope. `Fetch.max_wait_ms` is kio's
`max_wait` (a timedelta) in milliseconds. Records travel as `LogEntry` tuples; the wire mapping encodes
them as record batches.

An `Envelope` carries a message between nodes with a correlation id: a response echoes its request's
id, and a node ignores responses it no longer expects (after a role change, a timeout or a duplicate).
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from bus.raft.replicated_log import LogEntry

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """Fetch response's diverging_epoch: where the leader's log ends for the follower's last epoch."""

    epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int = NO_LEADER
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class SnapshotId:
    end_offset: int = -1
    epoch: int = -1


@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str | None
    replica_epoch: int  # the candidate's epoch
    replica_id: int  # the candidate
    last_offset_epoch: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str | None
    replica_id: int
    max_wait_ms: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int = -1
    partition_max_bytes: int = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int = -1
    diverging_epoch: EpochEndOffset = EpochEndOffset()
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    snapshot_id: SnapshotId = SnapshotId()
    records: tuple[LogEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    cluster_id: str | None
    replica_id: int
    max_bytes: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: ErrorCode
    snapshot_id: SnapshotId = SnapshotId()
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch()
    size: int = -1
    position: int = -1
    unaligned_records: bytes = b""


@dataclass(frozen=True, slots=True)
class DescribeQuorumRequest:
    pass


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica as DescribeQuorum reports it (`kafka-metadata-quorum.sh describe --replication`)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class DescribeQuorumResponse:
    error_code: ErrorCode
    leader_id: int = NO_LEADER
    leader_epoch: int = -1
    high_watermark: int = -1
    current_voters: tuple[ReplicaState, ...] = ()
    observers: tuple[ReplicaState, ...] = ()


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
    | DescribeQuorumRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | DescribeQuorumResponse
)


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message in flight: who sent it, to whom, and the correlation id that pairs a response with its request."""

    source: int
    destination: int
    correlation_id: int
    body: Request | Response
