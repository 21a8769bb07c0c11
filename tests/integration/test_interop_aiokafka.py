"""aiokafka (asyncio, its own protocol code, cramjam codecs) against a real broker process.

Each test runs its own event loop with asyncio.run (no pytest-asyncio needed). Consumers use assign()
with group_id=None: the broker has no group coordinator yet.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bus.protocol import compression
from testkit.clients import create_topic, stored_batches, wait_until

BASE_TS = 1_700_000_000_000
TIMEOUTS = {"request_timeout_ms": 8000, "retry_backoff_ms": 50, "metadata_max_age_ms": 60000}


def _producer(bootstrap: str, **extra: object) -> AIOKafkaProducer:
    return AIOKafkaProducer(bootstrap_servers=bootstrap, **TIMEOUTS, **extra)


def _consumer(bootstrap: str, **extra: object) -> AIOKafkaConsumer:
    options = {"group_id": None, "enable_auto_commit": False, "auto_offset_reset": "earliest",
               "fetch_max_wait_ms": 100, **TIMEOUTS, **extra}
    return AIOKafkaConsumer(bootstrap_servers=bootstrap, **options)


async def _drain(consumer: AIOKafkaConsumer, count: int, timeout: float = 10.0) -> list:  # type: ignore[type-arg]
    out: list = []  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=200)).values():
            out += records
    return sorted(out, key=lambda r: (r.partition, r.offset))


async def _read_all(bootstrap: str, topic: str, count: int, partition: int = 0) -> list:  # type: ignore[type-arg]
    consumer = _consumer(bootstrap)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        return await _drain(consumer, count)
    finally:
        await consumer.stop()


CODECS = [
    (None, compression.NONE),
    ("gzip", compression.GZIP),
    ("snappy", compression.SNAPPY),
    ("lz4", compression.LZ4),
    ("zstd", compression.ZSTD),
]


@pytest.mark.parametrize(("codec", "codec_id"), CODECS, ids=[str(c[0]) for c in CODECS])
def test_send_and_wait_every_codec(shared_broker, codec: str | None, codec_id: int) -> None:
    """send_and_wait returns the exact offset; records (key, value, headers, timestamp) round-trip and
    the stored batches carry aiokafka's codec."""
    topic = f"aio-codec-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    count = 20
    values = [f"aiokafka {codec} {i} ".encode() * 20 for i in range(count)]

    async def scenario() -> tuple[list, list]:  # type: ignore[type-arg]
        producer = _producer(shared_broker.bootstrap, compression_type=codec)
        await producer.start()
        try:
            metas = [
                await producer.send_and_wait(topic, value=v, key=f"k{i}".encode(), partition=0,
                                             timestamp_ms=BASE_TS + i, headers=[("i", str(i).encode())])
                for i, v in enumerate(values)
            ]
        finally:
            await producer.stop()
        return metas, await _read_all(shared_broker.bootstrap, topic, count)

    metas, records = asyncio.run(scenario())
    assert [(m.partition, m.offset) for m in metas] == [(0, i) for i in range(count)]
    assert [(r.offset, r.key, r.value, list(r.headers), r.timestamp) for r in records] == [
        (i, f"k{i}".encode(), v, [("i", str(i).encode())], BASE_TS + i) for i, v in enumerate(values)
    ]
    assert wait_until(lambda: sum(len(b.records) for b in stored_batches(shared_broker.data_dir, topic)) == count)
    assert {b.info.compression for b in stored_batches(shared_broker.data_dir, topic)} == {codec_id}


