"""KIP-630 snapshot files of the metadata log: `<20-digit end offset>-<10-digit epoch>.checkpoint`.

Kafka names a snapshot by the offset it ends at (exclusive) and the epoch of its last record, and keeps
it beside the log segments in `__cluster_metadata-0/`. The state machine's image is opaque bytes here, so
the file holds them behind a small header rather than Kafka's record batches:

    magic "KRSN" | version u16 | crc u32 | end offset i64 | epoch i32 | length u64 | data

The CRC-32C covers everything after itself, so a torn or bit-rotted file, or one renamed to another id,
is refused with a `SnapshotError` naming the file instead of being loaded (a node that trusted a bad
image would apply a different history than its peers).

Writing is atomic: the bytes go to `<name>.checkpoint.part`, are fsynced, renamed into place and the
directory fsynced, so a crash leaves either no snapshot or a whole one; a `.part` left by a crash is
deleted when the store opens. Several snapshots may be kept (the metadata log keeps its entries after a
snapshot and deletes old snapshots only by retention, see `bus.raft.file_raft_log`); only the latest is read
into memory, the older ones are known by id, size and age.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import crc32c

from bus.log import files
from bus.raft.replicated_log import OffsetAndEpoch, Snapshot

SUFFIX = ".checkpoint"
PART = ".part"
MAGIC = b"KRSN"
VERSION = 0
_HEAD = struct.Struct(">4sHI")  # magic, version, crc
_BODY = struct.Struct(">qiQ")  # end offset, epoch, data length: the start of what the CRC covers
_NAME = re.compile(r"(\d{20})-(\d{10})" + re.escape(SUFFIX))


class SnapshotError(Exception):
    """A snapshot file that cannot be trusted (torn, corrupt, or not what its name says)."""


def snapshot_path(directory: Path, snapshot_id: OffsetAndEpoch) -> Path:
    return directory / f"{snapshot_id.offset:020d}-{snapshot_id.epoch:010d}{SUFFIX}"


def snapshot_id_of(name: str) -> OffsetAndEpoch | None:
    """The id a snapshot file name encodes, or None if `name` is not a snapshot file."""
    match = _NAME.fullmatch(name)
    return OffsetAndEpoch(epoch=int(match[2]), offset=int(match[1])) if match else None


def encode(snapshot: Snapshot) -> bytes:
    snapshot_id = snapshot.snapshot_id
    body = _BODY.pack(snapshot_id.offset, snapshot_id.epoch, len(snapshot.data)) + snapshot.data
    return _HEAD.pack(MAGIC, VERSION, crc32c.crc32c(body)) + body


def decode(path: Path, raw: bytes) -> Snapshot:
    """The snapshot in `raw` (the content of `path`), checked against its CRC and its file name."""
    if len(raw) < _HEAD.size + _BODY.size:
        raise SnapshotError(f"snapshot {path} is truncated ({len(raw)} bytes, less than its header)")
    magic, version, crc = _HEAD.unpack_from(raw)
    if magic != MAGIC:
        raise SnapshotError(f"{path} is not a metadata snapshot (magic {magic!r})")
    if version != VERSION:
        raise SnapshotError(f"snapshot {path} has unsupported version {version}")
    if crc32c.crc32c(memoryview(raw)[_HEAD.size :]) != crc:
        raise SnapshotError(f"snapshot {path} is corrupt (CRC-32C mismatch); refusing to load it")
    end_offset, epoch, length = _BODY.unpack_from(raw, _HEAD.size)
    data = raw[_HEAD.size + _BODY.size :]
    if len(data) != length:
        raise SnapshotError(f"snapshot {path} holds {len(data)} bytes of data, its header says {length}")
    snapshot_id = OffsetAndEpoch(epoch=epoch, offset=end_offset)
    if snapshot_id_of(path.name) != snapshot_id:
        raise SnapshotError(f"snapshot {path} holds snapshot {snapshot_id}, not the one its name says")
    return Snapshot(snapshot_id, data)


class SnapshotStore:
    """The snapshot files of one metadata log directory, oldest first; `latest` is loaded (and verified) on
    open. Which of them to keep is the log's business (`delete_before`)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        for name in os.listdir(directory):
            if name.endswith(SUFFIX + PART):
                (directory / name).unlink()
        self.ids = sorted(i for name in os.listdir(directory) if (i := snapshot_id_of(name)) is not None)
        self.latest: Snapshot | None = None
        if self.ids:
            path = snapshot_path(directory, self.ids[-1])
            self.latest = decode(path, path.read_bytes())

    def save(self, snapshot: Snapshot) -> None:
        """Make `snapshot` the durable latest (the older ones stay)."""
        path = snapshot_path(self.directory, snapshot.snapshot_id)
        part = path.with_name(path.name + PART)
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            files.write_all(fd, encode(snapshot))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, path)
        files.fsync_dir(self.directory)
        self.ids = sorted({*self.ids, snapshot.snapshot_id})
        self.latest = snapshot

    def size_bytes(self, snapshot_id: OffsetAndEpoch) -> int:
        return snapshot_path(self.directory, snapshot_id).stat().st_size

    def created_ms(self, snapshot_id: OffsetAndEpoch) -> int:
        """When the snapshot was written (its file's mtime): its age for metadata.max.retention.ms."""
        return snapshot_path(self.directory, snapshot_id).stat().st_mtime_ns // 1_000_000

    def delete_before(self, offset: int) -> None:
        """Delete every snapshot that ends below `offset` (the log no longer starts below it)."""
        self._delete([i for i in self.ids if i.offset < offset])

    def delete_all_but(self, keep: OffsetAndEpoch) -> None:
        """Delete every snapshot but `keep` (one installed from the leader replaces the whole history)."""
        self._delete([i for i in self.ids if i != keep])

    def _delete(self, doomed: list[OffsetAndEpoch]) -> None:
        """Not fsynced: a file that comes back after a crash is deleted again when the log opens."""
        for snapshot_id in doomed:
            snapshot_path(self.directory, snapshot_id).unlink(missing_ok=True)
            self.ids.remove(snapshot_id)
