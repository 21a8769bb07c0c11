"""`FileRaftLog`: the KRaft metadata log (`__cluster_metadata-0/`) on disk, durable before every answer.

It builds on the broker's partition log (`bus.log.log.Log`): its segments, offset index, torn-tail
recovery on open, `append_as_is`, `read`, `truncate_to` and `delete_records_before` are what a Raft log
needs, and the files are then Kafka's own layout (`00000000000000000000.log`, `.index`, `.timeindex`),
readable by Kafka's tools. What this class adds is the Raft side:

- **One record batch per entry.** Entries are encoded with `bus.raft.wire.entries_to_records`, the batch's
  partition leader epoch being the entry's epoch. The consensus core truncates a follower to
  min(its own end of an epoch, the leader's), which can fall inside a batch whenever the two logs were
  written with different batch boundaries (the core reads and ships entries, not batches, and a fetch's
  max_bytes cuts anywhere). `Log.truncate_to` drops a straddling batch whole, which could remove entries
  below the high watermark that the leader counted on this replica; with one entry per batch every
  offset is a batch boundary, so truncation is exact. The cost is a batch header per entry (metadata
  records are few and small); an append of many entries is still one write and one fsync.
- **Durability.** The Log runs with flush.messages=1, so `append_as_is` fsyncs (segment and indexes, and
  the directory after a roll) before it returns; `truncate_to` flushes explicitly. A leader's own end
  offset and a follower's fetch offset count toward the high watermark, so both survive kill -9 and
  power loss once the method returns.
- **Leader-epoch cache.** (epoch, first offset) pairs in memory answer `epoch_of` and
  `end_offset_for_epoch` without reading the log; they are rebuilt on open from the batches, which are
  all decoded then anyway to check that this is a metadata log (a snapshot keeps the log short).
- **Snapshots** (`bus.raft.snapshots`) and **retention**, as KRaft's KafkaMetadataLog: `create_snapshot`
  only makes the snapshot durable; the entries it covers stay, so a follower a few entries behind is sent
  those entries, not the whole image. `maybe_clean` (after each snapshot and on open) deletes history by
  `metadata.max.retention.bytes` / `.ms`: while more than one snapshot exists and the log plus the
  snapshots exceed the bytes, or the oldest snapshot is older than the ms, the log start moves to the end
  of the next snapshot (whole segments below it go) and then the snapshots below the new start are
  deleted. So the log starts at 0 or at the end of its oldest snapshot; the latest snapshot is what
  FetchSnapshot serves. `install_snapshot` makes the leader's snapshot durable, then empties the log,
  restarts it at the snapshot's end (Kafka's truncateFullyAndStartAt) and deletes the older snapshots.
  A crash inside any of these is finished on open: snapshots below the log start are deleted (a cut
  clean); a latest snapshot that the log does not continue (past its end, or the log's epoch at its end
  differs) is an interrupted install, and the log is discarded for it.

Opening a directory that holds anything a metadata log does not (a broker's log root, a topic's
partition with producer snapshots), or batches that are not Raft entries in offset and epoch order, is
a `MetadataLogError` naming it; nothing is deleted or rewritten for it (the Log's own recovery of a
torn tail aside).
"""

from __future__ import annotations

import logging
import os
import re
import time
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path

from bus.log import files
from bus.log.config import LogConfig
from bus.log.leader_epoch_cache import CHECKPOINT
from bus.log.log import Log
from bus.protocol.records import BatchInfo, scan_batches
from bus.raft.quorum_state import FILE_NAME as QUORUM_STATE
from bus.raft.replicated_log import LogEntry, OffsetAndEpoch, Record, Snapshot
from bus.raft.snapshots import PART, SUFFIX, SnapshotStore
from bus.raft.wire import WireError, entries_to_records, records_to_entries

log = logging.getLogger(__name__)

# Kafka's metadata.log.segment.bytes default.
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
# Kafka's metadata.max.retention.bytes and metadata.max.retention.ms defaults (a negative value: no limit).
DEFAULT_RETENTION_BYTES = 100 * 1024 * 1024
DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
_READ_CHUNK = 1 << 20


def _any(*names: str) -> str:
    return "(" + "|".join(map(re.escape, names)) + ")"


