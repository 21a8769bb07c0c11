"""A segment's aborted-transaction index (Kafka's `.txnindex`).

One entry per transaction aborted by a marker in this segment: version (int16, 0), producer id, first
offset, last offset (the marker's) and the last stable offset once it was aborted, 34 bytes big-endian as
Kafka writes them. `read_committed` fetches collect the entries overlapping what they return; retention
deletes the file with its segment, so the broker's memory and disk for aborts stay bounded by retention.

The file exists only once a segment has an abort (as in Kafka). The partition rebuilds entries past its
producer-state snapshot on start-up by replaying the markers, which also drops entries a crash cut off.
"""

from __future__ import annotations

import os
import struct
from bisect import bisect_left
from dataclasses import dataclass
from pathlib import Path

from bus.log.files import read_all, write_all

_ENTRY = struct.Struct(">hqqqq")
_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    __slots__ = ("_fd", "_last_offsets", "entries", "path")

    def __init__(self, path: Path) -> None:
        """Load the entries of `path` if it exists; a torn final entry (crash mid-write) is cut."""
        self.path = path
        self._fd: int | None = None
        self.entries: list[AbortedTxn] = []
        self._last_offsets: list[int] = []
        if path.exists():
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND)
            data = read_all(self._fd)
            whole = len(data) - len(data) % _ENTRY.size
            if whole != len(data):
                os.ftruncate(self._fd, whole)
            for version, *fields in _ENTRY.iter_unpack(data[:whole]):
                if version == _VERSION:
                    self._add(AbortedTxn(*fields))

    def _add(self, txn: AbortedTxn) -> None:
        self.entries.append(txn)
        self._last_offsets.append(txn.last_offset)

    def append(self, txn: AbortedTxn) -> None:
        if self._last_offsets and txn.last_offset <= self._last_offsets[-1]:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} is not after the index's last "
                             f"entry ending at {self._last_offsets[-1]}")
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        write_all(self._fd, _ENTRY.pack(_VERSION, txn.producer_id, txn.first_offset, txn.last_offset,
                                        txn.last_stable_offset))
        self._add(txn)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries ending at or after `fetch_offset` and starting before `upper_bound`, and whether the search
        is complete: an entry whose last stable offset passed `upper_bound` proves that no later segment holds
        a transaction starting below it (Kafka's TransactionIndex.collectAbortedTxns)."""
        found = []
        for txn in self.entries[bisect_left(self._last_offsets, fetch_offset):]:
            if txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset > upper_bound:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose marker is at or after `offset`."""
        keep = bisect_left(self._last_offsets, offset)
        if keep == len(self.entries):
            return
        del self.entries[keep:]
        del self._last_offsets[keep:]
        if self._fd is not None:
            os.ftruncate(self._fd, keep * _ENTRY.size)

    def dup_fd(self) -> int | None:
        """A descriptor for an fsync outside the log's lock (see Log.flush_if_due)."""
        return None if self._fd is None else os.dup(self._fd)

    def rename(self, path: Path) -> None:
        if self._fd is not None:
            os.replace(self.path, path)
        self.path = path

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
