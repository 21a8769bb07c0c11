"""The HBase layout of captures: tables, families and row keys (the ingest job writes, the console reads).

Row keys are deterministic functions of the record, so a replayed micro-batch rewrites the same
cells (families keep one version) and restarts never duplicate rows. Each key starts with a short
hash of its leading field, spreading writes over regions instead of hot-spotting the newest time,
and index keys carry a reversed timestamp so a prefix scan returns the newest captures first.

| table | row key | holds |
|---|---|---|
| ``vehicle`` / ``face`` | ``h4|record_id`` | one row per valid record: ``r:record`` (JSON) + scan columns |
| ``vehicle_by_plate`` | ``h4(plate)|plate|rev_ms|record_id`` | a plate's trajectory, newest first (+ ``i:v``) |
| ``capture_by_checkpoint`` | ``h4(checkpoint)|checkpoint|rev_ms|kind|record_id`` | captures at a checkpoint by time
  (vehicle rows + ``i:v``) |
| ``vehicle_by_district`` | ``h4(district)|district|rev_ms|record_id`` | a district's vehicles by time (``i:v`` only) |
| ``vehicle_by_brand`` | ``h4(brand)|brand|rev_ms|record_id`` | a brand's vehicles by time (``i:v`` only) |
| ``capture_unrecognized`` | ``h4|topic|record_id`` | records with ``UNRECOGNIZED`` fields, kept out of the above |

Every vehicle index row carries ``i:v``, one *covering* cell: the fields the multi-condition vehicle search
filters on (``VEHICLE_FIELDS``) as a JSON array, so a search filters index rows without reading the main row.
One cell rather than one per field because cells are what the write pays for (see ``SCAN_FIELDS``): a vehicle
now writes 5 rows and 15 cells where it wrote 3 rows and 11. The two new tables hold nothing else: the main
row's key is ``record_key(record_id)``, the capture time is in ``i:v``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..records import Kind, epoch_ms
from ..retention import with_ttl
from . import Families, ensure_tables, reversed_ms, salt

RECORD_FAMILY = "r"
INDEX_FAMILY = "i"

TABLES: dict[str, Families] = {
    Kind.VEHICLE.value: {RECORD_FAMILY: {"max_versions": 1}},
    Kind.FACE.value: {RECORD_FAMILY: {"max_versions": 1}},
    "vehicle_by_plate": {INDEX_FAMILY: {"max_versions": 1}},
    "capture_by_checkpoint": {INDEX_FAMILY: {"max_versions": 1}},
    "vehicle_by_district": {INDEX_FAMILY: {"max_versions": 1}},
    "vehicle_by_brand": {INDEX_FAMILY: {"max_versions": 1}},
    "capture_unrecognized": {RECORD_FAMILY: {"max_versions": 1}},
}

Cells = dict[bytes, bytes]
Put = tuple[str, bytes, Cells]
"""(table, row key, cells) of one row written."""


def record_key(record_id: str) -> bytes:
    return f"{salt(record_id)}|{record_id}".encode()


def plate_prefix(plate: str) -> bytes:
    """Scan prefix of one plate's trajectory (newest first)."""
    return f"{salt(plate)}|{plate}|".encode()


def checkpoint_prefix(checkpoint_id: str) -> bytes:
    """Scan prefix of one checkpoint's captures (newest first); append ``reversed_ms(t)`` to bound by time."""
    return f"{salt(checkpoint_id)}|{checkpoint_id}|".encode()


def district_of(checkpoint_id: str) -> str:
    """The district code a checkpoint id starts with (``district#crossroad#direction#index``)."""
    return checkpoint_id.split("#", 1)[0]


def direction_of(checkpoint_id: str) -> str:
    """The direction field of a checkpoint id (``district#crossroad#direction#index``)."""
    return checkpoint_id.split("#")[2]


def district_prefix(district: str) -> bytes:
    """Scan prefix of one district's vehicle captures (newest first)."""
    return f"{salt(district)}|{district}|".encode()


def brand_prefix(brand: str) -> bytes:
    """Scan prefix of one brand's vehicle captures (newest first)."""
    return f"{salt(brand)}|{brand}|".encode()


