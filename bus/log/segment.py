"""One log segment: a `.log` file of whole record batches and its offset and time indexes.

Reads walk batch headers from the nearest index entry; nothing here decodes records except the
timestamp searches. A segment's in-memory state (size, next offset, max timestamp) is authoritative while
it is open; `load` trusts the files after a clean shutdown, `recover` rebuilds everything from the batches.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from bus.log import files
from bus.log.index import OffsetIndex, TimeIndex
from bus.log.txn_index import TransactionIndex
from bus.protocol.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    BatchInfo,
    iter_records,
    scan_batches_prefix,
)

# baseOffset, batchLength, partitionLeaderEpoch, lastOffsetDelta and producerId: what walking a file's batch
# headers needs.
_WALK = struct.Struct(">qii7xi16xq")
_LENGTH = struct.Struct(">qi")
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_AT = 35
# Index entries store offsets relative to the segment's base as int32.
MAX_RELATIVE_OFFSET = 2**31 - 1
_HEADER_CHUNK = 16 * 1024
_SCAN_CHUNK = 1 << 20

# What an append tells the segment about each batch, in order: (size, last offset, max timestamp).
Placement = tuple[int, int, int]


class BatchHeader(NamedTuple):
    position: int
    base_offset: int
    last_offset: int
    size: int
    producer_id: int
    partition_leader_epoch: int


def walk_headers(fd: int, start: int, end: int) -> Iterator[BatchHeader]:
    """Each batch from `start` by its header alone, reading 16 KB at a time: cheap however big the batches.
    For data already validated (written by this log), so it stops at anything not shaped like a batch."""
    position = start
    while position < end:
        chunk = os.pread(fd, min(_HEADER_CHUNK, end - position), position)
        cursor = 0
        while cursor + _WALK.size <= len(chunk):
            base_offset, length, leader_epoch, last_delta, producer_id = _WALK.unpack_from(chunk, cursor)
            if length < BATCH_OVERHEAD - LOG_OVERHEAD:
                return
            size = LOG_OVERHEAD + length
            yield BatchHeader(position + cursor, base_offset, base_offset + last_delta, size, producer_id, leader_epoch)
            cursor += size
        if cursor == 0:
            return
        position += cursor


def read_batches(fd: int, start: int, end: int, *, verify_crc: bool) -> Iterator[tuple[int, bytes, BatchInfo]]:
    """Whole batches of a file region as (file position, buffer holding it, header), stopping quietly at
    the first torn or invalid batch. Reads start at 16 KB, so a search that stops early stays cheap, and
    double up to 1 MB for long scans; a batch bigger than the read is read on its own."""
    position = start
    read_size = _HEADER_CHUNK
    while position < end:
        chunk = os.pread(fd, min(read_size, end - position), position)
        read_size = min(read_size * 2, _SCAN_CHUNK)
        batches, valid = scan_batches_prefix(chunk, verify_crc=verify_crc)
        if not batches:
            if len(chunk) < LOG_OVERHEAD:
                return
            size = LOG_OVERHEAD + _LENGTH.unpack_from(chunk)[1]
            if size <= len(chunk) or position + size > end:
                return
            chunk = os.pread(fd, size, position)
            batches, valid = scan_batches_prefix(chunk, verify_crc=verify_crc)
            if not batches:
                return
        for batch in batches:
            yield position + batch.position, chunk, batch
        position += valid


class Segment:
    __slots__ = (
        "base_offset",
        "bytes_since_index_entry",
        "created_ms",
        "directory",
        "fd",
        "first_batch_timestamp",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "size",
        "suffix",
        "time_index",
        "txn_index",
        "unflushed",
    )

    def __init__(self, directory: Path, base_offset: int, created_ms: int, suffix: str = "") -> None:
        """Open (creating if absent) the segment's three files; call load, recover or reset next."""
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self.created_ms = created_ms
        log_path, index_path, time_index_path = files.segment_paths(directory, base_offset, suffix)
        self.fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.offset_index = OffsetIndex(index_path, base_offset)
        self.time_index = TimeIndex(time_index_path, base_offset)
        self.txn_index = TransactionIndex(files.txn_index_path(directory, base_offset, suffix))
        self.size = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = -1
        self.bytes_since_index_entry = 0
        self.unflushed = False
        # Max timestamp of the first batch: how old the data is, for max.compaction.lag.ms. Kept in memory
        # so the cleaner thread never touches this segment's descriptors.
        self.first_batch_timestamp: int | None = None

    @classmethod
    def create(cls, directory: Path, base_offset: int, created_ms: int, suffix: str = "") -> Segment:
        """A new empty segment, discarding whatever files of that name a failed attempt left behind."""
        segment = cls(directory, base_offset, created_ms, suffix)
        segment.reset()
        return segment

    @property
    def path(self) -> Path:
        return files.segment_path(self.directory, self.base_offset, files.LOG, self.suffix)

    @property
    def paths(self) -> tuple[Path, Path, Path, Path]:
        """The log, offset index, time index and transaction index files (the last may not exist)."""
        return (*files.segment_paths(self.directory, self.base_offset, self.suffix),
                files.txn_index_path(self.directory, self.base_offset, self.suffix))

    @property
    def largest_timestamp(self) -> int:
        """What retention and compaction lag compare with the clock; file mtime when no batch has a time."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.stat(self.path).st_mtime_ns // 1_000_000

    def set_suffix(self, suffix: str) -> None:
        """Record that the caller renamed the files; open descriptors follow a rename by themselves."""
        self.suffix = suffix
        _, self.offset_index.path, self.time_index.path, self.txn_index.path = self.paths

    def reset(self) -> None:
        os.ftruncate(self.fd, 0)
        self.offset_index.reset()
        self.time_index.reset()
        self.size = 0
        self.first_batch_timestamp = None
        self._restart_from_indexes()

    def load(self) -> bool:
        """Trust the index files (clean shutdown), checking them and the log tail they do not cover.

        False means the files disagree with each other and the caller must `recover` the segment.
        """
        if not (self.offset_index.load() and self.time_index.load()):
            return False
        if self.offset_index:
            indexed = next(walk_headers(self.fd, self.offset_index.last_position, self.size), None)
            if indexed is None or indexed.last_offset != self.base_offset + self.offset_index.keys[-1]:
                return False
        if not self._rescan(self.offset_index.last_position):
            return False
        if self.first_batch_timestamp is None and self.size:
            header = os.pread(self.fd, BATCH_OVERHEAD, 0)
            self.first_batch_timestamp = _MAX_TIMESTAMP.unpack_from(header, _MAX_TIMESTAMP_AT)[0]
        last_time_entry = self.time_index.last_entry
        return last_time_entry is None or last_time_entry[1] < self.next_offset

    def recover(self, index_interval_bytes: int) -> int:
        """Rebuild indexes and state from the batches themselves, cutting the file at the first torn,
        corrupt or out-of-order batch. Returns the number of bytes cut."""
        self.offset_index.reset()
        self.time_index.reset()
        self.first_batch_timestamp = None
        self._restart_from_indexes()
        valid_end = 0
        for position, _, batch in read_batches(self.fd, 0, self.size, verify_crc=True):
            if batch.base_offset < self.next_offset or batch.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                break
            self._track(position, batch.size, batch.last_offset, batch.max_timestamp, index_interval_bytes)
            valid_end = position + batch.size
        self.seal()
        cut = self.size - valid_end
        if cut:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
            self.unflushed = True
        return cut

    def _restart_from_indexes(self) -> None:
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry or (NO_TIMESTAMP, -1)
        self.next_offset = self.base_offset
        self.bytes_since_index_entry = 0

    def _rescan(self, start: int) -> bool:
        """Derive next offset, max timestamp and index spacing from the time index plus the batches from
        `start` (the last indexed batch); True if they end exactly at the end of the file. Trusted data
        (flushed, or in the page cache after a clean shutdown) is not CRC-checked, as in Kafka."""
        self._restart_from_indexes()
        end = start
        for position, _, batch in read_batches(self.fd, start, self.size, verify_crc=False):
            if position == 0:
                self.first_batch_timestamp = batch.max_timestamp
            self.next_offset = batch.last_offset + 1
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = batch.max_timestamp, batch.last_offset
            end = position + batch.size
        self.bytes_since_index_entry = end - start
        return end == self.size

    def _track(self, position: int, size: int, last_offset: int, max_timestamp: int, index_interval: int) -> bool:
        """Account one batch written at `position`; the index entry rule is Kafka's LogSegment.append. True when
        it added index entries (which `_write_indexes` then writes)."""
        if position == 0:
            self.first_batch_timestamp = max_timestamp
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, last_offset
        indexed = self.bytes_since_index_entry > index_interval
        if indexed:
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_index_entry = 0
        self.bytes_since_index_entry += size
        self.next_offset = last_offset + 1
        return indexed

    def append(self, data: memoryview, placements: Sequence[Placement], index_interval: int) -> None:
        """Write whole batches with one write call; on failure cut back so the file matches memory. The index files
        are written only when an append adds entries to them (every `index.interval.bytes`): entries are only ever
        added here and by `seal`, which writes its own."""
        position = self.size
        try:
            written = os.write(self.fd, data)
            if written != len(data):  # a short write (a signal, a quota): the rest the slow way
                files.write_all(self.fd, data[written:])
        except OSError:
            os.ftruncate(self.fd, position)
            raise
        indexed = False
        for size, last_offset, max_timestamp in placements:
            if self._track(position, size, last_offset, max_timestamp, index_interval):
                indexed = True
            position += size
        self.size = position
        self.unflushed = True
        if indexed:
            self._write_indexes()

    def _write_indexes(self) -> None:
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def batch_at_or_after(self, offset: int) -> tuple[int, int, int] | None:
        """(position, base offset, size) of the first batch ending at or after `offset` (Kafka's
        translateOffset), or None when every batch here ends before it."""
        for header in walk_headers(self.fd, self.offset_index.lookup(offset), self.size):
            if header.last_offset >= offset:
                return header.position, header.base_offset, header.size
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> tuple[bytes | memoryview, int | None] | None:
        """(whole batches, base offset of the first) starting with the batch holding `offset`; None if no
        batch here reaches `offset`, so the caller moves to the next segment."""
        found = self.batch_at_or_after(offset)
        if found is None:
            return None
        start, first_base, first_size = found
        limit = self.size
        if max_offset is not None:
            if first_base >= max_offset:
                return b"", None
            bound = self.batch_at_or_after(max_offset) if max_offset < self.next_offset else None
            if bound is not None:
                limit = bound[0] if bound[1] >= max_offset else bound[0] + bound[2]
        end = min(limit, start + max(max_bytes, 0))
        data = os.pread(self.fd, end - start, start) if end > start else b""
        if end == limit:
            return data, first_base
        boundary = self._last_boundary(data, start)
        if boundary > start:
            return memoryview(data)[: boundary - start], first_base
        if min_one_batch:
            return os.pread(self.fd, first_size, start), first_base
        return b"", None

    def _last_boundary(self, data: bytes, start: int) -> int:
        """End of the last whole batch in `data` (read from `start`), walking from the nearest index entry."""
        cursor = max(self.offset_index.floor_position(start + len(data)), start) - start
        while cursor + LOG_OVERHEAD <= len(data):
            size = LOG_OVERHEAD + _LENGTH.unpack_from(data, cursor)[1]
            if cursor + size > len(data):
                break
            cursor += size
        return start + cursor

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record at or after `starting_offset` stamped >= `timestamp`."""
        begin = max(self.time_index.lookup(timestamp), starting_offset)
        for _, buf, batch in read_batches(self.fd, self.offset_index.lookup(begin), self.size, verify_crc=False):
            if batch.max_timestamp >= timestamp:
                for record in iter_records(buf, batch):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.timestamp, record.offset
        return None

    def max_timestamp_record(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the first record carrying this segment's max timestamp."""
        if self.max_timestamp < 0:
            return None
        start = self.offset_index.lookup(self.offset_of_max_timestamp)
        for _, buf, batch in read_batches(self.fd, start, self.size, verify_crc=False):
            if batch.max_timestamp == self.max_timestamp:
                for record in iter_records(buf, batch):
                    if record.timestamp == self.max_timestamp:
                        return record.timestamp, record.offset
        return None

    def truncate_to(self, offset: int) -> int:
        """Remove every batch ending at or after `offset` (a batch straddling it goes whole); returns bytes cut."""
        found = self.batch_at_or_after(offset)
        if found is None:
            return 0
        position = found[0]
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        cut = self.size - position
        os.ftruncate(self.fd, position)
        self.size = position
        if not position:
            self.first_batch_timestamp = None
        self.unflushed = True
        self._rescan(self.offset_index.last_position)
        return cut

    def seal(self) -> None:
        """Record the final max timestamp in the time index, as Kafka does when a segment stops being active,
        so retention and timestamp look-ups after a restart need not rescan the segment."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        self._write_indexes()

    def flush(self) -> None:
        for fd in self.dup_fds():
            fsync_and_close(fd)
        self.unflushed = False

    def dup_fds(self) -> list[int]:
        """Duplicates of the segment's descriptors (pending index entries written first), so the fsyncs can
        run without the log's lock: a duplicate stays valid even if the segment is closed meanwhile."""
        self._write_indexes()
        fds = [os.dup(self.fd), self.offset_index.dup_fd(), self.time_index.dup_fd()]
        txn = self.txn_index.dup_fd()
        return fds if txn is None else [*fds, txn]

    def close(self) -> None:
        self.seal()
        os.close(self.fd)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def close_descriptors(self) -> None:
        """Close without sealing or deleting: for segments whose files were renamed or removed already."""
        os.close(self.fd)
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def close_and_delete(self) -> None:
        self.close_descriptors()
        for path in self.paths:
            path.unlink(missing_ok=True)


def fsync_and_close(fd: int) -> None:
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
