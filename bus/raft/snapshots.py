"""KIP-630 snapshot files of the metadata log: `<20-digit end offset>-<10-digit epoch>.checkpoint`.

Kafka names a snapshot by the offset it ends at (exclusive) and the epoch of its last record, and keeps
it beside the log segments in `__cluster_metadata-0/`. The state machine's image is opaque bytes here, so
the file holds them behind a small header rather than Kafka's record batches:

    magic "KRSN" | version u16 | crc u32 | end offset i64 | epoch i32 | length u64 | data

The CRC-32C covers everything after itself, so a torn or bit-rotted file, or one renamed to another id,
is refused with a `SnapshotError` naming the file instead of being loaded (a node that trusted a bad
image would apply a different history than its peers).

Writing is atomic: the bytes go to `<name>.checkpoint.part`, are fsynced, renamed into place and the
directory fsynced, so a crash leaves either no snapshot or a whole one. Older snapshots are deleted only
once the new one is durable; a `.part` left by a crash is deleted when the store opens.
"""

from __future__ import annotations

import os
import re
import struct
from pathlib import Path

import crc32c

from bus.log import files
from bus.raft.log import OffsetAndEpoch, Snapshot

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
    """The snapshot files of one metadata log directory; `latest` is loaded (and verified) on open."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        for name in os.listdir(directory):
            if name.endswith(SUFFIX + PART):
                (directory / name).unlink()
        ids = sorted(i for name in os.listdir(directory) if (i := snapshot_id_of(name)) is not None)
        self.latest: Snapshot | None = None
        if ids:
            path = snapshot_path(directory, ids[-1])
            self.latest = decode(path, path.read_bytes())
            # Older ones survive only a crash between the newest's rename and their deletion.
            self._delete_all_but(ids[-1])

    def save(self, snapshot: Snapshot) -> None:
        """Make `snapshot` the durable latest, then delete the older ones."""
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
        self.latest = snapshot
        self._delete_all_but(snapshot.snapshot_id)

    def _delete_all_but(self, keep: OffsetAndEpoch) -> None:
        for name in os.listdir(self.directory):
            snapshot_id = snapshot_id_of(name)
            if snapshot_id is not None and snapshot_id != keep:
                (self.directory / name).unlink()
