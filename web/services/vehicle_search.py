"""Multi-condition vehicle search: a time range plus any of district, checkpoint, lane, plate (exact or a pattern),
plate/vehicle colour, vehicle type, brand and direction, newest first, from index tables, never the main table.

Which index answers (:func:`plan`; layouts in :mod:`contracts.tables.captures`), the most selective first:

| conditions given | index scanned | why |
|---|---|---|
| an exact ``plate`` | ``vehicle_by_plate``, that plate's prefix | one car: a handful of rows per day |
| ``checkpoint`` (no exact plate) | ``capture_by_checkpoint``, its prefix, vehicle rows | one camera's traffic |
| ``brand`` (neither of the above) | ``vehicle_by_brand`` | a brand is ~1/13 of the traffic, a district ~1/6 |
| ``district`` (none of the above) | ``vehicle_by_district`` | the district's traffic only |
| colours, type, lane, direction or a plate pattern only | every map district's ``vehicle_by_district``, merged | no
  time-only table to write: the district tables already partition every vehicle by time |

Every scan is bounded by the time range (at most ``[console] vehicle_search_max_days``), and the other conditions
are checked on the covering cell ``i:v`` each index row carries, in this process: an HBase filter
(``SingleColumnValueFilter``) would return only matches, but then the server's work per request is unbounded (a
rare colour over a month reads the whole month before a page fills) and the client cannot tell where it stopped.
Here a request reads at most ``SCAN_BUDGET`` index rows: a page may then hold fewer than ``limit`` items with a
``next`` cursor, which resumes exactly after the last row read (the UI's "more" keeps going). Only the page's
items are then read from the main table, by key (``rows()``), for their device and ingest time.

Streams of a merge are ordered by the same key suffix ``rev_ms|record_id`` (``rev_ms|kind|record_id`` at a
checkpoint), so the cursor is that one suffix (the last row read, across streams): each stream resumes just after
it. It is bound to its search by a digest of the conditions: a cursor from another search is refused.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import happybase
from happybase.table import TScan  # happybase's own Thrift type: the scan is driven through ``connection.client``
from thriftpy2.thrift import TException

from contracts.records import Kind
from contracts.tables import captures as layout
from contracts.tables import reversed_ms

from .captures import Locate, Page, capture_item, decode_cursor, encode_cursor, is_missing_table, main_rows
from .deployment import Loaded
from .errors import Invalid

SCAN_BUDGET = 4000
"""Index rows one request reads at most (~4 MB of covering cells); then it answers what it found, with a cursor."""
BATCH = 500
"""Index rows fetched per round trip from each stream."""
_PLATE_CHARS = r"[\u4e00-\u9fffA-Z0-9]"
_PATTERN = re.compile(rf"(?:{_PLATE_CHARS}|[*?]){{1,16}}")
_SUFFIX = re.compile(rb"\d{13}\|")


def is_pattern(plate: str) -> bool:
    return "*" in plate or "?" in plate


def check_pattern(pattern: str) -> re.Pattern[str]:
    """A plate pattern (``*`` any run, ``?`` one character) as a regex; ValueError when it has a character no
    plate has, or narrows nothing (only wildcards: every plate matches, so it would be a scan of all traffic)."""
    if not _PATTERN.fullmatch(pattern):
        raise ValueError("a plate pattern has plate characters (province, A-Z, 0-9) and * or ? only, at most 16")
    if not pattern.strip("*?"):
        raise ValueError("this pattern matches every plate: give at least one plate character")
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern))


@dataclass(frozen=True)
class VehicleQuery:
    """One search's conditions (already checked against the map); times in epoch ms, ``[start, end)``."""

    start_ms: int
    end_ms: int
    district: str | None = None
    checkpoint: str | None = None
    lane: int | None = None
    plate: str | None = None
    """An exact plate or a pattern (``is_pattern``)."""
    plate_color: str | None = None
    vehicle_color: str | None = None
    vehicle_type: str | None = None
    brand: str | None = None
    direction: str | None = None

    @property
    def exact_plate(self) -> str | None:
        return self.plate if self.plate is not None and not is_pattern(self.plate) else None

    def digest(self) -> bytes:
        """What binds a cursor to this search: 8 hex digits of a hash of every condition."""
        text = json.dumps(asdict(self), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:8].encode()

    def matcher(self) -> Callable[[dict[str, Any]], bool]:
        """A predicate on a covering cell (field -> value): every condition the index key does not already hold."""
        wanted = {name: value for name, value in (
            ("checkpoint_id", self.checkpoint), ("lane", self.lane), ("plate_number", self.exact_plate),
            ("plate_color", self.plate_color), ("vehicle_color", self.vehicle_color),
            ("vehicle_type", self.vehicle_type), ("vehicle_brand", self.brand)) if value is not None}
        pattern = check_pattern(self.plate) if self.plate is not None and is_pattern(self.plate) else None
        district, direction = self.district, self.direction

        def matches(cell: dict[str, Any]) -> bool:
            if any(cell[name] != value for name, value in wanted.items()):
                return False
            checkpoint = cell["checkpoint_id"]
            if district is not None and layout.district_of(checkpoint) != district:
                return False
            if direction is not None and layout.direction_of(checkpoint) != direction:
                return False
            return pattern is None or pattern.fullmatch(cell["plate_number"]) is not None

        return matches


