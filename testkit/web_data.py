"""Capture rows for the console's search tests and benchmark, written the way the capture slice writes them.

Records come from the simulator's generator (``ingest.traffic``) with a deterministic clock, so
every run loads the same rows; they go through ``contracts.records.validate`` and
``contracts.tables.captures.rows_for_valid`` and reach the gateway with the ingest writer's own
``write_puts`` (one mutateRows per table and chunk).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import happybase

from contracts.hbase import HBaseClient
from contracts.records import CITY_TZ, Kind, Status, format_time, validate
from contracts.retention import Retention
from contracts.tables import captures
from ingest.city import City, build_city
from ingest.traffic import Traffic, TrafficConfig
from spark_jobs.capture_writer import WriterSettings, close_cached_clients, write_puts

T0 = datetime(2026, 3, 2, 8, 0, 0, tzinfo=CITY_TZ)
INGEST_DELAY_MS = 1500


class StepClock:
    """capture_time of the n-th record: T0 + n x step (distinct, increasing, known in advance)."""

    def __init__(self, start: datetime = T0, step: timedelta = timedelta(milliseconds=250)) -> None:
        self.now = start - step
        self.step = step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


def valid_records(count: int, seed: int = 7, checkpoints: int = 12, clock: StepClock | None = None,
                  city: City | None = None, face_share: float = 0.3) -> Iterator[tuple[Kind, dict[str, Any]]]:
    """``count`` valid (kind, record) pairs from the simulator's generator (unreadable ones are skipped)."""
    config = TrafficConfig(seed=seed, failure_rate=0.0, face_share=face_share)
    traffic = Traffic(city or build_city(seed, checkpoints), config, clock=clock or StepClock())
    made = 0
    while made < count:
        for emitted in traffic.records(min(1000, count - made), 0.0):
            checked = validate(emitted.kind, json.loads(emitted.value))
            if checked.status is Status.VALID and checked.record is not None:
                made += 1
                yield emitted.kind, checked.record


def ingest_time(record: dict[str, Any]) -> str:
    capture = datetime.fromisoformat(record["capture_time"])
    return format_time(capture + timedelta(milliseconds=INGEST_DELAY_MS))


def puts_for(pairs: list[tuple[Kind, dict[str, Any]]]) -> list[captures.Put]:
    return [put for kind, record in pairs for put in captures.rows_for_valid(kind, record, ingest_time(record))]


def writer(port: int) -> WriterSettings:
    return WriterSettings(HBaseClient(port=port), "127.0.0.1:9", {})


def create_tables(port: int) -> None:
    """What the ingest job does when it starts: create the capture tables that are missing."""
    conn = happybase.Connection("127.0.0.1", port)
    try:
        captures.ensure_capture_tables(conn, Retention().captures_ttl_s)
    finally:
        conn.close()


def load(port: int, pairs: list[tuple[Kind, dict[str, Any]]], chunk: int = 2000) -> None:
    """Write the records' main and index rows with the ingest writer (tables created if missing)."""
    create_tables(port)
    settings = writer(port)
    try:
        for start in range(0, len(pairs), chunk):
            write_puts(puts_for(pairs[start:start + chunk]), settings)
    finally:
        close_cached_clients()


def as_plate(pairs: list[tuple[Kind, dict[str, Any]]], plate: str) -> list[tuple[Kind, dict[str, Any]]]:
    """The vehicle records of ``pairs`` re-plated: one car seen everywhere (record ids stay unique)."""
    return [(kind, {**record, "plate_number": plate}) for kind, record in pairs if kind is Kind.VEHICLE]

