"""The HBase layout of monitoring: time series (OpenTSDB-style) and the monitor's durable state.

| table | row key | holds |
|---|---|---|
| ``monitoring_series`` | ``h4(metric|tags)|metric|tags|hour_epoch_s`` | ``t:MM`` per minute, ``t:h`` the hour |
| ``monitoring_state`` | ``kind|id`` | ``s:v`` JSON: a device, alert, notification-log entry, silence, job |

The series key follows OpenTSDB's idea (one row per series and hour, one column per offset within
it, a salt so writes spread over regions) with one change: the tags come before the base hour, and
the salt hashes metric and tags only, so one series' day is one contiguous scan (the console draws
one series at a time; OpenTSDB's metric-then-time order serves scans across all tag values). Cells
hold the whole bucket (counts as JSON, latency as an encoded HdrHistogram), rewritten when the
bucket changes: replaying input rewrites the same cells.

The state table is small (one row per device, alert, receiver x group, silence) and read in full at
start-up, so its keys are unsalted and prefixed by kind for prefix scans.
"""

from __future__ import annotations

import json
from typing import Any

from . import Families, ensure_tables, salt

SERIES_TABLE = "monitoring_series"
STATE_TABLE = "monitoring_state"
SERIES_FAMILY = "t"
STATE_COLUMN = b"s:v"
HOUR_COLUMN = b"t:h"
TABLES: dict[str, Families] = {SERIES_TABLE: {SERIES_FAMILY: {"max_versions": 1}},
                               STATE_TABLE: {"s": {"max_versions": 1}}}

LATENCY = "latency"
"""Metric of latency histograms; tag ``stage`` (contracts.ingest_stats.STAGES)."""
QUALITY = "quality"
"""Metric of record counts; tag ``scope``: ``city``, ``district=CODE``, ``recognizer=IP`` or ``device=IP``."""

STATE_KINDS = ("device", "alert", "nflog", "silence", "job")


def series_prefix(metric: str, tags: str) -> bytes:
    series = f"{metric}|{tags}"
    return f"{salt(series)}|{series}|".encode()


def series_key(metric: str, tags: str, hour_s: int) -> bytes:
    """Row of one series' hour; ``hour_s`` is the hour's start in epoch seconds (UTC, 10 digits)."""
    return series_prefix(metric, tags) + f"{hour_s:010d}".encode()


def hour_of_key(row_key: bytes) -> int:
    return int(row_key.rsplit(b"|", 1)[1])


def minute_column(minute: int) -> bytes:
    return f"{SERIES_FAMILY}:{minute:02d}".encode()


def state_key(kind: str, ident: str) -> bytes:
    if kind not in STATE_KINDS:
        raise ValueError(f"unknown state kind {kind!r}")
    return f"{kind}|{ident}".encode()


def state_cells(value: dict[str, Any]) -> dict[bytes, bytes]:
    return {STATE_COLUMN: json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()}


def read_state(cells: dict[bytes, bytes]) -> dict[str, Any]:
    return json.loads(cells[STATE_COLUMN])


def ensure_monitoring_tables(connection: Any) -> None:
    ensure_tables(connection, TABLES)
