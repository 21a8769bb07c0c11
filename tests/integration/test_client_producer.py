"""Our KafkaProducer against a real broker process: every behaviour of the Java producer we promise.

Failures are made real: a proxy answers chosen Produce requests with NOT_LEADER_OR_FOLLOWER or drops
their responses after the broker appended them, the broker is stopped to exhaust buffer.memory and
delivery.timeout.ms, and a topic's max.message.bytes forces batch splits. What the producer claims
is checked by reading the partition back with confluent-kafka (and its stored batches from disk).
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode

from bus.client.errors import (
    BufferExhaustedError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
    SerializationError,
)
from bus.client.partitioner import partition_for_key
from bus.client.producer import KafkaProducer, ProducerInterceptor, RecordMetadata
from bus.protocol import compression as codecs
from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from testkit.clients import FAST_CLIENT, consume, create_topic, stored_batches
from tests.integration._support_client_proxy import KafkaProxy

FAST = {"retry.backoff.ms": 20, "reconnect.backoff.ms": 20, "request.timeout.ms": 5000,
        "delivery.timeout.ms": 20000, "max.block.ms": 10000}


def producer(bootstrap: str, **extra: object) -> KafkaProducer:
    return KafkaProducer({"bootstrap.servers": bootstrap, **FAST, **extra})


def values_of(bootstrap: str, topic: str, partition: int = 0, count: int | None = None) -> list[bytes]:
    return [m.value() for m in consume(bootstrap, topic, partition, count)]


def test_send_returns_metadata_and_runs_each_callback_once(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-basic", 3)
    calls: list[tuple[RecordMetadata | None, Exception | None]] = []
    lock = threading.Lock()

    def callback(md: RecordMetadata | None, exc: Exception | None) -> None:
        with lock:
            calls.append((md, exc))

    with producer(bootstrap, **{"linger.ms": 5}) as p:
        futures = [p.send("p-basic", b"v%d" % i, partition=i % 3, key=b"k%d" % i, timestamp=1_700_000_000_000 + i,
                          headers=[("h", b"x%d" % i)], callback=callback) for i in range(300)]
        p.flush(10)
        metadata = [f.get(5) for f in futures]
    assert len(calls) == 300 and all(exc is None for _, exc in calls)
    for partition in range(3):
        offsets = [md.offset for md in metadata if md.partition == partition]
        assert offsets == list(range(100))
    assert metadata[7].timestamp == 1_700_000_000_007 and metadata[7].serialized_key_size == 2
    messages = consume(bootstrap, "p-basic", 1, 100)
    assert [m.value() for m in messages] == [b"v%d" % i for i in range(1, 300, 3)]
    assert messages[0].key() == b"k1" and messages[0].headers() == [("h", b"x1")]
    assert messages[0].timestamp()[1] == 1_700_000_000_001


def test_keyed_records_land_where_java_and_librdkafka_murmur2_put_them(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-keys", 7)
    create_topic(bootstrap, "p-keys-rdkafka", 7)
    keys = [f"110110#{i}#0#0".encode() for i in range(60)]
    with producer(bootstrap) as p:
        ours = [p.send("p-keys", b"v", key=k).get(10).partition for k in keys]
    theirs: dict[bytes, int] = {}
    rdkafka = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", **FAST_CLIENT})
    for key in keys:
        rdkafka.produce("p-keys-rdkafka", b"v", key=key,
                        on_delivery=lambda err, msg: theirs.__setitem__(msg.key(), msg.partition()))
    assert rdkafka.flush(10) == 0
    assert ours == [partition_for_key(k, 7) for k in keys]
    assert ours == [theirs[k] for k in keys]


def test_null_keys_stick_to_a_partition_per_batch(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-sticky", 4)
    with producer(bootstrap, **{"batch.size": 2000, "linger.ms": 1000}) as p:
        futures = [p.send("p-sticky", b"x" * 100) for _ in range(200)]
        p.flush(10)
        partitions = [f.get(1).partition for f in futures]
    runs = sum(1 for a, b in itertools.pairwise(partitions) if a != b) + 1
    assert len(set(partitions)) > 1  # it moves on when a batch fills...
    assert runs <= 200 * 115 // 2000 + 2  # ...and only then (about one run per full batch)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_read_by_confluent(shared_broker: BrokerProcess, codec: str) -> None:
    bootstrap = shared_broker.bootstrap
    topic = f"p-codec-{codec}"
    create_topic(bootstrap, topic)
    values = [(b"%05d-" % i) + b"payload " * 12 for i in range(500)]
    with producer(bootstrap, **{"compression.type": codec, "linger.ms": 20}) as p:
        for i, value in enumerate(values):
            p.send(topic, value, key=b"key-%d" % i, partition=0)
        p.flush(10)
    assert values_of(bootstrap, topic, 0, 500) == values
    stored = stored_batches(shared_broker.data_dir, topic)
    wanted = {"gzip": codecs.GZIP, "snappy": codecs.SNAPPY, "lz4": codecs.LZ4, "zstd": codecs.ZSTD}[codec]
    assert {b.info.compression for b in stored} == {wanted}
    assert len(stored) < 50  # batched, not a batch per record
    assert all(b.info.producer_id >= 0 for b in stored)  # idempotent by default


def _proxied_broker(make_broker: object) -> tuple[BrokerProcess, int]:
    port = free_port()
    broker = make_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})  # type: ignore[operator]
    return broker, port


def test_retriable_errors_keep_order_without_duplicates(make_broker: object) -> None:
    """NOT_LEADER_OR_FOLLOWER on some requests while up to 5 are in flight: the rest arrive out of
    sequence, are rejected, retried behind the failed one, and the log still reads in send order."""
    broker, port = _proxied_broker(make_broker)
    failed = {3, 4, 9, 15}
    proxy = KafkaProxy(broker.port, lambda api, n: ("error", ErrorCode.not_leader_or_follower)
                       if api == 0 and n in failed else "forward", port=port)
    try:
        bootstrap = f"127.0.0.1:{port}"
        create_topic(broker.bootstrap, "p-order", 1)
        with producer(bootstrap, **{"batch.size": 1024, "linger.ms": 0,
                                    "max.in.flight.requests.per.connection": 5}) as p:
            futures = [p.send("p-order", b"%06d" % i, partition=0) for i in range(3000)]
            p.flush(20)
            offsets = [f.get(1).offset for f in futures]
            metrics = p.metrics()
        assert metrics["record-retry-total"] > 0
        assert offsets == list(range(3000))
        assert values_of(broker.bootstrap, "p-order", 0, 3000) == [b"%06d" % i for i in range(3000)]
    finally:
        proxy.close()


def test_lost_responses_are_retried_and_deduplicated(make_broker: object) -> None:
    broker, port = _proxied_broker(make_broker)
    proxy = KafkaProxy(broker.port, lambda api, n: "lose_response" if api == 0 and n in (2, 6) else "forward",
                       port=port)
    try:
        create_topic(broker.bootstrap, "p-dedup", 1)
        with producer(f"127.0.0.1:{port}", **{"batch.size": 2048, "linger.ms": 0}) as p:
            futures = [p.send("p-dedup", b"%05d" % i, partition=0) for i in range(1000)]
            p.flush(20)
            assert [f.get(1).offset for f in futures] == list(range(1000))
            assert p.metrics()["record-retry-total"] > 0
        assert values_of(broker.bootstrap, "p-dedup", 0) == [b"%05d" % i for i in range(1000)]
    finally:
        proxy.close()


def test_kill_9_and_restart_mid_stream_loses_and_duplicates_nothing(make_broker: object) -> None:
    broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, "p-crash", 1)
    acknowledged: list[int] = []
    errors: list[Exception] = []
    with producer(broker.bootstrap, **{"batch.size": 4096, "linger.ms": 2}) as p:
        for i in range(4000):
            if i == 2000:
                broker.kill()
                threading.Timer(0.5, broker.start).start()
            p.send("p-crash", b"%05d" % i, partition=0,
                   callback=lambda md, exc: errors.append(exc) if exc else acknowledged.append(md.offset))
        p.flush(30)
    assert not errors
    values = values_of(broker.bootstrap, "p-crash", 0)
    assert len(values) == len(set(values))  # no duplicates
    assert values == sorted(values)  # and in order
    assert set(values) == {b"%05d" % i for i in range(4000)}


def test_full_buffer_blocks_for_max_block_ms_then_raises(make_broker: object) -> None:
    broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, "p-buffer", 1)
    p = producer(broker.bootstrap, **{"buffer.memory": 64 * 1024, "batch.size": 16 * 1024, "max.block.ms": 700,
                                      "delivery.timeout.ms": 30000})
    try:
        p.send("p-buffer", b"warm", partition=0).get(10)
        broker.stop()
        started = time.monotonic()
        with pytest.raises(BufferExhaustedError):
            for _ in range(10_000):
                p.send("p-buffer", b"x" * 1000, partition=0)
        blocked = time.monotonic() - started
        assert 0.6 < blocked < 5
    finally:
        p.close(0)


def test_buffer_unblocks_when_the_broker_comes_back(make_broker: object) -> None:
    broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, "p-unblock", 1)
    p = producer(broker.bootstrap, **{"buffer.memory": 64 * 1024, "batch.size": 16 * 1024, "max.block.ms": 15000})
    try:
        p.send("p-unblock", b"warm", partition=0).get(10)
        broker.stop()
        threading.Timer(1.0, broker.start).start()
        futures = [p.send("p-unblock", b"%04d" % i + b"x" * 996, partition=0) for i in range(300)]
        p.flush(20)
        assert [f.get(1).offset for f in futures] == list(range(1, 301))
    finally:
        p.close(5)


def test_delivery_timeout_expires_records_against_a_stopped_broker(make_broker: object) -> None:
    broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, "p-expire", 2)
    p = producer(broker.bootstrap, **{"delivery.timeout.ms": 1500, "request.timeout.ms": 1000, "linger.ms": 10})
    try:
        p.send("p-expire", b"warm", partition=0).get(10)
        broker.stop()
        outcomes: list[Exception | None] = []
        started = time.monotonic()
        for i in range(50):
            p.send("p-expire", b"lost", partition=i % 2, callback=lambda md, exc: outcomes.append(exc))
        with pytest.raises(KafkaTimeoutError):
            p.send("p-expire", b"last", partition=0).get(10)
        elapsed = time.monotonic() - started
        time.sleep(0.2)
        assert 1.4 < elapsed < 6
        assert len(outcomes) == 50 and all(isinstance(e, KafkaTimeoutError) for e in outcomes)
        assert p.metrics()["record-error-total"] == 51
    finally:
        p.close(0)


def test_batches_too_large_for_the_topic_are_split(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-split", 1, {"max.message.bytes": "2000"})
    with producer(bootstrap, **{"batch.size": 64 * 1024, "linger.ms": 200}) as p:
        futures = [p.send("p-split", b"%04d" % i + b"y" * 96, partition=0) for i in range(300)]
        p.flush(20)
        assert [f.get(1).offset for f in futures] == list(range(300))
        assert p.metrics()["batch-split-total"] > 0
        with pytest.raises(RecordTooLargeError):
            p.send("p-split", b"z" * 5000, partition=0).get(10)
        assert p.send("p-split", b"after", partition=0).get(10).offset == 300
    assert values_of(bootstrap, "p-split", 0, 301) == [b"%04d" % i + b"y" * 96 for i in range(300)] + [b"after"]


def test_records_over_max_request_size_are_refused_at_send(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-huge", 1)
    with producer(bootstrap, **{"max.request.size": 10_000}) as p, pytest.raises(RecordTooLargeError):
        p.send("p-huge", b"x" * 20_000)


def test_metadata_wait_is_bounded_by_max_block_ms(make_broker: object) -> None:
    broker = make_broker({"auto.create.topics.enable": "false"})  # type: ignore[operator]
    with producer(broker.bootstrap, **{"max.block.ms": 500}) as p:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError):
            p.send("p-no-such-topic", b"x")
        assert 0.4 < time.monotonic() - started < 5


def test_close_with_zero_timeout_fails_what_was_not_sent(make_broker: object) -> None:
    broker = make_broker()  # type: ignore[operator]
    create_topic(broker.bootstrap, "p-close", 1)
    p = producer(broker.bootstrap, **{"linger.ms": 10000, "delivery.timeout.ms": 30000})
    p.send("p-close", b"warm", partition=0)
    p.flush(10)
    broker.stop()
    outcomes: list[Exception | None] = []
    future = p.send("p-close", b"never", partition=0, callback=lambda md, exc: outcomes.append(exc))
    p.close(0)
    assert isinstance(future.exception(5), ProducerClosedError)
    assert len(outcomes) == 1 and isinstance(outcomes[0], ProducerClosedError)


def test_acks_zero_and_one_without_idempotence(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-acks", 1)
    for acks in ("0", "1"):
        with producer(bootstrap, acks=acks) as p:
            futures = [p.send("p-acks", b"a%s-%d" % (acks.encode(), i), partition=0) for i in range(100)]
            p.flush(10)
            offsets = [f.get(1).offset for f in futures]
        assert offsets == ([-1] * 100 if acks == "0" else list(range(100, 200)))
    stored = stored_batches(shared_broker.data_dir, "p-acks")
    assert all(b.info.producer_id == -1 for b in stored)
    assert len(values_of(bootstrap, "p-acks", 0, 200)) == 200


class _Tagging(ProducerInterceptor):
    def __init__(self) -> None:
        self.acks: list[int] = []

    def on_send(self, record: dict) -> dict:
        return {**record, "headers": [*(record["headers"] or []), ("via", b"interceptor")]}

    def on_acknowledgement(self, metadata: RecordMetadata | None, exception: Exception | None) -> None:
        self.acks.append(metadata.offset if metadata else -1)


def test_serializers_and_interceptors(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-serde", 1)
    interceptor = _Tagging()
    with producer(bootstrap, **{"key.serializer": lambda s: s.encode(),
                                "value.serializer": lambda topic, v: repr(v).encode(),
                                "interceptor.classes": [interceptor]}) as p:
        p.send("p-serde", {"n": 1}, key="k", partition=0).get(10)
        with pytest.raises(SerializationError):
            KafkaProducer({"bootstrap.servers": bootstrap}).send("p-serde", 12345)
    [message] = consume(bootstrap, "p-serde", 0, 1)
    assert message.key() == b"k" and message.value() == b"{'n': 1}"
    assert message.headers() == [("via", b"interceptor")]
    assert interceptor.acks == [0]


def test_idempotence_is_on_by_default(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    bootstrap = shared_broker.bootstrap
    create_topic(bootstrap, "p-idem", 1)
    with producer(bootstrap) as p:
        for i in range(10):
            p.send("p-idem", b"%d" % i, partition=0)
        p.flush(10)
        assert p.metrics()["producer-id"] >= 0
    [first, *_] = stored_batches(shared_broker.data_dir, "p-idem")
    assert first.info.producer_id >= 0 and first.info.base_sequence == 0


def test_idle_producer_does_not_spin_when_the_broker_goes_away(make_broker) -> None:
    """Regression: a closed idle connection stays readable (EOF); the sender ignored it and its select
    loop spun at 100% CPU until the producer was closed (seen starving a whole CI run)."""
    broker = make_broker(name="spin")
    client = producer(broker.bootstrap)
    try:
        client.send("spin", b"x").get(10)
        broker.stop()
        started = time.process_time()
        time.sleep(2.0)
        assert time.process_time() - started < 0.5
    finally:
        client.close(1)
