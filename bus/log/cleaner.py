"""Log compaction, after Kafka's Cleaner: keep the latest record per key in the non-active segments.

One pass: build key -> latest offset over the dirty section (from the cleaner checkpoint up to the first
uncleanable offset), then recopy every segment below that point, grouped so small segments merge, keeping
a record only if no later offset holds its key. Batches keep their offsets and metadata: a batch that
loses records is re-encoded with its original base offset, last offset delta, producer fields, flags and
codec (MemoryRecords.filterTo); a batch that loses nothing is copied byte for byte.

Tombstones (null values) survive their first clean, which stamps the batch with a delete horizon of
now + delete.retention.ms; a later clean past the horizon drops them. Records without a key are kept
(Kafka rejects them on produce for compacted topics, so they only come from a policy change).
Not done yet: removing aborted transactional data and expired transaction markers (control batches are
copied whole).

Runs in a worker thread: it reads through its own descriptors and swaps results in with
Log.replace_segments, which refuses if the log changed underneath (then this pass is abandoned).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise

from bus.log import files
from bus.log.config import LogConfig
from bus.log.errors import LogClosedError
from bus.log.log import CleaningSnapshot, Log
from bus.log.segment import MAX_RELATIVE_OFFSET, Placement, Segment, read_batches, walk_headers
from bus.protocol.records import LOG_APPEND_TIME, BatchInfo, Record, build_batch, iter_records, scan_batches_prefix

log = logging.getLogger(__name__)

# Keys held in memory while mapping the dirty section; past it a pass cleans what it has mapped so far
# (Kafka bounds its dedupe buffer the same way).
DEFAULT_MAX_KEYS = 1_000_000
_WRITE_CHUNK = 1 << 20


@dataclass(frozen=True)
class CleanStats:
    first_dirty_offset: int
    end_offset: int  # the next clean starts here
    segments_in: int
    segments_out: int
    bytes_read: int
    bytes_written: int
    records_read: int
    records_retained: int


@dataclass(frozen=True)
class _Plan:
    first_dirty: int
    first_uncleanable: int
    next_base: dict[int, int]  # base offset of each non-active segment -> that of the segment after it

    def overlaps_dirty(self, segment: Segment) -> bool:
        return segment.base_offset < self.first_uncleanable and self.next_base[segment.base_offset] > self.first_dirty


def clean(
    log_: Log,
    now_ms: int,
    *,
    upper_bound_offset: int | None = None,
    max_keys: int = DEFAULT_MAX_KEYS,
    force: bool = False,
) -> CleanStats | None:
    """Compact `log_` if its policy includes compact and it is dirty enough (min.cleanable.dirty.ratio, or
    max.compaction.lag.ms overdue). `force` cleans regardless, which also purges tombstones past their
    horizon from a log with nothing dirty. `upper_bound_offset` caps the cleanable range (the last stable
    offset once transactions exist). None if there was nothing to do or the log changed under the pass."""
    config = log_.config
    if not config.compact:
        return None
    try:
        snapshot = log_.cleaning_snapshot()
        plan = _plan(snapshot, config, now_ms, upper_bound_offset)
        if plan is None or not (force or _dirty_enough(snapshot, plan, config, now_ms)):
            return None
        return _Pass(log_, snapshot, plan, now_ms, max_keys).run()
    except (FileNotFoundError, LogClosedError):
        # A segment vanished (retention) or the whole log did (topic deleted) while we worked.
        log.info("%s: cleaning abandoned, the log changed underneath", log_.directory)
        return None


def _plan(snapshot: CleaningSnapshot, config: LogConfig, now_ms: int, upper_bound: int | None) -> _Plan | None:
    """Kafka's cleanableOffsets: the dirty section starts at the checkpoint (the log start when that is out
    of range) and stops before the active segment, the first dirty segment newer than the compaction lag,
    and `upper_bound`."""
    segments = snapshot.segments
    checkpoint = snapshot.cleaner_checkpoint
    first_dirty = snapshot.log_start_offset
    if checkpoint is not None and snapshot.log_start_offset <= checkpoint <= snapshot.log_end_offset:
        first_dirty = checkpoint
    next_base = {segment.base_offset: after.base_offset for segment, after in pairwise(segments)}
    limit = segments[-1].base_offset if upper_bound is None else min(segments[-1].base_offset, upper_bound)
    if config.min_compaction_lag_ms > 0:
        young = (
            s.base_offset
            for s in segments[:-1]
            if next_base[s.base_offset] > first_dirty and s.largest_timestamp > now_ms - config.min_compaction_lag_ms
        )
        limit = min(limit, next(young, limit))
    return _Plan(first_dirty, limit, next_base) if limit >= first_dirty and len(segments) > 1 else None


def _dirty_enough(snapshot: CleaningSnapshot, plan: _Plan, config: LogConfig, now_ms: int) -> bool:
    """Kafka's LogToClean: the dirty share of the bytes below the uncleanable point beats the ratio, or the
    oldest dirty batch has waited longer than max.compaction.lag.ms."""
    cleanable = [s for s in snapshot.segments[:-1] if s.base_offset < plan.first_uncleanable]
    dirty = [s for s in cleanable if plan.overlaps_dirty(s)]
    dirty_bytes = sum(s.size for s in dirty)
    if not dirty_bytes:
        return False
    oldest = min((t for s in dirty if (t := s.first_batch_timestamp) is not None and t > 0), default=None)
    if oldest is not None and oldest < now_ms - config.max_compaction_lag_ms:
        return True
    return dirty_bytes / sum(s.size for s in cleanable) > config.min_cleanable_dirty_ratio


class _Pass:
    """One cleaning pass over a snapshot of a log."""

    def __init__(self, log_: Log, snapshot: CleaningSnapshot, plan: _Plan, now_ms: int, max_keys: int) -> None:
        self.log = log_
        self.config = log_.config
        self.snapshot = snapshot
        self.plan = plan
        self.now_ms = now_ms
        self.max_keys = max_keys
        self.latest: dict[bytes, int] = {}
        self.latest_offset = plan.first_dirty - 1
        self.last_batch_of_producer: dict[int, int] | None = None
        self.bytes_read = self.bytes_written = self.records_read = self.records_retained = 0

    def run(self) -> CleanStats | None:
        self._map_dirty_section()
        end = self.latest_offset + 1
        groups = _group(
            [s for s in self.snapshot.segments[:-1] if s.base_offset < end],
            self.plan,
            self.config.segment_bytes,
            self.config.segment_index_bytes,
        )
        for group in groups:
            if not self._clean_group(group):
                log.info("%s: cleaning abandoned, the log changed underneath", self.log.directory)
                return None
        self.log.set_cleaner_checkpoint(end)
        return CleanStats(self.plan.first_dirty, end, sum(map(len, groups)), len(groups), self.bytes_read,
                          self.bytes_written, self.records_read, self.records_retained)  # fmt: skip

    def _map_dirty_section(self) -> None:
        """Latest offset per key in [first dirty, first uncleanable), stopping early once max_keys are held."""
        first_dirty, stop = self.plan.first_dirty, self.plan.first_uncleanable
        for segment in self.snapshot.segments[:-1]:
            if not self.plan.overlaps_dirty(segment):
                continue
            start = segment.offset_index.lookup(first_dirty) if segment.base_offset < first_dirty else 0
            with _own_fd(segment) as fd:
                for _, buf, batch in read_batches(fd, start, segment.size, verify_crc=False):
                    if batch.base_offset >= stop:
                        break
                    if batch.last_offset < first_dirty:
                        continue
                    if not batch.is_control:
                        for record in iter_records(buf, batch):
                            if record.key is not None and record.offset >= first_dirty:
                                self.latest[record.key] = record.offset
                    self.latest_offset = batch.last_offset
                    if len(self.latest) >= self.max_keys:
                        return
            self.latest_offset = max(self.latest_offset, min(self.plan.next_base[segment.base_offset], stop) - 1)

    def _is_last_of_producer(self, batch: BatchInfo) -> bool:
        """Whether this is its producer's last batch in the log (Kafka asks its producer state; we walk the
        headers once per pass, and only when an emptied producer batch makes it matter)."""
        if self.last_batch_of_producer is None:
            self.last_batch_of_producer = {}
            for segment in self.snapshot.segments:
                with _own_fd(segment) as fd:
                    for header in walk_headers(fd, 0, segment.size):
                        if header.producer_id >= 0:
                            self.last_batch_of_producer[header.producer_id] = header.last_offset
        return self.last_batch_of_producer.get(batch.producer_id) == batch.last_offset

    def _clean_group(self, group: Sequence[Segment]) -> bool:
        cleaned = Segment.create(self.log.directory, group[0].base_offset, self.now_ms, files.CLEANED)
        try:
            for segment in group:
                self._clean_into(segment, cleaned)
                for txn in segment.txn_index.entries:  # markers are all kept, so are their aborts
                    cleaned.txn_index.append(txn)
            cleaned.seal()
            cleaned.flush()
            # Retention falls back on the file time for segments without timestamps: keep the old one.
            mtime = os.stat(group[-1].path).st_mtime_ns
            os.utime(cleaned.path, ns=(mtime, mtime))
            swapped = self.log.replace_segments(cleaned, group, self.snapshot.generation)
        except BaseException:
            cleaned.close_and_delete()
            raise
        if not swapped:
            cleaned.close_and_delete()
        return swapped

    def _clean_into(self, source: Segment, cleaned: Segment) -> None:
        out = bytearray()
        placements: list[Placement] = []
        with _own_fd(source) as fd:
            for _, buf, batch in read_batches(fd, 0, source.size, verify_crc=False):
                self.bytes_read += batch.size
                kept = self._filter(buf, batch)
                if kept is None:
                    continue
                [info], _ = scan_batches_prefix(kept, verify_crc=False)
                out += kept
                placements.append((info.size, info.last_offset, info.max_timestamp))
                if len(out) >= _WRITE_CHUNK:
                    self._write(cleaned, out, placements)
        self._write(cleaned, out, placements)

    def _write(self, cleaned: Segment, out: bytearray, placements: list[Placement]) -> None:
        if out:
            cleaned.append(memoryview(out), placements, self.config.index_interval_bytes)
            self.bytes_written += len(out)
            out.clear()
            placements.clear()

    def _filter(self, buf: bytes, batch: BatchInfo) -> bytes | None:
        """The batch as it should be after cleaning, or None to drop it."""
        whole = buf[batch.position : batch.position + batch.size]
        if batch.is_control:
            return whole
        records = list(iter_records(buf, batch))
        horizon = batch.delete_horizon_ms
        kept = [r for r in records if self._retain(r, horizon)]
        self.records_read += len(records)
        self.records_retained += len(kept)
        has_tombstone = any(r.value is None for r in kept)
        if len(kept) == len(records) and (horizon is not None or not has_tombstone):
            return whole
        if kept:
            if horizon is None and has_tombstone:
                horizon = self.now_ms + self.config.delete_retention_ms
            return _rebuild(batch, kept, horizon)
        if batch.next_offset == self.plan.first_uncleanable or (
            batch.producer_id >= 0 and self._is_last_of_producer(batch)
        ):
            # Kafka keeps an emptied batch that ends the cleaned range (the offset where cleaning stopped
            # stays visible) or is its producer's last (its sequence number still matters).
            return _rebuild(batch, [], None)
        return None

    def _retain(self, record: Record, horizon: int | None) -> bool:
        if record.offset > self.latest_offset or record.key is None:
            return True
        if record.offset < self.latest.get(record.key, -1):
            return False
        return record.value is not None or horizon is None or self.now_ms < horizon


@contextmanager
def _own_fd(segment: Segment) -> Iterator[int]:
    """A descriptor of the cleaner's own, so the log may close and delete the segment while we read it."""
    fd = os.open(segment.path, os.O_RDONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def _rebuild(batch: BatchInfo, kept: Sequence[Record], horizon: int | None) -> bytes:
    """Re-encode the retained records keeping everything but the record list (MemoryRecords.filterTo)."""
    log_append_time = batch.timestamp_type == LOG_APPEND_TIME
    return build_batch(
        kept,
        base_offset=batch.base_offset,
        compression=batch.compression if kept else 0,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence,
        is_transactional=batch.is_transactional,
        timestamp_type=batch.timestamp_type,
        partition_leader_epoch=batch.partition_leader_epoch,
        last_offset_delta=batch.last_offset_delta,
        max_timestamp=batch.max_timestamp if log_append_time or not kept else None,
        delete_horizon_ms=horizon,
    )


def _group(candidates: Sequence[Segment], plan: _Plan, max_bytes: int, max_index_bytes: int) -> list[list[Segment]]:
    """Kafka's groupSegmentsBySize: consecutive segments merge while the data and each index stay within
    their limits and the offsets still fit relative to the group's base."""
    groups: list[list[Segment]] = []
    for segment in candidates:
        if groups and _fits(groups[-1], segment, plan, max_bytes, max_index_bytes):
            groups[-1].append(segment)
        else:
            groups.append([segment])
    return groups


def _fits(group: list[Segment], segment: Segment, plan: _Plan, max_bytes: int, max_index_bytes: int) -> bool:
    members = [*group, segment]
    offset_index_bytes = sum(len(s.offset_index) for s in members) * segment.offset_index.entry_size
    time_index_bytes = sum(len(s.time_index) for s in members) * segment.time_index.entry_size
    last_offset = min(plan.next_base[segment.base_offset], plan.first_uncleanable) - 1
    return (
        sum(s.size for s in members) <= max_bytes
        and offset_index_bytes <= max_index_bytes
        and time_index_bytes <= max_index_bytes
        and (segment.size == 0 or last_offset - group[0].base_offset <= MAX_RELATIVE_OFFSET)
    )
