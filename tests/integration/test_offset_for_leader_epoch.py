"""OffsetForLeaderEpoch (KIP-101/279/320) and leader epochs on a real broker process.

Raw kio requests check Kafka's answers at every version we serve; librdkafka's and kafka-python's consumers,
which validate their positions with this API (KIP-320), must keep reading what they were reading.
"""

from __future__ import annotations

import datetime
import importlib
import time
import urllib.request
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTP
from kio.schema.errors import ErrorCode

from bus.log.leader_epoch_cache import CHECKPOINT
from bus.protocol import records as rb
from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from testkit.clients import (
    FAST_CLIENT,
    consumer_config,
    create_topic,
    producer_config,
    stored_batches,
)
from testkit.raw_kafka import RawKafka

API_KEY = 23


def offsets_for_epochs(raw: RawKafka, topic: str, wanted: list[tuple[int, int, int]], version: int = 4) -> list[Any]:
    """EpochEndOffset of each (partition, current leader epoch, leader epoch) asked at `version`."""
    schema = importlib.import_module(f"kio.schema.offset_for_leader_epoch.v{version}.request")
    partitions = tuple(
        schema.OffsetForLeaderPartition(partition=p, current_leader_epoch=current, leader_epoch=epoch)
        for p, current, epoch in wanted
    )
    fields: dict[str, Any] = {"replica_id": -1} if version >= 3 else {}
    request = schema.OffsetForLeaderEpochRequest(
        topics=(schema.OffsetForLeaderTopic(topic=topic, partitions=partitions),), **fields
    )
    [result] = raw.request(request).topics
    assert result.topic == topic
    return list(result.partitions)


def answer(part: Any) -> tuple[ErrorCode, int, int]:
    return part.error_code, part.leader_epoch, part.end_offset


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer(producer_config(bootstrap))
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition)
    assert producer.flush(10) == 0


def metrics_broker(make_broker: Any) -> BrokerProcess:
    port = free_port()
    proc: BrokerProcess = make_broker({"bus.metrics.listener": f"127.0.0.1:{port}"})
    proc.metrics_port = port  # type: ignore[attr-defined]
    return proc


def requests_served(proc: BrokerProcess, api: str) -> float:
    port = proc.metrics_port  # type: ignore[attr-defined]
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    prefix = f'bus_request_seconds_count{{api="{api}"}} '
    return sum(float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix))


def test_kafkas_answers_for_current_future_and_fenced_epochs(broker: BrokerProcess) -> None:
    topic = "epochs"
    create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, 0, 10)
    with RawKafka(broker.bootstrap) as raw:
        for version in (2, 3, 4):
            got = offsets_for_epochs(raw, topic, [
                (0, -1, 0),  # the current epoch ends at the log end offset
                (0, 0, 0),
                (0, -1, 3),  # an epoch past every epoch the log knows: undefined
                (0, -1, -1),  # an undefined epoch: undefined
                (0, 1, 0),  # the client has newer metadata than the broker
                (0, -2, 0),  # older than ours (Kafka treats only -1 as "no epoch")
                (1, -1, 0),  # an empty partition: its leader's epoch starts at 0
                (7, -1, 0),
            ], version)  # fmt: skip
            assert [answer(p) for p in got] == [
                (ErrorCode.none, 0, 10),
                (ErrorCode.none, 0, 10),
                (ErrorCode.none, -1, -1),
                (ErrorCode.none, -1, -1),
                (ErrorCode.unknown_leader_epoch, -1, -1),
                (ErrorCode.fenced_leader_epoch, -1, -1),
                (ErrorCode.none, 0, 0),
                (ErrorCode.unknown_topic_or_partition, -1, -1),
            ], version
            assert [p.partition for p in got] == [0, 0, 0, 0, 0, 0, 1, 7]
        [unknown] = offsets_for_epochs(raw, "no-such-topic", [(0, -1, 0)])
        assert unknown.error_code == ErrorCode.unknown_topic_or_partition

    # The leader stamped its epoch on what it wrote (producers send -1) and recorded where it starts.
    assert {b.info.partition_leader_epoch for b in stored_batches(broker.data_dir, topic)} == {0}

    broker.kill()  # kill -9 before any flush wrote the checkpoint: the batches carry the epoch, recovery reads it
    broker.start()
    assert (broker.data_dir / f"{topic}-0" / CHECKPOINT).read_text() == "0\n1\n0 0\n"
    produce(broker.bootstrap, topic, 0, 5)
    with RawKafka(broker.bootstrap) as raw:
        assert [answer(p) for p in offsets_for_epochs(raw, topic, [(0, 0, 0), (0, -1, 1)])] == [
            (ErrorCode.none, 0, 15),
            (ErrorCode.none, -1, -1),
        ]


