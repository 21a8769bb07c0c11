"""MirrorMaker 2's internal record formats, so Kafka's own tooling (RemoteClusterUtils, MM2) reads ours.

Both use Kafka's `protocol.types.Schema` encoding: STRING is an int16 length then UTF-8, INT32/INT64
big-endian.
- OffsetSync (topic `mm2-offset-syncs.<target>.internal`): key (topic STRING, partition INT32), value
  (upstreamOffset INT64, offset INT64).
- Checkpoint (topic `<source>.checkpoints.internal` on the target): key (group STRING, topic STRING,
  partition INT32), value (version INT16 = 0, upstreamOffset INT64, offset INT64, metadata STRING).

Anyone may write to these topics, so decoding refuses, with a FormatError, anything that is not such a
record: short or overrunning bytes, names that are not UTF-8, a negative partition or offset (no Kafka
log has one; taken as a sync it would move a partition's resumption point).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_OFFSETS = struct.Struct(">qq")
CHECKPOINT_VERSION = 0


class FormatError(ValueError):
    """Bytes that are not an MM2 offset sync or checkpoint; ``reason`` is a short fixed phrase (a metric label)."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise FormatError("bad length", "no string length")
    (size,) = _I16.unpack_from(buf, pos)
    pos += 2
    if size < 0 or pos + size > len(buf):
        raise FormatError("bad length", f"string length {size} overruns the record")
    try:
        return buf[pos : pos + size].decode(), pos + size
    except UnicodeDecodeError as exc:
        raise FormatError("not UTF-8", str(exc)) from None


def _read(fmt: struct.Struct, buf: bytes, pos: int) -> tuple[tuple, int]:
    if pos + fmt.size > len(buf):
        raise FormatError("bad length", f"{len(buf) - pos} bytes left, {fmt.size} needed")
    return fmt.unpack_from(buf, pos), pos + fmt.size


def _read_partition(buf: bytes, pos: int) -> int:
    (partition,), _ = _read(_I32, buf, pos)
    if partition < 0:
        raise FormatError("negative partition or offset", f"partition {partition}")
    return int(partition)


def _read_offsets(buf: bytes, pos: int) -> tuple[tuple[int, int], int]:
    """(upstream, downstream) offsets, both non-negative."""
    (upstream, downstream), pos = _read(_OFFSETS, buf, pos)
    if upstream < 0 or downstream < 0:
        raise FormatError("negative partition or offset", f"offsets {upstream} -> {downstream}")
    return (upstream, downstream), pos


@dataclass(frozen=True, slots=True)
class OffsetSync:
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return _OFFSETS.pack(self.upstream_offset, self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> OffsetSync:
        topic, pos = _read_string(key, 0)
        partition = _read_partition(key, pos)
        (upstream, downstream), _ = _read_offsets(value, 0)
        return cls(topic, partition, upstream, downstream)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    group: str
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + _I32.pack(self.partition)

    def value(self) -> bytes:
        return (_I16.pack(CHECKPOINT_VERSION) + _OFFSETS.pack(self.upstream_offset, self.downstream_offset)
                + _string(self.metadata))

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Checkpoint:
        group, pos = _read_string(key, 0)
        topic, pos = _read_string(key, pos)
        partition = _read_partition(key, pos)
        (version,), pos = _read(_I16, value, 0)
        if version != CHECKPOINT_VERSION:
            raise FormatError("unknown version", f"checkpoint version {version} is not {CHECKPOINT_VERSION}")
        (upstream, downstream), pos = _read_offsets(value, pos)
        metadata, _ = _read_string(value, pos)
        return cls(group, topic, partition, upstream, downstream, metadata)
