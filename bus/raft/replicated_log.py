"""What the consensus core needs from the replicated metadata log, and an in-memory log.

Kafka's `ReplicatedLog` is wide; the core here needs only: where the log starts and ends, the epoch of
the last record (or of the snapshot the log starts from), OffsetsForLeaderEpoch's answer, appends as
leader and as follower, truncation, reads, and snapshots. The binding onto `bus/log` comes later; it
must make an append durable before returning (a voter's fetch offset and the leader's own end offset
count toward the high watermark, so they must survive kill -9).

Each entry occupies one offset. A record is either opaque bytes (the controller's metadata records)
or a `LeaderChangeMessage` control record, which a new leader writes at the start of its epoch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import Enum
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class OffsetAndEpoch:
    """An offset with the epoch it belongs to, ordered by (epoch, offset) as Raft compares logs."""

    epoch: int
    offset: int


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """The control record a leader appends when its epoch starts (Kafka's LeaderChangeMessage)."""

    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


Record = bytes | LeaderChangeMessage


@dataclass(frozen=True, slots=True)
class LogEntry:
    offset: int
    epoch: int
    record: Record

    @property
    def size(self) -> int:
        """Bytes this entry counts against a fetch's max_bytes (a control record counts as 16)."""
        return len(self.record) if isinstance(self.record, bytes) else 16


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot of the state machine covering every offset below `snapshot_id.offset`."""

    snapshot_id: OffsetAndEpoch
    data: bytes


class RaftLog(Protocol):
    """The replicated log as the consensus core sees it."""

    def start_offset(self) -> int:
        """First offset still in the log (0, or the end of the oldest snapshot once a prefix is deleted)."""
        ...

    def end_offset(self) -> int:
        """The offset the next append gets."""
        ...

    def last_fetched_epoch(self) -> int:
        """Epoch of the last entry; the latest snapshot's epoch if the log is empty after it; else 0."""
        ...

    def epoch_of(self, offset: int) -> int:
        """Epoch of the entry at `offset` (start_offset <= offset < end_offset)."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """OffsetsForLeaderEpoch: the largest epoch <= `epoch` in the log and the offset where it ends."""
        ...

    def append_as_leader(self, records: list[Record], epoch: int) -> tuple[int, int]:
        """Append at the end with `epoch`; returns (first offset, last offset)."""
        ...

    def append_as_follower(self, entries: list[LogEntry]) -> None:
        """Append entries fetched from the leader; the first must sit at end_offset()."""
        ...

    def truncate_to(self, offset: int) -> None:
        """Remove every entry at or above `offset`."""
        ...

    def read(self, offset: int, max_bytes: int) -> list[LogEntry]:
        """Entries from `offset` up to about `max_bytes` (at least one if any exists)."""
        ...

    def latest_snapshot(self) -> Snapshot | None: ...

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        """The oldest snapshot still kept (the one the log starts from once a prefix is deleted)."""
        ...

    def create_snapshot(self, snapshot: Snapshot) -> None:
        """Keep `snapshot` as the latest; the entries it covers go when the log's retention allows."""
        ...

    def maybe_clean(self) -> bool:
        """Delete the history retention no longer keeps (Kafka's maybeClean); whether anything went."""
        ...

    def install_snapshot(self, snapshot: Snapshot) -> None:
        """Replace the whole log with `snapshot` fetched from the leader (KRaft's truncateToLatestSnapshot)."""
        ...


class ValidationKind(Enum):
    VALID = "valid"
    DIVERGING = "diverging"
    SNAPSHOT = "snapshot"


def validate_offset_and_epoch(
    log: RaftLog, fetch_offset: int, last_fetched_epoch: int
) -> tuple[ValidationKind, OffsetAndEpoch | None]:
    """KIP-595's fetch validation, as the leader applies it to a follower's (fetch_offset, last_fetched_epoch)
    (Kafka's ReplicatedLog.validateOffsetAndEpoch).

    SNAPSHOT with the latest snapshot id when the follower needs entries the log no longer holds: it fetches
    below the log start, at the log start with another epoch than the oldest snapshot's, or from an epoch
    older than that snapshot. DIVERGING with the leader's end of the follower's last epoch when the
    follower's log cannot be a prefix of the leader's (the follower truncates to it and fetches again);
    else VALID, also for an offset the latest snapshot covers while the log still holds it.
    """
    start = log.start_offset()
    earliest, latest = log.earliest_snapshot_id(), log.latest_snapshot()
    if (
        earliest is not None
        and latest is not None
        and not (start == 0 and fetch_offset == 0)
        and (
            fetch_offset < start
            or (fetch_offset == start and last_fetched_epoch != earliest.epoch)
            or last_fetched_epoch < earliest.epoch
        )
    ):
        return ValidationKind.SNAPSHOT, latest.snapshot_id
    leader_end = log.end_offset_for_epoch(last_fetched_epoch)
    if leader_end.epoch != last_fetched_epoch or leader_end.offset < fetch_offset:
        return ValidationKind.DIVERGING, leader_end
    return ValidationKind.VALID, None


class InMemoryRaftLog:
    """The replicated log in memory: for tests and the simulation (a "crash" keeps it, as a disk would). It
    keeps as little as a FileRaftLog with metadata.max.retention.bytes=0: a snapshot's history goes as soon
    as a newer snapshot covers it, so the log starts at 0 until the second snapshot, then at the latest's end."""

    def __init__(self) -> None:
        self._start = 0
        self._entries: list[LogEntry] = []
        # (epoch, first offset of that epoch) in offset order: the leader-epoch cache.
        self._epochs: list[tuple[int, int]] = []
        self._snapshot: Snapshot | None = None

    def start_offset(self) -> int:
        return self._start

    def end_offset(self) -> int:
        return self._start + len(self._entries)

    def last_fetched_epoch(self) -> int:
        if self._entries:
            return self._entries[-1].epoch
        return self._snapshot.snapshot_id.epoch if self._snapshot is not None else 0

    def epoch_of(self, offset: int) -> int:
        if not self._start <= offset < self.end_offset():
            raise IndexError(f"offset {offset} is outside the log [{self._start}, {self.end_offset()})")
        return self._entries[offset - self._start].epoch

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        index = bisect.bisect_right([e for e, _ in self._epochs], epoch)
        if index == 0:
            # Older than anything in the log: the log starts at 0 or where the snapshot ends.
            snapshot = self._snapshot
            at_start = snapshot is not None and snapshot.snapshot_id.offset == self._start > 0
            base_epoch = snapshot.snapshot_id.epoch if snapshot is not None and at_start else 0
            return OffsetAndEpoch(base_epoch, self._start)
        found = self._epochs[index - 1][0]
        end = self._epochs[index][1] if index < len(self._epochs) else self.end_offset()
        return OffsetAndEpoch(found, end)

    def append_as_leader(self, records: list[Record], epoch: int) -> tuple[int, int]:
        if not records:
            raise ValueError("nothing to append")
        first = self.end_offset()
        self._append([LogEntry(first + i, epoch, record) for i, record in enumerate(records)])
        return first, self.end_offset() - 1

    def append_as_follower(self, entries: list[LogEntry]) -> None:
        if entries and entries[0].offset != self.end_offset():
            raise ValueError(f"follower append at {entries[0].offset} but the log ends at {self.end_offset()}")
        self._append(entries)

    def _append(self, entries: list[LogEntry]) -> None:
        for entry in entries:
            if entry.epoch < self.last_fetched_epoch():
                raise ValueError(f"entry epoch {entry.epoch} below the log's last epoch {self.last_fetched_epoch()}")
            if entry.offset != self.end_offset():
                raise ValueError(f"entry offset {entry.offset} does not follow the log end {self.end_offset()}")
            if not self._epochs or self._epochs[-1][0] != entry.epoch:
                self._epochs.append((entry.epoch, entry.offset))
            self._entries.append(entry)

    def truncate_to(self, offset: int) -> None:
        if offset < self._start:
            raise ValueError(f"cannot truncate to {offset}, below the log start {self._start}")
        del self._entries[offset - self._start :]
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()

    def read(self, offset: int, max_bytes: int) -> list[LogEntry]:
        if not self._start <= offset <= self.end_offset():
            raise IndexError(f"offset {offset} is outside the log [{self._start}, {self.end_offset()}]")
        out: list[LogEntry] = []
        size = 0
        for entry in self._entries[offset - self._start :]:
            if out and size + entry.size > max_bytes:
                break
            out.append(entry)
            size += entry.size
        return out

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshot.snapshot_id if self._snapshot is not None else None  # the only one kept

    def maybe_clean(self) -> bool:
        return False  # create_snapshot already dropped what retention 0 drops

    def create_snapshot(self, snapshot: Snapshot) -> None:
        end = snapshot.snapshot_id.offset
        if not self._start <= end <= self.end_offset():
            raise ValueError(f"snapshot end {end} is outside the log [{self._start}, {self.end_offset()}]")
        if self._snapshot is not None:  # the new snapshot covers the old one's history: retention 0 drops it
            remaining = self._entries[end - self._start :]
            self._entries, self._epochs, self._start = [], [], end
            self._append(remaining)
        self._snapshot = snapshot

    def install_snapshot(self, snapshot: Snapshot) -> None:
        self._entries, self._epochs = [], []
        self._start = snapshot.snapshot_id.offset
        self._snapshot = snapshot

    def entries(self) -> list[LogEntry]:
        """Every entry still in the log (tests compare logs with it)."""
        return list(self._entries)
