"""kafka-python (pure Python, its own protocol code) against a real broker process.

kafka-python negotiates versions from our ApiVersions answer and infers a broker release from it,
then picks features (zstd needs >= 2.1) from that guess, so version detection is tested explicitly.
Its codecs come from python-snappy, lz4 and zstandard (not cramjam): a missing one skips that codec.
Consumers use assign() with no group: the broker has no group coordinator yet.
"""

from __future__ import annotations

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka import codec as kcodec
from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

from bus.protocol import compression
from testkit.clients import create_topic, stored_batches, wait_until
from testkit.raw_kafka import RawKafka

BASE_TS = 1_700_000_000_000
TIMEOUTS = {"request_timeout_ms": 8000, "reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 500,
            "bootstrap_timeout_ms": 8000}


def _producer(bootstrap: str, **extra: object) -> KafkaProducer:
    # Idempotence is kafka-python 3's default; it needs InitProducerId, which the broker does not serve yet.
    options = {"enable_idempotence": False, "linger_ms": 5, **TIMEOUTS, **extra}
    return KafkaProducer(bootstrap_servers=bootstrap, **options)


def _consumer(bootstrap: str, **extra: object) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_wait_ms=100, **TIMEOUTS, **extra)


def _drain(consumer: KafkaConsumer, count: int, rounds: int = 50) -> list:  # type: ignore[type-arg]
    out: list = []  # type: ignore[type-arg]
    for _ in range(rounds):
        for records in consumer.poll(timeout_ms=200).values():
            out += records
        if len(out) >= count:
            break
    return sorted(out, key=lambda r: (r.partition, r.offset))


CODECS = [
    (None, compression.NONE, lambda: True),
    ("gzip", compression.GZIP, kcodec.has_gzip),
    ("snappy", compression.SNAPPY, kcodec.has_snappy),
    ("lz4", compression.LZ4, kcodec.has_lz4),
    ("zstd", compression.ZSTD, kcodec.has_zstd),
]


@pytest.mark.parametrize(("codec", "codec_id", "available"), CODECS, ids=[str(c[0]) for c in CODECS])
def test_codec_round_trip(shared_broker, codec: str | None, codec_id: int, available) -> None:  # type: ignore[no-untyped-def]
    """Each codec kafka-python writes is accepted, stored with that codec id, and read back intact."""
    if not available():
        pytest.skip(f"kafka-python has no {codec} library installed (python-snappy / lz4 / zstandard)")
    topic = f"kp-codec-{codec}"
    create_topic(shared_broker.bootstrap, topic)
    producer = _producer(shared_broker.bootstrap, compression_type=codec, linger_ms=50)
    count = 50
    values = [f"kafka-python {codec} {i} ".encode() * 10 for i in range(count)]
    futures = [
        producer.send(topic, value=v, key=f"k{i}".encode(), partition=0, timestamp_ms=BASE_TS + i,
                      headers=[("i", str(i).encode())])
        for i, v in enumerate(values)
    ]
    producer.flush(timeout=10)
    metas = [f.get(timeout=10) for f in futures]
    producer.close(timeout=5)
    assert [(m.partition, m.offset) for m in metas] == [(0, i) for i in range(count)]

    consumer = _consumer(shared_broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        records = _drain(consumer, count)
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp, r.timestamp_type) for r in records] == [
        (i, f"k{i}".encode(), v, [("i", str(i).encode())], BASE_TS + i, 0) for i, v in enumerate(values)
    ]
    assert wait_until(lambda: sum(len(b.records) for b in stored_batches(shared_broker.data_dir, topic)) == count)
    assert {b.info.compression for b in stored_batches(shared_broker.data_dir, topic)} == {codec_id}


