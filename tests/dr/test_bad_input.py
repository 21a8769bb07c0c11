"""Bad input: malformed settings stop start-up naming the key; a record too large for the target stops only
its partition, loudly; an unreachable target is waited for, then caught up without loss or reordering."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.dr._support import MirrorProcess, create_topics, end_offsets, read_all, wait_until, write_properties
from tests.support.broker_process import ROOT
from tests.support.ports import free_port


@pytest.mark.parametrize(("lines", "key"), [
    (["clusters = primary"], "clusters"),
    (["clusters = primary, dr", "primary.bootstrap.servers = a:1", "dr.bootstrap.servers = b:1"], "clusters"),
    (["clusters = primary, dr", "primary->dr.enabled = true", "primary.bootstrap.servers = a:1"],
     "dr.bootstrap.servers"),
    (["clusters = primary, dr", "primary->dr.enabled = yes", "primary.bootstrap.servers = a:1",
      "dr.bootstrap.servers = b:1"], "primary->dr.enabled"),
    (["clusters = primary, dr", "primary->dr.enabled = true", "primary.bootstrap.servers = a:1",
      "dr.bootstrap.servers = b:1", "primary->dr.topics = capture\\\\.(vehicle"], "topics"),
    (["clusters = primary, dr", "primary->dr.enabled = true", "primary.bootstrap.servers = a:1",
      "dr.bootstrap.servers = b:1", "tasks.max = 0"], "tasks.max"),
    (["clusters = primary, dr", "primary->dr.enabled = true", "primary.bootstrap.servers = a:1",
      "dr.bootstrap.servers = b:1", "emit.checkpoints.interval.seconds = soon"], "emit.checkpoints.interval.seconds"),
    (["clusters = primary, dr", "primary->dr.enabled = true", "primary.bootstrap.servers = a:1",
      "dr.bootstrap.servers = b:1", "replication.policy.class = com.example.Custom"], "replication.policy.class"),
])
def test_malformed_properties_exit_2_naming_the_key(tmp_path: Path, lines: list[str], key: str) -> None:
    props = tmp_path / "mm2.properties"
    props.write_text("\n".join(lines) + "\n")
    done = subprocess.run([sys.executable, "-m", "dr_mirror", "--config", str(props)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"{key}:" in done.stderr


def test_legacy_flags_bad_regex_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "dr_mirror", "--whitelist", "capture.(vehicle"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "topics:" in done.stderr, done.stderr


def test_record_too_large_for_the_target_stops_only_its_partition(make_broker, tmp_path: Path) -> None:
    source = make_broker(name="source")
    target = make_broker({"message.max.bytes": "20000"}, name="target")
    create_topics(source.bootstrap, {"alerts": 2})
    producer = Producer({"bootstrap.servers": source.bootstrap, "compression.type": "none"})
    for value in (b"small", b"x" * 50_000, b"after"):  # one batch each
        producer.produce("alerts", value=value, partition=0)
        producer.flush(10)
    for i in range(20):
        producer.produce("alerts", value=f"ok-{i}".encode(), partition=1)
    assert producer.flush(10) == 0
    port = free_port()
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props), "--metrics-port", str(port)], tmp_path / "mirror.log").start()
    try:
        wait_until(lambda: end_offsets(target.bootstrap, "alerts", 2) == [1, 20], 60, "partition 1", mirror.logs)
        wait_until(lambda: "mirroring of alerts-0 stopped" in mirror.logs(), 30, "the stop", mirror.logs)
        assert "message.max.bytes" in mirror.logs()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        assert 'dr_mirror_partition_stopped{partition="0",topic="alerts"} 1.0' in metrics
        assert 'dr_mirror_partition_lag_records{partition="1",topic="alerts"} 0.0' in metrics
        time.sleep(2)
        assert end_offsets(target.bootstrap, "alerts", 2) == [1, 20]  # nothing skipped past the big record
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]


@pytest.mark.slow
def test_unreachable_target_is_waited_for_then_caught_up_in_order(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"ingest.stats": 1})
    producer = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 2})
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    try:
        for i in range(300):
            producer.produce("ingest.stats", value=f"a{i}".encode())
        producer.flush(10)
        wait_until(lambda: end_offsets(target.bootstrap, "ingest.stats", 1) == [300], 60, "first part", mirror.logs)
        target.kill()
        for i in range(300):
            producer.produce("ingest.stats", value=f"b{i}".encode())
            if i % 50 == 0:
                producer.flush(10)
                time.sleep(0.3)
        producer.flush(10)
        time.sleep(2)
        target.start()
        wait_until(lambda: end_offsets(target.bootstrap, "ingest.stats", 1) == [600], 90, "catch-up", mirror.logs)
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    assert read_all(target.bootstrap, "ingest.stats", 0) == read_all(source.bootstrap, "ingest.stats", 0)


@pytest.mark.slow
def test_target_expiring_the_idle_producer_id_loses_and_duplicates_nothing(make_broker, tmp_path: Path) -> None:
    """The target forgets the mirror's producer id between bursts (producer.id.expiration.ms); the mirror's
    next sequences must still land once each, in order (Kafka accepts them for a producer it no longer knows)."""
    source = make_broker(name="source")
    target = make_broker({"producer.id.expiration.ms": "1000", "producer.id.expiration.check.interval.ms": "200"},
                         name="target")
    create_topics(source.bootstrap, {"video.status": 1})
    producer = Producer({"bootstrap.servers": source.bootstrap})
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    try:
        for round_ in range(3):
            for i in range(50):
                producer.produce("video.status", value=f"{round_}-{i}".encode())
                producer.flush(10)  # one batch each
            wait_until(lambda r=round_: end_offsets(target.bootstrap, "video.status", 1) == [50 * (r + 1)], 60,
                       f"round {round_}", mirror.logs)
            time.sleep(2.5)  # idle past producer.id.expiration.ms
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    assert read_all(target.bootstrap, "video.status", 0) == read_all(source.bootstrap, "video.status", 0)
