"""An append-only, checksummed metadata log (`__cluster_metadata-0/metadata.log`).

Each record is one line: CRC-32C (hex) of the JSON text, a space, the JSON text. Metadata changes
are rare and must never be lost, so every append is fsynced before the change is acknowledged;
a torn final line (crash mid-write) is detected by its checksum and truncated on replay.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import crc32c

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

    @property
    def records(self) -> list[dict[str, Any]]:
        return self._records

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
        batch = list(records)
        if not batch:
            return
        os.write(self._fd, b"".join(_encode(r) for r in batch))
        os.fsync(self._fd)
        self._records.extend(batch)

    def close(self) -> None:
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
