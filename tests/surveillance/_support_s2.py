"""Helpers of the cloned-plate and statistics tests: wait until a stage's group has committed everything."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition


def committed_to_end(bootstrap: str, group: str, topic: str, partitions: int) -> bool:
    """Whether ``group`` has committed every partition of ``topic`` up to its end offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "log_level": 3})
    try:
        wanted = [TopicPartition(topic, p) for p in range(partitions)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=10)}
        for p in range(partitions):
            _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high > 0 and committed.get(p, -1) < high:
                return False
        return True
    finally:
        consumer.close()


def wait_committed(bootstrap: str, group: str, topic: str, partitions: int = 2, timeout: float = 60.0) -> None:
    """Block until ``group`` has processed (and committed) everything on ``topic``."""
    deadline = time.monotonic() + timeout
    while not committed_to_end(bootstrap, group, topic, partitions):
        assert time.monotonic() < deadline, f"{group} did not catch up on {topic} in {timeout} s"
        time.sleep(0.3)

