"""The ingest job's per-task writer against a real gateway and broker (no Spark needed)."""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import happybase
import pytest

from contracts import records
from contracts.hbase import HBaseClient
from contracts.ingest_stats import BatchTally
from contracts.records import Kind
from contracts.retention import Retention
from contracts.tables import captures
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig
from spark_jobs.capture_writer import WriterSettings, close_cached_clients, process_records, summarize, write_puts
from tests.integration._ingest_support import read_all, row_counts

TOPICS = Topics()


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    yield
    close_cached_clients()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path / "hbase")
    yield gw
    gw.kill()


@pytest.fixture
def conn(gateway: Gateway) -> Iterator[happybase.Connection]:
    c = gateway.connect()
    captures.ensure_capture_tables(c, Retention().captures_ttl_s)
    yield c
    c.close()


def settings(gateway: Gateway, broker: BrokerProcess, **kw: object) -> WriterSettings:
    return WriterSettings(HBaseClient(port=gateway.port), broker.bootstrap,
                          {"capture.vehicle": "vehicle", "capture.face": "face"}, **kw)


BUS_DELAY_MS = 40
"""The bus timestamp the rows below carry: capture time + this (the device -> bus stage)."""


def bus_rows(n: int, seed: int = 3, malformed: float = 0.05) -> list[tuple]:
    traffic = Traffic(build_city(seed, 12), TrafficConfig(seed=seed, malformed_rate=malformed, failure_rate=0.1))
    rows = []
    for offset, e in enumerate(traffic.records(n, 0.0)):
        try:
            stamp = records.epoch_ms(json.loads(e.value)["capture_time"]) + BUS_DELAY_MS
        except (ValueError, KeyError, TypeError):
            stamp = None  # a malformed record: the bus stamp does not matter, it is dead-lettered
        rows.append((e.key, e.value, TOPICS.of_kind(e.kind), 0, offset, stamp))
    # The traffic's capture times run up to now, so the newest bus stamps lie up to BUS_DELAY_MS ahead: wait until
    # they have passed, as they would have on a real bus, or a fast read measures a negative bus-to-read latency.
    newest = max((row[5] for row in rows if row[5] is not None), default=0)
    time.sleep(max(0.0, newest / 1000 - time.time()) + 0.005)
    return rows


