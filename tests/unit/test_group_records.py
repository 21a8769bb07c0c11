"""__consumer_offsets record codecs and the group -> partition mapping, against Kafka's formats."""

from __future__ import annotations

import struct

import pytest

from bus.coordinator import partitioning
from bus.coordinator.group import records as rec


# Values printed by Java (`s.hashCode()`, `Utils.abs(h) % 50`) for these strings.
@pytest.mark.parametrize(
    ("text", "hash_code", "partition"),
    [
        ("", 0, 0),
        ("a", 97, 47),
        ("hello", 99162322, 22),
        ("my-group", -1906497762, 12),
        ("test-group", 627841412, 12),
        ("console-consumer-12345", 158455506, 6),
        ("polygenelubricants", -2147483648, 0),  # Integer.MIN_VALUE: Utils.abs maps it to 0
        ("groupé", -1237460406, 6),
        ("組", 32068, 18),
        ("😀grp", 1276929186, 36),  # a surrogate pair counts as two UTF-16 units
    ],
)
def test_java_hash_and_partition(text: str, hash_code: int, partition: int) -> None:
    assert partitioning.java_string_hash(text) == hash_code
    assert partitioning.partition_for(text, 50) == partition


def test_offset_key_is_kafka_v1_layout() -> None:
    key = rec.encode_offset_key("g", "t", 3)
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + struct.pack(">i", 3)
    assert rec.decode_key(key) == rec.OffsetKey("g", "t", 3)
    # v0 keys (written by old brokers) have the same body
    assert rec.decode_key(b"\x00\x00" + key[2:]) == rec.OffsetKey("g", "t", 3)


def test_group_key_and_unknown_key_versions() -> None:
    key = rec.encode_group_key("grp")
    assert key == b"\x00\x02\x00\x03grp"
    assert rec.decode_key(key) == rec.GroupKey("grp")
    assert rec.decode_key(b"\x00\x03\x00\x01x") is None  # KIP-848 records: not ours to read
    with pytest.raises(rec.RecordFormatError):
        rec.decode_key(b"\x00\x01\x00\x05ab")


def test_offset_value_v3_layout_and_round_trip() -> None:
    value = rec.OffsetValue(offset=42, metadata="m", commit_timestamp=1000, leader_epoch=7)
    data = rec.encode_offset_value(value)
    assert data == b"\x00\x03" + struct.pack(">qi", 42, 7) + b"\x00\x01m" + struct.pack(">q", 1000)
    assert rec.decode_offset_value(data) == value


def test_offset_value_with_expiry_is_v1() -> None:
    value = rec.OffsetValue(offset=5, metadata="", commit_timestamp=10, expire_timestamp=99)
    data = rec.encode_offset_value(value)
    assert data[:2] == b"\x00\x01"
    assert rec.decode_offset_value(data) == value


def test_offset_value_v0_and_flexible_v4() -> None:
    v0 = b"\x00\x00" + struct.pack(">q", 9) + b"\x00\x00" + struct.pack(">q", 77)
    assert rec.decode_offset_value(v0) == rec.OffsetValue(9, "", 77)
    # v4: offset, leaderEpoch, compact string "md" (length+1 = 3), commitTimestamp, no tagged fields
    v4 = b"\x00\x04" + struct.pack(">qi", 12, 2) + b"\x03md" + struct.pack(">q", 55) + b"\x00"
    assert rec.decode_offset_value(v4) == rec.OffsetValue(12, "md", 55, 2)


def test_group_value_v3_round_trip() -> None:
    member = rec.MemberValue("m-1", "inst", "client", "/127.0.0.1", 30000, 6000, b"sub", b"asg")
    value = rec.GroupValue("consumer", 3, "range", "m-1", 12345, (member,))
    data = rec.encode_group_value(value)
    assert data[:2] == b"\x00\x03"
    assert rec.decode_group_value(data) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = rec.GroupValue("consumer", 4, None, None, 1, ())
    data = rec.encode_group_value(value)
    assert data == (b"\x00\x03\x00\x08consumer" + struct.pack(">i", 4) + b"\xff\xff\xff\xff"
                    + struct.pack(">q", 1) + struct.pack(">i", 0))
    assert rec.decode_group_value(data) == value


def test_group_value_v0_has_one_timeout() -> None:
    def s(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    member = s("m") + s("c") + s("/h") + struct.pack(">i", 10000) + struct.pack(">i", 1) + b"x" + struct.pack(">i", 0)
    data = b"\x00\x00" + s("consumer") + struct.pack(">i", 1) + s("range") + s("m") + struct.pack(">i", 1) + member
    decoded = rec.decode_group_value(data)
    assert decoded.current_state_timestamp == -1
    assert decoded.members == (rec.MemberValue("m", None, "c", "/h", 10000, 10000, b"x", b""),)


def test_truncated_value_is_a_format_error() -> None:
    data = rec.encode_offset_value(rec.OffsetValue(1, "abc", 2))
    with pytest.raises(rec.RecordFormatError):
        rec.decode_offset_value(data[:-3])
