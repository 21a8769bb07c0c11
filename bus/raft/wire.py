"""The consensus core's messages on Kafka's wire: `to_kio` and `from_kio`, sans-IO.

The core flattens away the topic/partition nesting of the KRaft RPCs because only `__cluster_metadata`-0
is replicated; this module rebuilds it (one topic, one partition) and refuses anything else with a
`WireError`, which the broker answers with INVALID_REQUEST as Kafka does. One version per API: the
lowest that carries every field the core uses (see `VERSIONS`). A kio object of another version is a
`WireError` too, so the broker must negotiate these versions with its peers.

Log entries travel as Kafka record batches (`entries_to_records`, `records_to_entries`): a batch's
partition leader epoch is its entries' epoch and its base offset the first entry's offset; metadata
records are key-less records whose value is the entry's bytes, as Kafka's raft BatchBuilder writes
them; a LeaderChangeMessage is a control batch holding a LeaderChange control record (key: version 0
and ControlRecordType.LEADER_CHANGE; value: the LeaderChangeMessage v0 struct, with no version prefix,
as MemoryRecordsBuilder.appendLeaderChangeMessage writes it). `LogEntry` carries no time, so batches
carry NO_TIMESTAMP. FetchSnapshot chunks are opaque bytes cut at any position (Kafka's
`UnalignedRecords`), so they pass through as they are.

Errors: the core's error code travels at the partition level; a peer's top-level error code (Kafka
answers INCONSISTENT_CLUSTER_ID or INVALID_REQUEST there, with no topics) wins over the partition's.
"""

from __future__ import annotations

import datetime
import itertools
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage as KioLeaderChange
from kio.schema.leader_change_message.v0.data import Voter
from kio.schema.types import BrokerId
from kio.serial import entity_reader
from kio.static.primitive import i16, i32

from bus.protocol.guard import check_body
from bus.protocol.messages import Shapes, encode, request_class, request_shapes, response_class, shapes
from bus.protocol.records import NO_TIMESTAMP, Record, build_batch, iter_records, scan_batches
from bus.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    ReplicaState,
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from bus.raft.replicated_log import LeaderChangeMessage, LogEntry

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0

FETCH = 1
VOTE = 52
BEGIN_QUORUM_EPOCH = 53
END_QUORUM_EPOCH = 54
DESCRIBE_QUORUM = 55
FETCH_SNAPSHOT = 59

VERSIONS: dict[int, int] = {
    # v0 has cluster_id, replica_epoch/replica_id and last_offset(_epoch); v1 adds KIP-853's directory ids
    # and voter keys, v2 KIP-996's pre-vote: both out of the core's scope.
    VOTE: 0,
    # v0 has cluster_id, leader_id, leader_epoch; v1 adds KIP-853's voter directory id and leader endpoints.
    BEGIN_QUORUM_EPOCH: 0,
    # v0 has preferred_successors; v1 replaces them with KIP-853's preferred candidates and endpoints.
    END_QUORUM_EPOCH: 0,
    # v12 is the first with cluster_id, last_fetched_epoch and the response's diverging_epoch,
    # current_leader and snapshot_id (KIP-595); it still names the topic (v13 switches to topic ids) and
    # keeps replica_id at the top level (v15 moves it into replica_state).
    FETCH: 12,
    # v0 has everything the core uses; v1 adds KIP-853's replica directory id and leader endpoints.
    FETCH_SNAPSHOT: 0,
    # v1 adds the replicas' last_fetch_timestamp and last_caught_up_timestamp that `--replication`
    # shows; v2 adds KIP-853's directory ids and nodes.
    DESCRIBE_QUORUM: 1,
}

LEADER_CHANGE = 2  # Kafka's ControlRecordType.LEADER_CHANGE
_CONTROL_KEY = struct.Struct(">hh")  # version 0, control record type
_CONTROL_KEY_VERSION = 0
_LEADER_CHANGE_VERSION = 0  # ControlRecordUtils.LEADER_CHANGE_CURRENT_VERSION
_MS = datetime.timedelta(milliseconds=1)