# Every file a metadata log directory may hold: the Log's segments and checkpoints (and their temporary
# names), snapshots, the quorum-state file, and the two files Kafka also keeps there.
_KNOWN_FILES = re.compile(
    rf"\d{{20}}{_any(files.LOG, files.INDEX, files.TIME_INDEX, files.TXN_INDEX)}{_any(files.CLEANED, files.SWAP)}?"
    rf"|\d{{20}}-\d{{10}}{re.escape(SUFFIX)}{_any(PART)}?"
    rf"|{_any(files.RECOVERY_POINT, files.LOG_START_OFFSET, files.CLEANER_CHECKPOINT, QUORUM_STATE, CHECKPOINT)}"
    rf"(\.tmp)?|{_any(files.CLEAN_SHUTDOWN, 'partition.metadata')}"
)


class MetadataLogError(Exception):
    """The directory is not a KRaft metadata log, or its log contradicts its snapshot."""


class _EpochCache:
    """(epoch, first offset) of each epoch in the log, in offset order: Kafka's leader-epoch cache."""

    def __init__(self) -> None:
        self.epochs: list[int] = []
        self.starts: list[int] = []

    def assign(self, epoch: int, offset: int) -> None:
        if not self.epochs or self.epochs[-1] != epoch:
            self.epochs.append(epoch)
            self.starts.append(offset)

    def epoch_at(self, offset: int) -> int:
        return self.epochs[bisect_right(self.starts, offset) - 1]

    def truncate_from(self, offset: int) -> None:
        """Forget the epochs that start at or after `offset` (the entries there were removed)."""
        keep = bisect_right(self.starts, offset - 1)
        del self.epochs[keep:], self.starts[keep:]

    def truncate_before(self, offset: int, end: int) -> None:
        """The entries below `offset` were removed: the epoch holding `offset` now starts there."""
        if offset >= end:
            self.epochs, self.starts = [], []
            return
        first = bisect_right(self.starts, offset) - 1
        del self.epochs[:first], self.starts[:first]
        self.starts[0] = offset


