"""Which leader epoch wrote which offsets of a partition: Kafka's LeaderEpochFileCache (KIP-101/279).

Each entry is (epoch, start offset): the first offset written by that epoch's leader. Epochs and start
offsets both strictly increase. A follower asks the leader for the end offset of its own latest epoch
(OffsetsForLeaderEpoch) and truncates what lies past it; a consumer does the same after a leader change
(KIP-320) to detect that its position was lost with an unclean leader.

Persisted as `leader-epoch-checkpoint` in the partition directory in Kafka's checkpoint format (a version
line `0`, a count line, then `epoch startOffset` lines), so Kafka's tools read ours and ours read theirs.
Every change is written at once: to a temporary file, fsynced, renamed over the old one. A crash between an
append and a truncation may leave entries the log no longer holds; opening the log truncates the cache to
the log's bounds again, as Kafka does (where the truncations are flushed asynchronously for that reason).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from bus.log import files

log = logging.getLogger(__name__)

CHECKPOINT = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 0
# OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class CorruptCheckpointError(ValueError):
    """The checkpoint file is not in Kafka's format (the log rebuilds the cache from its batches)."""


def read_checkpoint(path: Path) -> list[EpochEntry]:
    """The entries of a checkpoint file, checked as Kafka's CheckpointReadBuffer checks them: version 0, as many
    entry lines as the count line says, two integers a line. FileNotFoundError when absent. An empty file,
    which Kafka reads as no entries, is refused too: the log then rebuilds the entries from its batches."""
    try:
        lines = path.read_bytes().decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path}: not a text file") from None
    try:
        version, count = int(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        raise CorruptCheckpointError(f"{path}: no version and entry count lines") from None
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"{path}: unrecognised version {version}")
    body = lines[2:]
    if len(body) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries but found {len(body)}")
    entries = []
    for line in body:
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            entries.append(EpochEntry(int(parts[0]), int(parts[1])))
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed line {line!r}") from None
    return entries


def write_checkpoint(path: Path, entries: Iterable[EpochEntry]) -> None:
    """Replace the checkpoint atomically and durably: a temporary file, fsynced, renamed, directory fsynced."""
    listed = list(entries)
    text = "".join([f"{CHECKPOINT_VERSION}\n{len(listed)}\n", *(f"{e} {o}\n" for e, o in listed)])
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        files.write_all(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    files.fsync_dir(path.parent)


class LeaderEpochFileCache:
    """The entries in memory (two parallel sorted lists), written to `path` whenever they change.

    `latest_epoch` is a plain attribute so the log's append path pays one comparison when the epoch has not
    changed. Not thread-safe by itself: the log calls it under its own lock.
    """

    __slots__ = ("_epochs", "_starts", "dirty", "latest_epoch", "path")

    def __init__(self, path: Path, entries: Iterable[EpochEntry] = ()) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._starts: list[int] = []
        self.latest_epoch = UNDEFINED_EPOCH
        self.dirty = False  # changed by an append since the file was last written (see `assign`)
        for epoch, start in entries:  # through the monotonicity rules, as Kafka reads its checkpoint
            self._assign(epoch, start)

    @property
    def entries(self) -> list[EpochEntry]:
        return [EpochEntry(e, s) for e, s in zip(self._epochs, self._starts, strict=True)]

    def write(self) -> None:
        write_checkpoint(self.path, self.entries)
        self.dirty = False

    def take_pending(self) -> list[EpochEntry] | None:
        """The entries to write if an append changed them since the last write (the log's flush writes them,
        off the event loop), else None. Marks them written: a failed write calls `mark_dirty` again."""
        if not self.dirty:
            return None
        self.dirty = False
        return self.entries

    def mark_dirty(self) -> None:
        self.dirty = True

    # ------------------------------------------------------------------------------------------- assign

    def assign(self, epoch: int, start_offset: int, *, durable: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`, writing the file if that changed anything. An epoch
        once assigned keeps its start unless offered a smaller one; entries that would break monotonicity (an
        epoch as new or newer, or starting at or past `start_offset`) are dropped first, as in Kafka.

        `durable=False` (the append path) only marks the file out of date; the log's next flush writes it, as
        Kafka defers the checkpoint since KAFKA-15046: a write with two fsyncs on the first append of every
        partition stalled the event loop. Nothing is lost by waiting: the batches carry their epochs, and
        recovery rescans everything past the recovery point, which a flush moves only after this write."""
        changed = self._assign(epoch, start_offset)
        if changed:
            if durable:
                self.write()
            else:
                self.dirty = True
        return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid partition leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._starts[-1]:
            return False
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
            keep -= 1
        removed = self.entries[keep:]
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            # Entries starting where the new one starts held no data; dropping anything else is worth a word.
            log.warning("%s: new epoch entry (%d, %d) truncated conflicting entries %s",
                        self.path.parent.name, epoch, start_offset, removed)  # fmt: skip
        del self._epochs[keep:], self._starts[keep:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self.latest_epoch = epoch
        return True

    # -------------------------------------------------------------------------------------------- query

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch: the largest epoch at or below `requested_epoch` and
        the start offset of the first epoch above it, or the log end offset when `requested_epoch` is the
        latest. UNDEFINED (-1, -1) for an undefined epoch or one past every cached epoch; an epoch below every
        cached one answers with itself and the first cached start offset (its data is gone: the follower
        replicates from the leader's start)."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch whose leader wrote `offset`, None if it precedes every entry."""
        index = bisect_right(self._starts, offset) - 1
        return self._epochs[index] if index >= 0 else None

    # ----------------------------------------------------------------------------------------- truncate

    def truncate_from_end(self, end_offset: int) -> bool:
        """Forget epochs starting at or after `end_offset` (the log was truncated there). True if any went."""
        if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
            return False
        keep = bisect_left(self._starts, end_offset)
        del self._epochs[keep:], self._starts[keep:]
        self.latest_epoch = self._epochs[-1] if self._epochs else UNDEFINED_EPOCH
        self.write()
        return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at `start_offset`: the epoch holding it starts there and older ones go (an entry
        at exactly `start_offset` stays as it is). True if the entries changed."""
        first = bisect_right(self._starts, start_offset) - 1
        if first < 0 or (first == 0 and self._starts[0] == start_offset):
            return False
        del self._epochs[:first], self._starts[:first]
        self._starts[0] = start_offset
        self.write()
        return True

    def clear(self) -> None:
        """Forget every entry (the log was emptied and restarts at a new offset)."""
        if self._epochs:
            self._epochs.clear()
            self._starts.clear()
            self.latest_epoch = UNDEFINED_EPOCH
            self.write()