class WireError(ValueError):
    """A kio message or record data the core's messages cannot represent (INVALID_REQUEST / CORRUPT_MESSAGE)."""


@dataclass(frozen=True, slots=True)
class _Nesting:
    """Where one API message keeps its topics and partitions: the class and field names differ per API."""

    topic_class: str
    partition_class: str
    topics: str = "topics"
    name: str = "topic_name"
    index: str = "partition_index"

    def wrap(self, shapes_: Shapes, **partition_values: Any) -> tuple[Any, ...]:
        """The one-topic, one-partition nesting around `partition_values`."""
        partition = shapes_.make(self.partition_class, **{self.index: METADATA_PARTITION}, **partition_values)
        return (shapes_.make(self.topic_class, **{self.name: METADATA_TOPIC, "partitions": (partition,)}),)

    def unwrap(self, message: Any) -> Any:
        """The `__cluster_metadata`-0 partition of `message`, which must hold nothing else."""
        topics = getattr(message, self.topics)
        if len(topics) != 1:
            raise WireError(f"{type(message).__name__} has {len(topics)} topics; KRaft uses only {METADATA_TOPIC}")
        name = getattr(topics[0], self.name)
        if name != METADATA_TOPIC:
            raise WireError(f"{type(message).__name__} names topic {name!r}; KRaft uses only {METADATA_TOPIC}")
        partitions = topics[0].partitions
        if len(partitions) != 1:
            raise WireError(f"{type(message).__name__} has {len(partitions)} partitions of {METADATA_TOPIC}, not 1")
        index = getattr(partitions[0], self.index)
        if index != METADATA_PARTITION:
            raise WireError(f"{type(message).__name__} names partition {METADATA_TOPIC}-{index}, not -0")
        return partitions[0]

    def response_partition(self, message: Any) -> tuple[ErrorCode, Any | None]:
        """A response's error code and partition: a top-level error wins and may come without any topics."""
        if message.error_code != ErrorCode.none:
            partition = self.unwrap(message) if getattr(message, self.topics) else None
            return message.error_code, partition
        partition = self.unwrap(message)
        return partition.error_code, partition


_QUORUM = _Nesting("TopicData", "PartitionData")
_FETCH_REQUEST = _Nesting("FetchTopic", "FetchPartition", name="topic", index="partition")
_FETCH_RESPONSE = _Nesting("FetchableTopicResponse", "PartitionData", topics="responses", name="topic")
_SNAPSHOT_REQUEST = _Nesting("TopicSnapshot", "PartitionSnapshot", name="name", index="partition")
_SNAPSHOT_RESPONSE = _Nesting("TopicSnapshot", "PartitionSnapshot", name="name", index="index")


def _request(api_key: int) -> Shapes:
    return request_shapes(api_key, VERSIONS[api_key])


def _response(api_key: int) -> Shapes:
    return shapes(api_key, VERSIONS[api_key])


# ---- records -------------------------------------------------------------------------------------------


def entries_to_records(entries: Sequence[LogEntry]) -> bytes:
    """Log entries as record batches: consecutive entries of one epoch share a batch, control records their own."""
    out = bytearray()
    for (epoch, control), group in itertools.groupby(
        entries, key=lambda e: (e.epoch, isinstance(e.record, LeaderChangeMessage))
    ):
        batch = list(group)
        try:
            out += build_batch(
                [_to_record(entry) for entry in batch],
                base_offset=batch[0].offset,
                partition_leader_epoch=epoch,
                is_control=control,
            )
        except ValueError as exc:  # offsets out of order
            raise WireError(f"cannot encode the entries from offset {batch[0].offset}: {exc}") from exc
    return bytes(out)


def _to_record(entry: LogEntry) -> Record:
    if isinstance(entry.record, bytes):
        return Record(entry.offset, NO_TIMESTAMP, None, entry.record)
    message = KioLeaderChange(
        version=i16(_LEADER_CHANGE_VERSION),
        leader_id=BrokerId(entry.record.leader_id),
        voters=_voters(entry.record.voters),
        granting_voters=_voters(entry.record.granting_voters),
    )
    return Record(entry.offset, NO_TIMESTAMP, _CONTROL_KEY.pack(_CONTROL_KEY_VERSION, LEADER_CHANGE), encode(message))


