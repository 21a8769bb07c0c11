"""Durability across crashes and restarts, with the broker as a real process.

kill -9 gives the broker no chance to flush or checkpoint: whatever it acknowledged must already be in
the OS (page cache survives a process kill), and log recovery on restart must find it, drop any torn
tail, and continue the offsets exactly where the surviving log ends. A clean SIGTERM must exit 0 and
keep topics, their configs and their data.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from bus.protocol import records as rb
from testkit.clients import FAST_CLIENT, consume, consumer_config, create_topic, producer_config


def _watermarks(bootstrap: str, topic: str, partitions: int) -> list[tuple[int, int]]:
    consumer = Consumer(consumer_config(bootstrap))
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                for p in range(partitions)]
    finally:
        consumer.close()


def _produce_until_killed(broker, topic: str, acks: str, kill_after: int) -> dict[tuple[int, int], bytes]:  # type: ignore[no-untyped-def]
    """Produce a continuous stream over 2 partitions; SIGKILL the broker from another thread once
    `kill_after` records are acknowledged, keep producing for a moment, then give up on the rest.

    Returns every acknowledged record as (partition, offset) -> value.
    """
    acked: dict[tuple[int, int], bytes] = {}
    failed: list[KafkaError] = []
    killed = threading.Event()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is None:
            acked[(msg.partition(), msg.offset())] = msg.value()
        else:
            failed.append(err)

    def killer() -> None:
        deadline = time.monotonic() + 20
        while len(acked) < kill_after and time.monotonic() < deadline:
            time.sleep(0.002)
        broker.kill()
        killed.set()

    producer = Producer(producer_config(broker.bootstrap, acks=acks, **{
        "linger.ms": 2, "batch.num.messages": 20, "message.timeout.ms": 3000, "queue.buffering.max.messages": 2000,
    }))
    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    i = 0
    stop_at: float | None = None
    while stop_at is None or time.monotonic() < stop_at:
        try:
            producer.produce(topic, partition=i % 2, value=f"record-{i:06d}".encode(), on_delivery=on_delivery)
            i += 1
        except BufferError:
            producer.poll(0.005)
        producer.poll(0)
        if killed.is_set() and stop_at is None:
            stop_at = time.monotonic() + 0.3  # records still being sent to a dead broker
    thread.join(5)
    producer.purge(in_queue=True, in_flight=True)
    producer.flush(5)
    assert len(acked) >= kill_after, f"only {len(acked)} acknowledged before the kill"
    return acked


@pytest.mark.parametrize("acks", ["1", "all"])
def test_kill_9_mid_stream_keeps_every_acknowledged_record(make_broker, acks: str) -> None:
    broker = make_broker()
    topic = f"crash-acks-{acks}"
    create_topic(broker.bootstrap, topic, partitions=2)
    acked = _produce_until_killed(broker, topic, acks, kill_after=400)

    broker.start()
    marks = _watermarks(broker.bootstrap, topic, 2)
    for p in range(2):
        low, high = marks[p]
        assert low == 0
        acked_here = {o: v for (part, o), v in acked.items() if part == p}
        assert high >= max(acked_here) + 1, f"partition {p}: high watermark {high} below an acknowledged offset"
        stored = consume(broker.bootstrap, topic, p, count=high)
        assert [m.offset() for m in stored] == list(range(high)), f"partition {p}: offsets not contiguous"
        values = {m.offset(): m.value() for m in stored}
        lost = {o: v for o, v in acked_here.items() if values.get(o) != v}
        assert not lost, f"partition {p}: {len(lost)} acknowledged records lost or changed, e.g. {sorted(lost)[:5]}"

    # New records continue right after what survived, in both partitions.
    producer = Producer(producer_config(broker.bootstrap, acks=acks))
    reports: list[tuple[int, int]] = []
    for p in range(2):
        producer.produce(topic, partition=p, value=b"after-restart",
                         on_delivery=lambda err, msg: reports.append((msg.partition(), -1 if err else msg.offset())))
    assert producer.flush(10) == 0
    assert sorted(reports) == [(p, marks[p][1]) for p in range(2)]
    after = consume(broker.bootstrap, topic, 0, start=marks[0][1], count=1)
    assert [(m.offset(), m.value()) for m in after] == [(marks[0][1], b"after-restart")]


def test_torn_tail_is_truncated_on_recovery(make_broker) -> None:
    """A crash mid-write leaves half a batch at the end of the active segment: recovery drops it, every
    whole batch survives, and the next append gets the next offset (not one after the garbage)."""
    broker = make_broker()
    topic = "crash-torn-tail"
    create_topic(broker.bootstrap, topic)
    producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 0}))
    for i in range(10):
        producer.produce(topic, partition=0, value=f"whole-{i}".encode())
        producer.flush(5)
    broker.kill()

    [segment] = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    size = segment.stat().st_size
    assert size > 0
    torn = rb.build_batch([(10, 1_700_000_000_000, None, b"torn" * 50)], base_offset=10)
    with open(segment, "ab") as f:
        f.write(torn[: len(torn) // 2])

    broker.start()
    assert _watermarks(broker.bootstrap, topic, 1) == [(0, 10)]
    assert [(m.offset(), m.value()) for m in consume(broker.bootstrap, topic, count=10)] == [
        (i, f"whole-{i}".encode()) for i in range(10)
    ]
    reports: list[int] = []
    producer = Producer(producer_config(broker.bootstrap))
    producer.produce(topic, partition=0, value=b"next", on_delivery=lambda err, msg: reports.append(msg.offset()))
    assert producer.flush(10) == 0
    assert reports == [10]
    assert [(m.offset(), m.value()) for m in consume(broker.bootstrap, topic, start=10, count=1)] == [(10, b"next")]


def test_sigterm_exits_zero_and_restart_keeps_topics_configs_and_data(make_broker) -> None:
    """A clean shutdown (with a consumer parked in a long poll) exits 0 promptly; after restart the topic,
    its partitions, its configs and its records are all still there, and offsets continue."""
    broker = make_broker()
    topic = "clean-restart"
    create_topic(broker.bootstrap, topic, partitions=3,
                 config={"retention.ms": "3600000", "max.message.bytes": "50000", "cleanup.policy": "delete"})
    producer = Producer(producer_config(broker.bootstrap))
    for p in range(3):
        for i in range(5 + p):
            producer.produce(topic, partition=p, key=f"k{i}".encode(), value=f"p{p}-{i}".encode())
    assert producer.flush(10) == 0

    parked = Consumer(consumer_config(broker.bootstrap, **{"fetch.wait.max.ms": 5000}))
    parked.assign([TopicPartition(topic, 0, 5)])
    parked.poll(0.5)
    try:
        start = time.monotonic()
        assert broker.stop() == 0
        assert time.monotonic() - start < 5, "SIGTERM shutdown took too long"
    finally:
        parked.close()
    assert "shut down cleanly" in broker.logs()

    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **FAST_CLIENT})
    metadata = admin.list_topics(topic, timeout=5)
    assert metadata.topics[topic].error is None
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=5)[resource].result(timeout=10)
    assert configs["retention.ms"].value == "3600000"
    assert configs["max.message.bytes"].value == "50000"
    assert configs["retention.ms"].source == 1  # DYNAMIC_TOPIC_CONFIG: still a topic override

    for p in range(3):
        got = [(m.offset(), m.key(), m.value()) for m in consume(broker.bootstrap, topic, p, count=5 + p)]
        assert got == [(i, f"k{i}".encode(), f"p{p}-{i}".encode()) for i in range(5 + p)]
    reports: list[tuple[int, int]] = []
    producer = Producer(producer_config(broker.bootstrap))
    producer.produce(topic, partition=2, value=b"after", on_delivery=lambda e, m: reports.append((m.partition(),
                                                                                                    m.offset())))
    assert producer.flush(10) == 0
    assert reports == [(2, 7)]


def test_restart_twice_after_kill(make_broker) -> None:
    """Recovery is repeatable: kill, restart, produce, kill again, restart: all records in order."""
    broker = make_broker()
    topic = "crash-twice"
    create_topic(broker.bootstrap, topic)
    expected: list[bytes] = []
    for round_ in range(3):
        producer = Producer(producer_config(broker.bootstrap))
        for i in range(20):
            value = f"round-{round_}-{i}".encode()
            producer.produce(topic, partition=0, value=value)
            expected.append(value)
        assert producer.flush(10) == 0
        broker.kill()
        broker.start()
    assert [m.value() for m in consume(broker.bootstrap, topic, count=len(expected))] == expected
    assert _watermarks(broker.bootstrap, topic, 1) == [(0, 60)]


def test_kill_9_with_many_segments_rebuilds_indexes(make_broker) -> None:
    """With small segments (many rolls, offset and time indexes per segment), a kill -9 and restart
    keep every record, positional reads from the middle of old segments and time look-ups still work,
    and appends continue in the active segment."""
    broker = make_broker({"log.segment.bytes": str(14 * 1024), "log.index.interval.bytes": "512"})
    topic = "crash-segments"
    create_topic(broker.bootstrap, topic)
    base_ts = 1_700_000_000_000
    producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 0, "batch.num.messages": 10}))
    values = [f"segment-record-{i:05d}-".encode() + b"q" * 150 for i in range(600)]
    for i, value in enumerate(values):
        producer.produce(topic, partition=0, value=value, timestamp=base_ts + i * 10)
        if i % 50 == 49:
            producer.flush(5)
    assert producer.flush(10) == 0
    segments = sorted((broker.data_dir / f"{topic}-0").glob("*.log"))
    assert len(segments) >= 5, f"expected several segments, got {[s.name for s in segments]}"
    broker.kill()
    broker.start()

    assert _watermarks(broker.bootstrap, topic, 1) == [(0, 600)]
    assert [m.value() for m in consume(broker.bootstrap, topic, count=600)] == values
    assert [(m.offset(), m.value()) for m in consume(broker.bootstrap, topic, start=333, count=3)] == [
        (333 + i, values[333 + i]) for i in range(3)
    ]
    consumer = Consumer(consumer_config(broker.bootstrap))
    try:
        for target, expected in ((base_ts + 4005, 401), (base_ts + 10, 1), (base_ts + 5990, 599), (base_ts + 6000, -1)):
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=5)
            assert (target, found.offset) == (target, expected)
    finally:
        consumer.close()
    reports: list[int] = []
    producer = Producer(producer_config(broker.bootstrap))
    producer.produce(topic, partition=0, value=b"after", on_delivery=lambda err, msg: reports.append(msg.offset()))
    assert producer.flush(10) == 0
    assert reports == [600]


def test_damaged_index_files_are_rebuilt(make_broker) -> None:
    """Index files are derived data: a zeroed offset index and a torn time index (after a clean
    shutdown, when indexes are otherwise trusted) are detected and rebuilt from the log."""
    broker = make_broker({"log.segment.bytes": str(14 * 1024), "log.index.interval.bytes": "512"})
    topic = "damaged-index"
    create_topic(broker.bootstrap, topic)
    base_ts = 1_700_000_000_000
    producer = Producer(producer_config(broker.bootstrap, **{"linger.ms": 0, "batch.num.messages": 10}))
    for i in range(400):
        producer.produce(topic, partition=0, value=f"{i:05d}".encode() + b"q" * 150, timestamp=base_ts + i * 10)
        if i % 50 == 49:
            producer.flush(5)
    assert producer.flush(10) == 0
    assert broker.stop() == 0

    directory = broker.data_dir / f"{topic}-0"
    indexes = sorted(directory.glob("*.index"))
    time_indexes = sorted(directory.glob("*.timeindex"))
    assert len(indexes) >= 3
    indexes[1].write_bytes(b"\x00" * indexes[1].stat().st_size)
    time_indexes[2].write_bytes(time_indexes[2].read_bytes()[:5])

    broker.start()
    assert [m.offset() for m in consume(broker.bootstrap, topic, count=400)] == list(range(400))
    assert [(m.offset(), m.value()[:5]) for m in consume(broker.bootstrap, topic, start=150, count=2)] == [
        (150, b"00150"), (151, b"00151")]
    consumer = Consumer(consumer_config(broker.bootstrap))
    try:
        for target, expected in ((base_ts + 1505, 151), (base_ts + 2005, 201), (base_ts + 2505, 251)):
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, target)], timeout=5)
            assert (target, found.offset) == (target, expected)
    finally:
        consumer.close()
