"""MirrorMaker 2's internal record formats, so Kafka's own tooling (RemoteClusterUtils, MM2) reads ours.

Both use Kafka's `protocol.types.Schema` encoding: STRING is an int16 length then UTF-8, INT32/INT64
big-endian.
- OffsetSync (topic `mm2-offset-syncs.<target>.internal`): key (topic STRING, partition INT32), value
  (upstreamOffset INT64, offset INT64).
- Checkpoint (topic `<source>.checkpoints.internal` on the target): key (group STRING, topic STRING,
  partition INT32), value (version INT16 = 0, upstreamOffset INT64, offset INT64, metadata STRING).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_OFFSETS = struct.Struct(">qq")
CHECKPOINT_VERSION = 0


class FormatError(ValueError):
    """Bytes that are not an MM2 offset sync or checkpoint."""


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def _read_string(buf: bytes, pos: int) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise FormatError("truncated string length")
    (size,) = _I16.unpack_from(buf, pos)
    pos += 2
    if size < 0 or pos + size > len(buf):
        raise FormatError(f"string length {size} overruns the record")
    return buf[pos : pos + size].decode(), pos + size


def _read(fmt: struct.Struct, buf: bytes, pos: int) -> tuple[tuple, int]:
    if pos + fmt.size > len(buf):
        raise FormatError("truncated record")
    return fmt.unpack_from(buf, pos), pos + fmt.size


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
        (partition,), _ = _read(_I32, key, pos)
        (upstream, downstream), _ = _read(_OFFSETS, value, 0)
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
        (partition,), _ = _read(_I32, key, pos)
        (version,), pos = _read(_I16, value, 0)
        if version != CHECKPOINT_VERSION:
            raise FormatError(f"checkpoint version {version} is not {CHECKPOINT_VERSION}")
        (upstream, downstream), pos = _read(_OFFSETS, value, pos)
        metadata, _ = _read_string(value, pos)
        return cls(group, topic, partition, upstream, downstream, metadata)