def check_places(loaded: Loaded, query: VehicleQuery) -> list[str]:
    """Invalid naming the field unless the query's places exist on the deployment map: a district or checkpoint
    it does not have, a lane its checkpoint (or, without one, every checkpoint) does not have, a direction no
    checkpoint faces. Returns the map's districts (the merge's streams)."""
    checkpoints = loaded.checkpoints
    districts = sorted(set(loaded.districts) | {c.district for c in checkpoints.values()})
    if query.district is not None and query.district not in districts:
        raise Invalid("district", f"no district {query.district} on the deployment map")
    checkpoint = checkpoints.get(query.checkpoint) if query.checkpoint is not None else None
    if query.checkpoint is not None:
        if checkpoint is None:
            raise Invalid("checkpoint", f"no checkpoint {query.checkpoint} on the deployment map")
        if query.district is not None and checkpoint.district != query.district:
            raise Invalid("checkpoint", f"checkpoint {query.checkpoint} is not in district {query.district}")
    if query.lane is not None:
        lanes = checkpoint.lanes if checkpoint is not None else max((c.lanes for c in checkpoints.values()), default=0)
        if not 1 <= query.lane <= lanes:
            where = f"checkpoint {query.checkpoint}" if checkpoint is not None else "any checkpoint"
            raise Invalid("lane", f"{where} has lanes 1 to {lanes}, not {query.lane}")
    if query.direction is not None:
        directions = {layout.direction_of(c) for c in checkpoints}
        if query.direction not in directions:
            raise Invalid("direction", f"no checkpoint faces direction {query.direction} (the map has "
                                       f"{', '.join(sorted(directions)) or 'none'})")
        if query.checkpoint is not None and layout.direction_of(query.checkpoint) != query.direction:
            raise Invalid("direction", f"checkpoint {query.checkpoint} does not face direction {query.direction}")
    return districts


@dataclass(frozen=True)
class Plan:
    """The index table a search scans and the key prefixes of its streams (merged newest first)."""

    table: str
    prefixes: tuple[bytes, ...]


def plan(query: VehicleQuery, districts: list[str]) -> Plan:
    """The index that answers ``query`` (the module's table); ``districts``: the map's, for the merge."""
    if query.exact_plate is not None:
        return Plan("vehicle_by_plate", (layout.plate_prefix(query.exact_plate),))
    if query.checkpoint is not None:
        return Plan("capture_by_checkpoint", (layout.checkpoint_prefix(query.checkpoint),))
    if query.brand is not None:
        return Plan("vehicle_by_brand", (layout.brand_prefix(query.brand),))
    chosen = [query.district] if query.district is not None else sorted(districts)
    return Plan("vehicle_by_district", tuple(layout.district_prefix(d) for d in chosen))


def _suffix_bounds(query: VehicleQuery) -> tuple[bytes, bytes]:
    """The key-suffix range of the time range: ``[first, stop)`` (suffixes start with the reversed time)."""
    return reversed_ms(query.end_ms - 1).encode(), reversed_ms(query.start_ms - 1).encode()


