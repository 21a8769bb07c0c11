"""The whole slice with real processes: broker, HBase gateway, simulator, and the Spark ingest job.

Spark start-up costs ~10-25 s on the shared 2-core machine, so these are few, marked slow, kept
on one xdist worker (one JVM at a time), and every wait is a poll with a generous deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import happybase
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from contracts import records
from contracts.ingest_stats import merge_latency, parse_stats
from contracts.tables import captures
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, started_cluster
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.ingest import ingest_job, simulate
from testkit.polling import poll
from tests.integration._ingest_support import count_rows, read_all, row_counts

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(600)]
JOB_DEADLINE_S = 300


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path / "hbase")
    yield gw
    gw.kill()


@pytest.fixture
def conn(gateway: Gateway) -> Iterator[happybase.Connection]:
    c = gateway.connect(timeout=60_000)
    yield c
    c.close()

TOPICS = Topics()


def expected_counts(summary: dict) -> dict[str, int]:
    produced, unrecognized, malformed = summary["produced"], summary["unrecognized"], summary["malformed"]
    valid = {t: produced[t] - unrecognized[t] - malformed[t] for t in produced}
    return {"vehicle": valid["capture.vehicle"], "face": valid["capture.face"],
            "vehicle_by_plate": valid["capture.vehicle"],
            "vehicle_by_district": valid["capture.vehicle"], "vehicle_by_brand": valid["capture.vehicle"],
            "capture_by_checkpoint": valid["capture.vehicle"] + valid["capture.face"],
            "capture_unrecognized": sum(unrecognized.values())}


def bus_record_ids(broker: BrokerProcess) -> set[str]:
    """Every well-formed record id on the capture topics (the truth the tables must match)."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check", "enable.auto.commit": False})
    ids: set[str] = set()
    try:
        for topic in TOPICS.captures:
            for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                consumer.assign([TopicPartition(topic, partition, low)])
                seen = 0
                while seen < high - low:
                    for message in consumer.consume(2000, 5):
                        seen += 1
                        checked = records.parse(TOPICS.kind_of(topic), message.value())
                        if checked.record is not None:
                            ids.add(checked.record["record_id"])
    finally:
        consumer.close()
    return ids


def table_record_ids(conn: happybase.Connection) -> list[str]:
    ids = []
    for table in ("vehicle", "face", "capture_unrecognized"):
        scan = conn.table(table).scan(batch_size=2000, columns=[b"r:capture_time"])
        ids += [captures.record_id_of(key) for key, _ in scan]
    return ids


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    """Three combined nodes laid out as a production cluster: topics get three replicas, acks=all needs two."""
    yield from started_cluster(tmp_path / "cluster", 3, {
        "default.replication.factor": "3", "min.insync.replicas": "2",
        "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
        "transaction.state.log.min.isr": "2",
        "broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"})