def test_fetch_and_list_offsets_check_the_current_leader_epoch(shared_broker: BrokerProcess) -> None:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.list_offsets.v7.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic

    topic = "epochs-checked"
    create_topic(shared_broker.bootstrap, topic)
    produce(shared_broker.bootstrap, topic, 0, 3)

    def list_offsets(raw: RawKafka, current: int, timestamp: int) -> tuple[ErrorCode, int, int]:
        request = ListOffsetsRequest(
            replica_id=-1,
            isolation_level=0,
            topics=(
                ListOffsetsTopic(
                    name=topic,
                    partitions=(
                        ListOffsetsPartition(partition_index=0, current_leader_epoch=current, timestamp=timestamp),
                    ),
                ),
            ),
        )
        [part] = raw.request(request).topics[0].partitions
        return part.error_code, part.offset, part.leader_epoch

    def fetch(raw: RawKafka, current: int) -> tuple[ErrorCode, int]:
        request = FetchRequest(
            max_wait=datetime.timedelta(0), min_bytes=0, isolation_level=0, session_id=0, session_epoch=-1,
            forgotten_topics_data=(), rack_id="",
            topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
                partition=0, current_leader_epoch=current, fetch_offset=0, partition_max_bytes=1 << 20),)),),
        )  # fmt: skip
        [part] = raw.request(request).responses[0].partitions
        return part.error_code, len(rb.scan_batches_prefix(part.records or b"")[0])

    with RawKafka(shared_broker.bootstrap) as raw:
        assert fetch(raw, 0)[0] == fetch(raw, -1)[0] == ErrorCode.none
        assert fetch(raw, 0)[1] > 0
        assert fetch(raw, 1) == (ErrorCode.unknown_leader_epoch, 0)
        assert fetch(raw, -2) == (ErrorCode.fenced_leader_epoch, 0)
        assert list_offsets(raw, 0, -1) == (ErrorCode.none, 3, 0)
        assert list_offsets(raw, -1, -2) == (ErrorCode.none, 0, 0)  # the epoch that wrote the earliest offset
        assert list_offsets(raw, 1, -1)[0] == ErrorCode.unknown_leader_epoch
        assert list_offsets(raw, -2, -1)[0] == ErrorCode.fenced_leader_epoch


def test_confluent_group_commits_the_epoch_of_what_it_read_and_resumes(shared_broker: BrokerProcess) -> None:
    """librdkafka commits the leader epoch of the last record it read (from the batches' partition leader
    epoch, which the leader now stamps) and a new member resumes exactly there."""
    topic = "epochs-group"
    create_topic(shared_broker.bootstrap, topic)
    produce(shared_broker.bootstrap, topic, 0, 20)
    config = {"bootstrap.servers": shared_broker.bootstrap, "group.id": "epochs", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "fetch.wait.max.ms": 100, **FAST_CLIENT}  # fmt: skip

    def read(count: int, committed_after: int) -> list[bytes]:
        consumer = Consumer(config)
        try:
            consumer.subscribe([topic])
            out = poll_values(consumer, count)
            consumer.commit(asynchronous=False)
            [committed] = consumer.committed([ConfluentTP(topic, 0)], timeout=10)
            assert (committed.offset, committed.leader_epoch) == (committed_after, 0)
            return out
        finally:
            consumer.close()

    assert read(8, 8) == [b"v%d" % i for i in range(8)]
    assert read(12, 20) == [b"v%d" % i for i in range(8, 20)]


def test_confluent_seek_validates_the_position_with_offset_for_leader_epoch(make_broker: Any) -> None:
    """A seek to a position carrying a leader epoch makes librdkafka (KIP-320) ask OffsetForLeaderEpoch before
    fetching; our answer must let it fetch from exactly there (a wrong end offset below the position would be
    taken for log truncation)."""
    proc = metrics_broker(make_broker)
    topic = "epochs-seek"
    create_topic(proc.bootstrap, topic)
    produce(proc.bootstrap, topic, 0, 20)
    consumer = Consumer(consumer_config(proc.bootstrap, **{"enable.partition.eof": False}))
    try:
        consumer.assign([ConfluentTP(topic, 0, 0)])
        assert poll_values(consumer, 3) == [b"v0", b"v1", b"v2"]
        before = requests_served(proc, "offset_for_leader_epoch")
        consumer.seek(ConfluentTP(topic, 0, 12, leader_epoch=0))
        assert poll_values(consumer, 8) == [b"v%d" % i for i in range(12, 20)]
        assert requests_served(proc, "offset_for_leader_epoch") > before
    finally:
        consumer.close()


def poll_values(consumer: Consumer, count: int, timeout: float = 20.0) -> list[bytes]:
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None:
            assert msg.error() is None, msg.error()
            out.append(msg.value())
    assert len(out) == count, out
    return out
