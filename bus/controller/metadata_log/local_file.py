"""An append-only, checksummed metadata log (`__cluster_metadata-0/metadata.log`).

Each record is one line: CRC-32C (hex) of the JSON text, a space, the JSON text. Metadata changes
are rare and must never be lost, so every append is fsynced before the change is acknowledged;
a torn final line (crash mid-write) is detected by its checksum and truncated on replay.

The write happens at once (a killed process loses nothing written); the fsync, which can take long on
a busy disk, runs in a worker thread when an event loop is running. A request that appended records
awaits `sync()` before its response goes out (KafkaApis does this for every request that moved
`written`), so "acknowledged" still means "fsynced". Concurrent requests share one fsync.

It is the `MetadataRecordLog` of a node without a quorum: written means committed (there is nobody to agree
with), so every append is handed to the controller's commit handler at once and the controller is always active.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import crc32c

from bus.controller.metadata_log.record_log import MetadataStateMachine
from bus.log.files import write_all

log = logging.getLogger(__name__)

METADATA_PARTITION_DIR = "__cluster_metadata-0"
_FILE = "metadata.log"


class MetadataLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory / METADATA_PARTITION_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / _FILE
        self._records = list(self._replay())
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.written = 0  # appends so far (this process); `synced` trails it until the fsync returns
        self.synced = 0
        self._syncing: asyncio.Future[None] | None = None
        self._machine: MetadataStateMachine | None = None

    @property
    def records(self) -> list[dict[str, Any]]:
        return self._records

    @property
    def active(self) -> bool:
        return True

    def open(self, machine: MetadataStateMachine) -> None:
        """Replay what is stored into `machine`; later appends go to it as they are written (this log keeps every
        record and takes no snapshots)."""
        self._machine = machine
        if self._records:
            machine.apply_committed(list(self._records))

    def _replay(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        good = 0
        for line in data.splitlines(keepends=True):
            record = _decode(line)
            if record is None:
                log.warning("metadata log %s: dropping torn or corrupt tail at byte %d", self.path, good)
                with open(self.path, "r+b") as f:
                    f.truncate(good)
                return
            good += len(line)
            yield record

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Write `records`; fsynced here without an event loop, else in a worker thread (await `sync`)."""
        batch = list(records)
        if not batch:
            return
        write_all(self._fd, b"".join(_encode(r) for r in batch))
        self._records.extend(batch)
        self.written += 1
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            os.fsync(self._fd)
            self.synced = self.written
        else:
            self._start_sync()
        if self._machine is not None:
            self._machine.apply_committed(batch)

    def _start_sync(self) -> None:
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.ensure_future(self._sync_once())

    async def _sync_once(self) -> None:
        target = self.written
        await asyncio.to_thread(os.fsync, self._fd)
        self.synced = max(self.synced, target)

    async def sync(self) -> None:
        """Return once everything appended so far is fsynced (an fsync error propagates to the caller)."""
        target = self.written
        while self.synced < target:
            self._start_sync()
            assert self._syncing is not None
            await asyncio.shield(self._syncing)

    def close(self) -> None:
        os.fsync(self._fd)
        os.close(self._fd)


def _encode(record: dict[str, Any]) -> bytes:
    text = json.dumps(record, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (crc32c.crc32c(text), text)


def _decode(line: bytes) -> dict[str, Any] | None:
    if not line.endswith(b"\n") or len(line) < 10 or line[8:9] != b" ":
        return None
    text = line[9:-1]
    try:
        if int(line[:8], 16) != crc32c.crc32c(text):
            return None
        return json.loads(text)
    except ValueError:
        return None
