"""Helpers for the mirror's tests: topic setup, reading topics back, and the log as it sits on disk (the mirror
itself runs as `deploy.processes.mirror.MirrorProcess`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bus.protocol import records as rb


def create_topics(bootstrap: str, topics: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, n, 1, config=(configs or {}).get(t, {})) for t, n in topics.items()])
    for future in futures.values():
        future.result(30)


def write_properties(path: Path, source: str, target: str, **extra: str) -> Path:
    lines = ["clusters = primary, dr", f"primary.bootstrap.servers = {source}", f"dr.bootstrap.servers = {target}",
             "primary->dr.enabled = true", "refresh.topics.interval.seconds = 1",
             "emit.checkpoints.interval.seconds = 1", "sync.group.offsets.interval.seconds = 1"]
    lines += [f"{k.replace('__', '->').replace('_', '.')} = {v}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-test-watermarks"})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)]
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str, partition: int, isolation: str = "read_committed") -> list[tuple]:
    """(offset, key, value) of every record of one partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dr-test-reader", "enable.auto.commit": False,
                         "isolation.level": isolation, "auto.offset.reset": "earliest"})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        consumer.assign([TopicPartition(topic, partition, 0)])
        out: list[tuple] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if consumer.position([TopicPartition(topic, partition)])[0].offset >= end:
                    break
                continue
            if msg.error():
                continue
            out.append((msg.offset(), msg.key(), msg.value()))
        return out
    finally:
        consumer.close()


def wait_until(condition: Callable[[], bool], timeout: float, what: str, logs: Callable[[], str] = str) -> None:
    """Poll `condition`; a Kafka error (a topic not there yet) counts as not yet."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except KafkaException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{logs()[-4000:]}")


def disk_batches(data_dir: Path, topic: str, partition: int) -> list[tuple[rb.BatchInfo, bytes]]:
    """Every batch in the partition's segment files with its records section (compressed as stored)."""
    out = []
    for segment in sorted((data_dir / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        found, _ = rb.scan_batches_prefix(data)
        out += [(b, data[b.position + rb.BATCH_OVERHEAD : b.position + b.size]) for b in found]
    return out
