"""Kafka record batches, magic v2, as bytes in and bytes out.

The broker's hot path never decodes records: a produce payload is validated by its batch headers and
CRC-32C (`scan_batches`), gets offsets written into its headers in place (`assign_offsets`), and goes to
disk and back out to consumers as the same bytes. Record-level decoding (`iter_records`) and encoding
(`build_batch`) exist for compaction, timestamp look-ups, control records and tests.

Batch layout (big-endian): baseOffset i64, batchLength i32, partitionLeaderEpoch i32, magic i8,
crc u32 (CRC-32C of everything from attributes to the end), attributes i16, lastOffsetDelta i32,
baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16, baseSequence i32,
recordsCount i32, then the (possibly compressed) records.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields

import crc32c

from bus.protocol import compression as codecs
from bus.protocol.compression import DecompressionError, UnsupportedCompressionError

__all__ = [
    "BatchInfo",
    "CorruptRecordError",
    "Record",
    "RecordTooLargeError",
    "UnsupportedCompressionError",
    "UnsupportedMagicError",
    "assign_offsets",
    "build_batch",
    "iter_records",
    "scan_batches",
    "scan_batches_prefix",
]

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD = HEADER.size  # 61: a batch with no records
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
_LOG_OVERHEAD = struct.Struct(">qi")
# A legacy (v0) message is at least this long; shorter lengths cannot be any Kafka format.
_MIN_LEGACY_LENGTH = 14

PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_FLAG = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")


class CorruptRecordError(ValueError):
    """Bytes that are not a well-formed batch: bad CRC, torn or inconsistent lengths (CORRUPT_MESSAGE)."""


class RecordTooLargeError(ValueError):
    """A batch larger than the topic's max.message.bytes (MESSAGE_TOO_LARGE)."""


