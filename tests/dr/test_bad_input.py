"""Bad input: malformed settings stop start-up naming the key; a taken metrics port is replaced by a free one;
foreign records in the mirror's own topics and group offsets are skipped and counted; a record too large for the
target stops only its partition, loudly; an unreachable target is waited for, then caught up without loss or
reordering."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from contracts.ports import free_port
from contracts.processes import ROOT
from deploy.processes.mirror import MirrorProcess
from dr_mirror.formats import Checkpoint, OffsetSync
from testkit.mirror import create_topics, end_offsets, write_properties
from testkit.raw_kafka import RawKafka, produce_error
from tests.dr._support import read_all, wait_until
from tests.web._bad_records import header_name_batch, undecompressible_batch

SYNCS = "mm2-offset-syncs.dr.internal"


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


def metrics_text(port: int) -> str:
    """The exposition text on ``port``; empty while nothing answers there."""
    try:
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return ""


def test_a_second_mirror_with_the_same_metrics_port_serves_on_a_free_one(broker, tmp_path: Path) -> None:
    """Two mirrors started from one command line on one host: the second logs the port it took instead. (One
    broker for both sides, with no data topic: nothing is copied; the mirrors run, which is the point.)"""
    port = free_port()
    props = write_properties(tmp_path / "mm2.properties", broker.bootstrap, broker.bootstrap)
    args = ["--config", str(props), "--metrics-port", str(port)]
    first = MirrorProcess(args, tmp_path / "first.log").start()
    second = None
    try:
        wait_until(lambda: "dr_mirror_records" in metrics_text(port), 60, "the first mirror's metrics", first.logs)
        second = MirrorProcess(args, tmp_path / "second.log").start()
        taken = rf"dr_mirror port {port} on 127\.0\.0\.1 is taken \(.*\): serving /metrics on port (\d+) instead"
        wait_until(lambda: re.search(taken, second.logs()) is not None, 60, "the second mirror's port", second.logs)
        match = re.search(taken, second.logs())
        assert match is not None
        other = int(match.group(1))
        assert other != port and "dr_mirror_records" in metrics_text(other)
        wait_until(lambda: "mirroring primary" in second.logs(), 30, "the second mirror running", second.logs)
        assert first.proc is not None and first.proc.poll() is None
        assert second.proc is not None and second.proc.poll() is None
    finally:
        codes = [mirror.stop() for mirror in (first, second) if mirror is not None]
    assert codes == [0, 0], first.logs()[-3000:] + (second.logs()[-3000:] if second else "")


def _string(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


FOREIGN_SYNCS: list[tuple[bytes | None, bytes | None, str]] = [
    # (key, value, the reason the mirror counts)
    (b"\xff\xfe\x00garbage", b"\x00\x01\x02", "bad length"),
    (_string(b"capture.\xff\xfe") + struct.pack(">i", 0), struct.pack(">qq", 0, 0), "not UTF-8"),
    (b"[1, 2, 3]", b"[1, 2, 3]", "bad length"),
    (b"42", b"42", "bad length"),
    (b'{"topic": "capture.face", "partition": 0}', b'{"upstream": 0, "downstream": 0}', "bad length"),
    (_string(b"capture.face"), struct.pack(">q", 3), "bad length"),  # no partition, no downstream offset
    (None, None, "bad length"),
    # Well-formed but impossible: taken as a sync, the mirror would resume partition 0 at source offset 2.
    (OffsetSync("capture.face", 0, 0, 0).key(), struct.pack(">qq", -5, -7), "negative partition or offset"),
]


def _transaction(bootstrap: str, topic: str, values: list[bytes], commit: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "dr-bad-input-txn", "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in values:
        producer.produce(topic, value=value, partition=0)
    producer.flush(10)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def _plain(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(10) == 0


def _commit(bootstrap: str, group: str, topic: str, offset: int, metadata: str = "") -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset, metadata=metadata)], asynchronous=False)
    finally:
        consumer.close()


def _checkpoints(bootstrap: str) -> dict[str, int]:
    """Each group's newest checkpoint: its translated (target) offset."""
    return {c.group: c.downstream_offset for c in (Checkpoint.decode(k, v) for _, k, v in
                                                   read_all(bootstrap, "primary.checkpoints.internal", 0,
                                                            "read_uncommitted"))}


