"""A follower's copy of a real broker's partition: a ReplicaFetcherManager in the test process fetches from a
single-node broker into a local Partition (a LogManager in tmp_path), while confluent-kafka writes to the
leader: plain and idempotent batches, a committed and an aborted transaction, DeleteRecords.

The leader is a single node: its partitions list no replica but itself, so it refuses a fetch as replica 2
with NOT_LEADER_OR_FOLLOWER, as Kafka refuses an unknown replica. The copy therefore fetches as an observer
(replica_id -1); alone in its ISR the leader's high watermark is its log end, so it serves the same bytes a
replica would get, and everything on the follower's side (appends, truncation, high watermark, log start)
runs as it does for a replica.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as ConfluentTP
from confluent_kafka.admin import AdminClient

from bus.broker.partition import Partition
from bus.broker.replica_fetcher import FetcherSettings, ReplicaFetcherManager
from bus.controller.image import TopicImage
from bus.log.config import LogConfig
from bus.log.log import Log
from bus.log.manager import LogManager
from bus.protocol import records as rb
from deploy.processes.broker import BrokerProcess
from testkit.clients import FAST_CLIENT, consumer_config, create_topic, producer_config
from testkit.raw_kafka import RawKafka, metadata_request

LEADER = 1
SETTINGS = FetcherSettings(node_id=-1, fetch_max_bytes=4096, response_max_bytes=1 << 20, min_bytes=1,
                           wait_max_ms=100, backoff_ms=100, socket_timeout_ms=5000)
NOW = int(time.time() * 1000)


# -- helpers --------------------------------------------------------------------------------------------------


def leader_epoch(bootstrap: str, topic: str) -> int:
    with RawKafka(bootstrap) as raw:
        response = raw.request(metadata_request(topic, allow_auto_create=False))
    return int(response.topics[0].partitions[0].leader_epoch)


def follower(root: Path, bootstrap: str, topic: str) -> Partition:
    """A local Partition of `topic` (partition 0) that knows the leader's epoch, as a follower's metadata would."""
    config = LogConfig()
    log_ = LogManager([root], config).get_or_create(topic, 0, config)
    return Partition(TopicImage(topic, uuid.uuid4(), {}), 0, log_, config, leader_epoch(bootstrap, topic))


def segment_bytes(directory: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def leader_dir(broker: BrokerProcess, topic: str) -> Path:
    return broker.data_dir / f"{topic}-0"


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer(consumer_config(bootstrap))
    try:
        low, high = consumer.get_watermark_offsets(ConfluentTP(topic, 0), timeout=5)
        return int(low), int(high)
    finally:
        consumer.close()


def produce(bootstrap: str, topic: str, count: int, **extra: object) -> None:
    producer = Producer(producer_config(bootstrap, **extra))
    for i in range(count):
        producer.produce(topic, value=b"value-%d" % i, key=b"k%d" % (i % 3), partition=0)
    assert producer.flush(10) == 0


def transaction(bootstrap: str, topic: str, txn_id: str, count: int, commit: bool) -> None:
    producer = Producer(producer_config(bootstrap, **{"transactional.id": txn_id}))
    producer.init_transactions(10)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, value=b"txn-%d" % i, partition=0)
    producer.flush(10)
    if commit:
        producer.commit_transaction(10)
    else:
        producer.abort_transaction(10)


def delete_records(bootstrap: str, topic: str, before: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **FAST_CLIENT})
    wanted = ConfluentTP(topic, 0, before)
    assert admin.delete_records([wanted])[wanted].result(10).low_watermark == before


async def until(predicate: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.05)


def endpoint_of(broker: BrokerProcess) -> Callable[[int], tuple[str, int] | None]:
    return lambda broker_id: ("127.0.0.1", broker.port) if broker_id == LEADER else None


def caught_up(partition: Partition, end: int) -> Callable[[], bool]:
    return lambda: partition.log.log_end_offset == end and partition.high_watermark == end


# -- tests ----------------------------------------------------------------------------------------------------


def test_the_copy_is_the_leaders_byte_for_byte_with_its_producer_state(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = "copied"
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, 20, **{"enable.idempotence": False})
    produce(bootstrap, topic, 20, **{"enable.idempotence": True})
    transaction(bootstrap, topic, "copied-commit", 5, commit=True)
    transaction(bootstrap, topic, "copied-abort", 5, commit=False)
    _low, end = watermarks(bootstrap, topic)
    partition = follower(tmp_path / "follower", bootstrap, topic)

    async def scenario() -> None:
        manager = ReplicaFetcherManager(SETTINGS, endpoint_of(broker))
        manager.add(LEADER, partition)
        try:
            await until(caught_up(partition, end), f"the copy reaches the leader's end {end}")
            # The leader keeps writing while the fetcher runs: the copy and its high watermark follow.
            await asyncio.to_thread(produce, bootstrap, topic, 30, **{"enable.idempotence": True})
            _low, later = await asyncio.to_thread(watermarks, bootstrap, topic)
            assert later > end
            await until(caught_up(partition, later), f"the copy reaches the leader's new end {later}")
            assert manager.max_lag() == 0
            await asyncio.to_thread(delete_records, bootstrap, topic, 12)
            await until(lambda: partition.log.log_start_offset == 12, "the leader's log start reaches the copy")
            manager.remove(partition)
            await asyncio.to_thread(produce, bootstrap, topic, 1)
            await asyncio.sleep(0.5)
            assert partition.log.log_end_offset == later  # removed: fetched no more
        finally:
            await manager.close()

    asyncio.run(scenario())
    assert segment_bytes(partition.log.directory) == segment_bytes(leader_dir(broker, topic))[
        : len(segment_bytes(partition.log.directory))]
    copied = partition.log.log_end_offset
    batches, _size = rb.scan_batches_prefix(segment_bytes(partition.log.directory))
    assert batches[-1].next_offset == copied
    assert any(b.is_transactional for b in batches) and any(b.is_control for b in batches)

    broker.stop()  # the leader's own view of the same offsets, loaded from its directory
    config = LogConfig()
    leader_log = Log(leader_dir(broker, topic), config)
    leader_log.truncate_to(copied)  # drop the one record produced after the copy stopped
    leader = Partition(TopicImage(topic, uuid.uuid4(), {}), 0, leader_log, config, 0)
    try:
        assert partition.producers.to_json() == leader.producers.to_json()
        aborted = partition.aborted_transactions(0, copied)
        assert aborted == leader.aborted_transactions(0, copied) and len(aborted) == 1
        assert partition.log.epoch_entries == leader_log.epoch_entries
    finally:
        leader_log.close()


def test_a_follower_ahead_of_the_leader_is_truncated_to_its_end(broker: BrokerProcess, tmp_path: Path) -> None:
    """Two logs past the leader's end of 5: one whose extra batches carry no epoch (the leader answers
    OFFSET_OUT_OF_RANGE and the follower truncates to the end ListOffsets gives), one whose extra batches carry
    the leader's own epoch (the leader answers a diverging epoch, or OFFSET_OUT_OF_RANGE: the same point)."""
    bootstrap = broker.bootstrap
    create_topic(bootstrap, "unstamped")
    create_topic(bootstrap, "stamped")
    for topic in ("unstamped", "stamped"):
        produce(bootstrap, topic, 5, **{"linger.ms": 0, "batch.num.messages": 1})
    unstamped = follower(tmp_path / "a", bootstrap, "unstamped")
    unstamped.append_as_follower(rb.build_batch([(i, NOW, None, b"local") for i in range(8)], base_offset=0))
    stamped = follower(tmp_path / "b", bootstrap, "stamped")
    epoch = stamped.leader_epoch
    stamped.append_as_follower(segment_bytes(leader_dir(broker, "stamped"))
                               + rb.build_batch([(i, NOW, None, b"lost") for i in range(5, 8)], base_offset=5,
                                                partition_leader_epoch=epoch))
    assert unstamped.log.log_end_offset == stamped.log.log_end_offset == 8

    async def scenario() -> None:
        manager = ReplicaFetcherManager(SETTINGS, endpoint_of(broker))
        manager.add(LEADER, unstamped)
        manager.add(LEADER, stamped)
        try:
            await until(lambda: caught_up(unstamped, 5)() and caught_up(stamped, 5)(), "both are truncated to 5")
            for topic in ("unstamped", "stamped"):
                await asyncio.to_thread(produce, bootstrap, topic, 3)
            await until(lambda: caught_up(unstamped, 8)() and caught_up(stamped, 8)(), "both copy the new records")
        finally:
            await manager.close()

    asyncio.run(scenario())
    assert segment_bytes(stamped.log.directory) == segment_bytes(leader_dir(broker, "stamped"))
    leader_tail = segment_bytes(leader_dir(broker, "unstamped"))
    tail_start = next(b.position for b in rb.scan_batches_prefix(leader_tail)[0] if b.base_offset == 5)
    assert bytes(unstamped.log.read(5, 1 << 20).data) == leader_tail[tail_start:]  # from the leader on from 5


