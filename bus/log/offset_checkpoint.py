"""Per-partition offsets in one file: Kafka's OffsetCheckpointFile (`replication-offset-checkpoint`).

The broker writes every hosted partition's high watermark here every
`replica.high.watermark.checkpoint.interval.ms` and reads it at start-up, so a restarted follower (or a leader
that was one) does not expose records the ISR never acknowledged, and does not hide ones it had. Kafka's
format, so its tools read ours and ours read theirs: a version line `0`, a count line, then one
`topic partition offset` line per partition (topic names hold no spaces).

A write goes to `<name>.tmp`, is fsynced, renamed over the old file and the directory fsynced: a crash leaves
the old checkpoint or the new one, never a torn one. Reading refuses anything else with an error naming the
file and the line, as Kafka's CheckpointReadBuffer does; a missing or empty file holds no offsets (Kafka
creates the file empty when it first opens it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from bus.log import files
from bus.protocol.topic_partition import TopicPartition

VERSION = 0
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"


class CorruptOffsetCheckpointError(ValueError):
    """The checkpoint file is not in Kafka's format; the message names the file and the line."""


def read_offset_checkpoint(path: Path) -> dict[TopicPartition, int]:
    """The offsets the file at `path` holds; {} when it is missing or empty."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        lines = raw.decode("ascii").splitlines()
    except UnicodeDecodeError:
        raise CorruptOffsetCheckpointError(f"{path}: not a text file") from None
    if not lines:
        return {}
    version = _integer(path, lines, 1)
    if version != VERSION:
        raise CorruptOffsetCheckpointError(f"{path}, line 1: unrecognised version {version}")
    count = _integer(path, lines, 2)
    if len(lines) - 2 != count:
        raise CorruptOffsetCheckpointError(f"{path}: expected {count} entries but found {max(len(lines) - 2, 0)}")
    offsets: dict[TopicPartition, int] = {}
    for number, line in enumerate(lines[2:], start=3):
        parts = line.split(" ")
        try:
            if len(parts) != 3 or not parts[0]:
                raise ValueError
            tp = TopicPartition(parts[0], int(parts[1]))
            offset = int(parts[2])
        except ValueError:
            raise CorruptOffsetCheckpointError(f"{path}, line {number}: malformed entry {line!r}") from None
        if tp.partition < 0 or tp in offsets:
            raise CorruptOffsetCheckpointError(f"{path}, line {number}: invalid or repeated partition {line!r}")
        offsets[tp] = offset
    return offsets


def _integer(path: Path, lines: list[str], number: int) -> int:
    try:
        return int(lines[number - 1])
    except (IndexError, ValueError):
        found = repr(lines[number - 1]) if number <= len(lines) else "nothing"
        raise CorruptOffsetCheckpointError(f"{path}, line {number}: expected an integer, found {found}") from None


def write_offset_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    """Replace the file atomically and durably (blocking: the broker calls it from its flusher's thread)."""
    for tp in offsets:
        if not tp.topic or any(c.isspace() for c in tp.topic):
            raise ValueError(f"topic name {tp.topic!r} cannot be written to an offset checkpoint")
    body = "".join(f"{topic} {partition} {offset}\n" for (topic, partition), offset in offsets.items())
    data = f"{VERSION}\n{len(offsets)}\n{body}".encode("ascii")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        files.write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    files.fsync_dir(path.parent)
