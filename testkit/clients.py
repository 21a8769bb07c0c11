"""Helpers the interop tests and the broker benchmarks share: topic creation, draining a partition, and reading
stored batches.

Reading the partition's `.log` files directly is how the tests prove what a client claims (that a
batch was really compressed, with which codec) instead of trusting a round trip that would also pass
if both sides silently skipped compression.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bus.protocol import records as rb

# Fail fast: a broker that stopped answering should fail a test in seconds, not minutes.
FAST_CLIENT = {
    "socket.timeout.ms": 5000,
    "socket.connection.setup.timeout.ms": 5000,
    "reconnect.backoff.ms": 50,
    "reconnect.backoff.max.ms": 500,
    "retry.backoff.ms": 50,
    "topic.metadata.refresh.interval.ms": 60000,
}


def producer_config(bootstrap: str, **extra: object) -> dict[str, object]:
    return {"bootstrap.servers": bootstrap, "message.timeout.ms": 8000, "linger.ms": 5, **FAST_CLIENT, **extra}


def consumer_config(bootstrap: str, **extra: object) -> dict[str, object]:
    """An assign()-only consumer that never commits (confluent-kafka insists on a group.id even then)."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": "assign-only",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "fetch.wait.max.ms": 100,
        "enable.partition.eof": True,
        "check.crcs": True,  # a batch the broker damaged (offset/timestamp rewrites) must not pass unnoticed
        **FAST_CLIENT,
        **extra,
    }


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=5, request_timeout=10,
    )
    futures[name].result(timeout=10)


def consume(bootstrap: str, topic: str, partition: int = 0, count: int | None = None, *, start: int = 0,
            timeout: float = 10.0, **extra: object) -> list[Message]:
    """Every record of one partition from `start` up to the end (or `count` records), via assign()."""
    consumer = Consumer(consumer_config(bootstrap, **extra))
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        out: list[Message] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    if count is None or len(out) >= count:
                        return out
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            out.append(msg)
            if count is not None and len(out) >= count:
                return out
        raise AssertionError(f"timed out with {len(out)} records of {topic}-{partition} (wanted {count})")
    finally:
        consumer.close()


@dataclass(frozen=True)
class StoredBatch:
    info: rb.BatchInfo
    records: list[rb.Record]


def stored_batches(data_dir: Path, topic: str, partition: int = 0) -> list[StoredBatch]:
    """The batches of a partition as they sit in its segment files, decoded (decompressing as needed)."""
    directory = data_dir / f"{topic}-{partition}"
    out: list[StoredBatch] = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        batches, _end = rb.scan_batches_prefix(data)
        out += [StoredBatch(b, list(rb.iter_records(data, b))) for b in batches]
    return out


def log_bytes(data_dir: Path, topic: str, partition: int = 0) -> int:
    """Total size of a partition's segment files (what the records cost on disk)."""
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-{partition}").glob("*.log"))


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