class FileRaftLog:
    """The replicated metadata log in `directory` (created if absent); see the module docstring."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        retention_bytes: int = DEFAULT_RETENTION_BYTES,
        retention_ms: int = DEFAULT_RETENTION_MS,
    ) -> None:
        if directory.exists() and not directory.is_dir():
            raise MetadataLogError(f"{directory} is not a directory, so not a KRaft metadata log")
        if not directory.exists():
            directory.mkdir(parents=True)
            files.fsync_dir(directory.parent)
        strangers = sorted(name for name in os.listdir(directory) if not _KNOWN_FILES.fullmatch(name))
        if strangers:
            raise MetadataLogError(
                f"{directory} does not look like a KRaft metadata log: it holds {', '.join(strangers[:5])}"
            )
        self.directory = directory
        self.retention_bytes, self.retention_ms = retention_bytes, retention_ms
        self._config = LogConfig(segment_bytes=segment_bytes, flush_messages=1)
        self._snapshots = SnapshotStore(directory)
        self._log = Log(directory, self._config)
        self._epochs = _EpochCache()
        try:
            self._reconcile()
            self.maybe_clean()
            # A new directory's first segment: the Log fsyncs the directory only after later rolls.
            files.fsync_dir(directory)
        except BaseException:
            self._log.close()
            raise

    # ---- opening -------------------------------------------------------------------------------------

    def _reconcile(self) -> None:
        """Load the epoch cache; finish an interrupted install_snapshot (the log not yet replaced) or clean
        (the snapshots below the new log start not yet deleted)."""
        start, end = self._log.log_start_offset, self._log.log_end_offset
        self._load_epochs(start)
        snapshot = self._snapshots.latest
        if snapshot is not None and not self._continues(snapshot.snapshot_id):
            log.warning("%s: replacing the log [%d, %d) with snapshot %s (its install was interrupted)",
                        self.directory, start, end, snapshot.snapshot_id)  # fmt: skip
            self._restart_at(snapshot.snapshot_id.offset)
            self._snapshots.delete_all_but(snapshot.snapshot_id)
            return
        if start > 0 and self._snapshot_at_start() is None:
            raise MetadataLogError(
                f"{self.directory}: the log starts at offset {start} but no snapshot ends there "
                f"(snapshots: {', '.join(map(str, self._snapshots.ids)) or 'none'})"
            )
        self._snapshots.delete_before(start)

    def _continues(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Whether the log holds the snapshot's end with the snapshot's epoch below it and none lower above it
        (otherwise the snapshot came from the leader and the log it replaces was not yet discarded)."""
        start, end, offset = self.start_offset(), self.end_offset(), snapshot_id.offset
        if offset < start:
            return True  # no install ends below the log start (the start check refuses such a log)
        if offset > end or (offset > start and self._epochs.epoch_at(offset - 1) != snapshot_id.epoch):
            return False
        return offset == end or self._epochs.epoch_at(offset) >= snapshot_id.epoch

    def _snapshot_at_start(self) -> OffsetAndEpoch | None:
        """The snapshot the log starts from (Kafka's logStartSnapshot), None while the log starts at 0."""
        start = self.start_offset()
        return next((i for i in self._snapshots.ids if i.offset == start), None) if start > 0 else None

    def _load_epochs(self, start: int) -> None:
        expected, last_epoch = start, -1
        for entry in self._entries_from(start, _READ_CHUNK):
            if entry.offset != expected or entry.epoch < last_epoch:
                raise MetadataLogError(
                    f"{self.directory} is not a KRaft metadata log: entry at offset {entry.offset} of epoch "
                    f"{entry.epoch} follows offset {expected - 1} of epoch {last_epoch}"
                )
            self._epochs.assign(entry.epoch, entry.offset)
            expected, last_epoch = entry.offset + 1, entry.epoch

    def _restart_at(self, offset: int) -> None:
        """Kafka's truncateFullyAndStartAt: an empty log whose next offset is `offset`. `Log.truncate_to`
        empties it at its first segment's base; a log start offset past the end makes the Log start
        empty there when it opens (a crash on the way is finished by `_reconcile` on the next open)."""
        base = self._log.segments[0].base_offset
        if self._log.log_end_offset > base:
            self._log.truncate_to(base)
        self._log.flush()
        if base != offset:
            self._log.close()
            files.write_offset(self.directory / files.LOG_START_OFFSET, offset)
            files.fsync_dir(self.directory)
            self._log = Log(self.directory, self._config)
            files.fsync_dir(self.directory)  # the Log's new first segment, which later appends go to
        self._epochs = _EpochCache()

    # ---- reading -------------------------------------------------------------------------------------

    def _entries_from(self, offset: int, chunk_bytes: int) -> Iterator[LogEntry]:
        """Every entry from `offset` to the end, reading about `chunk_bytes` of batches at a time."""
        position = offset
        while position < self._log.log_end_offset:
            try:
                entries = records_to_entries(bytes(self._log.read(position, chunk_bytes).data))
            except WireError as exc:
                raise MetadataLogError(f"{self.directory} is not a KRaft metadata log: {exc}") from exc
            if not entries:
                raise MetadataLogError(f"{self.directory}: no batch holds offset {position} below the log end")
            for entry in entries:
                if entry.offset >= position:
                    yield entry
            position = max(position, entries[-1].offset + 1)

    def start_offset(self) -> int:
        return self._log.log_start_offset

    def end_offset(self) -> int:
        return self._log.log_end_offset

    def last_fetched_epoch(self) -> int:
        if self._epochs.epochs:
            return self._epochs.epochs[-1]
        snapshot = self._snapshots.latest
        return snapshot.snapshot_id.epoch if snapshot is not None else 0

    def epoch_of(self, offset: int) -> int:
        if not self.start_offset() <= offset < self.end_offset():
            raise IndexError(f"offset {offset} is outside the log [{self.start_offset()}, {self.end_offset()})")
        return self._epochs.epoch_at(offset)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        epochs, starts = self._epochs.epochs, self._epochs.starts
        index = bisect_right(epochs, epoch)
        if index == 0:
            # Older than anything in the log: the log starts where its oldest snapshot ends.
            snapshot_id = self._snapshot_at_start()
            return OffsetAndEpoch(snapshot_id.epoch if snapshot_id is not None else 0, self.start_offset())
        end = starts[index] if index < len(starts) else self.end_offset()
        return OffsetAndEpoch(epochs[index - 1], end)

    def read(self, offset: int, max_bytes: int) -> list[LogEntry]:
        if not self.start_offset() <= offset <= self.end_offset():
            raise IndexError(f"offset {offset} is outside the log [{self.start_offset()}, {self.end_offset()}]")
        out: list[LogEntry] = []
        size = 0
        for entry in self._entries_from(offset, min(2 * max(max_bytes, 1), _READ_CHUNK)):
            if out and size + entry.size > max_bytes:
                break
            out.append(entry)
            size += entry.size
        return out

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshots.latest

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return self._snapshots.ids[0] if self._snapshots.ids else None

    # ---- writing -------------------------------------------------------------------------------------

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
        """Check every entry, then write them all with one write and one fsync (the Log's flush.messages=1)."""
        if not entries:
            return
        expected, last_epoch = self.end_offset(), self.last_fetched_epoch()
        for entry in entries:
            if entry.epoch < last_epoch:
                raise ValueError(f"entry epoch {entry.epoch} below the log's last epoch {last_epoch}")
            if entry.offset != expected:
                raise ValueError(f"entry offset {entry.offset} does not follow the log end {expected}")
            expected, last_epoch = expected + 1, entry.epoch
        payload = b"".join(entries_to_records((entry,)) for entry in entries)
        for chunk in self._segment_sized(scan_batches(payload, verify_crc=False)):
            self._log.append_as_is(payload, chunk)
        for entry in entries:
            self._epochs.assign(entry.epoch, entry.offset)

    def _segment_sized(self, batches: list[BatchInfo]) -> Iterator[list[BatchInfo]]:
        """Runs of batches that fit one segment: the Log writes an append into one segment and refuses a
        bigger one. Only an append larger than segment.bytes is split (each run is durable in turn, so a
        crash keeps a prefix of it, which is a valid log); a single entry larger than that is refused."""
        run: list[BatchInfo] = []
        size = 0
        for batch in batches:
            if run and size + batch.size > self._config.segment_bytes:
                yield run
                run, size = [], 0
            run.append(batch)
            size += batch.size
        yield run

    def truncate_to(self, offset: int) -> None:
        if offset < self.start_offset():
            raise ValueError(f"cannot truncate to {offset}, below the log start {self.start_offset()}")
        if offset >= self.end_offset():
            return
        self._log.truncate_to(offset)
        self._log.flush()
        self._epochs.truncate_from(offset)

    def create_snapshot(self, snapshot: Snapshot) -> None:
        end = snapshot.snapshot_id.offset
        if not self.start_offset() <= end <= self.end_offset():
            raise ValueError(f"snapshot end {end} is outside the log [{self.start_offset()}, {self.end_offset()}]")
        if end > self.start_offset() and self.epoch_of(end - 1) != snapshot.snapshot_id.epoch:
            # On open, a snapshot whose epoch differs from the log's there reads as an unfinished install.
            raise ValueError(
                f"snapshot {snapshot.snapshot_id} ends at an entry of epoch {self.epoch_of(end - 1)}, not its own"
            )
        latest = self._snapshots.latest
        if latest is not None and snapshot.snapshot_id <= latest.snapshot_id:
            raise ValueError(f"snapshot {snapshot.snapshot_id} is not after the latest {latest.snapshot_id}")
        self._snapshots.save(snapshot)
        self.maybe_clean()

    def maybe_clean(self, now_ms: int | None = None) -> bool:
        """Kafka's KafkaMetadataLog.maybeClean: while a newer snapshot covers the oldest one's history and
        the log and snapshots together exceed retention_bytes, or the oldest snapshot is older than
        retention_ms, start the log at the next snapshot's end. Returns whether anything was deleted."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        cleaned = False
        while len(ids := self._snapshots.ids) > 1 and (self._over_bytes() or self._expired(ids[0], now_ms)):
            self._start_at_snapshot(ids[1].offset)
            cleaned = True
        return cleaned

    def _over_bytes(self) -> bool:
        if self.retention_bytes < 0:
            return False
        snapshots = sum(self._snapshots.size_bytes(i) for i in self._snapshots.ids)
        return self._log.size_bytes + snapshots > self.retention_bytes

    def _expired(self, snapshot_id: OffsetAndEpoch, now_ms: int) -> bool:
        return self.retention_ms >= 0 and now_ms - self._snapshots.created_ms(snapshot_id) > self.retention_ms

    def _start_at_snapshot(self, offset: int) -> None:
        """Move the log start (durably, by the Log's checkpoint) to a snapshot's end, then delete the older
        snapshots: a crash between the two leaves snapshots below the start, which the next open deletes."""
        if offset > self.start_offset():
            self._log.delete_records_before(offset)
            self._epochs.truncate_before(offset, self.end_offset())
            files.fsync_dir(self.directory)  # the new start is durable before the snapshots below it go
        self._snapshots.delete_before(offset)

    def install_snapshot(self, snapshot: Snapshot) -> None:
        if snapshot.snapshot_id.offset < self.start_offset():
            # Raft never sends one: the offsets below our start are committed, so the leader's snapshot covers them.
            raise ValueError(f"snapshot {snapshot.snapshot_id} ends below the log start {self.start_offset()}")
        self._snapshots.save(snapshot)
        self._restart_at(snapshot.snapshot_id.offset)
        self._snapshots.delete_all_but(snapshot.snapshot_id)

    def close(self) -> None:
        self._log.close()