def cursor_position(query: VehicleQuery, cursor: str | None) -> bytes | None:
    """The key suffix a cursor resumes after; Invalid("cursor") unless it is one of this search's."""
    if cursor is None:
        return None
    try:
        digest, _, position = decode_cursor(cursor).partition(b"|")
    except ValueError:
        raise Invalid("cursor", "not a cursor") from None
    first, stop = _suffix_bounds(query)
    if digest != query.digest() or not _SUFFIX.match(position) or not first <= position < stop:
        raise Invalid("cursor", "this cursor belongs to another search")
    return position


def _stream(conn: happybase.Connection, table: str, prefix: bytes, start: bytes, stop: bytes, first_batch: int,
            opened: list[int]) -> Iterator[tuple[bytes, bytes, bytes | None]]:
    """(suffix, row key, covering cell) of one prefix's rows in ``[start, stop)``, lazily.

    Batches start at ``first_batch`` and double up to ``BATCH``: a broad query takes its page from the first batch
    of each stream (happybase's fixed batch would fetch ``BATCH`` rows from every stream of a merge), a narrow one
    reaches full batches within a few round trips. A row without the cell (a face at a checkpoint, a vehicle row
    written before covering cells) comes out too, with None: it was read, so it counts against the budget."""
    client = conn.client
    scan = TScan(startRow=prefix + start, stopRow=prefix + stop, columns=[layout.VEHICLE_COLUMN], caching=BATCH)
    scanner = client.scannerOpenWithScan(conn.table(table).name, scan, {})
    opened.append(scanner)
    batch, read = first_batch, 0
    while read <= SCAN_BUDGET:
        rows = client.scannerGetList(scanner, min(batch, SCAN_BUDGET + 1 - read))
        for row in rows:
            cell = row.columns.get(layout.VEHICLE_COLUMN)
            yield row.row[len(prefix):], row.row, cell.value if cell is not None else None
        if len(rows) < min(batch, SCAN_BUDGET + 1 - read):
            return  # the range is exhausted
        read += len(rows)
        batch = min(2 * batch, BATCH)


def search(conn: happybase.Connection, query: VehicleQuery, districts: list[str], limit: int,
           position: bytes | None, locate: Locate) -> Page:
    """One page of ``query``'s vehicles, newest first, after ``position`` (``cursor_position``)."""
    chosen = plan(query, districts)
    first, stop = _suffix_bounds(query)
    start = first if position is None else position + b"\0"
    matches = query.matcher()
    opened: list[int] = []
    found: list[tuple[bytes, dict[str, Any]]] = []
    last: bytes | None = None
    more = False
    try:
        merged = heapq.merge(*(_stream(conn, chosen.table, p, start, stop, limit + 1, opened)
                               for p in chosen.prefixes))
        for read, (suffix, key, value) in enumerate(merged):
            if len(found) == limit or read == SCAN_BUDGET:
                more = True  # one row past the page: there is a next one
                break
            last = suffix
            cell = layout.read_vehicle_cell(value) if value is not None else None
            if cell is not None and matches(cell):
                found.append((key, cell))
    except TException as exc:
        if not is_missing_table(exc):
            raise
        found, more = [], False  # nothing ingested yet
    finally:
        for scanner in opened:
            conn.client.scannerClose(scanner)
    records = main_rows(conn, {Kind.VEHICLE: [layout.record_key(layout.record_id_of(key)) for key, _ in found]})
    items = [_vehicle_item(key, cell, records, locate) for key, cell in found]
    return Page(items, encode_cursor(query.digest() + b"|" + last) if more and last is not None else None)


def _vehicle_item(key: bytes, cell: dict[str, Any], records: dict[bytes, dict[str, Any]],
                  locate: Locate) -> dict[str, Any]:
    record_id = layout.record_id_of(key)
    index = {b"i:capture_time": cell["capture_time"].encode()}
    item = capture_item(Kind.VEHICLE, record_id, index, records.get(layout.record_key(record_id)),
                        cell["checkpoint_id"], locate)
    return {**item, "plate_number": cell["plate_number"],
            **{name: cell[name] for name in ("plate_color", "vehicle_color", "vehicle_type", "vehicle_brand",
                                             "lane")}}
