"""The metadata a cluster starts with (Kafka's bootstrap metadata, `bootstrap.checkpoint`).

`bus storage format --add-scram ...` writes the records (SCRAM credentials) to `bootstrap.json` in the metadata
dir before the node first starts; the controller commits them with the cluster id, once, when it starts the
cluster's metadata log (`QuorumController`'s `bootstrap_records`), so the first users can log in from the first start
on. Kafka's file is a binary snapshot; ours holds the records as the metadata log does, a JSON array.
"""

from __future__ import annotations

import os
from pathlib import Path

from bus.config.definitions import ConfigError
from bus.controller.image import MetadataRecord
from bus.controller.metadata_log.entry_codec import decode_entry, encode_entry

BOOTSTRAP_FILE = "bootstrap.json"


def write_bootstrap(directory: Path, records: list[MetadataRecord]) -> Path:
    """Write the records durably (a reader sees the old file or the whole new one)."""
    path = directory / BOOTSTRAP_FILE
    partial = path.with_name(path.name + ".tmp")
    with open(partial, "wb") as file:
        file.write(encode_entry(records))
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)
    return path


def read_bootstrap(directory: Path) -> list[MetadataRecord]:
    """The bootstrap records of a formatted metadata dir; none if it was not formatted with any."""
    path = directory / BOOTSTRAP_FILE
    try:
        return decode_entry(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: cannot read the bootstrap metadata ({exc})") from None