def _voters(ids: Iterable[int]) -> tuple[Voter, ...]:
    return tuple(Voter(voter_id=i32(voter)) for voter in ids)


def records_to_entries(data: bytes | None) -> tuple[LogEntry, ...]:
    """The entries in record batches (None or empty: none); a batch or record that does not parse is a WireError."""
    if not data:
        return ()
    try:
        batches = scan_batches(data)
        return tuple(
            LogEntry(record.offset, batch.partition_leader_epoch, _from_record(record, batch.is_control))
            for batch in batches
            for record in iter_records(data, batch)
        )
    except WireError:
        raise
    except ValueError as exc:  # CorruptRecordError, UnsupportedMagicError, UnsupportedCompressionError
        raise WireError(f"records do not parse: {exc}") from exc


def _from_record(record: Record, control: bool) -> bytes | LeaderChangeMessage:
    if not control:
        if record.value is None:
            raise WireError(f"metadata record at offset {record.offset} has no value")
        return record.value
    if record.key is None or len(record.key) < _CONTROL_KEY.size:
        raise WireError(f"control record at offset {record.offset} has no control record key")
    _version, kind = _CONTROL_KEY.unpack_from(record.key)
    if kind != LEADER_CHANGE:
        raise WireError(f"control record type {kind} at offset {record.offset} is not one the KRaft core reads")
    if record.value is None:
        raise WireError(f"LeaderChange record at offset {record.offset} has no value")
    try:
        check_body(KioLeaderChange, record.value, 0)
        message, _size = entity_reader(KioLeaderChange)(record.value, 0)
    except Exception as exc:  # the bounds check and kio raise assorted errors on garbled bytes
        raise WireError(f"LeaderChange record at offset {record.offset} does not parse: {exc!r}") from None
    return LeaderChangeMessage(
        int(message.leader_id),
        tuple(int(v.voter_id) for v in message.voters),
        tuple(int(v.voter_id) for v in message.granting_voters),
    )


# ---- core message -> kio -------------------------------------------------------------------------------


def _vote_request(m: VoteRequest) -> Any:
    s = _request(VOTE)
    topics = _QUORUM.wrap(
        s,
        replica_epoch=m.replica_epoch,
        replica_id=m.replica_id,
        last_offset_epoch=m.last_offset_epoch,
        last_offset=m.last_offset,
    )
    return s.make("VoteRequest", cluster_id=m.cluster_id, topics=topics)


def _vote_response(m: VoteResponse) -> Any:
    s = _response(VOTE)
    topics = _QUORUM.wrap(
        s, error_code=m.error_code, leader_id=m.leader_id, leader_epoch=m.leader_epoch, vote_granted=m.vote_granted
    )
    return s.make("VoteResponse", topics=topics)


def _begin_request(m: BeginQuorumEpochRequest) -> Any:
    s = _request(BEGIN_QUORUM_EPOCH)
    topics = _QUORUM.wrap(s, leader_id=m.leader_id, leader_epoch=m.leader_epoch)
    return s.make("BeginQuorumEpochRequest", cluster_id=m.cluster_id, topics=topics)


def _begin_response(m: BeginQuorumEpochResponse) -> Any:
    s = _response(BEGIN_QUORUM_EPOCH)
    topics = _QUORUM.wrap(s, error_code=m.error_code, leader_id=m.leader_id, leader_epoch=m.leader_epoch)
    return s.make("BeginQuorumEpochResponse", topics=topics)


def _end_request(m: EndQuorumEpochRequest) -> Any:
    s = _request(END_QUORUM_EPOCH)
    topics = _QUORUM.wrap(
        s, leader_id=m.leader_id, leader_epoch=m.leader_epoch, preferred_successors=m.preferred_successors
    )
    return s.make("EndQuorumEpochRequest", cluster_id=m.cluster_id, topics=topics)


