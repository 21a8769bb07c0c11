"""Produce's request reader and response encoder, written out by hand for the hot path.

Produce is the request a broker answers most, one per producer batch. The generic schema walker
(`guard.check_body`) and kio's generic writer cost more per request than the append itself, so for
Produce v3-v12 both are spelled out with plain struct calls: `parse_request` follows the exact layout
and refuses what `check_body` and kio's reader refuse, and `encode_response` writes the bytes kio would write
(tests/unit/test_produce_codec.py holds both to that with hypothesis across the versions). Anything
outside that path (another version, a response carrying the leader-discovery tagged fields) returns
None from `encode_response` and goes through kio.

The broker's own Produce path skips kio's dataclasses altogether: `parse_request` checks and reads the
request in one walk into the NamedTuples below (named as kio names the fields, so handler code reads
either), and the handler answers with `PartitionProduced`/`ProduceAnswer`, which `encode_response`
writes like kio's objects. Building kio's response dataclasses cost about a tenth of a Produce.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from bus.protocol.guard import MalformedRequest, need
from bus.protocol.header import read_uvarint

MIN_VERSION = 3
MAX_VERSION = 12
FLEXIBLE_FROM = 9  # compact strings/arrays and tagged fields
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">ii")  # frame size, correlation id
_PARTITION_V2 = struct.Struct(">ihqq")  # index, error_code, base_offset, log_append_time_ms
_PARTITION_V5 = struct.Struct(">ihqqq")  # + log_start_offset
_BATCH_INDEX = struct.Struct(">i")


# -- the broker's own request and response values ----------------------------------------------------


class PartitionData(NamedTuple):
    index: int  # type: ignore[assignment]  # kio's field name; it shadows tuple.index
    records: bytes | None


class TopicData(NamedTuple):
    name: str
    partition_data: list[PartitionData]


class ProduceRequest(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


class RecordErrorOut(NamedTuple):
    batch_index: int
    batch_index_error_message: str | None


class PartitionProduced(NamedTuple):
    """One partition's answer; versions before 8 have no message or record errors and drop them."""

    index: int  # type: ignore[assignment]  # kio's field name; it shadows tuple.index
    error_code: int
    base_offset: int = -1
    log_append_time: int = -1  # epoch ms, -1 unless the topic uses LogAppendTime
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[RecordErrorOut, ...] = ()


class TopicProduced(NamedTuple):
    name: str
    partition_responses: list[PartitionProduced]


class ProduceAnswer(NamedTuple):
    responses: list[TopicProduced]
    throttle_time: int = 0


def error_answer(request: ProduceRequest, code: int, message: str) -> ProduceAnswer:
    """Every partition of `request` answered with `code` (a handler that raised: UNKNOWN_SERVER_ERROR)."""
    return ProduceAnswer([TopicProduced(t.name, [PartitionProduced(p.index, code, error_message=message)
                                                 for p in t.partition_data]) for t in request.topic_data])


# -- request ------------------------------------------------------------------------------------------


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """An unsigned varint, the one-byte case (nearly every count and short length) without a call."""
    if pos < end and buf[pos] < 0x80:
        return buf[pos], pos + 1
    return read_uvarint(buf, pos, end)


def _skip_string(buf: bytes, pos: int, end: int, flexible: bool, width: struct.Struct) -> int:
    """A (nullable) string or bytes field: legacy int16/int32 length, or compact uvarint length + 1."""
    if flexible:
        length, pos = _varint(buf, pos, end)
        return pos if length == 0 else need(pos, length - 1, end)
    pos = need(pos, width.size, end)
    (length,) = width.unpack_from(buf, pos - width.size)
    return pos if length == -1 else need(pos, length, end)


def _array_count(buf: bytes, pos: int, end: int, flexible: bool) -> tuple[int, int]:
    if flexible:
        count, pos = _varint(buf, pos, end)
        count -= 1
    else:
        pos = need(pos, 4, end)
        (count,) = _I32.unpack_from(buf, pos - 4)
    if count < 0:
        raise MalformedRequest("null for a non-nullable array")
    if count > end - pos:  # every element takes at least one byte
        raise MalformedRequest(f"array of {count} elements in {end - pos} bytes")
    return count, pos


def _skip_tagged(buf: bytes, pos: int, end: int) -> int:
    """Produce requests define no tagged fields: each one present is skipped within its declared size."""
    if pos < end and buf[pos] == 0:
        return pos + 1
    count, pos = read_uvarint(buf, pos, end)
    if count > end - pos:
        raise MalformedRequest(f"{count} tagged fields in {end - pos} bytes")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos, end)
        size, pos = read_uvarint(buf, pos, end)
        pos = need(pos, size, end)
    return pos