def test_a_leader_log_starting_past_the_follower_starts_it_over(broker: BrokerProcess, tmp_path: Path) -> None:
    """The leader deleted records up to 5, inside its one batch 0-9; an empty follower is out of range, starts
    over at the leader's log start, takes the whole batch holding it and then follows the log start."""
    topic = "restarted"
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, 10, **{"linger.ms": 200})
    [batch] = rb.scan_batches_prefix(segment_bytes(leader_dir(broker, topic)))[0]
    assert (batch.base_offset, batch.last_offset) == (0, 9)
    delete_records(bootstrap, topic, 5)
    partition = follower(tmp_path / "follower", bootstrap, topic)

    async def scenario() -> None:
        manager = ReplicaFetcherManager(SETTINGS, endpoint_of(broker))
        manager.add(LEADER, partition)
        try:
            await until(lambda: caught_up(partition, 10)() and partition.log.log_start_offset == 5,
                        "the copy starts at 5 and ends at 10")
        finally:
            await manager.close()

    asyncio.run(scenario())
    assert segment_bytes(partition.log.directory) == segment_bytes(leader_dir(broker, topic))


def test_the_fetcher_outlives_unknown_endpoints_errors_and_a_killed_leader(broker: BrokerProcess,
                                                                           tmp_path: Path) -> None:
    """The leader's endpoint unknown at first, a partition the leader does not have (UNKNOWN_TOPIC_OR_PARTITION:
    it waits, the other goes on), then the leader killed with -9 and restarted: the fetcher backs off, reconnects
    and copies what was written after the restart. Nothing raises out of it."""
    topic = "survivor"
    bootstrap = broker.bootstrap
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, 5)
    partition = follower(tmp_path / "follower", bootstrap, topic)
    config = LogConfig()
    stray_log = LogManager([tmp_path / "stray"], config).get_or_create("nowhere", 0, config)
    stray = Partition(TopicImage("nowhere", uuid.uuid4(), {}), 0, stray_log, config, -1)
    known = False

    async def scenario() -> None:
        manager = ReplicaFetcherManager(SETTINGS, lambda b: endpoint_of(broker)(b) if known else None)
        manager.add(LEADER, stray)
        manager.add(LEADER, partition)
        try:
            await asyncio.sleep(0.5)
            assert partition.log.log_end_offset == 0  # nowhere to fetch from yet
            nonlocal known
            known = True
            await until(caught_up(partition, 5), "the copy reaches 5 once the endpoint is known")
            await asyncio.to_thread(broker.kill)
            await asyncio.sleep(0.5)
            await asyncio.to_thread(broker.start)
            await asyncio.to_thread(produce, bootstrap, topic, 3)
            await until(caught_up(partition, 8), "the copy follows the restarted leader")
            assert stray.log.log_end_offset == 0 and manager.max_lag() == 0
        finally:
            await manager.close()

    asyncio.run(scenario())
    assert segment_bytes(partition.log.directory) == segment_bytes(leader_dir(broker, topic))
