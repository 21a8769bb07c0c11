"""What the transaction tests share: transactional producers, the views each client's consumer gives of a topic,
the markers in a partition's log, and the admin clients that describe transactions."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from deploy.processes.broker import BrokerProcess
from testkit.clients import FAST_CLIENT, consume, producer_config, stored_batches

ABORT, COMMIT = 0, 1


def txn_producer(bootstrap: str, txn_id: str, timeout_ms: int = 10000, **extra: object) -> Producer:
    """A confluent transactional producer, initialised (its InitProducerId done)."""
    producer = Producer(producer_config(bootstrap, **{
        "transactional.id": txn_id, "transaction.timeout.ms": timeout_ms,
        "message.timeout.ms": min(timeout_ms, 8000), "socket.timeout.ms": min(timeout_ms, 5000), **extra,
    }))
    producer.init_transactions(10)
    return producer


def produce_all(producer: Producer, topic: str, values: list[bytes], partition: int = 0) -> list[int]:
    """Produce and flush; the offsets the broker acknowledged, in order."""
    offsets: list[int] = []

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        assert err is None, err
        offsets.append(msg.offset())

    for value in values:
        producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
    assert producer.flush(10) == 0
    return offsets


def committed_view(bootstrap: str, topic: str, partition: int = 0, **extra: object) -> list[tuple[int, bytes]]:
    """What a confluent read_committed consumer sees from offset 0 up to the partition's end (EOF at the LSO)."""
    got = consume(bootstrap, topic, partition, **{"isolation.level": "read_committed"}, **extra)
    return [(m.offset(), m.value()) for m in got]


def uncommitted_view(bootstrap: str, topic: str, partition: int = 0) -> list[tuple[int, bytes]]:
    got = consume(bootstrap, topic, partition, **{"isolation.level": "read_uncommitted"})
    return [(m.offset(), m.value()) for m in got]


def markers(broker: BrokerProcess, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(offset, COMMIT/ABORT) of every control batch stored in the partition's segments."""
    out = []
    for batch in stored_batches(broker.data_dir, topic, partition):
        if batch.info.is_control:
            [record] = batch.records
            assert record.key is not None
            out.append((batch.info.base_offset, int.from_bytes(record.key[2:4], "big")))
    return out


def list_offset(bootstrap: str, topic: str, committed: bool, partition: int = 0) -> int:
    """ListOffsets(latest) through confluent's AdminClient: the LSO for read_committed, else the high watermark."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    tp = TopicPartition(topic, partition)
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    result = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=level, request_timeout=10)
    return int(result[tp].result(10).offset)


def kafka_python_admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)


def describe_txn(bootstrap: str, txn_id: str) -> Any:
    admin = kafka_python_admin(bootstrap)
    try:
        return admin.describe_transactions([txn_id])[txn_id]
    finally:
        admin.close()


def state_name(description: Any) -> str:
    state = description.state
    return getattr(state, "value", state)


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1) -> Any:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def kafka_python_view(bootstrap: str, topic: str, end: int, isolation: str) -> list[tuple[int, bytes]]:
    """kafka-python's consumer from offset 0 until its position reaches `end` (it skips markers/aborts)."""
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest", request_timeout_ms=10000, fetch_max_wait_ms=100)
    tp = KTP(topic, 0)
    out: list[tuple[int, bytes]] = []
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = time.monotonic() + 10
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"kafka-python stuck at {consumer.position(tp)} of {end}: {out}"
            for records in consumer.poll(timeout_ms=200).values():
                out += [(r.offset, r.value) for r in records]
    finally:
        consumer.close()
    return out


def aiokafka_view(bootstrap: str, topic: str, end: int, isolation: str) -> list[tuple[int, bytes]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def run() -> list[tuple[int, bytes]]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        tp = ATP(topic, 0)
        out: list[tuple[int, bytes]] = []
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            deadline = time.monotonic() + 10
            while await consumer.position(tp) < end:
                assert time.monotonic() < deadline, f"aiokafka stuck at {await consumer.position(tp)} of {end}: {out}"
                for records in (await consumer.getmany(timeout_ms=200)).values():
                    out += [(r.offset, r.value) for r in records]
        finally:
            await consumer.stop()
        return out

    return asyncio.run(run())
