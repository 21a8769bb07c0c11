"""Capture search: a plate's trajectory, a checkpoint's captures in a time range, one record's detail.

Both searches (each optionally bounded in time) read an index table (``vehicle_by_plate``,
``capture_by_checkpoint``; layouts in :mod:`contracts.tables.captures`) whose keys sort newest
first, then fetch the page's main rows in one ``rows()`` call per kind table. A page scans at
most ``limit + 1`` index rows (the extra one says whether there is a next page), starting just
after the cursor, so a plate with 10,000 captures costs the same per page as a plate with ten.

The cursor is the last index row key of the page, URL-safe base64 without padding: opaque to the
client, and a search checks that a cursor falls inside its own key range (a cursor from another
search is refused, never silently answered with someone else's rows).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import happybase
from thriftpy2.thrift import TException

from contracts.records import Kind, epoch_ms
from contracts.tables import MAX_MS, reversed_ms
from contracts.tables import captures as layout

from .errors import Invalid, NotFound

PLATE_INDEX = "vehicle_by_plate"
CHECKPOINT_INDEX = "capture_by_checkpoint"
MAX_LIMIT = 500

Locate = Callable[[str], dict[str, Any] | None]
"""checkpoint id -> its location on the map (or None)."""


@dataclass(frozen=True)
class Page:
    items: list[dict[str, Any]]
    next: str | None


def encode_cursor(row_key: bytes) -> str:
    return base64.urlsafe_b64encode(row_key).rstrip(b"=").decode()


def decode_cursor(text: str) -> bytes:
    """The row key inside a cursor; ValueError when it is not one of ours."""
    if not text or len(text) > 1024:
        raise ValueError("not a cursor")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not a cursor") from None


def _prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with ``prefix`` (prefixes here end in ``|``, never 0xff)."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def is_missing_table(exc: TException) -> bool:
    """HBase (and the gateway) answer a read of a table nobody created with an IOError naming the exception."""
    return "TableNotFoundException" in str(getattr(exc, "message", None) or exc)


def _scan(conn: happybase.Connection, table: str, start: bytes, stop: bytes, limit: int,
          cursor: bytes | None) -> tuple[list[tuple[bytes, dict[bytes, bytes]]], bytes | None]:
    """One page of index rows in [start, stop) after ``cursor``, and the next page's cursor key."""
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid("limit", f"limit must be between 1 and {MAX_LIMIT}")
    if cursor is not None:
        if not start <= cursor < stop:
            raise Invalid("cursor", "this cursor belongs to another search")
        start = cursor + b"\0"
    try:
        rows = list(conn.table(table).scan(row_start=start, row_stop=stop, limit=limit + 1, batch_size=limit + 1))
    except TException as exc:
        if is_missing_table(exc):
            return [], None  # nothing ingested yet
        raise
    if len(rows) > limit:
        rows = rows[:limit]
        return rows, rows[-1][0]
    return rows, None


def main_rows(conn: happybase.Connection, wanted: dict[Kind, list[bytes]]) -> dict[bytes, dict[str, Any]]:
    """Main-table records by row key: one ``rows()`` call per kind present on the page."""
    found: dict[bytes, dict[str, Any]] = {}
    for kind, keys in wanted.items():
        if not keys:
            continue
        try:
            rows = conn.table(kind.value).rows(keys, columns=[layout.RECORD_COLUMN])
        except TException as exc:
            if is_missing_table(exc):
                continue
            raise
        found.update((key, layout.read_record(cells)) for key, cells in rows)
    return found


def capture_item(kind: Kind, record_id: str, index: dict[bytes, bytes], record: dict[str, Any] | None,
          checkpoint_id: str | None, locate: Locate) -> dict[str, Any]:
    """A search hit; built from the index row too, so a row whose main row is not written yet still shows."""
    record = record or {}
    checkpoint = record.get("checkpoint_id") or checkpoint_id or index.get(b"i:checkpoint_id", b"").decode() or None
    return {
        "record_id": record_id,
        "kind": kind.value,
        "capture_time": record.get("capture_time") or index[b"i:capture_time"].decode(),
        "checkpoint_id": checkpoint,
        "plate_number": record.get("plate_number") if kind is Kind.VEHICLE else None,
        "device_ip": record.get("device_ip"),
        "ingest_time": record.get("ingest_time"),
        "location": locate(checkpoint) if checkpoint else None,
    }


