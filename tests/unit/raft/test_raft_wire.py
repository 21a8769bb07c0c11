"""The core's KRaft messages through kio's real encoder and decoder, and log entries as Kafka record batches.

Requests are decoded with the broker's own request reader (bounds check included), responses with the
cached reader behind it; kafka-python's record parser judges the batches independently of ours.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

import pytest
from kafka.record import MemoryRecords
from kio.schema.errors import ErrorCode

from bus.protocol import messages
from bus.protocol.records import Record, build_batch
from bus.raft.messages import (
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
from bus.raft.wire import (
    METADATA_TOPIC,
    VERSIONS,
    WireError,
    entries_to_records,
    from_kio,
    records_to_entries,
    to_kio,
)

LEADER_CHANGE = LeaderChangeMessage(leader_id=2, voters=(1, 2, 3), granting_voters=(2, 3))
# Offsets 10-16: epoch 3 data, epoch 4's LeaderChange and data, epoch 6's LeaderChange and data.
ENTRIES = (
    LogEntry(10, 3, b"a"),
    LogEntry(11, 3, b"bb"),
    LogEntry(12, 4, LEADER_CHANGE),
    LogEntry(13, 4, b""),
    LogEntry(14, 4, b"c" * 300),
    LogEntry(15, 6, LeaderChangeMessage(1, (1, 2, 3), (1, 3))),
    LogEntry(16, 6, b"d"),
)

MESSAGES: list[Request | Response] = [
    VoteRequest("cluster-a", replica_epoch=7, replica_id=2, last_offset_epoch=6, last_offset=120),
    VoteRequest(None, replica_epoch=1, replica_id=1, last_offset_epoch=0, last_offset=0),
    VoteResponse(ErrorCode.none, leader_id=-1, leader_epoch=7, vote_granted=True),
    VoteResponse(ErrorCode.inconsistent_voter_set, leader_id=3, leader_epoch=8, vote_granted=False),
    BeginQuorumEpochRequest("cluster-a", leader_id=2, leader_epoch=7),
    BeginQuorumEpochResponse(ErrorCode.fenced_leader_epoch, leader_id=3, leader_epoch=9),
    EndQuorumEpochRequest("cluster-a", leader_id=2, leader_epoch=7, preferred_successors=(3, 1)),
    EndQuorumEpochRequest(None, leader_id=2, leader_epoch=7, preferred_successors=()),
    EndQuorumEpochResponse(ErrorCode.none, leader_id=2, leader_epoch=7),
    FetchRequest("cluster-a", replica_id=3, max_wait_ms=500, current_leader_epoch=7, fetch_offset=42,
                 last_fetched_epoch=6, log_start_offset=10, partition_max_bytes=1 << 20),
    FetchRequest(None, replica_id=1, max_wait_ms=0, current_leader_epoch=1, fetch_offset=0, last_fetched_epoch=0),
    FetchResponse(ErrorCode.none, high_watermark=15, log_start_offset=10, current_leader=LeaderIdAndEpoch(2, 6),
                  records=ENTRIES),
    FetchResponse(ErrorCode.none, high_watermark=15, current_leader=LeaderIdAndEpoch(2, 6)),
    FetchResponse(ErrorCode.none, high_watermark=15, diverging_epoch=EpochEndOffset(4, 13),
                  current_leader=LeaderIdAndEpoch(2, 6)),
    FetchResponse(ErrorCode.none, high_watermark=15, snapshot_id=SnapshotId(end_offset=10, epoch=3),
                  current_leader=LeaderIdAndEpoch(2, 6)),
    FetchResponse(ErrorCode.fenced_leader_epoch, high_watermark=-1, current_leader=LeaderIdAndEpoch(3, 8)),
    FetchSnapshotRequest("cluster-a", replica_id=3, max_bytes=4096, current_leader_epoch=7,
                         snapshot_id=SnapshotId(100, 6), position=8192),
    FetchSnapshotResponse(ErrorCode.none, SnapshotId(100, 6), LeaderIdAndEpoch(2, 7), size=9000, position=8192,
                          unaligned_records=bytes(range(256)) * 3),
    FetchSnapshotResponse(ErrorCode.snapshot_not_found, current_leader=LeaderIdAndEpoch(2, 7)),
    DescribeQuorumRequest(),
    DescribeQuorumResponse(ErrorCode.none, leader_id=2, leader_epoch=7, high_watermark=120,
                           current_voters=(ReplicaState(2, 130, -1, 1_700_000_000_000),
                                           ReplicaState(1, 120, 1_700_000_000_100, 1_700_000_000_050)),
                           observers=(ReplicaState(9, 40),)),
    DescribeQuorumResponse(ErrorCode.not_leader_or_follower),
]  # fmt: skip


def _over_the_wire(kio_message: Any) -> Any:
    """Encode with kio and decode with the reader the broker uses for that request or response."""
    frame = messages.encode(kio_message)
    api_key, version = kio_message.__api_key__, kio_message.__version__
    if type(kio_message) is messages.request_class(api_key, version):
        return messages.decode_request(api_key, version, frame, 0)
    decoded, size = messages._reader(messages.response_class(api_key, version))(frame, 0)
    assert size == len(frame)
    return decoded


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_through_kafka_bytes(message: Request | Response) -> None:
    kio_message = to_kio(message)
    assert kio_message.__version__ == VERSIONS[kio_message.__api_key__]
    assert from_kio(_over_the_wire(kio_message)) == message


def test_every_message_type_is_covered() -> None:
    assert {type(m) for m in MESSAGES} == set(Request.__args__) | set(Response.__args__)  # type: ignore[attr-defined]


def test_nesting_is_one_metadata_partition_with_the_fields_where_kafka_keeps_them() -> None:
    fetch = to_kio(MESSAGES[9])
    assert (fetch.cluster_id, fetch.replica_id, fetch.max_wait.total_seconds()) == ("cluster-a", 3, 0.5)
    assert (fetch.session_id, fetch.session_epoch, fetch.min_bytes) == (0, -1, 0)  # sessionless, as KRaft fetches
    [topic] = fetch.topics
    [partition] = topic.partitions
    assert (topic.topic, partition.partition, partition.last_fetched_epoch) == (METADATA_TOPIC, 0, 6)
    vote = to_kio(MESSAGES[0])
    assert (vote.topics[0].topic_name, vote.topics[0].partitions[0].partition_index) == (METADATA_TOPIC, 0)


def test_batches_split_by_epoch_and_read_by_an_independent_parser() -> None:
    data = entries_to_records(ENTRIES)
    records = MemoryRecords(data)
    batches = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        batches.append((batch.base_offset, batch.leader_epoch, batch.is_control_batch,
                        [(r.offset, r.key, r.value) for r in batch]))  # fmt: skip
    # A control batch holds only control records, so epoch 4's LeaderChange sits apart from its data.
    assert [b[:3] for b in batches] == [(10, 3, False), (12, 4, True), (13, 4, False), (15, 6, True), (16, 6, False)]
    assert batches[0][3] == [(10, None, b"a"), (11, None, b"bb")]
    assert [r[0] for r in batches[2][3]] == [13, 14]
    # Kafka's LeaderChange control record: key (version 0, type 2); value LeaderChangeMessage v0, flexible.
    voter = struct.Struct(">ib")  # voter_id, empty tagged fields
    value = (struct.pack(">hi", 0, 2) + b"\x04" + b"".join(voter.pack(v, 0) for v in (1, 2, 3))
             + b"\x03" + b"".join(voter.pack(v, 0) for v in (2, 3)) + b"\x00")  # fmt: skip
    assert batches[1][3] == [(12, struct.pack(">hh", 0, 2), value)]
    assert records_to_entries(data) == ENTRIES


def test_empty_records() -> None:
    assert entries_to_records(()) == b""
    assert records_to_entries(b"") == records_to_entries(None) == ()
    partition = _over_the_wire(to_kio(FetchResponse(ErrorCode.none, 0))).responses[0].partitions[0]
    assert partition.records == b""


def _response_with_records(data: bytes) -> Any:
    kio_message = to_kio(FetchResponse(ErrorCode.none, 15))
    topic = kio_message.responses[0]
    partition = dataclasses.replace(topic.partitions[0], records=data)
    return _over_the_wire(
        dataclasses.replace(kio_message, responses=(dataclasses.replace(topic, partitions=(partition,)),))
    )


def test_corrupt_batches_are_wire_errors() -> None:
    data = bytearray(entries_to_records(ENTRIES))
    truncated = bytes(data[:-1])
    data[70] ^= 0xFF  # a bit flip inside the first batch's records
    with pytest.raises(WireError, match="CRC"):
        from_kio(_response_with_records(bytes(data)))
    with pytest.raises(WireError, match="truncated"):
        from_kio(_response_with_records(truncated))
    with pytest.raises(WireError, match="do not parse"):
        from_kio(_response_with_records(b"\x00" * 40))


def test_records_the_core_cannot_hold_are_wire_errors() -> None:
    def control(key: bytes | None, value: bytes | None) -> bytes:
        return build_batch([Record(5, -1, key, value)], base_offset=5, partition_leader_epoch=1, is_control=True)

    with pytest.raises(WireError, match="control record type 0"):  # a transaction marker (abort)
        records_to_entries(control(struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 1)))
    with pytest.raises(WireError, match="no control record key"):
        records_to_entries(control(None, b"x"))
    with pytest.raises(WireError, match="LeaderChange record at offset 5 does not parse"):
        records_to_entries(control(struct.pack(">hh", 0, 2), b"\x00\x00\x00"))
    with pytest.raises(WireError, match="LeaderChange record at offset 5 does not parse"):  # a 2**31 array length
        records_to_entries(control(struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1) + b"\xff\xff\xff\xff\x07"))
    with pytest.raises(WireError, match="has no value"):
        records_to_entries(build_batch([Record(5, -1, None, None)], base_offset=5, partition_leader_epoch=1))


def _nested(kio_message: Any, topics: tuple[Any, ...]) -> Any:
    return dataclasses.replace(kio_message, topics=topics)


def test_anything_but_the_one_metadata_partition_is_a_wire_error() -> None:
    vote = to_kio(MESSAGES[0])
    topic = vote.topics[0]
    partition = topic.partitions[0]
    cases = {
        "0 topics": (),
        "2 topics": (topic, topic),
        "topic 'orders'": (dataclasses.replace(topic, topic_name="orders"),),
        "2 partitions": (dataclasses.replace(topic, partitions=(partition, partition)),),
        "partition __cluster_metadata-1": (
            dataclasses.replace(topic, partitions=(dataclasses.replace(partition, partition_index=1),)),
        ),
    }
    for expected, topics in cases.items():
        with pytest.raises(WireError, match=expected.replace("'", ".")):
            from_kio(_over_the_wire(_nested(vote, topics)))
    fetch = to_kio(MESSAGES[9])
    with pytest.raises(WireError, match="topic 'orders'"):
        from_kio(_over_the_wire(_nested(fetch, (dataclasses.replace(fetch.topics[0], topic="orders"),))))
    response = to_kio(MESSAGES[2])
    with pytest.raises(WireError, match="0 topics"):
        from_kio(_over_the_wire(_nested(response, ())))


def test_a_top_level_error_wins_and_needs_no_topics() -> None:
    """Kafka answers a bad cluster id or partition with only a top-level error code."""
    shapes = messages.shapes(52, VERSIONS[52])
    bare = shapes.make("VoteResponse", error_code=ErrorCode.inconsistent_cluster_id, topics=())
    assert from_kio(_over_the_wire(bare)) == VoteResponse(ErrorCode.inconsistent_cluster_id, -1, -1, False)
    with_topics = dataclasses.replace(to_kio(MESSAGES[2]), error_code=ErrorCode.invalid_request)
    assert from_kio(_over_the_wire(with_topics)) == VoteResponse(ErrorCode.invalid_request, -1, 7, True)
    fetch = messages.shapes(1, VERSIONS[1]).make("FetchResponse", error_code=ErrorCode.inconsistent_cluster_id)
    assert from_kio(_over_the_wire(fetch)) == FetchResponse(ErrorCode.inconsistent_cluster_id, -1)


def test_other_versions_and_types_are_wire_errors() -> None:
    vote_v1 = messages.request_shapes(52, 1).make("VoteRequest", topics=())
    with pytest.raises(WireError, match=r"VoteRequest v1 is not mapped \(KRaft wire version: v0\)"):
        from_kio(vote_v1)
    with pytest.raises(WireError, match="LogEntry is not a KRaft message"):
        to_kio(ENTRIES[0])  # type: ignore[arg-type]