def _end_response(m: EndQuorumEpochResponse) -> Any:
    s = _response(END_QUORUM_EPOCH)
    topics = _QUORUM.wrap(s, error_code=m.error_code, leader_id=m.leader_id, leader_epoch=m.leader_epoch)
    return s.make("EndQuorumEpochResponse", topics=topics)


def _fetch_request(m: FetchRequest) -> Any:
    s = _request(FETCH)
    topics = _FETCH_REQUEST.wrap(
        s,
        current_leader_epoch=m.current_leader_epoch,
        fetch_offset=m.fetch_offset,
        last_fetched_epoch=m.last_fetched_epoch,
        log_start_offset=m.log_start_offset,
        partition_max_bytes=m.partition_max_bytes,
    )
    # min_bytes 0 and a sessionless fetch (session 0, epoch -1), as KafkaRaftClient sends.
    return s.make("FetchRequest", cluster_id=m.cluster_id, replica_id=m.replica_id, max_wait=m.max_wait_ms,
                  topics=topics)  # fmt: skip


def _fetch_response(m: FetchResponse) -> Any:
    s = _response(FETCH)
    topics = _FETCH_RESPONSE.wrap(
        s,
        error_code=m.error_code,
        high_watermark=m.high_watermark,
        log_start_offset=m.log_start_offset,
        diverging_epoch=s.make(
            "EpochEndOffset", epoch=m.diverging_epoch.epoch, end_offset=m.diverging_epoch.end_offset
        ),
        current_leader=_leader(s, m.current_leader),
        snapshot_id=_snapshot_id(s, m.snapshot_id),
        records=entries_to_records(m.records),
    )
    return s.make("FetchResponse", responses=topics)


def _leader(s: Shapes, leader: LeaderIdAndEpoch) -> Any:
    return s.make("LeaderIdAndEpoch", leader_id=leader.leader_id, leader_epoch=leader.leader_epoch)


def _snapshot_id(s: Shapes, snapshot_id: SnapshotId) -> Any:
    return s.make("SnapshotId", end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch)


def _snapshot_request(m: FetchSnapshotRequest) -> Any:
    s = _request(FETCH_SNAPSHOT)
    topics = _SNAPSHOT_REQUEST.wrap(
        s,
        current_leader_epoch=m.current_leader_epoch,
        snapshot_id=_snapshot_id(s, m.snapshot_id),
        position=m.position,
    )
    return s.make("FetchSnapshotRequest", cluster_id=m.cluster_id, replica_id=m.replica_id, max_bytes=m.max_bytes,
                  topics=topics)  # fmt: skip


def _snapshot_response(m: FetchSnapshotResponse) -> Any:
    s = _response(FETCH_SNAPSHOT)
    topics = _SNAPSHOT_RESPONSE.wrap(
        s,
        error_code=m.error_code,
        snapshot_id=_snapshot_id(s, m.snapshot_id),
        current_leader=_leader(s, m.current_leader),
        size=m.size,
        position=m.position,
        unaligned_records=m.unaligned_records,
    )
    return s.make("FetchSnapshotResponse", topics=topics)


def _describe_request(_m: DescribeQuorumRequest) -> Any:
    s = _request(DESCRIBE_QUORUM)
    return s.make("DescribeQuorumRequest", topics=_QUORUM.wrap(s))


def _describe_response(m: DescribeQuorumResponse) -> Any:
    s = _response(DESCRIBE_QUORUM)

    def replicas(states: tuple[ReplicaState, ...]) -> tuple[Any, ...]:
        return tuple(
            s.make("ReplicaState", replica_id=r.replica_id, log_end_offset=r.log_end_offset,
                   last_fetch_timestamp=r.last_fetch_timestamp, last_caught_up_timestamp=r.last_caught_up_timestamp)
            for r in states
        )  # fmt: skip

    topics = _QUORUM.wrap(
        s,
        error_code=m.error_code,
        leader_id=m.leader_id,
        leader_epoch=m.leader_epoch,
        high_watermark=m.high_watermark,
        current_voters=replicas(m.current_voters),
        observers=replicas(m.observers),
    )
    return s.make("DescribeQuorumResponse", topics=topics)


