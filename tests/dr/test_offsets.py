"""Offsets across gaps: only committed transactional data is mirrored, and group offsets translate exactly."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.processes.mirror import MirrorProcess
from dr_mirror.formats import Checkpoint
from testkit.mirror import create_topics, end_offsets, write_properties
from tests.dr._support import read_all, wait_until

TOPIC = "capture.face"


def _transactions(bootstrap: str) -> None:
    """Source offsets: 0-9 committed, 10 marker, 11-15 aborted, 16 marker, 17-26 committed, 27 marker, 28-32 plain."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "dr-test-txn", "linger.ms": 0})
    producer.init_transactions(30)
    for first, count, commit in ((0, 10, True), (100, 5, False), (200, 10, True)):
        producer.begin_transaction()
        for i in range(count):
            producer.produce(TOPIC, key=b"k", value=f"r{first + i}".encode(), partition=0)
        producer.flush(10)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(5):
        plain.produce(TOPIC, key=b"k", value=f"r{300 + i}".encode(), partition=0)
    assert plain.flush(10) == 0


def _commit(bootstrap: str, group: str, offset: int, topic: str = TOPIC) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


def _checkpoints(bootstrap: str) -> dict[str, Checkpoint]:
    out = {}
    for _, key, value in read_all(bootstrap, "primary.checkpoints.internal", 0, "read_uncommitted"):
        checkpoint = Checkpoint.decode(key, value)
        out[checkpoint.group] = checkpoint
    return out


def test_aborted_data_is_not_mirrored_and_group_offsets_translate_exactly(make_broker, tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {TOPIC: 1})
    _transactions(source.bootstrap)
    assert end_offsets(source.bootstrap, TOPIC, 1) == [33]
    # Where each source group stands -> where it must stand on the target (the next mirrored record).
    expected = {"at-start": (0, 0), "mid-first": (5, 5), "on-marker": (10, 10), "in-aborted": (13, 10),
                "mid-third": (20, 13), "on-last-marker": (27, 20), "at-end": (33, 25)}
    for group, (offset, _) in expected.items():
        _commit(source.bootstrap, group, offset)
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap,
                             sync_group_offsets_enabled="true")
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    try:
        wait_until(lambda: end_offsets(target.bootstrap, TOPIC, 1) == [25], 60, "committed data mirrored",
                   mirror.logs)
        wait_until(lambda: {g: c.downstream_offset for g, c in _checkpoints(target.bootstrap).items()}
                   == {g: d for g, (_, d) in expected.items()}, 60, "checkpoints", mirror.logs)
        checkpoints = _checkpoints(target.bootstrap)
        for group, (upstream, _) in expected.items():
            checkpoint = checkpoints[group]
            assert (checkpoint.topic, checkpoint.partition, checkpoint.upstream_offset) == (TOPIC, 0, upstream)

        def synced() -> bool:
            consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "mid-third"})
            try:
                return consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)[0].offset == 13
            finally:
                consumer.close()

        wait_until(synced, 30, "group offsets committed on the target", mirror.logs)
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    mirrored = read_all(target.bootstrap, TOPIC, 0)
    assert [v for _, _, v in mirrored] == [f"r{i}".encode() for i in (*range(10), *range(200, 210), *range(300, 305))]
    assert [o for o, _, _ in mirrored] == list(range(25))
    # A consumer failing over with the translated offset resumes exactly where it stopped on the source.
    consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "mid-third", "auto.offset.reset": "error"})
    try:
        consumer.subscribe([TOPIC])
        msg = None
        for _ in range(60):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                break
        assert msg is not None and msg.value() == b"r203"  # source offset 20 holds r203
    finally:
        consumer.close()


@pytest.mark.slow
def test_a_compacted_source_is_mirrored_with_exact_translation_across_its_holes(make_broker, tmp_path: Path) -> None:
    source = make_broker({"log.cleaner.backoff.ms": "200"}, name="source")
    target = make_broker(name="target")
    topic = "surveillance.stats"
    create_topics(source.bootstrap, {topic: 1}, {topic: {"cleanup.policy": "compact", "segment.bytes": "16384",
                                                         "min.cleanable.dirty.ratio": "0.01"}})
    producer = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 20, "compression.type": "lz4"})
    for i in range(600):  # ~120 KB: several closed segments for the cleaner
        key = f"unique{i}" if i % 25 == 0 else f"k{i % 20}"  # survivors scattered: holes between them
        producer.produce(topic, key=key.encode(), value=f"{i:04d}".encode() + os.urandom(100).hex().encode(),
                         partition=0)
        if i % 50 == 49:
            producer.flush(10)
    producer.produce(topic, key=b"last", value=b"x", partition=0)
    producer.flush(10)
    wait_until(lambda: len(read_all(source.bootstrap, topic, 0)) < 300, 60, "compaction on the source")
    # The cleaner may go on (a loaded machine cleans in several passes): the source is read once it has settled,
    # or the mirror copies fewer records than the test expects (it timed out waiting for them, in CI).
    src, settled = read_all(source.bootstrap, topic, 0), False
    while not settled:
        time.sleep(2)
        again = read_all(source.bootstrap, topic, 0)
        src, settled = again, again == src
    offsets = [o for o, _, _ in src]
    hole = next(o for prev, o in itertools.pairwise(offsets) if o != prev + 1)  # the first record after a hole
    _commit(source.bootstrap, "after-hole", hole, topic)
    _commit(source.bootstrap, "in-hole", hole - 1, topic)
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props)], tmp_path / "mirror.log").start()
    try:
        wait_until(lambda: end_offsets(target.bootstrap, topic, 1) == [len(src)], 60, "mirrored", mirror.logs)
        position = offsets.index(hole)  # the target offset of that record
        wait_until(lambda: {g: c.downstream_offset for g, c in _checkpoints(target.bootstrap).items()}
                   == {"after-hole": position, "in-hole": position}, 60, "checkpoints", mirror.logs)
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]
    assert [(k, v) for _, k, v in read_all(target.bootstrap, topic, 0)] == [(k, v) for _, k, v in src]
