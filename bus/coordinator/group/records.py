"""`__consumer_offsets` records in Kafka's own binary formats, and the group -> partition mapping.

Every record key starts with an int16 version that says what the record is: 0 and 1 are an
OffsetCommitKey (group, topic, partition), 2 is a GroupMetadataKey (group); 3 and above are
KIP-848 consumer-group records, which the classic coordinator skips. Values also start with their
int16 version. We write what Kafka 3.x/4.x write (OffsetCommitKey v1 with OffsetCommitValue v3, or
v1 when the commit carries an explicit expire timestamp; GroupMetadataKey v2 with
GroupMetadataValue v3), and read every version Kafka ever wrote, so the topic stays readable by
Kafka's own tools (`kafka-console-consumer --formatter ...GroupMetadataManager$OffsetsMessageFormatter`).
A record with a null value is a tombstone: the offset or the group was deleted. Which partition a
group's records go to is `bus.coordinator.partitioning.partition_for` (Java's String.hashCode).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY = 1
GROUP_METADATA_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordFormatError(ValueError):
    """A key or value that is not a record of the formats above (or is truncated)."""


# -- record types ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    """A committed offset. `expire_timestamp` is only set by OffsetCommit v2-v4 with a retention time."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = -1
    expire_timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


# -- writer / reader -----------------------------------------------------------------------------


class _Writer:
    __slots__ = ("flexible", "out")

    def __init__(self, version: int, flexible: bool = False) -> None:
        self.out = bytearray(_I16.pack(version))
        self.flexible = flexible

    def i32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.out += _I16.pack(-1)
            return
        data = value.encode()
        self.out += _I16.pack(len(data)) + data

    def bytes_(self, value: bytes) -> None:
        self.out += _I32.pack(len(value)) + value

    def count(self, n: int) -> None:
        self.out += _I32.pack(n)

    def done(self) -> bytes:
        return bytes(self.out)


class _Reader:
    """Reads both the classic encodings and the flexible (compact + tagged fields) ones of v4 values."""

    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise RecordFormatError("truncated __consumer_offsets record")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self._take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("varint too long")

    def _length16(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i16()

    def _length32(self) -> int:
        return self.uvarint() - 1 if self.flexible else self.i32()

    def nullable_string(self) -> str | None:
        n = self._length16()
        return None if n < 0 else self._take(n).decode("utf-8", errors="replace")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        n = self._length32()
        return b"" if n < 0 else self._take(n)

    def count(self) -> int:
        return max(self._length32(), 0)

    def tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


# -- keys ----------------------------------------------------------------------------------------


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    w = _Writer(OFFSET_COMMIT_KEY_VERSION)
    w.string(group)
    w.string(topic)
    w.i32(partition)
    return w.done()


def encode_group_key(group: str) -> bytes:
    w = _Writer(GROUP_METADATA_KEY_VERSION)
    w.string(group)
    return w.done()


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a `__consumer_offsets` record, or None for record types the classic coordinator ignores."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupKey(r.string())
    if version < 0:
        raise RecordFormatError(f"unknown __consumer_offsets key version {version}")
    return None


# -- values --------------------------------------------------------------------------------------


def encode_offset_value(value: OffsetValue) -> bytes:
    """OffsetCommitValue v3, or v1 (which has no leader epoch) when an explicit expiry must be kept."""
    if value.expire_timestamp is not None:
        w = _Writer(OFFSET_COMMIT_VALUE_VERSION_WITH_EXPIRY)
        w.i64(value.offset)
        w.string(value.metadata)
        w.i64(value.commit_timestamp)
        w.i64(value.expire_timestamp)
        return w.done()
    w = _Writer(OFFSET_COMMIT_VALUE_VERSION)
    w.i64(value.offset)
    w.i32(value.leader_epoch)
    w.string(value.metadata)
    w.i64(value.commit_timestamp)
    return w.done()


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.nullable_string() or ""
    commit_timestamp = r.i64()
    expire = r.i64() if version == 1 else None
    r.tagged_fields()
    return OffsetValue(offset, metadata, commit_timestamp, leader_epoch, None if expire == -1 else expire)


def encode_group_value(value: GroupValue) -> bytes:
    w = _Writer(GROUP_METADATA_VALUE_VERSION)
    w.string(value.protocol_type)
    w.i32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    w.i64(value.current_state_timestamp)
    w.count(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        w.i32(m.rebalance_timeout)
        w.i32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
    return w.done()


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.count()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        session_timeout_first = version < 1
        rebalance_timeout = -1 if session_timeout_first else r.i32()
        session_timeout = r.i32()
        if session_timeout_first:
            rebalance_timeout = session_timeout  # v0 had one timeout; Kafka uses it for both
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.tagged_fields()
        members.append(MemberValue(member_id, instance_id, client_id, client_host, rebalance_timeout,
                                   session_timeout, subscription, assignment))
    r.tagged_fields()
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))
