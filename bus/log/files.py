"""File names and small durable files of a partition directory, following Kafka's layout.

`<base>.log`, `<base>.index` and `<base>.timeindex` are named by the segment's base offset padded to 20
digits, so a directory listing sorts by offset and Kafka's own tools can read our segments.
A cleaned segment is written as `.cleaned` and committed by renaming its log to `.swap` (see log.py).
"""

from __future__ import annotations

import os
from pathlib import Path

LOG = ".log"
INDEX = ".index"
TIME_INDEX = ".timeindex"
TXN_INDEX = ".txnindex"
CLEANED = ".cleaned"
SWAP = ".swap"

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOG_START_OFFSET = "log-start-offset"
RECOVERY_POINT = "recovery-point"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"


def segment_path(directory: Path, base_offset: int, kind: str, suffix: str = "") -> Path:
    return directory / f"{base_offset:020d}{kind}{suffix}"


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> tuple[Path, Path, Path]:
    """The log, offset index and time index files of one segment."""
    return (
        segment_path(directory, base_offset, LOG, suffix),
        segment_path(directory, base_offset, INDEX, suffix),
        segment_path(directory, base_offset, TIME_INDEX, suffix),
    )


def txn_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    """The aborted-transaction index, kept apart from segment_paths: it exists only once a segment has an abort."""
    return segment_path(directory, base_offset, TXN_INDEX, suffix)


def base_offset_of(name: str, kind: str, suffix: str = "") -> int | None:
    """The base offset a segment file name encodes, or None if it is not such a file."""
    tail = kind + suffix
    if not name.endswith(tail):
        return None
    stem = name[: -len(tail)]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def read_offset(path: Path) -> int | None:
    """A checkpointed offset, or None when absent or unreadable (callers fall back to a safe default)."""
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_offset(path: Path, offset: int) -> None:
    """Replace a checkpoint atomically: a crash leaves the old value or the new, never a torn one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(f"{offset}\n")
    os.replace(tmp, path)


def fsync_dir(directory: Path) -> None:
    """Make renames and new files in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks = []
    position = 0
    while position < size:
        chunk = os.pread(fd, size - position, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """os.write may write less than asked (signals, quotas); loop so one call appends everything."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