def test_foreign_offset_syncs_and_group_offsets_are_skipped_and_counted(make_broker, tmp_path: Path) -> None:
    """Garbage, the wrong shapes and impossible values in the offset-syncs topic (read whole at each start) and
    foreign group offsets: each sync record skipped and counted; data mirrored, offsets translated exactly,
    across a restart that resumes through the foreign records and the mirror's own syncs."""
    source, target = make_broker(name="source"), make_broker(name="target")
    topic = "capture.face"
    create_topics(source.bootstrap, {topic: 1, SYNCS: 1}, {SYNCS: {"retention.ms": "-1"}})
    producer = Producer({"bootstrap.servers": source.bootstrap})
    for key, value, _reason in FOREIGN_SYNCS:
        producer.produce(SYNCS, value=value, key=key, partition=0)
    assert producer.flush(10) == 0
    with RawKafka(source.bootstrap, timeout=10) as raw:  # batches the mirror's client cannot decode: 3 records
        assert produce_error(raw, SYNCS, 0, header_name_batch(b"\xff\xfe-name", b"k", b"v"))[0] == 0
        assert produce_error(raw, SYNCS, 0, undecompressible_batch(2))[0] == 0
    # Source 0-4 committed, 5 marker, 6-8 aborted, 9 marker, 10-14 plain: data topics are copied as they are,
    # whatever they hold (garbage, the wrong JSON shapes, missing fields).
    _transaction(source.bootstrap, topic, [f"r{i}".encode() for i in range(5)], commit=True)
    _transaction(source.bootstrap, topic, [b"aborted"] * 3, commit=False)
    _plain(source.bootstrap, topic, [b"\xff\xfe\x00garbage", b"[1, 2, 3]", b"42", b'{"unrelated": true}',
                                     b'{"record_id": "x"}'])
    # Where groups stand -> where they must stand on the target (the next mirrored record).
    expected = {"mid-first": (3, 3), "in-aborted": (7, 5), "on-marker": (9, 5), "mid-plain": (12, 7)}
    for group, (offset, _) in expected.items():
        _commit(source.bootstrap, group, topic, offset)
    _commit(source.bootstrap, "foreign-beyond-the-end", topic, 10**12, metadata="{[ not ours")
    _commit(source.bootstrap, "foreign-unmirrored-topic", SYNCS, 5)
    port = free_port()
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props), "--metrics-port", str(port)], tmp_path / "mirror.log")
    reasons = {reason: sum(1 for *_, r in FOREIGN_SYNCS if r == reason) for *_, reason in FOREIGN_SYNCS}
    reasons["undecodable batch"] = 3

    def run(what: str, target_end: int) -> None:
        mirror.start()
        wait_until(lambda: end_offsets(target.bootstrap, topic, 1) == [target_end], 60, f"{what}: data", mirror.logs)
        translated = {g: d for g, (_, d) in expected.items()}
        wait_until(lambda: _checkpoints(target.bootstrap) == translated, 60, f"{what}: checkpoints", mirror.logs)
        skipped = {s.labels["reason"]: s.value for f in text_string_to_metric_families(metrics_text(port))
                   for s in f.samples if s.name == "dr_mirror_records_skipped_total" and s.labels["topic"] == SYNCS}
        assert skipped == reasons
        assert mirror.stop() == 0, mirror.logs()[-3000:]

    try:
        run("first run", 10)
        # Source 15-17 aborted, 18 marker, 19-21 plain: a new gap, synced by the restarted mirror.
        _transaction(source.bootstrap, topic, [b"aborted"] * 3, commit=False)
        _plain(source.bootstrap, topic, [b"after-1", b"after-2", b"after-3"])
        expected["after-restart"] = (20, 11)
        _commit(source.bootstrap, "after-restart", topic, 20)
        run("restart", 13)
    finally:
        mirror.stop()
    assert [v for _, _, v in read_all(target.bootstrap, topic, 0)] == [
        v for _, _, v in read_all(source.bootstrap, topic, 0)]
    assert mirror.logs().count("skipping a record that is not an offset sync") == 2 * sum(reasons.values())


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
