"""Helpers for the ingest tests: run the simulator and the Spark job as real processes, read HBase."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import happybase
from confluent_kafka import Consumer, TopicPartition

from contracts.tables import captures
from spark_jobs import launch

ROOT = Path(__file__).resolve().parents[2]


def simulate(bootstrap: str, tmp: Path, *args: str, timeout: float = 120) -> dict[str, Any]:
    """Run ``python -m ingest.simulate`` to the end; returns its JSON summary line."""
    out = subprocess.run(
        [sys.executable, "-m", "ingest.simulate", "--bootstrap-server", bootstrap, "--map", str(tmp / "map.json"),
         "--status-interval", "0", *args],
        cwd=ROOT, capture_output=True, timeout=timeout, check=False)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def ingest_job(bootstrap: str, hbase_port: int, checkpoint: Path, log: Path, *args: str) -> launch.SparkJob:
    """Start the ingest job with spark-submit (light local settings, shared CDS archive)."""
    handle = log.open("ab")
    return launch.submit(
        ROOT / "spark_jobs" / "ingest_captures.py",
        ["--bootstrap-server", bootstrap, "--hbase-host", "127.0.0.1", "--hbase-port", str(hbase_port),
         "--checkpoint", str(checkpoint), *args],
        stdout=handle, stderr=subprocess.STDOUT)


def count_rows(conn: happybase.Connection, table: str) -> int:
    """Rows in ``table``; 0 while the job has not created it yet."""
    if table.encode() not in conn.tables():
        return 0
    column = {"vehicle_by_plate": b"i:row", "capture_by_checkpoint": b"i:row", "vehicle_by_district": b"i:v",
              "vehicle_by_brand": b"i:v"}.get(table, b"r:capture_time")
    return sum(1 for _ in conn.table(table).scan(batch_size=2000, columns=[column]))


def row_counts(conn: happybase.Connection) -> dict[str, int]:
    return {name: count_rows(conn, name) for name in captures.TABLES}


def poll(condition: Callable[[], bool], timeout: float, interval: float = 0.5, what: str = "condition") -> None:
    """Wait for ``condition`` with a deadline (the machine is shared: no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached within {timeout}s")
        time.sleep(interval)


def read_all(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of partition 0 of ``topic``, from its start."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t", "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        consumer.assign([TopicPartition(topic, 0, low)])
        out: list[tuple[bytes, bytes]] = []
        while len(out) < high - low:
            out += [(m.key(), m.value()) for m in consumer.consume(1000, 5) if not m.error()]
        return out
    finally:
        consumer.close()
