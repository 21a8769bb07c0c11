"""Opening a partition's log from its directory: crash recovery before the log serves (Kafka's LogLoader).

What a directory may hold after a crash: a `.cleaned` segment the cleaner had not committed (dropped), a `.log.swap`
it had committed but not installed (installed, replacing the old segments of its range), segments written after the
`recovery-point` checkpoint (rescanned and cut at the first torn or corrupt batch, and every later segment dropped),
indexes that fail their checks (rebuilt), and a leader-epoch checkpoint out of step with the log (brought in line, or
rebuilt from the batch headers). After a clean shutdown (the `.kafka_cleanshutdown` marker) nothing is rescanned.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bus.log import files
from bus.log.leader_epoch_cache import (
    CHECKPOINT,
    CorruptCheckpointError,
    EpochEntry,
    LeaderEpochFileCache,
    read_checkpoint,
)
from bus.log.segment import Segment, walk_headers

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedLog:
    """What `Log` starts from: its segments (never empty), log start offset, epoch cache and recovery point."""

    segments: list[Segment]
    log_start_offset: int
    epochs: LeaderEpochFileCache
    recovery_point: int


def load_log(directory: Path, index_interval_bytes: int, now: int, recover: bool) -> LoadedLog:
    """The log in `directory` as it is safe to serve. After an unclean shutdown the unflushed segments are scanned
    and cut at the first bad batch, unless `recover` is False (indexes that fail their checks are rebuilt anyway)."""
    marker = directory / files.CLEAN_SHUTDOWN
    clean = marker.exists()
    marker.unlink(missing_ok=True)
    rebuild = finish_interrupted_swaps(directory, index_interval_bytes)
    names = os.listdir(directory)
    bases = sorted(b for name in names if (b := files.base_offset_of(name, files.LOG)) is not None)
    recovery_point = files.read_offset(directory / files.RECOVERY_POINT) or 0
    first_unflushed = len(bases) if clean or not recover else max(bisect_right(bases, recovery_point) - 1, 0)
    # Checked before Segment() creates any missing index file empty.
    rebuild.update(b for b in bases if not all(p.exists() for p in files.segment_paths(directory, b)))
    segments = [Segment(directory, base, now) for base in bases]
    recovered: list[Segment] = []
    for i, segment in enumerate(segments):
        if i >= first_unflushed or segment.base_offset in rebuild or not segment.load():
            recovered.append(segment)
            cut = segment.recover(index_interval_bytes)
            if cut:
                log.warning("%s: cut %d bytes of torn or corrupt data from segment %d",
                            directory, cut, segment.base_offset)  # fmt: skip
                for later in segments[i + 1 :]:
                    log.warning("%s: dropping segment %d after the cut", directory, later.base_offset)
                    later.close_and_delete()
                del segments[i + 1 :]
                break
    stored_start = files.read_offset(directory / files.LOG_START_OFFSET)
    if not segments:
        segments = [Segment.create(directory, stored_start or 0, now)]
    log_start = max(stored_start or 0, segments[0].base_offset)
    if log_start > segments[-1].next_offset:
        # Records were deleted up to the start offset and then the tail was lost: start empty there so no
        # offset a consumer has seen is ever handed out again.
        for segment in segments:
            segment.close_and_delete()
        segments = [Segment.create(directory, log_start, now)]
        recovered = []
    log_end = segments[-1].next_offset
    epochs = _load_epochs(directory, segments, recovered, log_start, log_end)
    loaded_recovery_point = min(recovery_point, log_end)
    if recovery_point > loaded_recovery_point:
        # Recovery cut below the checkpoint: never let a stale one exempt new unflushed data from the next scan.
        files.write_offset(directory / files.RECOVERY_POINT, loaded_recovery_point)
    return LoadedLog(segments, log_start, epochs, loaded_recovery_point)


def _load_epochs(directory: Path, segments: Sequence[Segment], recovered: Sequence[Segment], log_start: int,
                 log_end: int) -> LeaderEpochFileCache:
    """The leader-epoch cache from its checkpoint, brought in line with the log: batches that recovery
    rescanned assign their epochs again where newer than the cache's (Kafka's LogSegment.recover), then
    entries outside [log start, log end) go. A missing or corrupt checkpoint is rebuilt from the batch
    headers of every segment (a log written before the cache existed, or a damaged file)."""
    path = directory / CHECKPOINT
    path.with_name(CHECKPOINT + ".tmp").unlink(missing_ok=True)  # a write a crash interrupted
    scan: Sequence[Segment] = recovered
    try:
        entries = read_checkpoint(path)
    except FileNotFoundError:
        entries, scan = [], segments
    except CorruptCheckpointError as exc:
        log.warning("%s; rebuilding it from the log", exc)
        entries, scan = [], segments
    loaded = list(entries)
    latest = max((e.epoch for e in entries), default=-1)
    for segment in scan:
        for header in walk_headers(segment.fd, 0, segment.size):
            if header.partition_leader_epoch > latest:
                latest = header.partition_leader_epoch
                entries.append(EpochEntry(latest, header.base_offset))
    cache = LeaderEpochFileCache(path, entries)
    wrote = cache.truncate_from_end(log_end)
    wrote = cache.truncate_from_start(log_start) or wrote
    if not wrote and cache.entries != loaded:
        cache.write()
    return cache


def finish_interrupted_swaps(directory: Path, index_interval_bytes: int) -> set[int]:
    """Undo cleaning that had not committed (`.cleaned` files) and complete swaps that had (`.log.swap`):
    the swap replaces every old segment in its offset range. Returns base offsets whose indexes must be
    rebuilt."""
    names = os.listdir(directory)
    swaps = sorted(b for name in names if (b := files.base_offset_of(name, files.LOG, files.SWAP)) is not None)
    # A committed swap's transaction index cannot be rebuilt from its batches: it is kept and installed.
    kept = {files.txn_index_path(directory, base, files.CLEANED).name for base in swaps}
    for name in names:
        if name.endswith(files.CLEANED) and name not in kept:
            (directory / name).unlink()
    rebuild = set()
    for base in swaps:
        log.warning("%s: completing the interrupted swap of cleaned segment %d", directory, base)
        swapped = Segment(directory, base, 0, files.SWAP)
        swapped.recover(index_interval_bytes)
        end = max(swapped.next_offset, base + 1)
        swapped.close()
        for path in (*swapped.paths[1:], *files.segment_paths(directory, base)):
            path.unlink(missing_ok=True)
        for name in names:
            old = files.base_offset_of(name, files.LOG)
            if old is not None and base < old < end:
                for path in (*files.segment_paths(directory, old), files.txn_index_path(directory, old)):
                    path.unlink(missing_ok=True)
        cleaned_txn_index = files.txn_index_path(directory, base, files.CLEANED)
        if cleaned_txn_index.exists():
            os.replace(cleaned_txn_index, files.txn_index_path(directory, base))
        os.replace(swapped.path, files.segment_path(directory, base, files.LOG))
        rebuild.add(base)
    if swaps:
        files.fsync_dir(directory)
    return rebuild