def test_null_values_and_keys(shared_broker) -> None:
    topic = "kp-nulls"
    create_topic(shared_broker.bootstrap, topic)
    producer = _producer(shared_broker.bootstrap)
    sent = [(None, b"v0"), (b"k1", None), (b"", b""), (b"k3", b"v3")]
    metas = [producer.send(topic, key=k, value=v, partition=0).get(timeout=10) for k, v in sent]
    producer.close(timeout=5)
    assert [m.offset for m in metas] == [0, 1, 2, 3]
    consumer = _consumer(shared_broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        records = _drain(consumer, len(sent))
    finally:
        consumer.close()
    assert [(r.offset, r.key, r.value) for r in records] == [(i, k, v) for i, (k, v) in enumerate(sent)]


def test_offsets_lookups(shared_broker) -> None:
    """beginning_offsets / end_offsets / offsets_for_times answer exactly, across several batches."""
    topic = "kp-offsets"
    create_topic(shared_broker.bootstrap, topic, partitions=2)
    producer = _producer(shared_broker.bootstrap, linger_ms=0)
    for i in range(8):
        producer.send(topic, value=str(i).encode(), partition=0, timestamp_ms=BASE_TS + i * 1000).get(timeout=10)
    producer.close(timeout=5)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    consumer = _consumer(shared_broker.bootstrap)
    try:
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 8, tp1: 0}
        found = consumer.offsets_for_times({tp0: BASE_TS + 2500, tp1: BASE_TS})
        assert found[tp1] is None
        assert (found[tp0].offset, found[tp0].timestamp) == (3, BASE_TS + 3000)
        assert consumer.offsets_for_times({tp0: BASE_TS + 7001})[tp0] is None
        assert consumer.offsets_for_times({tp0: 0})[tp0].offset == 0

        consumer.assign([tp0])
        consumer.seek(tp0, found[tp0].offset)
        records = _drain(consumer, 5)
        assert [(r.offset, r.value) for r in records] == [(i, str(i).encode()) for i in range(3, 8)]
    finally:
        consumer.close()


def test_api_version_detection(shared_broker) -> None:
    """kafka-python's broker-release guess comes from our ApiVersions answer and is modern enough
    (>= 3.0) that it enables every feature it has (zstd needs 2.1, headers 0.11)."""
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    with RawKafka(shared_broker.bootstrap) as raw:
        answer = raw.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    assert answer.error_code.value == 0
    served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert served[18][0] == 0 and served[0][0] == 0  # ApiVersions v0 and Produce v0 stay advertised

    producer = _producer(shared_broker.bootstrap)
    try:
        inferred = producer.config["api_version"]
    finally:
        producer.close(timeout=5)
    assert inferred == infer_broker_version_from_api_versions(served)
    assert inferred >= (3, 0), inferred


def test_many_partitions_default_partitioner(shared_broker) -> None:
    """kafka-python's murmur2 partitioner spreads keys; every partition reads back exactly its records."""
    from kafka.partitioner.default import murmur2

    topic = "kp-partitions"
    partitions = 6
    create_topic(shared_broker.bootstrap, topic, partitions=partitions)
    producer = _producer(shared_broker.bootstrap)
    keys = [f"device-{i % 20}".encode() for i in range(120)]
    futures = [producer.send(topic, key=k, value=str(i).encode()) for i, k in enumerate(keys)]
    producer.flush(timeout=10)
    metas = [f.get(timeout=10) for f in futures]
    producer.close(timeout=5)
    for key, meta in zip(keys, metas, strict=True):
        assert meta.partition == (murmur2(key) & 0x7FFFFFFF) % partitions
    consumer = _consumer(shared_broker.bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        records = _drain(consumer, len(keys))
        ends = consumer.end_offsets(tps)
    finally:
        consumer.close()
    assert sorted((r.partition, r.offset, r.value) for r in records) == sorted(
        (m.partition, m.offset, str(i).encode()) for i, m in enumerate(metas)
    )
    assert ends == {TopicPartition(topic, p): sum(1 for m in metas if m.partition == p) for p in range(partitions)}


def test_default_producer_is_idempotent_and_works(shared_broker) -> None:
    """kafka-python's out-of-the-box producer (idempotent, acks=all) is what applications get."""
    topic = "kp-default-producer"
    create_topic(shared_broker.bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, **TIMEOUTS)
    try:
        assert producer.config["enable_idempotence"] is True
        metas = [producer.send(topic, value=f"{i}".encode(), partition=0).get(timeout=10) for i in range(3)]
    finally:
        producer.close(timeout=5)
    assert [m.offset for m in metas] == [0, 1, 2]
    batches = stored_batches(shared_broker.data_dir, topic)
    assert all(b.info.producer_id >= 0 for b in batches)
    assert [b.info.base_sequence for b in batches] == [0, 1, 2]