def _string(buf: bytes, pos: int, end: int, flexible: bool) -> tuple[str | None, int]:
    start = pos
    pos = _skip_string(buf, pos, end, flexible, _I16)
    if flexible:
        length, body = _varint(buf, start, end)
        if length == 0:
            return None, pos
    elif _I16.unpack_from(buf, start)[0] == -1:
        return None, pos
    else:
        body = start + 2
    try:
        return bytes(buf[body:pos]).decode(), pos
    except UnicodeDecodeError as exc:
        raise MalformedRequest(f"string at byte {body} is not UTF-8: {exc.reason}") from None


def _records(buf: bytes, pos: int, end: int, flexible: bool) -> tuple[bytes | None, int]:
    start = pos
    pos = _skip_string(buf, pos, end, flexible, _I32)
    if flexible:
        length, body = _varint(buf, start, end)
        return (None if length == 0 else bytes(buf[body:pos])), pos
    return (None if _I32.unpack_from(buf, start)[0] == -1 else bytes(buf[start + 4:pos])), pos


_ACKS_TIMEOUT = struct.Struct(">hi")


def parse_request(frame: bytes, offset: int, version: int) -> ProduceRequest:
    """The ProduceRequest body at `offset`, every length checked against `frame` (MalformedRequest if not)."""
    flexible = version >= FLEXIBLE_FROM
    end = len(frame)
    transactional_id, pos = _string(frame, offset, end, flexible)
    pos = need(pos, 6, end)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos - 6)
    topic_count, pos = _array_count(frame, pos, end, flexible)
    topics = []
    for _ in range(topic_count):
        name, pos = _string(frame, pos, end, flexible)
        if name is None:
            raise MalformedRequest("null topic name")
        partition_count, pos = _array_count(frame, pos, end, flexible)
        partitions = []
        for _ in range(partition_count):
            pos = need(pos, 4, end)
            (index,) = _I32.unpack_from(frame, pos - 4)
            records, pos = _records(frame, pos, end, flexible)
            if flexible:
                pos = _skip_tagged(frame, pos, end)
            partitions.append(PartitionData(index, records))
        if flexible:
            pos = _skip_tagged(frame, pos, end)
        topics.append(TopicData(name, partitions))
    if flexible:
        _skip_tagged(frame, pos, end)
    return ProduceRequest(transactional_id, acks, timeout_ms, topics)


# -- response -----------------------------------------------------------------------------------------


def _uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _put_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    data = value.encode()
    if flexible:
        _uvarint(out, len(data) + 1)
    else:
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes does not fit a legacy string")
        out += _I16.pack(len(data))
    out += data


def _count(out: bytearray, count: int, flexible: bool) -> None:
    if flexible:
        _uvarint(out, count + 1)
    else:
        out += _I32.pack(count)


def _millis(value: Any) -> int:
    """kio's datetime_i64/timedelta_i32 encoding: rounded milliseconds, -1 for a null time; ints are ms."""
    if value is None:
        return -1
    if isinstance(value, int):
        return value
    seconds = value.timestamp() if hasattr(value, "timestamp") else value.total_seconds()
    return round(seconds * 1000)


def _has_leader_tags(response: Any) -> bool:
    """The v10+ tagged fields that point a producer at a new leader (KIP-951): kio writes those."""
    if getattr(response, "node_endpoints", ()):
        return True
    for topic in response.responses:
        for partition in topic.partition_responses:
            leader = getattr(partition, "current_leader", None)
            if leader is not None and (leader.leader_id != -1 or leader.leader_epoch != -1):
                return True
    return False


def encode_response(correlation_id: int, response: Any, version: int) -> memoryview | None:
    """The whole response frame of a ProduceResponse of `version`, or None where kio must write it."""
    if not MIN_VERSION <= version <= MAX_VERSION or (version >= 10 and _has_leader_tags(response)):
        return None
    flexible = version >= FLEXIBLE_FROM
    out = bytearray(_HEAD.pack(0, correlation_id))
    if flexible:
        out.append(0)  # response header v1: no tagged fields
    _count(out, len(response.responses), flexible)
    for topic in response.responses:
        _put_string(out, topic.name, flexible)
        _count(out, len(topic.partition_responses), flexible)
        for p in topic.partition_responses:
            if version >= 5:
                out += _PARTITION_V5.pack(p.index, p.error_code, p.base_offset, _millis(p.log_append_time),
                                          p.log_start_offset)
            else:
                out += _PARTITION_V2.pack(p.index, p.error_code, p.base_offset, _millis(p.log_append_time))
            if version >= 8:
                _count(out, len(p.record_errors), flexible)
                for error in p.record_errors:
                    out += _BATCH_INDEX.pack(error.batch_index)
                    _put_string(out, error.batch_index_error_message, flexible)
                    if flexible:
                        out.append(0)
                _put_string(out, p.error_message, flexible)
            if flexible:
                out.append(0)
        if flexible:
            out.append(0)
    out += _I32.pack(_millis(response.throttle_time))
    if flexible:
        out.append(0)
    frame = memoryview(out)
    _HEAD.pack_into(frame, 0, len(frame) - 4, correlation_id)
    return frame
