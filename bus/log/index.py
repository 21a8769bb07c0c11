"""A segment's sparse offset index (`.index`) and time index (`.timeindex`), in Kafka's file format.

Both are append-only files of fixed-size big-endian entries whose offsets are stored relative to the
segment's base offset, mirrored in memory as two parallel arrays at the file's width (so memory equals the
file size, as Kafka's mmap would) and searched by bisect. Files are not preallocated: an entry costs a
write of a few bytes, batched per append, and nothing needs trimming on close. Entries reach the file after
the log data they point into, so a crash can leave an index behind its log (recovery rebuilds it) but
never ahead of it.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_right
from operator import itemgetter
from pathlib import Path

from bus.log.files import read_all, write_all


class _IndexFile:
    """Entries of (key, value), both increasing, big-endian in a file and native in two arrays."""

    _ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.keys, self.values = self._parse(b"")
        self._pending = bytearray()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def entry_size(self) -> int:
        return self._ENTRY.size

    def is_full(self, max_index_bytes: int) -> bool:
        return len(self.keys) >= max_index_bytes // self._ENTRY.size

    def load(self) -> bool:
        """Read the file into memory; False if it is not a whole number of entries (the caller rebuilds it).

        As in Kafka's sanity check, entries are not verified one by one: the file is ours and append-only,
        and the caller checks the last entry against the log.
        """
        data = read_all(self._fd)
        if len(data) % self._ENTRY.size:
            return False
        self.keys, self.values = self._parse(data)
        return True

    def _parse(self, data: bytes) -> tuple[array, array]:
        raise NotImplementedError

    def _append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)
        self._pending += self._ENTRY.pack(key, value)

    def write_pending(self) -> None:
        if self._pending:
            write_all(self._fd, self._pending)
            self._pending.clear()

    def truncate_entries(self, count: int) -> None:
        """Keep only the first `count` entries."""
        self.write_pending()
        del self.keys[count:]
        del self.values[count:]
        os.ftruncate(self._fd, count * self._ENTRY.size)

    def reset(self) -> None:
        self.truncate_entries(0)

    def dup_fd(self) -> int:
        """A duplicate descriptor for an fsync outside the log's lock (see Segment.dup_fds)."""
        return os.dup(self._fd)

    def close(self) -> None:
        self.write_pending()
        os.close(self._fd)


class OffsetIndex(_IndexFile):
    """Maps the last offset of some batches (relative to the base) to the file position where they start.

    Kafka writes an entry once more than `index.interval.bytes` were appended since the last one, so a
    look-up lands at most about one interval (plus one batch) before the wanted batch.
    """

    _ENTRY = struct.Struct(">II")  # Kafka's int32 relative offset is never negative

    def _parse(self, data: bytes) -> tuple[array, array]:
        words = array("I")
        words.frombytes(data)
        if sys.byteorder == "little":
            words.byteswap()
        return words[0::2], words[1::2]

    def append(self, offset: int, position: int) -> None:
        self._append(offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch ending at or before `offset`, or 0; the scan starts there."""
        i = bisect_right(self.keys, offset - self.base_offset)
        return self.values[i - 1] if i else 0

    def floor_position(self, position: int) -> int:
        """The greatest indexed batch start at or before `position`, or 0."""
        i = bisect_right(self.values, position)
        return self.values[i - 1] if i else 0

    @property
    def last_position(self) -> int:
        return self.values[-1] if self.values else 0

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches ending at or after `offset`."""
        self.truncate_entries(bisect_right(self.keys, offset - 1 - self.base_offset))


class TimeIndex(_IndexFile):
    """Maps a growing max timestamp to the offset (a batch's last offset) where it was first reached."""

    _ENTRY = struct.Struct(">qi")

    def _parse(self, data: bytes) -> tuple[array, array]:
        entries = list(self._ENTRY.iter_unpack(data))
        return array("q", map(itemgetter(0), entries)), array("i", map(itemgetter(1), entries))

    def maybe_append(self, timestamp: int, offset: int) -> None:
        relative = offset - self.base_offset
        if not self.keys or (timestamp > self.keys[-1] and relative > self.values[-1]):
            self._append(timestamp, relative)

    def lookup(self, timestamp: int) -> int:
        """Offset to start a timestamp search from: that of the greatest entry at or below `timestamp`."""
        i = bisect_right(self.keys, timestamp)
        return self.base_offset + (self.values[i - 1] if i else 0)

    @property
    def last_entry(self) -> tuple[int, int] | None:
        return (self.keys[-1], self.base_offset + self.values[-1]) if self.keys else None

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at or after `offset`."""
        self.truncate_entries(bisect_right(self.values, offset - 1 - self.base_offset))
