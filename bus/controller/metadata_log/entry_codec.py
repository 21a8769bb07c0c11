"""How metadata records are encoded in the quorum's log: one entry (and one snapshot) is a JSON array of records.

An entry holds one operation's records; a snapshot holds the records that recreate the whole image. Both are the
same array, so a snapshot of a big image can be encoded a record at a time (`encode_record`, `join_encoded`) and
still read back with `decode_entry`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from bus.controller.image import MetadataRecord


def encode_record(record: MetadataRecord) -> bytes:
    return json.dumps(record, separators=(",", ":"), sort_keys=True).encode()


def join_encoded(parts: Iterable[bytes]) -> bytes:
    """The JSON array of records already encoded with `encode_record`."""
    return b"[" + b",".join(parts) + b"]"


def encode_entry(records: Iterable[MetadataRecord]) -> bytes:
    return join_encoded(map(encode_record, records))


def decode_entry(data: bytes) -> list[MetadataRecord]:
    records = json.loads(data)
    if not isinstance(records, list) or not all(isinstance(r, dict) and "type" in r for r in records):
        raise ValueError(f"metadata log entry is not a list of records: {data[:200]!r}")
    return records
