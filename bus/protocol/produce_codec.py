"""Produce's request bounds check and response encoder, written out by hand for the hot path.

Produce is the request a broker answers most, one per producer batch. The generic schema walker
(`guard.check_body`) and kio's generic writer cost more per request than the append itself, so for
Produce v3-v12 both are spelled out with plain struct calls: `check_request` follows the exact layout
and refuses what `check_body` refuses, and `encode_response` writes the bytes kio would write
(tests/unit/test_produce_codec.py holds both to that with hypothesis across the versions). Anything
outside that path (another version, a response carrying the leader-discovery tagged fields) returns
None from `encode_response` and goes through kio.
"""

from __future__ import annotations

import struct
from typing import Any

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


def check_request(frame: bytes, offset: int, version: int) -> None:
    """Raise MalformedRequest unless every length of the ProduceRequest body at `offset` fits in `frame`."""
    flexible = version >= FLEXIBLE_FROM
    end = len(frame)
    pos = _skip_string(frame, offset, end, flexible, _I16)  # transactional_id
    pos = need(pos, 6, end)  # acks, timeout_ms
    topics, pos = _array_count(frame, pos, end, flexible)
    for _ in range(topics):
        pos = _skip_string(frame, pos, end, flexible, _I16)  # name
        partitions, pos = _array_count(frame, pos, end, flexible)
        for _ in range(partitions):
            pos = need(pos, 4, end)  # index
            pos = _skip_string(frame, pos, end, flexible, _I32)  # records
            if flexible:
                pos = _skip_tagged(frame, pos, end)
        if flexible:
            pos = _skip_tagged(frame, pos, end)
    if flexible:
        _skip_tagged(frame, pos, end)


# -- response -----------------------------------------------------------------------------------------


def _uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _string(out: bytearray, value: str | None, flexible: bool) -> None:
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
    """kio's datetime_i64/timedelta_i32 encoding: rounded milliseconds, -1 for a null time."""
    if value is None:
        return -1
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
        _string(out, topic.name, flexible)
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
                    _string(out, error.batch_index_error_message, flexible)
                    if flexible:
                        out.append(0)
                _string(out, p.error_message, flexible)
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