class UnsupportedMagicError(ValueError):
    """A legacy (magic 0 or 1) message set, which this broker does not store (UNSUPPORTED_FOR_MESSAGE_FORMAT)."""


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """The header of one batch inside a buffer; enough to index, route and fetch it without decoding."""

    position: int
    size: int
    base_offset: int
    last_offset_delta: int
    partition_leader_epoch: int
    attributes: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_FLAG else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def delete_horizon_ms(self) -> int | None:
        """Set by the log cleaner on batches holding tombstones; it then replaces the base timestamp."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_FLAG else None

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def scan_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = True, max_batch_bytes: int | None = None
) -> list[BatchInfo]:
    """Validate a produce payload batch by batch, reading headers only.

    Beyond layout and CRC this enforces what Kafka's LogValidator demands of client batches:
    recordsCount == lastOffsetDelta + 1 (Kafka answers that one with INVALID_RECORD; here it is a
    CorruptRecordError like every other malformed batch).
    """
    view = _byte_view(buf)
    end = len(view)
    batches = []
    pos = 0
    while pos < end:
        batch = _parse_batch(view, pos, end, verify_crc, max_batch_bytes, strict=True)
        batches.append(batch)
        pos += batch.size
    return batches


def scan_batches_prefix(buf: bytes | bytearray | memoryview, *, verify_crc: bool = True) -> tuple[list[BatchInfo], int]:
    """The well-formed batches at the start of `buf` and how many bytes they span.

    Log recovery and file readers use this: a torn or corrupt batch ends the scan instead of raising.
    Cleaned batches legitimately hold fewer records than their offset span, so only
    recordsCount <= lastOffsetDelta + 1 is required here.
    """
    view = _byte_view(buf)
    end = len(view)
    batches = []
    pos = 0
    while pos < end:
        try:
            batch = _parse_batch(view, pos, end, verify_crc, None, strict=False)
        except (CorruptRecordError, UnsupportedMagicError, UnsupportedCompressionError):
            break
        batches.append(batch)
        pos += batch.size
    return batches, pos


def _byte_view(buf: bytes | bytearray | memoryview) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def _parse_batch(
    view: memoryview, pos: int, end: int, verify_crc: bool, max_batch_bytes: int | None, strict: bool
) -> BatchInfo:
    remaining = end - pos
    if remaining < LOG_OVERHEAD:
        raise CorruptRecordError(f"truncated batch at byte {pos}: {remaining} bytes left")
    _, length = _LOG_OVERHEAD.unpack_from(view, pos)
    if length < _MIN_LEGACY_LENGTH:
        raise CorruptRecordError(f"batch at byte {pos} declares length {length}")
    if remaining <= MAGIC_OFFSET:
        raise CorruptRecordError(f"truncated batch at byte {pos}: {remaining} bytes left")
    magic = view[pos + MAGIC_OFFSET]
    if magic != MAGIC:
        if magic in (0, 1):
            raise UnsupportedMagicError(f"message format v{magic} at byte {pos}; only v2 batches are accepted")
        raise CorruptRecordError(f"invalid magic {magic} at byte {pos}")
    size = LOG_OVERHEAD + length
    if size < BATCH_OVERHEAD:
        raise CorruptRecordError(f"batch at byte {pos} is {size} bytes, below the {BATCH_OVERHEAD}-byte header")
    if size > remaining:
        raise CorruptRecordError(f"truncated batch at byte {pos}: needs {size} bytes, {remaining} left")
    if max_batch_bytes is not None and size > max_batch_bytes:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds the limit of {max_batch_bytes} bytes")
    (base_offset, _, leader_epoch, _, crc, attributes, last_delta, base_ts, max_ts, producer_id,
     producer_epoch, base_sequence, count) = HEADER.unpack_from(view, pos)  # fmt: skip
    if verify_crc and crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
        raise CorruptRecordError(f"CRC-32C mismatch in the batch at byte {pos}")
    if attributes & COMPRESSION_MASK > codecs.ZSTD:
        raise UnsupportedCompressionError(f"unknown compression codec id {attributes & COMPRESSION_MASK}")
    if last_delta < 0 or count < 0:
        raise CorruptRecordError(f"batch at byte {pos}: lastOffsetDelta {last_delta}, recordsCount {count}")
    if count > last_delta + 1 or (strict and count != last_delta + 1):
        raise CorruptRecordError(
            f"batch at byte {pos}: recordsCount {count} does not match lastOffsetDelta {last_delta} + 1"
        )
    return _new_batch_info(pos, size, base_offset, last_delta, leader_epoch, attributes, base_ts, max_ts,
                           producer_id, producer_epoch, base_sequence, count)  # fmt: skip


def _batch_info_builder() -> Callable[..., BatchInfo]:
    """`BatchInfo(...)` for the hot path: every produced batch is scanned into one, and a frozen dataclass's
    `__init__` sets each of its twelve fields through `object.__setattr__` (a microsecond in all). Setting the
    slots through their descriptors builds the same object in about half the time."""
    new = object.__new__
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11 = (getattr(BatchInfo, f.name).__set__ for f in fields(BatchInfo))

    def build(position: int, size: int, base_offset: int, last_offset_delta: int, partition_leader_epoch: int,
              attributes: int, base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
              base_sequence: int, records_count: int) -> BatchInfo:
        batch = new(BatchInfo)
        s0(batch, position)
        s1(batch, size)
        s2(batch, base_offset)
        s3(batch, last_offset_delta)
        s4(batch, partition_leader_epoch)
        s5(batch, attributes)
        s6(batch, base_timestamp)
        s7(batch, max_timestamp)
        s8(batch, producer_id)
        s9(batch, producer_epoch)
        s10(batch, base_sequence)
        s11(batch, records_count)
        return batch

    return build


_new_batch_info = _batch_info_builder()


def assign_offsets(
    buf: bytearray,
    batches: Sequence[BatchInfo],
    first_offset: int,
    *,
    log_append_time: int | None = None,
    partition_leader_epoch: int | None = None,
) -> int:
    """Give the batches consecutive offsets from `first_offset`, in place; returns the next offset.

    The CRC starts at the attributes, so baseOffset and partitionLeaderEpoch change for free; only
    LogAppendTime (new attributes and maxTimestamp) costs a CRC pass.
    """
    view = memoryview(buf)
    offset = first_offset
    for batch in batches:
        pos = batch.position
        _I64.pack_into(buf, pos, offset)
        if partition_leader_epoch is not None:
            _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
        if log_append_time is not None:
            _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, batch.attributes | TIMESTAMP_TYPE_FLAG)
            _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, log_append_time)
            _U32.pack_into(buf, pos + CRC_OFFSET, crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + batch.size]))
        offset += batch.last_offset_delta + 1
    return offset


def iter_records(
    buf: bytes | bytearray | memoryview, batch: BatchInfo, *, max_inflated: int = codecs.MAX_INFLATED_BYTES
) -> Iterator[Record]:
    """Decode the records of one batch, decompressing if needed; malformed input raises CorruptRecordError.

    A compressed records section that inflates past `max_inflated` bytes is corrupt too (see compression).
    """
    view = _byte_view(buf)
    body = view[batch.position + BATCH_OVERHEAD : batch.position + batch.size]
    if batch.compression:
        try:
            data = codecs.decompress(batch.compression, body, max_inflated)
        except DecompressionError as exc:
            raise CorruptRecordError(str(exc)) from exc
    else:
        data = bytes(body)
    log_append_time = batch.max_timestamp if batch.timestamp_type == LOG_APPEND_TIME else None
    reader = _Reader(data)
    for _ in range(batch.records_count):
        yield reader.record(batch.base_offset, batch.base_timestamp, log_append_time)
    if reader.pos != len(data):
        raise CorruptRecordError(f"{len(data) - reader.pos} bytes left after the last record of the batch")


class _Reader:
    """Cursor over decoded record bytes; any overrun is a corrupt batch."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def varint(self) -> int:
        data = self.data
        pos = self.pos
        result = 0
        shift = 0
        try:
            while True:
                byte = data[pos]
                pos += 1
                result |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise CorruptRecordError("varint longer than 10 bytes")
        except IndexError:
            raise CorruptRecordError("record data ends inside a varint") from None
        self.pos = pos
        return (result >> 1) ^ -(result & 1)

    def take(self, length: int) -> bytes | None:
        if length == -1:
            return None
        if length < -1 or length > len(self.data) - self.pos:
            raise CorruptRecordError(f"field length {length} overruns the record data")
        start = self.pos
        self.pos = start + length
        return self.data[start : self.pos]

    def record(self, base_offset: int, base_timestamp: int, log_append_time: int | None) -> Record:
        length = self.varint()
        start = self.pos
        if length < 0 or length > len(self.data) - start:
            raise CorruptRecordError(f"record length {length} overruns the batch")
        self.pos += 1  # attributes: unused in v2
        timestamp_delta = self.varint()
        offset_delta = self.varint()
        key = self.take(self.varint())
        value = self.take(self.varint())
        header_count = self.varint()
        if header_count < 0:
            raise CorruptRecordError(f"negative header count {header_count}")
        headers = []
        for _ in range(header_count):
            name = self.take(self.varint())
            if name is None:
                raise CorruptRecordError("null header key")
            try:
                headers.append((name.decode(), self.take(self.varint())))
            except UnicodeDecodeError as exc:
                raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        if self.pos - start != length:
            raise CorruptRecordError(f"record declares {length} bytes but spans {self.pos - start}")
        timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
        return Record(base_offset + offset_delta, timestamp, key, value, tuple(headers))