_TO_KIO: dict[type, Callable[[Any], Any]] = {
    VoteRequest: _vote_request,
    VoteResponse: _vote_response,
    BeginQuorumEpochRequest: _begin_request,
    BeginQuorumEpochResponse: _begin_response,
    EndQuorumEpochRequest: _end_request,
    EndQuorumEpochResponse: _end_response,
    FetchRequest: _fetch_request,
    FetchResponse: _fetch_response,
    FetchSnapshotRequest: _snapshot_request,
    FetchSnapshotResponse: _snapshot_response,
    DescribeQuorumRequest: _describe_request,
    DescribeQuorumResponse: _describe_response,
}


def to_kio(message: Request | Response) -> Any:
    """The kio request or response object (at `VERSIONS`) that carries `message` on the wire."""
    convert = _TO_KIO.get(type(message))
    if convert is None:
        raise WireError(f"{type(message).__name__} is not a KRaft message")
    return convert(message)


# ---- kio -> core message -------------------------------------------------------------------------------


def _from_vote_request(k: Any) -> VoteRequest:
    p = _QUORUM.unwrap(k)
    return VoteRequest(k.cluster_id, int(p.replica_epoch), int(p.replica_id), int(p.last_offset_epoch),
                       int(p.last_offset))  # fmt: skip


def _from_vote_response(k: Any) -> VoteResponse:
    error, p = _QUORUM.response_partition(k)
    if p is None:
        return VoteResponse(error, NO_LEADER, -1, False)
    return VoteResponse(error, int(p.leader_id), int(p.leader_epoch), bool(p.vote_granted))


def _from_begin_request(k: Any) -> BeginQuorumEpochRequest:
    p = _QUORUM.unwrap(k)
    return BeginQuorumEpochRequest(k.cluster_id, int(p.leader_id), int(p.leader_epoch))


def _from_begin_response(k: Any) -> BeginQuorumEpochResponse:
    error, p = _QUORUM.response_partition(k)
    if p is None:
        return BeginQuorumEpochResponse(error, NO_LEADER, -1)
    return BeginQuorumEpochResponse(error, int(p.leader_id), int(p.leader_epoch))


def _from_end_request(k: Any) -> EndQuorumEpochRequest:
    p = _QUORUM.unwrap(k)
    return EndQuorumEpochRequest(k.cluster_id, int(p.leader_id), int(p.leader_epoch),
                                 tuple(int(i) for i in p.preferred_successors))  # fmt: skip


def _from_end_response(k: Any) -> EndQuorumEpochResponse:
    error, p = _QUORUM.response_partition(k)
    if p is None:
        return EndQuorumEpochResponse(error, NO_LEADER, -1)
    return EndQuorumEpochResponse(error, int(p.leader_id), int(p.leader_epoch))


def _from_fetch_request(k: Any) -> FetchRequest:
    p = _FETCH_REQUEST.unwrap(k)
    return FetchRequest(
        cluster_id=k.cluster_id,
        replica_id=int(k.replica_id),
        max_wait_ms=k.max_wait // _MS,
        current_leader_epoch=int(p.current_leader_epoch),
        fetch_offset=int(p.fetch_offset),
        last_fetched_epoch=int(p.last_fetched_epoch),
        log_start_offset=int(p.log_start_offset),
        partition_max_bytes=int(p.partition_max_bytes),
    )


def _from_fetch_response(k: Any) -> FetchResponse:
    error, p = _FETCH_RESPONSE.response_partition(k)
    if p is None:
        return FetchResponse(error, -1)
    return FetchResponse(
        error,
        int(p.high_watermark),
        log_start_offset=int(p.log_start_offset),
        diverging_epoch=EpochEndOffset(int(p.diverging_epoch.epoch), int(p.diverging_epoch.end_offset)),
        current_leader=_core_leader(p.current_leader),
        snapshot_id=_core_snapshot_id(p.snapshot_id),
        records=records_to_entries(p.records),
    )


