"""Topic config changes take effect on the running partitions, and survive a restart.

AlterConfigs/IncrementalAlterConfigs only commit metadata records; these tests prove the records
reach the live logs (retention runs with the new retention.ms, appends obey the new
max.message.bytes) rather than just changing what DescribeConfigs reports.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from deploy.processes.broker import BrokerProcess

TIMEOUT = 10.0


@pytest.fixture
def live_broker(make_broker: Callable[..., BrokerProcess]) -> BrokerProcess:
    """A broker that checks retention every 100 ms instead of every 5 minutes."""
    return make_broker({"log.retention.check.interval.ms": "100"})


def _set(admin: AdminClient, topic: str, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("topic", topic, incremental_configs=[entry])
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    """Produce `values` to partition 0 and return each delivery error (None when delivered)."""
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "message.timeout.ms": 5000})
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda err, _msg: errors.append(err))
        producer.flush(TIMEOUT)  # one batch per value
    return errors


def _earliest(admin: AdminClient, topic: str) -> int:
    tp = TopicPartition(topic, 0)
    return admin.list_offsets({tp: OffsetSpec.earliest()})[tp].result(TIMEOUT).offset


def _wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_retention_change_applies_to_running_log(live_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": live_broker.bootstrap})
    # segment.ms=100: the second batch, produced later, rolls a new segment so the first can expire
    admin.create_topics([NewTopic("retained", 1, config={"segment.ms": "100"})])["retained"].result(TIMEOUT)
    assert _produce(live_broker.bootstrap, "retained", [b"a", b"b", b"c"]) == [None] * 3
    time.sleep(0.3)
    assert _produce(live_broker.bootstrap, "retained", [b"d"]) == [None]
    time.sleep(0.3)  # several retention checks under the default 7-day retention.ms: nothing goes
    assert _earliest(admin, "retained") == 0

    _set(admin, "retained", "retention.ms", "100")
    assert _wait_for(lambda: _earliest(admin, "retained") == 3), "old segment not deleted after retention.ms change"

    live_broker.restart()  # the override is in the metadata log, not just in memory
    admin = AdminClient({"bootstrap.servers": live_broker.bootstrap})
    resource = ConfigResource("topic", "retained")
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT)
    assert configs["retention.ms"].value == "100"
    assert _earliest(admin, "retained") == 3


def test_max_message_bytes_change_applies_to_appends(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("limited", 1)])["limited"].result(TIMEOUT)
    assert _produce(broker.bootstrap, "limited", [b"x" * 2000]) == [None]

    _set(admin, "limited", "max.message.bytes", "1000")
    (error,) = _produce(broker.bootstrap, "limited", [b"x" * 2000])
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce(broker.bootstrap, "limited", [b"small"]) == [None]

    # AlterConfigs replaces the override set: without max.message.bytes the default applies again
    resource = ConfigResource("topic", "limited", set_config={"retention.ms": "86400000"})
    admin.alter_configs([resource])[resource].result(TIMEOUT)
    assert _produce(broker.bootstrap, "limited", [b"x" * 2000]) == [None]
