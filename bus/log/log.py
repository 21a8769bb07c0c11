"""A partition's log: its segments, offsets, reads, retention and flushing (opening it after a crash: log_loader.py).

Concurrency: the broker calls every method from one thread (the event loop); the log cleaner works in
a worker thread on its own file descriptors and only takes the lock to snapshot the segment list and to
swap cleaned segments in. Reads hold the lock across their pread, so a segment's descriptor is never
closed under a reader and a deleted segment can be unlinked at once (Kafka's file.delete.delay.ms exists
to protect zero-copy readers that we do not have).

Leader epochs: a leader's append stamps its epoch on the batches and records in the leader-epoch cache
(leader_epoch_cache.py) where each epoch starts; truncation and retention trim the cache with the log.

Durability: an append is one write(2), so once it returns the data survives a crash of the process.
Surviving a machine crash needs fsync: per flush.messages / flush.ms, and for every rolled segment at
the next `flush_if_due`. The `recovery-point` file records the offset below which everything was
fsynced; after an unclean shutdown only segments from there on are scanned and cut at a torn tail.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from bus.log import files
from bus.log.config import LogConfig
from bus.log.errors import LogClosedError, OffsetOutOfRangeError, RecordBatchTooLargeError
from bus.log.leader_epoch_cache import EpochEntry, write_checkpoint
from bus.log.log_loader import load_log
from bus.log.segment import MAX_RELATIVE_OFFSET, Placement, Segment, fsync_and_close
from bus.log.txn_index import AbortedTxn
from bus.protocol.records import BatchInfo, assign_offsets

log = logging.getLogger(__name__)


def _delete_segments(segments: Sequence[Segment]) -> None:
    for segment in segments:
        segment.close_and_delete()


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """Where an append landed (a named tuple: one is built per produced batch, and it is cheaper than a frozen
    dataclass)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int


@dataclass(frozen=True)
class ReadResult:
    data: bytes | memoryview  # whole batches only
    first_batch_offset: int | None


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    size: int
    path: Path


@dataclass(frozen=True)
class CleaningSnapshot:
    """What the cleaner works from. `generation` changes on truncation, which invalidates a clean."""

    segments: tuple[Segment, ...]
    log_start_offset: int
    log_end_offset: int
    cleaner_checkpoint: int | None
    generation: int


_EMPTY = ReadResult(b"", None)


class _FlushPlan:
    """Descriptors to fsync for one flush, taken under the log's lock and synced without it."""

    __slots__ = ("directory", "epochs", "epochs_path", "failed", "fds", "generation", "offset", "segments")

    def __init__(self, offset: int, generation: int, segments: list[Segment], fds: list[int],
                 directory: Path | None, epochs_path: Path, epochs: list[EpochEntry] | None) -> None:
        self.offset = offset
        self.generation = generation
        self.segments = segments
        self.fds = fds
        self.directory = directory
        self.epochs_path = epochs_path
        self.epochs = epochs  # leader-epoch entries appends changed, written before the recovery point moves
        self.failed = True

    def fsync(self) -> None:
        """Write the leader-epoch checkpoint if appends changed it, fsync and close every descriptor (all of
        them closed even if one fails), then the directory."""
        if self.epochs is not None:
            try:
                write_checkpoint(self.epochs_path, self.epochs)
            except OSError:
                for fd in self.fds:
                    os.close(fd)
                raise
        error: OSError | None = None
        for fd in self.fds:
            try:
                fsync_and_close(fd)
            except OSError as exc:
                error = error or exc
        if error is not None:
            raise error
        if self.directory is not None:
            files.fsync_dir(self.directory)
        self.failed = False