def build_batch(
    records: Sequence[Record] | Sequence[tuple],
    *,
    base_offset: int,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    partition_leader_epoch: int = -1,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode one v2 batch. Tuples are taken as Record fields: (offset, timestamp, key, value[, headers]).

    `last_offset_delta` lets a cleaned batch keep its original offset span (and so the producer's last
    sequence); `max_timestamp` carries a LogAppendTime or the timestamp of an emptied batch; a
    `delete_horizon_ms` replaces the base timestamp, with record deltas relative to it, as Kafka does.
    """
    recs = [r if isinstance(r, Record) else Record(*r) for r in records]
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif recs:
        base_timestamp = recs[0].timestamp
    else:
        base_timestamp = NO_TIMESTAMP if max_timestamp is None else max_timestamp
    if max_timestamp is None:
        max_timestamp = max((r.timestamp for r in recs), default=NO_TIMESTAMP)
    if last_offset_delta is None:
        last_offset_delta = recs[-1].offset - base_offset if recs else 0
    body = bytearray()
    for record in recs:
        delta = record.offset - base_offset
        if not 0 <= delta <= last_offset_delta:
            last = base_offset + last_offset_delta
            raise ValueError(f"record offset {record.offset} outside the batch's [{base_offset}, {last}]")
        _encode_record(body, record, delta, record.timestamp - base_timestamp)
    attributes = compression | (TIMESTAMP_TYPE_FLAG if timestamp_type == LOG_APPEND_TIME else 0)
    attributes |= (TRANSACTIONAL_FLAG if is_transactional else 0) | (CONTROL_FLAG if is_control else 0)
    attributes |= DELETE_HORIZON_FLAG if delete_horizon_ms is not None else 0
    payload = _compress(compression, body)
    out = bytearray(BATCH_OVERHEAD + len(payload))
    HEADER.pack_into(out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, attributes,
                     last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                     base_sequence, len(recs))  # fmt: skip
    out[BATCH_OVERHEAD:] = payload
    _U32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def _compress(codec: int, body: bytearray) -> bytes | bytearray:
    return body if codec == codecs.NONE else codecs.compress(codec, body)


def _encode_record(out: bytearray, record: Record, offset_delta: int, timestamp_delta: int) -> None:
    inner = bytearray(b"\x00")  # attributes
    _write_varint(inner, timestamp_delta)
    _write_varint(inner, offset_delta)
    _write_bytes(inner, record.key)
    _write_bytes(inner, record.value)
    _write_varint(inner, len(record.headers))
    for name, value in record.headers:
        _write_bytes(inner, name.encode())
        _write_bytes(inner, value)
    _write_varint(out, len(inner))
    out += inner


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _write_varint(out: bytearray, value: int) -> None:
    zigzag = (value << 1) ^ (value >> 63)
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
