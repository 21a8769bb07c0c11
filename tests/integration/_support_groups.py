"""Helpers the consumer-group tests share: group consumers and waiting for a settled assignment.

librdkafka serves rebalances inside `poll()`, so a test driving several confluent consumers polls them
round-robin until the condition holds; kafka-python consumers are driven the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message

from testkit.clients import FAST_CLIENT

# Members notice a rebalance on their next heartbeat: keep that short so tests settle in ~1 s.
SESSION_MS = 6000
HEARTBEAT_MS = 500


def group_consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": SESSION_MS,
        "heartbeat.interval.ms": HEARTBEAT_MS,
        "fetch.wait.max.ms": 100,
        **FAST_CLIENT,
        **extra,
    }
    return Consumer(config)


def owned(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def poll_until(consumers: Sequence[Consumer], done: Callable[[], bool], timeout: float = 20.0,
               on_message: Callable[[Consumer, Message], None] | None = None) -> None:
    """Poll every consumer in turn until `done()`; messages go to `on_message` (errors fail the test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for consumer in consumers:
            msg = consumer.poll(0.05)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise AssertionError(f"consumer error: {msg.error()}")
            if on_message:
                on_message(consumer, msg)
        if done():
            return
    raise AssertionError("condition not reached in time: " + repr([sorted(owned(c)) for c in consumers]))


def balanced(assigned: Sequence[set[Any]], universe: set[Any]) -> bool:
    """Every partition owned by exactly one member, and every member owns something (when it can)."""
    union: set[Any] = set().union(*assigned)
    disjoint = sum(len(a) for a in assigned) == len(union)
    everyone = all(assigned) or len(universe) < len(assigned)
    return disjoint and union == universe and everyone


def wait_balanced(consumers: Sequence[Consumer], partitions: int, timeout: float = 20.0) -> list[set[int]]:
    universe = set(range(partitions))
    poll_until(consumers, lambda: balanced([owned(c) for c in consumers], universe), timeout)
    return [owned(c) for c in consumers]