def time_bounds(prefix: bytes, start_ms: int | None, end_ms: int | None) -> tuple[bytes, bytes]:
    """Row-key range under an index prefix of captures with ``start_ms <= capture time < end_ms``.

    Index keys continue the prefix with the reversed capture time, so the newest sorts first and
    the range's first key comes from ``end``.
    """
    for name, value, lowest in (("start", start_ms, 0), ("end", end_ms, 1)):
        if value is not None and not lowest <= value <= MAX_MS:
            raise Invalid(name, f"{name} is outside the times a row key can hold (1970 to 2286)")
    if start_ms is not None and end_ms is not None and end_ms <= start_ms:
        raise Invalid("end", "end must be after start")
    first = prefix if end_ms is None else prefix + reversed_ms(end_ms - 1).encode()
    stop = _prefix_end(prefix) if not start_ms else prefix + reversed_ms(start_ms - 1).encode()
    return first, stop


def plate_trajectory(conn: happybase.Connection, plate: str, start_ms: int | None, end_ms: int | None,
                     limit: int, cursor: bytes | None, locate: Locate) -> Page:
    """A plate's captures in [start, end) (either end open), newest first, from ``vehicle_by_plate``."""
    first, stop = time_bounds(layout.plate_prefix(plate), start_ms, end_ms)
    rows, last = _scan(conn, PLATE_INDEX, first, stop, limit, cursor)
    records = main_rows(conn, {Kind.VEHICLE: [cells[b"i:row"] for _, cells in rows]})
    items = [capture_item(Kind.VEHICLE, layout.record_id_of(key), cells, records.get(cells[b"i:row"]), None, locate)
             for key, cells in rows]
    return Page(items, encode_cursor(last) if last is not None else None)


def checkpoint_captures(conn: happybase.Connection, checkpoint_id: str, start_ms: int | None, end_ms: int | None,
                        limit: int, cursor: bytes | None, locate: Locate) -> Page:
    """Vehicle and face captures at a checkpoint in [start, end), newest first, from ``capture_by_checkpoint``."""
    first, stop = time_bounds(layout.checkpoint_prefix(checkpoint_id), start_ms, end_ms)
    rows, last = _scan(conn, CHECKPOINT_INDEX, first, stop, limit, cursor)
    kinds = [Kind(key.rsplit(b"|", 2)[1].decode()) for key, _ in rows]
    wanted: dict[Kind, list[bytes]] = {kind: [] for kind in Kind}
    for kind, (_, cells) in zip(kinds, rows, strict=True):
        wanted[kind].append(cells[b"i:row"])
    records = main_rows(conn, wanted)
    items = [capture_item(kind, layout.record_id_of(key), cells, records.get(cells[b"i:row"]), checkpoint_id, locate)
             for kind, (key, cells) in zip(kinds, rows, strict=True)]
    return Page(items, encode_cursor(last) if last is not None else None)


def capture_detail(conn: happybase.Connection, kind: Kind, record_id: str, locate: Locate) -> dict[str, Any]:
    """The whole record as stored, its kind, ingest latency (ingest_time - capture_time) and location."""
    try:
        row = conn.table(kind.value).row(layout.record_key(record_id), columns=[layout.RECORD_COLUMN])
    except TException as exc:
        if not is_missing_table(exc):
            raise
        row = {}
    if not row:
        raise NotFound("capture", f"{kind.value}/{record_id}")
    record = layout.read_record(row)
    latency = None
    if record.get("ingest_time") and record.get("capture_time"):
        latency = epoch_ms(record["ingest_time"]) - epoch_ms(record["capture_time"])
    return {**record, "kind": kind.value, "latency_ms": latency, "location": locate(record["checkpoint_id"])}