VEHICLE_COLUMN = f"{INDEX_FAMILY}:v".encode()
VEHICLE_FIELDS = ("capture_time", "checkpoint_id", "plate_number", "plate_color", "vehicle_color", "vehicle_type",
                  "vehicle_brand", "lane")
"""What the covering cell ``i:v`` holds, in this order."""


def vehicle_cell(record: Mapping[str, Any]) -> bytes:
    return json.dumps([record[name] for name in VEHICLE_FIELDS], ensure_ascii=False, separators=(",", ":")).encode()


def read_vehicle_cell(value: bytes) -> dict[str, Any]:
    """The covering cell back as field -> value (``VEHICLE_FIELDS``)."""
    return dict(zip(VEHICLE_FIELDS, json.loads(value), strict=True))


RECORD_COLUMN = f"{RECORD_FAMILY}:record".encode()
"""The whole record as JSON (as validated, plus ``ingest_time``): what a reader of one row wants."""
SCAN_FIELDS = ("capture_time", "ingest_time", "checkpoint_id", "device_ip", "plate_number")
"""Fields also kept as their own columns, for scans and filters that should not parse JSON.

Fewer cells is what makes the write fast (each cell is a separate KeyValue in HBase and a row in
the embedded gateway's store): 6 cells instead of 20 per vehicle row roughly tripled ingest speed.
"""


def record_id_of(row_key: bytes) -> str:
    """The record id at the end of a main-table or ``capture_unrecognized`` row key."""
    return row_key.rsplit(b"|", 1)[1].decode()


def record_cells(record: Mapping[str, Any]) -> Cells:
    cells = {RECORD_COLUMN: json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()}
    for name in SCAN_FIELDS:
        value = record.get(name)
        if isinstance(value, str):
            cells[f"{RECORD_FAMILY}:{name}".encode()] = value.encode()
    return cells


def rows_for_valid(kind: Kind, record: Mapping[str, Any], ingest_time: str) -> list[Put]:
    """The main row and its index rows for a valid record (a vehicle's carry the covering cell ``i:v``)."""
    record_id = record["record_id"]
    main_key = record_key(record_id)
    capture_time = record["capture_time"]
    rev = reversed_ms(epoch_ms(capture_time))
    checkpoint = record["checkpoint_id"]
    at_checkpoint: Cells = {b"i:row": main_key, b"i:capture_time": capture_time.encode()}
    puts: list[Put] = [
        (kind.value, main_key, record_cells({**record, "ingest_time": ingest_time})),
        ("capture_by_checkpoint", checkpoint_prefix(checkpoint) + f"{rev}|{kind.value}|{record_id}".encode(),
         at_checkpoint),
    ]
    if kind is Kind.VEHICLE:
        covering = vehicle_cell(record)
        at_checkpoint[VEHICLE_COLUMN] = covering
        suffix = f"{rev}|{record_id}".encode()
        puts += [
            ("vehicle_by_plate", plate_prefix(record["plate_number"]) + suffix,
             {b"i:row": main_key, b"i:capture_time": capture_time.encode(), b"i:checkpoint_id": checkpoint.encode(),
              VEHICLE_COLUMN: covering}),
            ("vehicle_by_district", district_prefix(district_of(checkpoint)) + suffix, {VEHICLE_COLUMN: covering}),
            ("vehicle_by_brand", brand_prefix(record["vehicle_brand"]) + suffix, {VEHICLE_COLUMN: covering}),
        ]
    return puts


def row_for_unrecognized(topic: str, record: Mapping[str, Any], fields: tuple[str, ...], ingest_time: str) -> Put:
    record_id = str(record["record_id"])
    cells = record_cells({**record, "ingest_time": ingest_time})
    cells[b"r:unrecognized_fields"] = ",".join(fields).encode()
    cells[b"r:topic"] = topic.encode()
    return "capture_unrecognized", f"{salt(record_id)}|{topic}|{record_id}".encode(), cells


def read_record(cells: Mapping[bytes, bytes]) -> dict[str, Any]:
    """A main-table row back as the record dict (the console's read path)."""
    return json.loads(cells[RECORD_COLUMN])


def ensure_capture_tables(connection: Any, ttl_s: int) -> None:
    """Create the capture tables that are missing, their cells kept ``ttl_s`` (``[retention] captures_days``);
    existing ones are kept as they are."""
    ensure_tables(connection, with_ttl(TABLES, ttl_s))
