"""The hit loader as a real process: real broker, real HBase gateway, hits produced with confluent-kafka.

What it must do: every hit reaches both tables once (a replayed hit rewrites its row), malformed hits
(``_support.UNREADABLE``, a hit without a field, a null, a bad time, an id too long for a row key) are
skipped and counted without stopping the loader (a hit after them is loaded), and a kill -9 between
write and commit loses nothing and duplicates nothing.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.processes import spawn
from contracts.tables.surveillance import BY_TIME_TABLE, BY_WATCH_TABLE, bucket_prefixes, read_hit, watch_prefix
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from tests.surveillance._support import UNREADABLE, without

TOPIC = "surveillance.hits"
BASE = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


def hit(n: int, watch_id: str | None = "w-plate-1", kind: str = "plate") -> dict[str, Any]:
    """A hit as docs/architecture.md has it; ``n`` fixes its id and capture time."""
    return {"hit_id": f"h{n:06d}", "watch_id": watch_id, "kind": kind, "match": "exact" if kind == "plate" else None,
            "record_id": f"10.0.0.1-{n}", "checkpoint_id": "330102#1#0#0",
            "capture_time": (BASE + timedelta(seconds=n)).isoformat(timespec="milliseconds"), "score": 1.0,
            "location": {"district": "330102", "crossroad": 1, "lat": 30.25, "lon": 120.17},
            "detected_at": datetime.now(UTC).isoformat(timespec="milliseconds")}


@pytest.fixture
def backing(tmp_path: Path) -> Iterator[tuple[BrokerProcess, Gateway, Path]]:
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
            config = tmp_path / "solution.toml"
            config.write_text(f'[bus]\nbootstrap_servers = "{broker.bootstrap}"\n'
                              f'[hbase]\nhost = "127.0.0.1"\nport = {gateway.port}\n')
            yield broker, gateway, config
        finally:
            gateway.kill()
    finally:
        broker.stop()


def produce(bootstrap: str, values: list[bytes | dict[str, Any] | None]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for value in values:
        raw = json.dumps(value).encode() if isinstance(value, dict) else value
        key = value.get("watch_id") if isinstance(value, dict) else None
        producer.produce(TOPIC, raw, key=(key or "cloned").encode())
    assert producer.flush(30) == 0


def start_loader(config: Path, log: Path) -> subprocess.Popen[bytes]:
    return spawn([sys.executable, "-m", "surveillance.loader", "--config", str(config)], log)


def by_time_ids(gateway: Gateway) -> list[str]:
    table = gateway.connect().table(BY_TIME_TABLE)
    return [read_hit(cells)["hit_id"] for prefix in bucket_prefixes() for _, cells in table.scan(row_prefix=prefix)]


def wait_for(predicate: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def committed(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "surveillance-loader"})
    try:
        offsets = consumer.committed([TopicPartition(TOPIC, p) for p in (0, 1)], timeout=10)
        return sum(max(tp.offset, 0) for tp in offsets)
    finally:
        consumer.close()


def running(proc: subprocess.Popen[bytes], log: Path) -> bool:
    """True while ``proc`` runs; a loader that died fails the test at once, with its log."""
    assert proc.poll() is None, f"the loader exited {proc.returncode}:\n{log.read_text()[-3000:]}"
    return True


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


def test_hits_reach_both_tables_once_and_malformed_ones_are_skipped(backing, tmp_path: Path) -> None:
    broker, gateway, config = backing
    watched = [hit(n) for n in range(20)] + [hit(n, "w-face-2", "face") for n in range(20, 30)]
    cloned = [hit(n, None, "cloned_plate") for n in range(30, 35)]
    replayed = watched[:5]  # the service after kill -9 publishes these again, same ids
    # keyed "cloned" like the garbage, so the last cloned hit follows all of it in one partition
    malformed = [*UNREADABLE, without(hit(98, None, "cloned_plate"), "record_id"), None,
                 {**hit(99, None, "cloned_plate"), "capture_time": "yesterday"},
                 {**hit(97, None, "cloned_plate"), "hit_id": "h" * 40_000}]   # longer than an HBase row key
    produce(broker.bootstrap, [*watched, *cloned[:-1], *malformed, *replayed, cloned[-1]])
    log = tmp_path / "loader.log"
    loader = start_loader(config, log)
    try:
        wait_for(lambda: running(loader, log) and committed(broker.bootstrap) == 35 + len(malformed) + 5)
        ids = by_time_ids(gateway)
        assert sorted(ids) == sorted(h["hit_id"] for h in watched + cloned)  # no duplicates, cloned included
        table = gateway.connect().table(BY_WATCH_TABLE)
        plate_rows = [read_hit(c) for _, c in table.scan(row_prefix=watch_prefix("w-plate-1"))]
        # newest first: a watch's prefix scan is its trajectory backwards
        assert [h["hit_id"] for h in plate_rows] == [f"h{n:06d}" for n in reversed(range(20))]
        assert len(list(table.scan(row_prefix=watch_prefix("w-face-2")))) == 10
        assert sum(1 for _ in table.scan()) == 30  # unwatched cloned plates are by time only
    finally:
        stop(loader)
    text = log.read_text()
    assert text.count("skipped a malformed hit") == len(malformed), text
    assert f"40 hits loaded, {len(malformed)} malformed skipped" in text


@pytest.mark.slow
def test_kill_9_under_load_loses_and_duplicates_nothing(backing, tmp_path: Path) -> None:
    broker, gateway, config = backing
    total = 6000
    log = tmp_path / "loader.log"
    loader = start_loader(config, log)
    try:
        for start in range(0, total, 1000):
            produce(broker.bootstrap, [hit(n, f"w-{n % 7}") for n in range(start, start + 1000)])
            if start == 2000:
                wait_for(lambda: committed(broker.bootstrap) > 0)
                loader.send_signal(signal.SIGKILL)
                loader.wait(10)
                loader = start_loader(config, log)
        wait_for(lambda: committed(broker.bootstrap) == total, timeout=120)
        ids = by_time_ids(gateway)
        assert len(ids) == total and len(set(ids)) == total
        table = gateway.connect().table(BY_WATCH_TABLE)
        assert sum(1 for _ in table.scan(row_prefix=watch_prefix("w-3"))) == len(range(3, total, 7))
    finally:
        stop(loader)
