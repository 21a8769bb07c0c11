"""The ingest job's per-task writer against a real gateway and broker (no Spark needed)."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path

import happybase
import pytest
from confluent_kafka import Consumer, TopicPartition

from contracts import records
from contracts.records import Kind
from contracts.tables import captures
from contracts.topics import Topics
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig
from spark_jobs.capture_writer import WriterSettings, close_cached_clients, process_records, summarize, write_puts
from tests.hbase.conftest import Gateway, start_gateway
from tests.integration._ingest_support import row_counts
from tests.support.broker_process import BrokerProcess

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
    captures.ensure_capture_tables(c)
    yield c
    c.close()


def settings(gateway: Gateway, broker: BrokerProcess, **kw: object) -> WriterSettings:
    return WriterSettings("127.0.0.1", gateway.port, broker.bootstrap,
                          {"capture.vehicle": "vehicle", "capture.face": "face"}, **kw)


def bus_rows(n: int, seed: int = 3, malformed: float = 0.05) -> list[tuple]:
    traffic = Traffic(build_city(seed, 12), TrafficConfig(seed=seed, malformed_rate=malformed, failure_rate=0.1))
    return [(e.key, e.value, TOPICS.of_kind(e.kind), 0, offset) for offset, e in enumerate(traffic.records(n, 0.0))]


def test_records_are_sorted_into_tables_and_dead_letters(
        gateway: Gateway, conn: happybase.Connection, broker: BrokerProcess) -> None:
    rows = bus_rows(600)
    rows.append((b"k", b"\xff not json", "capture.face", 1, 77))
    tally = process_records(rows, settings(gateway, broker, chunk_rows=100))
    outcome = {kind: [records.parse(kind, v) for _, v, t, _, _ in rows if t == TOPICS.of_kind(kind)] for kind in Kind}
    for kind in Kind:
        checked = outcome[kind]
        assert tally[TOPICS.of_kind(kind)].valid == sum(c.status is records.Status.VALID for c in checked)
        assert tally[TOPICS.of_kind(kind)].unrecognized == sum(c.status is records.Status.UNRECOGNIZED for c in checked)
        assert tally[TOPICS.of_kind(kind)].invalid == sum(c.status is records.Status.INVALID for c in checked)
    counts = row_counts(conn)
    valid_vehicles = tally["capture.vehicle"].valid
    assert counts["vehicle"] == valid_vehicles and counts["vehicle_by_plate"] == valid_vehicles
    assert counts["face"] == tally["capture.face"].valid
    assert counts["capture_by_checkpoint"] == valid_vehicles + tally["capture.face"].valid
    assert counts["capture_unrecognized"] == sum(t.unrecognized for t in tally.values())

    valid = next(c.record for c in outcome[Kind.VEHICLE] if c.status is records.Status.VALID)
    row = conn.table("vehicle").row(captures.record_key(valid["record_id"]))
    assert row[b"r:plate_number"].decode() == valid["plate_number"]
    assert captures.read_record(row) == {**valid, "ingest_time": row[b"r:ingest_time"].decode()}
    assert records.parse_time(row[b"r:ingest_time"].decode()) >= records.parse_time(valid["capture_time"])
    trajectory = list(conn.table("vehicle_by_plate").scan(row_prefix=captures.plate_prefix(valid["plate_number"])))
    assert any(data[b"i:row"] == captures.record_key(valid["record_id"]) for _, data in trajectory)
    summary = summarize([{"topic": t, "valid": x.valid, "unrecognized": x.unrecognized, "invalid": x.invalid,
                          "latencies_ms": x.latencies_ms} for t, x in tally.items()])
    assert all(ms >= 0 for ms in summary["latencies_ms"])

    letters = read_all(broker, "capture.deadletter")
    assert len(letters) == sum(t.invalid for t in tally.values())
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
        captures.ensure_capture_tables(c)
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


def read_all(broker: BrokerProcess, topic: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[bytes, bytes]] = []
        while len(out) < high - low:
            out += [(m.key(), m.value()) for m in consumer.consume(1000, 5) if not m.error()]
        return out
    finally:
        consumer.close()
