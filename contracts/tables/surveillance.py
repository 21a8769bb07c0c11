"""The HBase layout of watchlist hits (the hit loader writes, the console reads).

| table | row key | holds |
|---|---|---|
| ``surveillance_hit`` | ``h4(watch_id)|watch_id|rev_ms|hit_id`` | a watch's hits, newest first (its trajectory) |
| ``surveillance_hit_by_time`` | ``b|rev_ms|hit_id`` (``b``: one of 4 buckets) | every hit, cloned plates too, by time |

Both keys end in the deterministic ``hit_id`` after the reversed *capture* time of the hit, so a
replayed hit (the service after kill -9, the loader after a restart) rewrites its own row: the loader
is idempotent without reading anything back. A cloned-plate hit of an unwatched plate has no watch
(``watch_id`` null) and is only in the by-time table.

The by-time table is salted with a few buckets rather than a 4-hex-digit hash: the console reads the
newest hits of the whole city, which with ``BUCKETS`` buckets is that many short scans merged, while
writes still spread over that many key ranges. A watch's hit count is a key-only scan of its prefix
(hits are few per watch: a watched car passes a few checkpoints an hour).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..records import epoch_ms
from ..retention import with_ttl
from . import MAX_MS, Families, ensure_tables, reversed_ms, salt

BY_WATCH_TABLE = "surveillance_hit"
BY_TIME_TABLE = "surveillance_hit_by_time"
FAMILY = "h"
HIT_COLUMN = f"{FAMILY}:hit".encode()
"""The whole hit record as JSON, as the service published it."""
BUCKETS = 4
TABLES: dict[str, Families] = {BY_WATCH_TABLE: {FAMILY: {"max_versions": 1}},
                               BY_TIME_TABLE: {FAMILY: {"max_versions": 1}}}
COUNT_FILTER = b"FirstKeyOnlyFilter() AND KeyOnlyFilter()"
"""Scan filter of a hit count: one empty cell per row, so counting moves keys only."""

Put = tuple[str, bytes, dict[bytes, bytes]]


def watch_prefix(watch_id: str) -> bytes:
    """Scan prefix of one watch's hits, newest first."""
    return f"{salt(watch_id)}|{watch_id}|".encode()


def bucket_of(hit_id: str) -> str:
    return str(int(salt(hit_id), 16) % BUCKETS)


def bucket_prefixes() -> list[bytes]:
    """The by-time table's scan prefixes, one per bucket; each sorts newest first."""
    return [f"{b}|".encode() for b in range(BUCKETS)]


def hit_rows(hit: Mapping[str, Any]) -> list[Put]:
    """The rows of one hit: by time always, by watch when it has a watch. KeyError/ValueError on a bad hit."""
    hit_id = str(hit["hit_id"])
    if not hit_id or "|" in hit_id:
        raise ValueError(f"hit_id {hit_id!r} cannot be part of a row key")
    rev = reversed_ms(epoch_ms(str(hit["capture_time"])))
    cells = {HIT_COLUMN: json.dumps(dict(hit), ensure_ascii=False, separators=(",", ":")).encode()}
    rows: list[Put] = [(BY_TIME_TABLE, f"{bucket_of(hit_id)}|{rev}|{hit_id}".encode(), cells)]
    watch_id = hit.get("watch_id")
    if watch_id:
        rows.append((BY_WATCH_TABLE, watch_prefix(str(watch_id)) + f"{rev}|{hit_id}".encode(), cells))
    return rows


def capture_ms_of(row_key: bytes) -> int:
    """The hit's capture time (epoch ms) from either table's row key (``...|rev_ms|hit_id``): no cell read."""
    return MAX_MS - int(row_key.rsplit(b"|", 2)[1])


def read_hit(cells: Mapping[bytes, bytes]) -> dict[str, Any]:
    return json.loads(cells[HIT_COLUMN])


def ensure_surveillance_tables(connection: Any, ttl_s: int) -> None:
    """Create the hit tables that are missing, their cells kept ``ttl_s`` (``[retention] hits_days``); existing ones
    are kept as they are."""
    ensure_tables(connection, with_ttl(TABLES, ttl_s))
