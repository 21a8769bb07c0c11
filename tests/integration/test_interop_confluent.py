"""confluent-kafka (librdkafka) against a real broker process: librdkafka is the strictest common judge.

Consumers use assign() with explicit partitions: the broker has no group coordinator yet. Every test
uses its own topic on one broker per module, so the module stays fast and tests stay independent.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, Producer, TopicPartition
from kafka.partitioner.default import murmur2

from bus.protocol import compression
from bus.protocol import records as rb
from testkit.clients import (
    consume,
    consumer_config,
    create_topic,
    log_bytes,
    producer_config,
    stored_batches,
    wait_until,
)
from testkit.raw_kafka import RawKafka, produce_error

BASE_TS = 1_700_000_000_000  # a fixed CreateTime so timestamps can be asserted exactly


class Deliveries:
    """Collects delivery reports: (error, partition, offset, value) per acknowledged or failed record."""

    def __init__(self) -> None:
        self.reports: list[tuple[KafkaError | None, int, int, bytes | None]] = []

    def __call__(self, err, msg) -> None:  # type: ignore[no-untyped-def]
        self.reports.append((err, msg.partition(), msg.offset(), msg.value()))

    @property
    def errors(self) -> list[KafkaError]:
        return [err for err, *_ in self.reports if err is not None]


def _produce_all(producer: Producer, records: list[dict], deliveries: Deliveries) -> None:
    for record in records:
        producer.produce(on_delivery=deliveries, **record)
        producer.poll(0)
    assert producer.flush(15) == 0, "records still queued after flush"
    assert deliveries.errors == []


# librdkafka enables LZ4 only if the broker advertises FindCoordinator v0 (rdkafka_feature.c ties the LZ4
# feature to that API, released with it in 0.8.2); without it, lz4 batches silently go out uncompressed.
CODECS = [
    ("none", compression.NONE),
    ("gzip", compression.GZIP),
    ("snappy", compression.SNAPPY),
    ("lz4", compression.LZ4),
    ("zstd", compression.ZSTD),
]


@pytest.mark.parametrize(("codec", "codec_id"), CODECS)
def test_codec_round_trip(shared_broker, codec: str, codec_id: int) -> None:
    """Each codec librdkafka writes is stored as sent (same codec id on disk) and read back intact."""
    topic = f"cf-codec-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    count = 60
    records = [
        {"topic": topic, "partition": 0, "key": f"key-{i}".encode(), "value": f"value-{i}-".encode() + b"abc" * 40,
         "headers": [("seq", str(i).encode())], "timestamp": BASE_TS + i}
        for i in range(count)
    ]
    deliveries = Deliveries()
    producer = Producer(producer_config(shared_broker.bootstrap, **{"compression.codec": codec, "linger.ms": 50}))
    _produce_all(producer, records, deliveries)
    assert sorted(offset for _, _, offset, _ in deliveries.reports) == list(range(count))

    messages = consume(shared_broker.bootstrap, topic, count=count)
    got = [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()) for m in messages]
    assert got == [
        (i, r["key"], r["value"], r["headers"], (TIMESTAMP_CREATE_TIME, r["timestamp"])) for i, r in enumerate(records)
    ]

    assert wait_until(lambda: sum(len(b.records) for b in stored_batches(shared_broker.data_dir, topic)) == count)
    batches = stored_batches(shared_broker.data_dir, topic)
    assert {b.info.compression for b in batches} == {codec_id}
    assert [r.value for b in batches for r in b.records] == [r["value"] for r in records]


def test_keys_null_values_headers_timestamps(shared_broker) -> None:
    """The edge cases of the record format survive: null/empty keys and values, repeated and null headers."""
    topic = "cf-edge-cases"
    create_topic(shared_broker.bootstrap, topic)
    records = [
        {"key": None, "value": b"no key", "headers": None, "timestamp": BASE_TS},
        {"key": b"tombstone", "value": None, "headers": None, "timestamp": BASE_TS + 1},
        {"key": b"", "value": b"", "headers": None, "timestamp": BASE_TS + 2},
        {"key": b"h", "value": b"headers", "headers": [("a", b"1"), ("a", b"2"), ("null", None), ("", b"")],
         "timestamp": BASE_TS + 3},
        {"key": "浙AWL999".encode(), "value": bytes(range(256)), "headers": [("bin", bytes(range(256)))],
         "timestamp": BASE_TS - 86_400_000},  # older than the previous record: timestamps need not be ordered
        {"key": b"big-ts", "value": b"x", "headers": None, "timestamp": 4_102_444_800_000},  # year 2100
    ]
    deliveries = Deliveries()
    producer = Producer(producer_config(shared_broker.bootstrap))
    _produce_all(producer, [{"topic": topic, "partition": 0, **r} for r in records], deliveries)

    messages = consume(shared_broker.bootstrap, topic, count=len(records))
    got = [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in messages]
    assert got == [(i, r["key"], r["value"], r["headers"], r["timestamp"]) for i, r in enumerate(records)]


def test_offsets_for_times(shared_broker) -> None:
    """ListOffsets by timestamp: the first offset whose timestamp is >= the target, -1 past the end."""
    topic = "cf-offsets-for-times"
    create_topic(shared_broker.bootstrap, topic)
    deliveries = Deliveries()
    producer = Producer(producer_config(shared_broker.bootstrap, **{"linger.ms": 0}))
    for i in range(10):  # one batch per record, so the lookup must search across batches
        producer.produce(topic, partition=0, value=str(i).encode(), timestamp=BASE_TS + i * 1000,
                         on_delivery=deliveries)
        producer.flush(5)
    assert deliveries.errors == []

    consumer = Consumer(consumer_config(shared_broker.bootstrap))
    try:
        cases = {BASE_TS - 1: 0, BASE_TS: 0, BASE_TS + 2500: 3, BASE_TS + 3000: 3, BASE_TS + 9000: 9,
                 BASE_TS + 9001: -1}
        for target, expected in cases.items():
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=5)
            assert found.error is None
            assert (target, found.offset) == (target, expected)
    finally:
        consumer.close()


def test_get_watermark_offsets(shared_broker) -> None:
    """Low and high watermarks come from the broker (cached=False), before and after producing."""
    topic = "cf-watermarks"
    create_topic(shared_broker.bootstrap, topic)
    consumer = Consumer(consumer_config(shared_broker.bootstrap))
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False) == (0, 0)
        producer = Producer(producer_config(shared_broker.bootstrap))
        for i in range(7):
            producer.produce(topic, partition=0, value=str(i).encode())
        assert producer.flush(10) == 0
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False) == (0, 7)
    finally:
        consumer.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(shared_broker, acks: str) -> None:
    """Every acks level stores every record once, in order; acks 1/all report the exact offsets."""
    topic = f"cf-acks-{acks}"
    create_topic(shared_broker.bootstrap, topic)
    deliveries = Deliveries()
    producer = Producer(producer_config(shared_broker.bootstrap, acks=acks, **{"linger.ms": 1}))
    values = [f"acks-{acks}-{i}".encode() for i in range(40)]
    _produce_all(producer, [{"topic": topic, "partition": 0, "value": v} for v in values], deliveries)
    if acks != "0":  # with acks=0 the broker sends no response, so there is no offset to report
        assert [(p, o, v) for _, p, o, v in deliveries.reports] == [(0, i, v) for i, v in enumerate(values)]
    messages = consume(shared_broker.bootstrap, topic, count=len(values))
    assert [(m.offset(), m.value()) for m in messages] == list(enumerate(values))


def test_many_partitions_and_key_partitioning(shared_broker) -> None:
    """Keyed records land where the Java partitioner (murmur2) says, and each partition reads back its own."""
    topic = "cf-partitions"
    partitions = 8
    create_topic(shared_broker.bootstrap, topic, partitions=partitions)
    deliveries = Deliveries()
    producer = Producer(producer_config(shared_broker.bootstrap, partitioner="murmur2_random"))
    keys = [f"checkpoint-{i % 30}".encode() for i in range(150)]
    for i, key in enumerate(keys):
        producer.produce(topic, key=key, value=f"{i}".encode(), on_delivery=deliveries)
    producer.produce(topic, key=b"pinned", value=b"explicit", partition=5, on_delivery=deliveries)
    assert producer.flush(15) == 0
    assert deliveries.errors == []

    expected: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i, key in enumerate(keys):
        expected[(murmur2(key) & 0x7FFFFFFF) % partitions].append(f"{i}".encode())
    expected[5].append(b"explicit")
    by_partition: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    for _, partition, offset, value in deliveries.reports:
        by_partition[partition].append((offset, value))
    for p in range(partitions):
        assert sorted(by_partition[p]) == list(enumerate(expected[p])), f"partition {p}"
    assert sum(1 for p in expected.values() if p) >= 6, "30 keys should spread over most of 8 partitions"

    consumer = Consumer(consumer_config(shared_broker.bootstrap))
    try:
        for p in range(partitions):
            low_high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
            assert low_high == (0, len(expected[p])), f"partition {p}"
    finally:
        consumer.close()
    for p in range(partitions):
        if expected[p]:
            messages = consume(shared_broker.bootstrap, topic, p, count=len(expected[p]))
            assert [(m.partition(), m.offset(), m.value()) for m in messages] == [
                (p, i, v) for i, v in enumerate(expected[p])
            ]


def test_large_batches(shared_broker) -> None:
    """Batches near the 1 MB limit go in whole and come out whole, even when the consumer's fetch
    limits are smaller than one batch (the broker must still return the first batch)."""
    topic = "cf-large-batches"
    create_topic(shared_broker.bootstrap, topic)
    count = 3000
    values = [f"{i:08d}".encode() + bytes((i + j) % 251 for j in range(992)) for i in range(count)]
    producer = Producer(producer_config(shared_broker.bootstrap, **{
        "linger.ms": 200, "batch.size": 1_000_000, "batch.num.messages": 10_000, "compression.codec": "none"}))
    deliveries = Deliveries()
    _produce_all(producer, [{"topic": topic, "partition": 0, "value": v} for v in values], deliveries)
    assert sorted(o for _, _, o, _ in deliveries.reports) == list(range(count))

    messages = consume(shared_broker.bootstrap, topic, count=count, timeout=20,
                       **{"fetch.max.bytes": 200_000, "message.max.bytes": 100_000,
                          "max.partition.fetch.bytes": 100_000})
    assert [m.offset() for m in messages] == list(range(count))
    assert [m.value() for m in messages] == values
    batches = stored_batches(shared_broker.data_dir, topic)
    assert sum(len(b.records) for b in batches) == count
    assert max(b.info.size for b in batches) > 500_000, [b.info.size for b in batches]


def test_lz4_is_really_compressed_on_disk(shared_broker) -> None:
    """librdkafka's lz4 is really on (it needs Produce v0 advertised, KAFKA-18659, and FindCoordinator v0)
    and the broker keeps the compressed bytes: 1 MB of compressible values costs a fraction of that on disk."""
    topic = "cf-lz4-disk"
    create_topic(shared_broker.bootstrap, topic)
    count = 1000
    values = [(f"vehicle {i:06d} plate=浙AWL999 colour=white " * 30).encode()[:1000] for i in range(count)]
    payload = sum(len(v) for v in values)
    producer = Producer(producer_config(shared_broker.bootstrap, **{"compression.codec": "lz4", "linger.ms": 100}))
    deliveries = Deliveries()
    _produce_all(producer, [{"topic": topic, "partition": 0, "value": v} for v in values], deliveries)
    messages = consume(shared_broker.bootstrap, topic, count=count)
    assert [m.value() for m in messages] == values
    assert wait_until(lambda: log_bytes(shared_broker.data_dir, topic) > 0)
    on_disk = log_bytes(shared_broker.data_dir, topic)
    assert on_disk < payload / 10, f"{on_disk} bytes on disk for {payload} bytes of compressible values"
    assert {b.info.compression for b in stored_batches(shared_broker.data_dir, topic)} == {compression.LZ4}


def test_produce_then_consume_latency_is_low(shared_broker) -> None:
    """A consumer already waiting (long-poll fetch) sees a new record promptly, not after fetch.wait.max.ms."""
    topic = "cf-long-poll"
    create_topic(shared_broker.bootstrap, topic)
    consumer = Consumer(consumer_config(shared_broker.bootstrap, **{"fetch.wait.max.ms": 10_000}))
    producer = Producer(producer_config(shared_broker.bootstrap, **{"linger.ms": 0}))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        # The first fetch of an empty partition is now parked at the broker for up to 10 s.
        deadline = time.monotonic() + 0.7
        while time.monotonic() < deadline:
            assert consumer.poll(0.1) is None
        time.sleep(0.3)
        sent = time.monotonic()
        producer.produce(topic, partition=0, value=b"wake up")
        producer.flush(5)
        while time.monotonic() - sent < 10:
            msg = consumer.poll(0.05)
            if msg is not None and not msg.error():
                break
        elapsed = time.monotonic() - sent
        assert msg is not None and msg.value() == b"wake up" and msg.offset() == 0
        assert elapsed < 2.0, f"record took {elapsed:.2f}s to reach a waiting consumer (fetch.wait.max.ms=10000)"
    finally:
        consumer.close()


def test_start_inside_a_batch_and_out_of_range_resets(shared_broker) -> None:
    """Fetching from an offset inside a compressed batch returns that batch and the client skips ahead;
    an offset past the end is OFFSET_OUT_OF_RANGE, which auto.offset.reset turns into earliest/latest."""
    topic = "cf-fetch-positions"
    create_topic(shared_broker.bootstrap, topic)
    # One gzip batch of ten records, built here so the batching is certain (librdkafka may split).
    batch = rb.build_batch([(i, BASE_TS + i, None, f"v{i}".encode()) for i in range(10)], base_offset=0,
                           compression=compression.GZIP)
    with RawKafka(shared_broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, batch) == (0, 0)
    assert [(b.info.base_offset, b.info.records_count) for b in stored_batches(shared_broker.data_dir, topic)] == [
        (0, 10)]

    mid = consume(shared_broker.bootstrap, topic, start=6, count=4)
    assert [(m.offset(), m.value()) for m in mid] == [(i, f"v{i}".encode()) for i in range(6, 10)]

    reset = consume(shared_broker.bootstrap, topic, start=500, count=10, **{"auto.offset.reset": "earliest"})
    assert [m.offset() for m in reset] == list(range(10))

    consumer = Consumer(consumer_config(shared_broker.bootstrap, **{"auto.offset.reset": "latest"}))
    try:
        consumer.assign([TopicPartition(topic, 0, 500)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and msg.error() and msg.error().code() == KafkaError._PARTITION_EOF:
                assert msg.offset() == 10  # reset to the log end, not to 500 and not to 0
                break
            assert msg is None, f"unexpected record at offset {msg.offset()}: {msg.value()!r}"
        else:
            pytest.fail("consumer never reached EOF after resetting to latest")
    finally:
        consumer.close()


def test_one_consumer_over_many_partitions(shared_broker) -> None:
    """One consumer assigned to 6 partitions: multi-partition fetches, each partition's order kept and
    the response size budget (fetch.max.bytes) shared across partitions without losing any record."""
    topic = "cf-multi-fetch"
    create_topic(shared_broker.bootstrap, topic, partitions=6)
    producer = Producer(producer_config(shared_broker.bootstrap))
    expected = {p: [f"p{p}-{i}-".encode() + b"z" * 300 for i in range(40)] for p in range(6)}
    for i in range(40):
        for p in range(6):
            producer.produce(topic, partition=p, value=expected[p][i])
    assert producer.flush(10) == 0
    consumer = Consumer(consumer_config(shared_broker.bootstrap, **{
        "fetch.max.bytes": 20_000, "message.max.bytes": 10_000, "max.partition.fetch.bytes": 5_000}))
    got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(6)}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(6)])
        deadline = time.monotonic() + 15
        while sum(map(len, got.values())) < 240 and time.monotonic() < deadline:
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error():
                got[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    assert got == {p: list(enumerate(expected[p])) for p in range(6)}


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_log_append_time_topic(shared_broker, codec: str) -> None:
    """message.timestamp.type=LogAppendTime: the broker stamps each batch (rewriting attributes, max
    timestamp and CRC); consumers verifying CRCs see the broker's time as LOG_APPEND_TIME for every record,
    and the delivery report carries it too."""
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

    topic = f"cf-log-append-time-{codec}"
    create_topic(shared_broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    deliveries: list[tuple[int, int]] = []
    producer = Producer(producer_config(shared_broker.bootstrap, **{"compression.codec": codec, "linger.ms": 20}))
    before = int(time.time() * 1000)
    for i in range(10):
        producer.produce(topic, partition=0, value=f"stamp-{i}".encode() * 10, timestamp=BASE_TS,
                         on_delivery=lambda err, msg: deliveries.append(msg.timestamp()))
    assert producer.flush(10) == 0
    after = int(time.time() * 1000)
    messages = consume(shared_broker.bootstrap, topic, count=10)
    assert [m.value() for m in messages] == [f"stamp-{i}".encode() * 10 for i in range(10)]
    stamps = {m.timestamp() for m in messages}
    assert len(stamps) >= 1 and all(kind == TIMESTAMP_LOG_APPEND_TIME for kind, _ in stamps)
    assert all(before - 1000 <= ts <= after + 1000 for _, ts in stamps), (stamps, before, after)
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before - 1000 <= ts <= after + 1000 for kind, ts in deliveries)


def test_topic_compression_type_recompresses(shared_broker) -> None:
    """compression.type=gzip on the topic: whatever the producer sends is stored gzip-compressed, as Kafka does."""
    topic = "cf-topic-compression"
    create_topic(shared_broker.bootstrap, topic, config={"compression.type": "gzip"})
    producer = Producer(producer_config(shared_broker.bootstrap, **{"compression.codec": "none"}))
    for i in range(20):
        producer.produce(topic, partition=0, key=f"k{i}".encode(), value=b"compress me " * 20)
    assert producer.flush(10) == 0
    messages = consume(shared_broker.bootstrap, topic, count=20)
    assert [(m.offset(), m.key()) for m in messages] == [(i, f"k{i}".encode()) for i in range(20)]
    assert {b.info.compression for b in stored_batches(shared_broker.data_dir, topic)} == {compression.GZIP}


def test_admin_list_offsets_specs(shared_broker) -> None:
    """AdminClient.list_offsets: earliest, latest, max_timestamp (ListOffsets -3, which needs v7) and
    for_timestamp, each answered with the exact offset (and the record's timestamp where one applies)."""
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from testkit.clients import FAST_CLIENT

    topic = "cf-admin-list-offsets"
    create_topic(shared_broker.bootstrap, topic)
    producer = Producer(producer_config(shared_broker.bootstrap, **{"linger.ms": 0}))
    stamps = [BASE_TS + 100, BASE_TS + 900, BASE_TS + 300, BASE_TS + 900, BASE_TS + 500]  # max twice: first wins
    for i, ts in enumerate(stamps):
        producer.produce(topic, partition=0, value=str(i).encode(), timestamp=ts)
        producer.flush(5)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap, **FAST_CLIENT})
    tp = TopicPartition(topic, 0)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "max": OffsetSpec.max_timestamp(), "at-400": OffsetSpec.for_timestamp(BASE_TS + 400)}
    answers = {}
    for name, spec in specs.items():
        answers[name] = admin.list_offsets({tp: spec}, request_timeout=5)[tp].result(timeout=10)
    assert answers["earliest"].offset == 0
    assert answers["latest"].offset == 5
    assert (answers["max"].offset, answers["max"].timestamp) == (1, BASE_TS + 900)
    assert (answers["at-400"].offset, answers["at-400"].timestamp) == (1, BASE_TS + 900)