def test_explicit_batches(shared_broker) -> None:
    """create_batch/send_batch: one batch of many records gets consecutive offsets from its base offset."""
    topic = "aio-batches"
    create_topic(shared_broker.bootstrap, topic)

    async def scenario() -> tuple[list[int], list]:  # type: ignore[type-arg]
        producer = _producer(shared_broker.bootstrap, compression_type="gzip")
        await producer.start()
        bases = []
        try:
            for b in range(3):
                batch = producer.create_batch()
                for i in range(25):
                    n = b * 25 + i
                    assert batch.append(key=f"k{n}".encode(), value=f"v{n}".encode(), timestamp=BASE_TS + n,
                                        headers=[("batch", str(b).encode())]) is not None
                meta = await (await producer.send_batch(batch, topic, partition=0))
                bases.append(meta.offset)
        finally:
            await producer.stop()
        return bases, await _read_all(shared_broker.bootstrap, topic, 75)

    bases, records = asyncio.run(scenario())
    assert bases == [0, 25, 50]
    assert [(r.offset, r.key, r.value, list(r.headers)) for r in records] == [
        (n, f"k{n}".encode(), f"v{n}".encode(), [("batch", str(n // 25).encode())]) for n in range(75)
    ]
    batches = stored_batches(shared_broker.data_dir, topic)
    assert [(b.info.base_offset, b.info.records_count) for b in batches] == [(0, 25), (25, 25), (50, 25)]


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(shared_broker, acks: int | str) -> None:
    topic = f"aio-acks-{acks}"
    create_topic(shared_broker.bootstrap, topic)

    async def scenario() -> tuple[list, list]:  # type: ignore[type-arg]
        producer = _producer(shared_broker.bootstrap, acks=acks, linger_ms=2)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=str(i).encode(), partition=0) for i in range(30)]
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return metas, await _read_all(shared_broker.bootstrap, topic, 30)

    metas, records = asyncio.run(scenario())
    if acks != 0:
        assert [m.offset for m in metas] == list(range(30))
    assert [(r.offset, r.value) for r in records] == [(i, str(i).encode()) for i in range(30)]


def test_long_poll_returns_promptly_when_data_arrives(shared_broker) -> None:
    """A consumer parked in a long-poll fetch (fetch_max_wait_ms=10 s) gets a new record in well under
    a second: the broker must wake waiting fetches on append, not sleep out max_wait."""
    topic = "aio-long-poll"
    create_topic(shared_broker.bootstrap, topic)

    async def scenario() -> tuple[float, object]:
        consumer = _consumer(shared_broker.bootstrap, fetch_max_wait_ms=10_000)
        producer = _producer(shared_broker.bootstrap, linger_ms=0)
        await consumer.start()
        await producer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            assert await consumer.getmany(timeout_ms=500) == {}  # empty: a fetch is now parked at the broker
            waiting = asyncio.ensure_future(consumer.getone())
            await asyncio.sleep(0.3)
            sent = time.monotonic()
            await producer.send_and_wait(topic, value=b"wake", partition=0)
            record = await asyncio.wait_for(waiting, 12)
            return time.monotonic() - sent, record
        finally:
            await producer.stop()
            await consumer.stop()

    elapsed, record = asyncio.run(scenario())
    assert (record.offset, record.value) == (0, b"wake")  # type: ignore[attr-defined]
    assert elapsed < 1.5, f"record reached the waiting consumer after {elapsed:.2f}s"


def test_end_offsets_and_offsets_for_times(shared_broker) -> None:
    topic = "aio-offsets"
    create_topic(shared_broker.bootstrap, topic)

    async def scenario() -> tuple[dict, dict, dict]:  # type: ignore[type-arg]
        producer = _producer(shared_broker.bootstrap)
        await producer.start()
        try:
            for i in range(6):
                await producer.send_and_wait(topic, value=b"x", partition=0, timestamp_ms=BASE_TS + 10 * i)
        finally:
            await producer.stop()
        consumer = _consumer(shared_broker.bootstrap)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            return (await consumer.beginning_offsets([tp]), await consumer.end_offsets([tp]),
                    await consumer.offsets_for_times({tp: BASE_TS + 25}))
        finally:
            await consumer.stop()

    begin, end, found = asyncio.run(scenario())
    tp = TopicPartition(topic, 0)
    assert begin == {tp: 0} and end == {tp: 6}
    assert (found[tp].offset, found[tp].timestamp) == (3, BASE_TS + 30)