def test_simulated_captures_land_in_hbase(tmp_path: Path, cluster: ClusterProcess, gateway: Gateway,
                                          conn: happybase.Connection) -> None:
    """The slice on a 3-node cluster, changing nothing but the bootstrap servers (how a user outgrows one machine),
    with the leader of a capture partition killed -9 while the Spark job reads: every record lands once."""
    summary = simulate(cluster.bootstrap, tmp_path, "--count", "3000", "--rate", "3000", "--seed", "11",
                       "--failure-rate", "0.05", "--malformed-rate", "0.01", "--checkpoints", "16")
    assert sum(summary["produced"].values()) == 3000 and summary["failed"] == 0
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    described = admin.list_topics(TOPICS.vehicle, timeout=10).topics[TOPICS.vehicle].partitions[0]
    assert len(described.replicas) == 3  # the broker's default.replication.factor: nothing in the slice says 3
    victim = described.leader
    job = ingest_job(cluster.bootstrap, gateway.port, tmp_path / "ckpt", tmp_path / "job.log", "--once")
    try:
        # Once the job has made its own topics (creating one with three replicas needs three live brokers).
        poll(lambda: {TOPICS.deadletter, TOPICS.ingest_stats} <= admin.list_topics(timeout=10).topics.keys()
             or job.poll() is not None,
             JOB_DEADLINE_S, 0.2, "the job's topics")
        cluster[victim].kill()
        assert job.wait(JOB_DEADLINE_S) == 0, (tmp_path / "job.log").read_text()[-5000:]
    finally:
        job.kill()
    broker = cluster.running()[0]  # the checks below read the capture topics from a survivor
    counts = row_counts(conn)
    assert counts == expected_counts(summary)
    rejected = counts["capture_unrecognized"] + sum(summary["malformed"].values())
    assert rejected + counts["vehicle"] + counts["face"] == 3000

    for table in ("vehicle", "face"):
        for _, data in conn.table(table).scan(batch_size=2000):
            ingested = records.parse_time(data[b"r:ingest_time"].decode())
            assert ingested >= records.parse_time(data[b"r:capture_time"].decode())
    letters = _records_on(broker, "capture.deadletter")
    assert letters == sum(summary["malformed"].values())
    lines = (tmp_path / "job.log").read_text().splitlines()
    final = [json.loads(line) for line in lines if line.startswith('{"final"')]
    assert sum(final[-1]["final"]["valid"].values()) == counts["vehicle"] + counts["face"]

    # ingest.stats: what the batches report adds up to what landed, device by device.
    stats = [parse_stats(value) for _, value in read_all(broker.bootstrap, "ingest.stats")]
    assert sum(s.read for s in stats) == 3000 and final[-1]["stats_not_delivered"] == 0
    assert sum(s.rows_written for s in stats) == counts["vehicle"] + counts["face"] + counts["capture_unrecognized"]
    per_device: dict[str, int] = {}
    for s in stats:
        for device in s.devices:
            per_device[device.device_ip] = per_device.get(device.device_ip, 0) + device.valid + device.unrecognized
    assert sum(per_device.values()) == sum(summary["produced"].values()) - sum(summary["malformed"].values())
    end_to_end = merge_latency(stats, "capture_to_ingest")
    assert end_to_end.count == sum(s.rows_written for s in stats) and end_to_end.percentile(50) > 0
    assert json.loads((tmp_path / "map.json").read_text())["checkpoints"]


def test_kill_9_mid_stream_then_restart_loses_and_duplicates_nothing(
        tmp_path: Path, broker: BrokerProcess, gateway: Gateway, conn: happybase.Connection) -> None:
    summary = simulate(broker.bootstrap, tmp_path, "--count", "12000", "--rate", "20000", "--seed", "12",
                       "--failure-rate", "0.03")
    total = sum(summary["produced"].values())
    expected = expected_counts(summary)
    log = tmp_path / "job.log"
    # Small batches, so the kill lands with part of the backlog written and part not.
    # Both runs with --no-stats: this test is about rows, and it checks the switch publishes nothing.
    first = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", log,
                       "--trigger-ms", "100", "--max-offsets-per-trigger", "800", "--no-stats")
    try:
        poll(lambda: count_rows(conn, "vehicle") > 0 or first.poll() is not None, JOB_DEADLINE_S, 0.3,
             "first rows in HBase")
        assert first.poll() is None, log.read_text()[-5000:]
    finally:
        first.kill()
    partial = row_counts(conn)
    assert 0 < partial["vehicle"] + partial["face"] + partial["capture_unrecognized"] < total

    second = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", log, "--once", "--no-stats")
    try:
        assert second.wait(JOB_DEADLINE_S) == 0, log.read_text()[-5000:]
    finally:
        second.kill()
    assert row_counts(conn) == expected
    batches = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"batch"')]
    assert batches[0]["records"] <= 800  # the replayed batch: the killed run's range, capped by maxOffsetsPerTrigger
    ids = table_record_ids(conn)
    assert len(ids) == len(set(ids)) == total  # no duplicate row
    assert set(ids) == bus_record_ids(broker)  # no record missing
    assert _records_on(broker, TOPICS.ingest_stats) == 0  # --no-stats


def _records_on(broker: BrokerProcess, topic: str) -> int:
    """Records on every partition of ``topic``; 0 when it does not exist."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check", "enable.auto.commit": False})
    try:
        described = consumer.list_topics(timeout=10).topics.get(topic)
        if described is None:
            return 0
        marks = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in described.partitions]
        return sum(high - low for low, high in marks)
    finally:
        consumer.close()