def _core_leader(k: Any) -> LeaderIdAndEpoch:
    return LeaderIdAndEpoch(int(k.leader_id), int(k.leader_epoch))


def _core_snapshot_id(k: Any) -> SnapshotId:
    return SnapshotId(int(k.end_offset), int(k.epoch))


def _from_snapshot_request(k: Any) -> FetchSnapshotRequest:
    p = _SNAPSHOT_REQUEST.unwrap(k)
    return FetchSnapshotRequest(
        cluster_id=k.cluster_id,
        replica_id=int(k.replica_id),
        max_bytes=int(k.max_bytes),
        current_leader_epoch=int(p.current_leader_epoch),
        snapshot_id=_core_snapshot_id(p.snapshot_id),
        position=int(p.position),
    )


def _from_snapshot_response(k: Any) -> FetchSnapshotResponse:
    error, p = _SNAPSHOT_RESPONSE.response_partition(k)
    if p is None:
        return FetchSnapshotResponse(error)
    return FetchSnapshotResponse(
        error,
        snapshot_id=_core_snapshot_id(p.snapshot_id),
        current_leader=_core_leader(p.current_leader),
        size=int(p.size),
        position=int(p.position),
        unaligned_records=bytes(p.unaligned_records),
    )


def _from_describe_request(k: Any) -> DescribeQuorumRequest:
    _QUORUM.unwrap(k)
    return DescribeQuorumRequest()


def _from_describe_response(k: Any) -> DescribeQuorumResponse:
    error, p = _QUORUM.response_partition(k)
    if p is None:
        return DescribeQuorumResponse(error)

    def replicas(states: Any) -> tuple[ReplicaState, ...]:
        return tuple(
            ReplicaState(int(r.replica_id), int(r.log_end_offset), int(r.last_fetch_timestamp),
                         int(r.last_caught_up_timestamp))
            for r in states
        )  # fmt: skip

    return DescribeQuorumResponse(
        error,
        int(p.leader_id),
        int(p.leader_epoch),
        int(p.high_watermark),
        replicas(p.current_voters),
        replicas(p.observers),
    )


_FROM_KIO: dict[type, Callable[[Any], Request | Response]] = {
    request_class(VOTE, VERSIONS[VOTE]): _from_vote_request,
    response_class(VOTE, VERSIONS[VOTE]): _from_vote_response,
    request_class(BEGIN_QUORUM_EPOCH, VERSIONS[BEGIN_QUORUM_EPOCH]): _from_begin_request,
    response_class(BEGIN_QUORUM_EPOCH, VERSIONS[BEGIN_QUORUM_EPOCH]): _from_begin_response,
    request_class(END_QUORUM_EPOCH, VERSIONS[END_QUORUM_EPOCH]): _from_end_request,
    response_class(END_QUORUM_EPOCH, VERSIONS[END_QUORUM_EPOCH]): _from_end_response,
    request_class(FETCH, VERSIONS[FETCH]): _from_fetch_request,
    response_class(FETCH, VERSIONS[FETCH]): _from_fetch_response,
    request_class(FETCH_SNAPSHOT, VERSIONS[FETCH_SNAPSHOT]): _from_snapshot_request,
    response_class(FETCH_SNAPSHOT, VERSIONS[FETCH_SNAPSHOT]): _from_snapshot_response,
    request_class(DESCRIBE_QUORUM, VERSIONS[DESCRIBE_QUORUM]): _from_describe_request,
    response_class(DESCRIBE_QUORUM, VERSIONS[DESCRIBE_QUORUM]): _from_describe_response,
}


def from_kio(message: Any) -> Request | Response:
    """The core's message carried by a decoded kio request or response (at `VERSIONS`)."""
    convert = _FROM_KIO.get(type(message))
    if convert is None:
        api_key = getattr(message, "__api_key__", None)
        version = getattr(message, "__version__", None)
        expected = f"v{VERSIONS[api_key]}" if api_key in VERSIONS else "none"
        raise WireError(f"{type(message).__name__} v{version} is not mapped (KRaft wire version: {expected})")
    return convert(message)