class Log:
    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        recover: bool = True,
    ) -> None:
        """Open or create the log in `directory`. After an unclean shutdown the unflushed segments are
        scanned and cut at the first bad batch, unless `recover` is False (indexes that fail their sanity
        checks are rebuilt either way)."""
        self.directory = directory
        self._config = config
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._closed = False
        self._generation = 0
        self._dir_dirty = False
        directory.mkdir(parents=True, exist_ok=True)
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        loaded = load_log(directory, config.index_interval_bytes, now_ms(), recover)
        self._set_segments(loaded.segments)
        self._log_start_offset = loaded.log_start_offset
        self._epochs = loaded.epochs
        self._recovery_point = loaded.recovery_point
        self._cleaner_checkpoint = files.read_offset(self.directory / files.CLEANER_CHECKPOINT)
        self._last_flush_ms = now_ms()

    def _set_segments(self, segments: list[Segment]) -> None:
        # Copy-on-write: a list once published is never mutated, so a snapshot taken under the lock stays valid.
        self._segments = segments
        self._bases = [segment.base_offset for segment in segments]

    # ------------------------------------------------------------------------------------------ state

    @property
    def config(self) -> LogConfig:
        return self._config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        return tuple(SegmentInfo(s.base_offset, s.size, s.path) for s in self._segments)

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = config

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # ---------------------------------------------------------------------------------------- writing

    def append(
        self, payload: bytearray, batches: Sequence[BatchInfo], *, partition_leader_epoch: int | None = None
    ) -> AppendResult:
        """Append validated batches (`scan_batches` of `payload`) as the leader: offsets are assigned in
        place from the log end offset, and LogAppendTime stamped when the topic asks for it."""
        with self._lock:
            if self._closed:
                self._check_open()
            now = self._now_ms()
            config = self._config
            append_time = now if config.log_append_time else None
            first = self._segments[-1].next_offset  # the log end offset
            assign_offsets(payload, batches, first, log_append_time=append_time,
                           partition_leader_epoch=partition_leader_epoch)  # fmt: skip
            if partition_leader_epoch is not None and partition_leader_epoch != self._epochs.latest_epoch:
                self._epochs.assign(partition_leader_epoch, first, durable=False)
            if len(batches) == 1:  # a producer's request: one batch, no list to build
                batch = batches[0]
                last = first + batch.last_offset_delta
                placements: list[Placement] = [(batch.size, last,
                                                batch.max_timestamp if append_time is None else append_time)]
                offset = last + 1
            else:
                placements = []
                offset = first
                for batch in batches:
                    last = offset + batch.last_offset_delta
                    placements.append((batch.size, last, batch.max_timestamp if append_time is None else append_time))
                    offset = last + 1
            self._write(payload, batches, placements, first, now)
            return AppendResult(first, offset - 1, -1 if append_time is None else append_time, self._log_start_offset)

    def append_as_is(self, payload: bytes | bytearray, batches: Sequence[BatchInfo]) -> AppendResult:
        """Append batches that already carry their offsets (a follower copying its leader); they must
        follow the log end offset, gaps allowed (a compacted leader)."""
        with self._lock:
            self._check_open()
            placements: list[Placement] = []
            expected = self.log_end_offset
            for batch in batches:
                if batch.base_offset < expected:
                    raise ValueError(f"batch at offset {batch.base_offset} is below the next offset {expected}")
                placements.append((batch.size, batch.last_offset, batch.max_timestamp))
                expected = batch.next_offset
            epochs = self._epochs
            for batch in batches:  # the leader's epochs, as its cache has them (Kafka skips unstamped batches)
                if batch.partition_leader_epoch != epochs.latest_epoch and batch.partition_leader_epoch >= 0:
                    epochs.assign(batch.partition_leader_epoch, batch.base_offset, durable=False)
            self._write(payload, batches, placements, batches[0].base_offset if batches else expected, self._now_ms())
            return AppendResult(batches[0].base_offset, batches[-1].last_offset, -1, self._log_start_offset)

    def _write(
        self,
        payload: bytes | bytearray,
        batches: Sequence[BatchInfo],
        placements: Sequence[Placement],
        first_offset: int,
        now: int,
    ) -> None:
        if not batches:
            raise ValueError("no record batch to append")
        start = batches[0].position
        size = batches[-1].position + batches[-1].size - start
        config = self._config
        if size > config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {size} bytes exceeds the segment size of {config.segment_bytes} bytes"
            )
        active = self._maybe_roll(size, first_offset, placements[-1][1], now)
        if not active.size:
            active.created_ms = now  # segment.ms counts from a segment's first append
        active.append(memoryview(payload)[start : start + size], placements, config.index_interval_bytes)
        if (config.flush_messages <= active.next_offset - self._recovery_point  # `_maybe_flush`'s test, unrolled:
                or now - self._last_flush_ms >= config.flush_ms):  # most topics never flush on append
            self._maybe_flush(now)

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, now: int) -> Segment:
        """Kafka's roll rules: the append would overflow segment.bytes, the segment is older than segment.ms
        (since its first append), an index is full, or offsets would not fit an index entry."""
        active = self._segments[-1]
        config = self._config
        if (
            active.size > config.segment_bytes - size
            or (active.size > 0 and now - active.created_ms > config.segment_ms)
            or active.offset_index.is_full(config.segment_index_bytes)
            or active.time_index.is_full(config.segment_index_bytes)
            or last_offset - active.base_offset > MAX_RELATIVE_OFFSET
        ):
            return self._roll(now, first_offset)
        return active

    def _roll(self, now: int, base_offset: int) -> Segment:
        active = self._segments[-1]
        if active.size == 0 and active.base_offset == base_offset:
            return active
        active.seal()
        segment = Segment.create(self.directory, base_offset, now)
        self._set_segments([*self._segments, segment])
        self._dir_dirty = True
        return segment

    def roll(self) -> None:
        with self._lock:
            self._check_open()
            self._roll(self._now_ms(), self.log_end_offset)

    # --------------------------------------------------------------------------------------- flushing

    def _maybe_flush(self, now: int) -> None:
        """flush.messages / flush.ms of the topic: fsync before the append returns, as Kafka does in its append
        path (the lock is held; only topics that ask for it pay)."""
        end = self.log_end_offset
        unflushed = end - self._recovery_point
        config = self._config
        if unflushed > 0 and (unflushed >= config.flush_messages or now - self._last_flush_ms >= config.flush_ms):
            plan = self._plan_flush(end)
            try:
                plan.fsync()
            finally:
                self._commit_flush(plan, now)

    def _plan_flush(self, offset: int) -> _FlushPlan:
        """Under the lock: duplicate the descriptors of every segment holding unflushed data below `offset`."""
        segments = [s for s in self._segments if s.base_offset < offset and s.unflushed]
        plan = _FlushPlan(offset, self._generation, segments, [fd for s in segments for fd in s.dup_fds()],
                          self.directory if self._dir_dirty else None, self._epochs.path, self._epochs.take_pending())
        for segment in segments:
            segment.unflushed = False
        self._dir_dirty = False
        return plan

    def _commit_flush(self, plan: _FlushPlan, now: int) -> None:
        """Under the lock, after plan.fsync(): move the recovery point, unless a truncation moved the log."""
        if plan.failed:
            for segment in plan.segments:
                segment.unflushed = True
            self._dir_dirty |= plan.directory is not None
            if plan.epochs is not None:
                self._epochs.mark_dirty()
            return
        if plan.offset > self._recovery_point and plan.generation == self._generation and not self._closed:
            self._recovery_point = plan.offset
            files.write_offset(self.directory / files.RECOVERY_POINT, plan.offset)
        self._last_flush_ms = now

    def _flush_unlocked(self, offset_of: Callable[[], int | None], now: int) -> bool:
        """fsync up to the offset `offset_of()` picks under the lock (None: nothing to do), with the fsyncs
        outside it, so appends and reads on the event loop never wait for the disk. Flushes of one log are
        serialised so recovery points are written in order."""
        with self._flush_lock:
            with self._lock:
                offset = None if self._closed else offset_of()
                if offset is None:
                    return False
                plan = self._plan_flush(offset)
            try:
                plan.fsync()
            finally:
                with self._lock:
                    self._commit_flush(plan, now)
            return True

    def flush(self) -> None:
        self._check_open()
        self._flush_unlocked(lambda: self.log_end_offset, self._now_ms())

    def flush_if_due(self, now_ms: int) -> bool:
        """The periodic flusher: everything once flush.ms has passed, else just the segments rolled since
        the last flush (Kafka flushes a segment when it rolls). True if anything was fsynced. Safe to call
        from a worker thread: the log's lock is not held across the fsyncs."""

        def due() -> int | None:
            end = self.log_end_offset
            if self._recovery_point < end and now_ms - self._last_flush_ms >= self._config.flush_ms:
                return end
            active_base = self._segments[-1].base_offset
            return active_base if self._recovery_point < active_base else None

        return self._flush_unlocked(due, now_ms)

    # ---------------------------------------------------------------------------------------- reading

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None = None, min_one_batch: bool = True
    ) -> ReadResult:
        """Whole batches from the one containing `offset` (it may start before it), at most `max_bytes`
        unless the first batch alone is bigger and `min_one_batch` is set, none based at or past
        `max_offset` (high watermark or last stable offset)."""
        with self._lock:
            self._check_open()
            end = self.log_end_offset
            if offset < self._log_start_offset or offset > end:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside [{self._log_start_offset}, {end}] of {self.directory.name}"
                )
            if offset == end or (max_offset is not None and offset >= max_offset):
                return _EMPTY
            first = max(bisect_right(self._bases, offset) - 1, 0)
            for segment in self._segments[first:]:
                found = segment.read(offset, max_bytes, max_offset, min_one_batch)
                if found is not None:
                    return ReadResult(*found) if found[1] is not None else _EMPTY
            return _EMPTY

    # ------------------------------------------------------------------------------------ leader epochs

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch the log knows of, -1 if none."""
        return self._epochs.latest_epoch

    @property
    def epoch_entries(self) -> list[EpochEntry]:
        """(epoch, start offset) of every epoch the log still holds, oldest first."""
        with self._lock:
            return self._epochs.entries

    def assign_epoch_start(self, epoch: int) -> None:
        """A new leader's epoch starts at the log end even before it appends (Kafka's
        maybeAssignEpochStartOffset on becoming leader), so OffsetsForLeaderEpoch knows the epoch at once."""
        with self._lock:
            self._check_open()
            if epoch != self._epochs.latest_epoch:
                self._epochs.assign(epoch, self.log_end_offset, durable=False)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetsForLeaderEpoch for `epoch`; (-1, -1) when undefined."""
        with self._lock:
            self._check_open()
            return self._epochs.end_offset_for(epoch, self.log_end_offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch that wrote `offset` (ListOffsets answers it with the offset), None if unknown."""
        with self._lock:
            return self._epochs.epoch_for_offset(offset)

    # ---------------------------------------------------------------------------- aborted transactions

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index a transaction aborted by the marker at `txn.last_offset`, in the segment holding the marker."""
        with self._lock:
            self._check_open()
            index = max(bisect_right(self._bases, txn.last_offset) - 1, 0)
            self._segments[index].txn_index.append(txn)

    def collect_aborted_txns(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper_bound): from the segment holding `start` onwards (a
        transaction ending at or after `start` has its marker there or later), until one segment's entries
        prove the rest start past the bound (Kafka's collectAbortedTransactions)."""
        with self._lock:
            self._check_open()
            found: list[AbortedTxn] = []
            for segment in self._segments[max(bisect_right(self._bases, start) - 1, 0) :]:
                txns, complete = segment.txn_index.collect(start, upper_bound)
                found += txns
                if complete:
                    break
            return found

    def truncate_aborted_txns(self, offset: int) -> None:
        """Drop index entries of markers at or after `offset`: the caller replays the log from there."""
        with self._lock:
            self._check_open()
            for segment in self._segments[max(bisect_right(self._bases, offset) - 1, 0) :]:
                segment.txn_index.truncate_to(offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(timestamp, offset) of the earliest record stamped at or after `timestamp` (ListOffsets)."""
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.largest_timestamp >= timestamp:
                    found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
                    if found is not None:
                        return found
            return None

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of its first record) for ListOffsets MAX_TIMESTAMP; (-1, -1) if none."""
        with self._lock:
            self._check_open()
            newest = max(self._segments, key=lambda segment: segment.max_timestamp)
            return newest.max_timestamp_record() or (-1, -1)

    # ----------------------------------------------------------------------------- deleting and truncating

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: move the log start offset up to `offset` and drop the segments wholly below it.
        Returns the new log start offset (the low watermark)."""
        with self._lock:
            self._check_open()
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(f"offset {offset} is past the log end offset {self.log_end_offset}")
            doomed: list[Segment] = []
            if offset > self._log_start_offset:
                self._move_log_start(offset)
                doomed = self._detach_oldest(self._count_below_log_start())
            start = self._log_start_offset
        _delete_segments(doomed)
        return start

    def enforce_retention(self) -> int:
        """Delete whole non-active segments past retention.ms (by their newest timestamp) or beyond
        retention.bytes, and any below the log start offset. Returns how many were deleted. The files are
        unlinked after the lock is released (no reader can reach a detached segment: reads hold the lock)."""
        with self._lock:
            if self._closed:
                return 0
            config = self._config
            inactive = self._segments[:-1]
            count = self._count_below_log_start()
            if config.delete and config.retention_ms >= 0:
                now = self._now_ms()
                expired = 0
                while expired < len(inactive) and now - inactive[expired].largest_timestamp > config.retention_ms:
                    expired += 1
                count = max(count, expired)
            if config.delete and config.retention_bytes >= 0:
                excess = self.size_bytes - config.retention_bytes
                oversize = 0
                while oversize < len(inactive) and excess >= inactive[oversize].size:
                    excess -= inactive[oversize].size
                    oversize += 1
                count = max(count, oversize)
            doomed = self._detach_oldest(count)
        _delete_segments(doomed)
        return len(doomed)

    def _count_below_log_start(self) -> int:
        count = 0
        while count + 1 < len(self._segments) and self._segments[count + 1].base_offset <= self._log_start_offset:
            count += 1
        return count

    def _detach_oldest(self, count: int) -> list[Segment]:
        """Take the `count` oldest segments out of the log (under the lock); the caller deletes them after."""
        if not count:
            return []
        doomed = self._segments[:count]
        self._set_segments(self._segments[count:])
        self._dir_dirty = True
        if self._segments[0].base_offset > self._log_start_offset:
            self._move_log_start(self._segments[0].base_offset)
        return doomed

    def _move_log_start(self, offset: int) -> None:
        """Under the lock: the log now starts at `offset`; so does the oldest epoch it still holds."""
        self._log_start_offset = offset
        files.write_offset(self.directory / files.LOG_START_OFFSET, offset)
        self._epochs.truncate_from_start(offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch ending at or after `offset` (replication divergence). A batch straddling
        `offset` goes whole, so the log end offset may land below it.

        At or past the log end no batch goes, but the leader epoch cache is still cut at the end, as Kafka's
        UnifiedLog.truncateTo does: a node that led an epoch without appending to it holds an entry starting at
        its log end; kept, it names that epoch as the last fetched one, the new leader answers that it diverges
        at the very same end, and the follower truncates to where it already is, fetch after fetch."""
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                self._epochs.truncate_from_end(self.log_end_offset)
                return
            if offset <= self._segments[0].base_offset:
                self._restart_at(offset)
                return
            self._generation += 1
            self._dir_dirty = True
            keep = bisect_left(self._bases, offset)
            for segment in self._segments[keep:]:
                segment.close_and_delete()
            self._set_segments(self._segments[:keep])
            self._segments[-1].truncate_to(offset)
            end = self.log_end_offset
            self._epochs.truncate_from_end(end)
            if end < self._log_start_offset:
                self._move_log_start(end)
            if self._recovery_point > end:
                self._recovery_point = end
                files.write_offset(self.directory / files.RECOVERY_POINT, end)
            if self._cleaner_checkpoint is not None and self._cleaner_checkpoint > end:
                self._write_cleaner_checkpoint(end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and start empty at `offset`, which may lie past the log end: a follower whose
        leader's log now starts beyond everything it holds (Kafka's truncateFullyAndStartAt)."""
        with self._lock:
            self._check_open()
            self._restart_at(offset)

    def _restart_at(self, offset: int) -> None:
        """Under the lock: an empty log at `offset`; no epoch wrote anything left, nothing below it needs recovery
        and the cleaner starts over."""
        if offset < 0:
            raise ValueError(f"a log cannot start at offset {offset}")
        self._generation += 1
        self._dir_dirty = True
        for segment in self._segments:
            segment.close_and_delete()
        self._set_segments([Segment.create(self.directory, offset, self._now_ms())])
        self._epochs.clear()
        self._move_log_start(offset)
        self._recovery_point = offset
        files.write_offset(self.directory / files.RECOVERY_POINT, offset)
        if self._cleaner_checkpoint is not None:
            self._write_cleaner_checkpoint(offset)

    # ----------------------------------------------------------------------------------- the cleaner's side

    def cleaning_snapshot(self) -> CleaningSnapshot:
        with self._lock:
            self._check_open()
            return CleaningSnapshot(
                tuple(self._segments), self._log_start_offset, self.log_end_offset, self._cleaner_checkpoint,
                self._generation,
            )  # fmt: skip

    def set_cleaner_checkpoint(self, offset: int) -> None:
        """Where the next clean's dirty section begins (Kafka's cleaner-offset-checkpoint)."""
        with self._lock:
            if not self._closed:
                self._write_cleaner_checkpoint(offset)

    def _write_cleaner_checkpoint(self, offset: int) -> None:
        self._cleaner_checkpoint = offset
        files.write_offset(self.directory / files.CLEANER_CHECKPOINT, offset)

    def replace_segments(self, cleaned: Segment, old: Sequence[Segment], generation: int) -> bool:
        """Swap a cleaned segment (fsynced, files named `.cleaned`) in for the consecutive non-active `old`
        segments it was built from. False, changing nothing, if the log moved on meanwhile (truncated,
        closed, or some of `old` deleted by retention); the caller then discards `cleaned`.

        Crash safety: renaming the cleaned log to `.swap` is the commit point. Recovery deletes `.cleaned`
        files (the old segments are intact) and completes any `.swap` (see log_loader.finish_interrupted_swaps). Only
        renames happen under the lock; the directory fsync that makes them durable follows without it (a
        journalling file system persists renames in order, so a crash still finds the commit before the
        deletions that follow it), as does the closing of the replaced segments.
        """
        with self._lock:
            if self._closed or generation != self._generation:
                return False
            current = self._segments
            first = next((i for i, segment in enumerate(current) if segment is old[0]), None)
            if first is None or first + len(old) >= len(current):
                return False
            if any(current[first + i] is not segment for i, segment in enumerate(old)):
                return False
            base = old[0].base_offset
            swap = files.segment_path(self.directory, base, files.LOG, files.SWAP)
            os.replace(cleaned.path, swap)
            for segment in old[1:]:
                for path in segment.paths:
                    path.unlink(missing_ok=True)
            final_log, final_index, final_time_index = files.segment_paths(self.directory, base)
            os.replace(cleaned.offset_index.path, final_index)
            os.replace(cleaned.time_index.path, final_time_index)
            final_txn_index = files.txn_index_path(self.directory, base)
            if cleaned.txn_index.entries:
                cleaned.txn_index.rename(final_txn_index)
            else:
                final_txn_index.unlink(missing_ok=True)
            os.replace(swap, final_log)
            cleaned.set_suffix("")
            self._set_segments([*current[:first], cleaned, *current[first + len(old) :]])
        for segment in old:
            segment.close_descriptors()
        files.fsync_dir(self.directory)
        return True

    # ------------------------------------------------------------------------------------------ closing

    def close(self) -> None:
        """Flush everything and leave the clean-shutdown marker, so the next open trusts the indexes."""
        with self._lock:
            if self._closed:
                return
            for segment in self._segments:
                segment.seal()
            plan = self._plan_flush(self.log_end_offset)
            plan.fsync()
            self._commit_flush(plan, self._now_ms())
            for segment in self._segments:
                segment.close()
            (self.directory / files.CLEAN_SHUTDOWN).touch()
            files.fsync_dir(self.directory)
            self._closed = True

    def delete(self) -> None:
        """Remove the log and its directory (blocking; see detach for the event loop's half)."""
        self.detach()()

    def detach(self) -> Callable[[], None]:
        """Close the log and rename its directory to `<dir>.<uuid>-delete`, as Kafka does, so a crash mid-way
        leaves a name that start-up recognises and finishes deleting. Returns the slow half, closing the
        files and removing the directory, for the caller to run off the event loop."""
        with self._lock:
            segments = [] if self._closed else list(self._segments)
            self._closed = True
            doomed = self.directory.with_name(f"{self.directory.name}.{uuid.uuid4().hex}-delete")
            os.rename(self.directory, doomed)

        def remove() -> None:
            with self._flush_lock:  # a flush in progress holds duplicates of descriptors, not these
                for segment in segments:
                    segment.close_descriptors()
            shutil.rmtree(doomed, ignore_errors=True)

        return remove
