"""Helpers for the mirror's tests: reading topics back, waiting on the mirror, and the log as it sits on disk (the
mirror itself runs as `deploy.processes.mirror.MirrorProcess`; topic setup and its properties are
`testkit.mirror`'s)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from bus.protocol import records as rb


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
