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

_FLEX_TAIL = b"\x00\x00\x00"  # the partition's, the topic's and the request's (empty) tagged fields
_LEGACY_ONE = struct.Struct(">hiih")  # acks, timeout_ms, topic count, the topic name's length
_LEGACY_PARTITION = struct.Struct(">iii")  # partition count, index, records length


def _parse_single(frame: bytes, pos: int, flexible: bool) -> ProduceRequest | None:
    """A request of exactly one topic with one partition, read without the general walk's calls, or None when the
    frame is anything else (or anything this reader is unsure of: a long varint, a bad length, tagged fields,
    trailing bytes): `parse_request` then reads it the general way. It never refuses a frame itself, so what is
    refused, and the message, stay the general walk's; what it accepts, it reads exactly as that walk would."""
    end = len(frame)
    try:
        if flexible:
            size = frame[pos]
            if size == 0:
                transactional_id = None
                pos += 1
            elif size < 0x80:
                stop = pos + size
                if stop > end:
                    return None
                transactional_id = str(frame[pos + 1:stop], "utf-8")
                pos = stop
            else:
                return None
            acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
            size = frame[pos + 7]  # the topic name's length + 1, after the topic count (1 + 1)
            if frame[pos + 6] != 2 or not 0 < size < 0x80:
                return None
            pos += 8
            stop = pos + size - 1
            name = str(frame[pos:stop], "utf-8")
            if stop + 5 > end or frame[stop] != 2:  # one partition
                return None
            (index,) = _I32.unpack_from(frame, stop + 1)
            pos = stop + 5
            size = frame[pos]
            if size < 0x80:
                pos += 1
            else:
                high = frame[pos + 1]
                if high >= 0x80:
                    return None
                size = (size & 0x7F) | high << 7
                pos += 2
            if size == 0:
                records = None
            else:
                stop = pos + size - 1
                records = bytes(frame[pos:stop])
                pos = stop
            if pos + 3 != end or frame[pos:end] != _FLEX_TAIL:
                return None
        else:
            (size,) = _I16.unpack_from(frame, pos)
            if size == -1:
                transactional_id = None
                pos += 2
            elif size >= 0:
                stop = pos + 2 + size
                if stop > end:
                    return None
                transactional_id = str(frame[pos + 2:stop], "utf-8")
                pos = stop
            else:
                return None
            acks, timeout_ms, topics, size = _LEGACY_ONE.unpack_from(frame, pos)
            if topics != 1 or size < 0:
                return None
            pos += 12
            stop = pos + size
            name = str(frame[pos:stop], "utf-8")
            partitions, index, size = _LEGACY_PARTITION.unpack_from(frame, stop)
            if partitions != 1:
                return None
            pos = stop + 12
            if size == -1:
                records = None
            elif size >= 0 and pos + size == end:
                records = bytes(frame[pos:end])
                pos = end
            else:
                return None
            if pos != end:
                return None
    except (IndexError, struct.error, UnicodeDecodeError):
        return None
    return ProduceRequest(transactional_id, acks, timeout_ms, [TopicData(name, [PartitionData(index, records)])])



def parse_request(frame: bytes, offset: int, version: int) -> ProduceRequest:
    """The ProduceRequest body at `offset`, every length checked against `frame` (MalformedRequest if not).

    The common request (one topic, one partition, short names, no tagged fields) is read by `_parse_single` in
    one straight walk; anything else, or anything it is unsure of, goes through the general walk below, which
    alone decides what is refused and why."""
    single = _parse_single(frame, offset, version >= FLEXIBLE_FROM)
    return single if single is not None else _parse_general(frame, offset, version)


def _parse_general(frame: bytes, offset: int, version: int) -> ProduceRequest:
    """Any ProduceRequest body, field by field: what `parse_request` refuses is refused here."""
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


_TEMPLATE_CACHE_SIZE = 1024  # (version, topic) pairs; past it the cache starts again (a broker of many topics)
_FLEX_HEAD = b"\x00\x02"  # response header v1's empty tagged fields, one topic (compact count 1 + 1)
_Template = tuple[struct.Struct, bytes, bytes, bytes]
_templates: dict[tuple[int, str], _Template] = {}


def _single_template(version: int, name: str) -> _Template | None:
    """The layout of a `version` answer of one partition of topic `name` with neither error message nor record
    errors, as `encode_response` writes it: a Struct whose constant parts (the header's tagged fields, the counts,
    the topic name, the empty record errors) are `s` fields passed in with the three constants, so one `pack`
    writes the whole frame. None for what the template does not cover (a version out of range, a long name)."""
    if not MIN_VERSION <= version <= MAX_VERSION:
        return None
    flexible = version >= FLEXIBLE_FROM
    try:
        name_bytes = name.encode()
    except UnicodeEncodeError:
        return None
    if len(name_bytes) >= (0x7F if flexible else 0x7FFF):  # a one-byte compact length; a legacy int16 one
        return None
    if flexible:
        middle = _FLEX_HEAD + bytes([len(name_bytes) + 1]) + name_bytes + b"\x02"
        tail = b"\x01\x00\x00\x00"  # no record errors, a null error message, the partition's and topic's tags
        end = b"\x00"
    else:
        middle = _I32.pack(1) + _I16.pack(len(name_bytes)) + name_bytes + _I32.pack(1)
        tail = _I32.pack(0) + _I16.pack(-1) if version >= 8 else b""
        end = b""
    partition = "ihqqq" if version >= 5 else "ihqq"
    return struct.Struct(f">ii{len(middle)}s{partition}{len(tail)}si{len(end)}s"), middle, tail, end


def _encode_single(correlation_id: int, answer: ProduceAnswer, version: int) -> bytes | None:
    """The frame of an answer of one topic and one partition without error message or record errors, written by
    one cached Struct; None for any other answer."""
    responses = answer.responses
    if len(responses) != 1:
        return None
    topic = responses[0]
    partitions = topic.partition_responses
    if len(partitions) != 1:
        return None
    p = partitions[0]
    throttle = answer.throttle_time
    if (p.error_message is not None or p.record_errors or type(p.log_append_time) is not int
            or type(throttle) is not int):
        return None
    key = (version, topic.name)
    cached = _templates.get(key)
    if cached is None:
        cached = _single_template(version, topic.name)
        if cached is None:
            return None
        if len(_templates) >= _TEMPLATE_CACHE_SIZE:
            _templates.clear()
        _templates[key] = cached
    template, middle, tail, end = cached
    if version >= 5:
        return template.pack(template.size - 4, correlation_id, middle, p.index, p.error_code, p.base_offset,
                             p.log_append_time, p.log_start_offset, tail, throttle, end)
    return template.pack(template.size - 4, correlation_id, middle, p.index, p.error_code, p.base_offset,
                         p.log_append_time, tail, throttle, end)


def encode_answer(correlation_id: int, answer: ProduceAnswer, version: int) -> bytes | memoryview | None:
    """The frame of the handler's own answer: the cached single-partition layout when it fits, else
    `encode_response` (byte for byte the same, tests/unit/test_produce_codec.py holds them to it)."""
    single = _encode_single(correlation_id, answer, version)
    return single if single is not None else encode_response(correlation_id, answer, version)


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
