"""Malformed and foreign records on the capture topics are dead-lettered and counted, and the ingest job goes on.

Any producer may write to ``capture.vehicle`` and ``capture.face``. One run of the Spark job (real broker,
gateway and spark-submit) gets every bad kind on both topics: not a record at all, records missing fields,
records that pass validation but cannot be stored (a lone surrogate, a row key over HBase's limit), one too big
for its dead letter to carry whole, thousands naming a different device each (their ``ingest.stats`` record is
over the bus's size limit), and valid records with odd values (a 400-digit speed, a timestamp in year 146 million)
that must simply land. Then the simulator's captures, which must all land in HBase.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import records
from contracts.records import Kind
from contracts.tables import captures
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.ingest import ingest_job, simulate
from ingest.city import build_city
from ingest.producer import open_producer
from ingest.traffic import Traffic, TrafficConfig
from tests.integration._ingest_support import count_rows, read_all
from tests.support.bad_records import MALFORMED, lone_surrogate, produce, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]
TOPICS = Topics()
FLOOD = 8000
"""Refused records naming a device each: their batch's per-device counts make an ``ingest.stats`` record of
~2.4 MB (~1.2 MB even if they are split over two batches), over the producer's 1 MB limit."""
OVERSIZED = 900_000


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path / "hbase")
    yield gw
    gw.kill()


def valid_records() -> dict[Kind, dict[str, Any]]:
    """A valid record of each kind, as a device sends it."""
    traffic = Traffic(build_city(21, 8), TrafficConfig(seed=21, failure_rate=0.0, malformed_rate=0.0))
    found: dict[Kind, dict[str, Any]] = {}
    while len(found) < len(Kind):
        for emitted in traffic.records(20, 0.0):
            found.setdefault(emitted.kind, json.loads(emitted.value))
    return found


def refused(kind: Kind, record: dict[str, Any]) -> dict[str, bytes | None]:
    """What the job must dead-letter on ``kind``'s topic, by what is wrong with it."""
    missing = {k: v for k, v in record.items() if k != "capture_time"}
    return {**MALFORMED,
            "a missing field": records.encode(missing),
            "a lone surrogate in its id": lone_surrogate(record, "record_id"),
            "an id too long for a row key": records.encode({**record, "record_id": "r" * 40_000}),  # HBase: 32767
            "too big for a whole dead letter": b"\x00" * OVERSIZED}


def flood() -> list[bytes]:
    name = "{:>064}".format
    return [records.encode({"device_ip": name(f"d{i}"), "recognizer_ip": name(f"r{i}"),
                            "checkpoint_id": name(f"c{i}")}) for i in range(FLOOD)]


def invalid_counted(log: Path) -> int:
    """Records the job has counted invalid so far (its per-batch lines)."""
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"batch"')]
    return sum(sum(line["invalid"].values()) for line in lines)


def test_bad_records_are_dead_lettered_and_later_captures_land(
        tmp_path: Path, broker: BrokerProcess, gateway: Gateway) -> None:
    valid = valid_records()
    bad = {kind: refused(kind, valid[kind]) for kind in Kind}
    letters = sum(len(b) for b in bad.values()) + FLOOD
    open_producer(broker.bootstrap).ensure_topics({topic: 2 for topic in TOPICS.captures})
    conn = gateway.connect(timeout=60_000)
    log = tmp_path / "job.log"
    job = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", log, "--trigger-ms", "300")
    try:
        for kind in Kind:
            produce(broker.bootstrap, TOPICS.of_kind(kind), bad[kind].values())
        produce(broker.bootstrap, TOPICS.vehicle, flood())
        # Valid records with odd values: stored like any other.
        vehicle = valid[Kind.VEHICLE]
        produce(broker.bootstrap, TOPICS.vehicle, [records.encode({**vehicle, "record_id": "odd-speed",
                                                                   "speed_kmh": 10**400})])
        produce(broker.bootstrap, TOPICS.vehicle, [records.encode({**vehicle, "record_id": "odd-timestamp"})],
                timestamp=2**62)
        wait_for(lambda: invalid_counted(log) >= letters and count_rows(conn, "vehicle") >= 2,
                 "every bad record counted", 300, log, lambda: job.poll() is None)

        # Captures sent after the bad records all land.
        summary = simulate(broker.bootstrap, tmp_path, "--count", "300", "--rate", "3000", "--seed", "7")
        produced, unrecognized = summary["produced"], summary["unrecognized"]
        expected = {"vehicle": produced[TOPICS.vehicle] - unrecognized[TOPICS.vehicle] + 2,
                    "face": produced[TOPICS.face] - unrecognized[TOPICS.face],
                    "capture_unrecognized": sum(unrecognized.values())}
        wait_for(lambda: {t: count_rows(conn, t) for t in expected} == expected, "the later captures in HBase",
                 120, log, lambda: job.poll() is None)
        job.stop(60)
    finally:
        job.kill()
    assert conn.table("vehicle").row(captures.record_key("odd-speed"))[b"r:record"].count(b"0" * 400) == 1
    assert conn.table("vehicle").row(captures.record_key("odd-timestamp"))
    final = next(json.loads(line) for line in reversed(log.read_text().splitlines()) if line.startswith('{"final"'))
    assert sum(final["final"]["invalid"].values()) == invalid_counted(log) == letters
    assert final["stats_not_delivered"] >= 1, "the flood's ingest.stats record was too big: lost, not fatal"

    dead = [json.loads(value) for key, value in read_all(broker.bootstrap, TOPICS.deadletter)]
    assert len(dead) == letters, "each refused record dead-lettered once"
    for kind in Kind:
        mine = [d for d in dead if d["topic"] == TOPICS.of_kind(kind)]
        unusable = [d["reason"] for d in mine if d["reason"].startswith("cannot be stored: ")]
        assert len(unusable) == 2 and any("surrogates not allowed" in r for r in unusable), unusable
        assert any("HBase takes at most 32767" in r for r in unusable), unusable
        big = next(d for d in mine if d["value_bytes"] == OVERSIZED)
        kept = base64.b64decode(big["value_base64"])
        assert 0 < len(kept) < OVERSIZED and kept == bytes(len(kept)), "the value's head, cut to fit the letter"