def by_topic(tally: BatchTally, name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for device in tally.devices.values():
        out[device.topic] = out.get(device.topic, 0) + getattr(device, name)
    return out


def test_records_are_sorted_into_tables_and_dead_letters(
        gateway: Gateway, conn: happybase.Connection, broker: BrokerProcess) -> None:
    rows = bus_rows(600)
    rows.append((b"k", b"\xff not json", "capture.face", 1, 77, None))
    tally = process_records(rows, settings(gateway, broker, chunk_rows=100))
    outcome = {kind: [records.parse(kind, r[1]) for r in rows if r[2] == TOPICS.of_kind(kind)] for kind in Kind}
    for kind in Kind:
        checked, topic = outcome[kind], TOPICS.of_kind(kind)
        for status in records.Status:
            assert by_topic(tally, status.value)[topic] == sum(c.status is status for c in checked)
    valid, unrecognized = by_topic(tally, "valid"), by_topic(tally, "unrecognized")
    counts = row_counts(conn)
    assert counts["vehicle"] == valid["capture.vehicle"] and counts["vehicle_by_plate"] == valid["capture.vehicle"]
    assert counts["face"] == valid["capture.face"]
    assert counts["capture_by_checkpoint"] == valid["capture.vehicle"] + valid["capture.face"]
    assert counts["capture_unrecognized"] == sum(unrecognized.values())
    assert tally.rows_written == sum(valid.values()) + sum(unrecognized.values())

    valid = next(c.record for c in outcome[Kind.VEHICLE] if c.status is records.Status.VALID)
    row = conn.table("vehicle").row(captures.record_key(valid["record_id"]))
    assert row[b"r:plate_number"].decode() == valid["plate_number"]
    assert captures.read_record(row) == {**valid, "ingest_time": row[b"r:ingest_time"].decode()}
    assert records.parse_time(row[b"r:ingest_time"].decode()) >= records.parse_time(valid["capture_time"])
    trajectory = list(conn.table("vehicle_by_plate").scan(row_prefix=captures.plate_prefix(valid["plate_number"])))
    assert any(data[b"i:row"] == captures.record_key(valid["record_id"]) for _, data in trajectory)

    # Per stage, one latency per record written; the rows were stamped on the bus 40 ms after capture.
    merged = summarize([tally.to_json()])
    assert merged.totals() == tally.totals()
    assert merged.latency["capture_to_bus"] == {BUS_DELAY_MS: tally.rows_written}
    for stage in ("bus_to_read", "read_to_write", "capture_to_ingest"):
        assert sum(merged.latency[stage].values()) == tally.rows_written
        assert min(merged.latency[stage]) >= 0
    # Devices are counted as the records name them; a record that is not JSON is the unknown device's.
    assert tally.devices[("capture.face", "unknown")].invalid >= 1
    assert all(d.recognizer_ip.startswith("10.200.") for (_, ip), d in tally.devices.items() if ip != "unknown")

    letters = read_all(broker.bootstrap, "capture.deadletter")
    assert len(letters) == sum(by_topic(tally, "invalid").values())
    odd = next(json.loads(v) for k, v in letters if json.loads(v)["offset"] == 77)
    assert odd["topic"] == "capture.face" and odd["partition"] == 1 and "not JSON" in odd["reason"]
    assert base64.b64decode(odd["value_base64"]) == b"\xff not json"
    assert {k for k, _ in letters} <= {b"capture.vehicle", b"capture.face"}


def test_replaying_a_batch_rewrites_the_same_rows(
        gateway: Gateway, conn: happybase.Connection, broker: BrokerProcess) -> None:
    rows = bus_rows(300, seed=5, malformed=0.0)
    process_records(rows, settings(gateway, broker))
    before = row_counts(conn)
    random.Random(1).shuffle(rows)
    process_records(rows, settings(gateway, broker))
    assert row_counts(conn) == before


def test_checkpoint_index_scans_newest_first_within_a_time_range(
        gateway: Gateway, conn: happybase.Connection, broker: BrokerProcess) -> None:
    rows = bus_rows(400, seed=9, malformed=0.0)
    process_records(rows, settings(gateway, broker))
    checkpoint = json.loads(rows[0][1])["checkpoint_id"]
    hits = list(conn.table("capture_by_checkpoint").scan(row_prefix=captures.checkpoint_prefix(checkpoint)))
    assert hits
    times = [records.epoch_ms(d[b"i:capture_time"].decode()) for _, d in hits]
    assert times == sorted(times, reverse=True)
    assert all(key.split(b"|")[1].decode() == checkpoint for key, _ in hits)


def test_writes_survive_a_gateway_restart(tmp_path: Path, broker: BrokerProcess) -> None:
    """A task's HBase write retries on a fresh connection (idempotent puts make that safe)."""
    gw = start_gateway(tmp_path / "hb")
    try:
        c = gw.connect()
        captures.ensure_capture_tables(c, Retention().captures_ttl_s)
        c.close()
        s = settings(gw, broker)
        put = ("face", b"k1", {b"r:capture_time": b"1"})
        write_puts([put], s)
        gw.kill()
        restarted = start_gateway(tmp_path / "hb", "--port", str(gw.port))
        try:
            write_puts([("face", b"k2", {b"r:capture_time": b"2"})], WriterSettings(**{**s.__dict__}))
            c = restarted.connect()
            assert [k for k, _ in c.table("face").scan()] == [b"k1", b"k2"]
        finally:
            restarted.kill()
    finally:
        gw.kill()


