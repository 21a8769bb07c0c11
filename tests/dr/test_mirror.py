"""The mirror between two real broker processes: what arrives, where, at which offsets, in which bytes."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer

from bus.protocol import compression
from deploy.processes.mirror import MirrorProcess
from testkit.mirror import create_topics, end_offsets, write_properties
from tests.dr._support import disk_batches, read_all, wait_until


def _produce(bootstrap: str, topic: str, count: int, codec: str, prefix: str = "v") -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5,
                         "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, key=str(i % 11).encode(), value=f"{prefix}{i}-".encode() * 8)
    assert producer.flush(30) == 0


def test_data_topics_arrive_same_partitions_offsets_codec_and_bytes(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"capture.vehicle": 3, "capture.face": 2, "video.commands": 1})
    _produce(source.bootstrap, "capture.vehicle", 3000, "zstd")
    _produce(source.bootstrap, "capture.face", 1000, "none")
    _produce(source.bootstrap, "video.commands", 50, "none")
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    try:
        for topic, n in (("capture.vehicle", 3), ("capture.face", 2)):
            expected = end_offsets(source.bootstrap, topic, n)
            wait_until(lambda t=topic, n=n, e=expected: end_offsets(target.bootstrap, t, n) == e, 60,
                       f"{topic} mirrored", mirror.logs)
        _produce(source.bootstrap, "capture.vehicle", 500, "zstd", prefix="late")  # while running
        expected = end_offsets(source.bootstrap, "capture.vehicle", 3)
        wait_until(lambda: end_offsets(target.bootstrap, "capture.vehicle", 3) == expected, 60, "late records",
                   mirror.logs)
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    for topic, n, codec in (("capture.vehicle", 3, compression.ZSTD), ("capture.face", 2, compression.NONE)):
        for p in range(n):
            assert read_all(target.bootstrap, topic, p) == read_all(source.bootstrap, topic, p)
            src = disk_batches(source.data_dir, topic, p)
            dst = disk_batches(target.data_dir, topic, p)
            assert [(b.base_offset, b.records_count, b.compression, body) for b, body in src] == \
                   [(b.base_offset, b.records_count, b.compression, body) for b, body in dst]
            assert all(b.compression == codec for b, _ in dst)
    # Control topics stay home (the book, 10.3.6); the checkpoint topic is MM2's.
    from confluent_kafka.admin import AdminClient
    topics = set(AdminClient({"bootstrap.servers": target.bootstrap}).list_topics(timeout=10).topics)
    assert "video.commands" not in topics
    assert "primary.checkpoints.internal" in topics


def test_new_partitions_and_topics_appear_within_seconds(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"alerts": 1}, {"alerts": {"retention.ms": "86400000"}})
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    try:
        _produce(source.bootstrap, "alerts", 10, "none")
        wait_until(lambda: end_offsets(target.bootstrap, "alerts", 1) == [10], 30, "alerts mirrored", mirror.logs)
        from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions
        admin = AdminClient({"bootstrap.servers": source.bootstrap})
        admin.create_partitions([NewPartitions("alerts", 3)])["alerts"].result(10)
        create_topics(source.bootstrap, {"surveillance.hits": 2})
        started = time.monotonic()
        producer = Producer({"bootstrap.servers": source.bootstrap})
        for p in range(3):
            producer.produce("alerts", value=b"x", partition=p)
        producer.produce("surveillance.hits", value=b"hit", partition=1)
        producer.flush(10)
        wait_until(lambda: end_offsets(target.bootstrap, "alerts", 3) == [11, 1, 1]
                   and end_offsets(target.bootstrap, "surveillance.hits", 2) == [0, 1], 30, "new partitions",
                   mirror.logs)
        assert time.monotonic() - started < 15
        target_admin = AdminClient({"bootstrap.servers": target.bootstrap})
        described = target_admin.describe_configs([ConfigResource("topic", "alerts")])
        config = next(iter(described.values())).result(10)
        assert config["retention.ms"].value == "86400000"
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]


def test_legacy_flags_and_a_source_deletion_that_is_not_propagated(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"capture.vehicle": 1, "capture.face": 1})
    _produce(source.bootstrap, "capture.vehicle", 100, "gzip")
    _produce(source.bootstrap, "capture.face", 100, "none")
    consumer = tmp_path / "consumer.properties"
    consumer.write_text(f"bootstrap.servers={source.bootstrap}\n")
    producer = tmp_path / "producer.properties"
    producer.write_text(f"bootstrap.servers={target.bootstrap}\n")
    mirror = MirrorProcess(["--consumer.config", str(consumer), "--producer.config", str(producer),
                            "--whitelist", "capture\\..*", "--blacklist", "capture\\.face", "--num.streams", "2"],
                           tmp_path / "mirror.log").start()
    try:
        wait_until(lambda: end_offsets(target.bootstrap, "capture.vehicle", 1) == [100], 60, "mirrored",
                   mirror.logs)
        from confluent_kafka.admin import AdminClient
        source_admin = AdminClient({"bootstrap.servers": source.bootstrap})
        source_admin.delete_topics(["capture.vehicle"])["capture.vehicle"].result(30)
        time.sleep(12)  # two topic refreshes (the legacy default interval is 5 s)
        topics = AdminClient({"bootstrap.servers": target.bootstrap}).list_topics(timeout=10).topics
        assert "capture.vehicle" in topics and "capture.face" not in topics
        assert end_offsets(target.bootstrap, "capture.vehicle", 1) == [100]
        assert mirror.proc is not None and mirror.proc.poll() is None
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
