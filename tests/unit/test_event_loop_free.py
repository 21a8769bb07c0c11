"""The broker's periodic disk work leaves the event loop free: with 1,000 partitions of idempotent producers
on a slow disk (every fsync takes 2 ms), producer snapshots, the flusher and a topic deletion run while a
sampler on the loop sees no stall near what the disk costs. Before, the snapshots alone held the loop for
1,000 fsyncs and the flusher for 3,000."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.partition import PartitionError
from bus.broker.replica_manager import ReplicaManager
from bus.controller.image import MetadataImage, PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.manager import LogManager
from bus.protocol import records as rb
from bus.protocol.topic_partition import TopicPartition

PARTITIONS = 1000
SLOW_FSYNC_S = 0.002


def _idempotent_batch(producer_id: int, sequence: int) -> bytearray:
    return bytearray(rb.build_batch([rb.Record(0, int(time.time() * 1000), None, b"v")], base_offset=0,
                                    producer_id=producer_id, producer_epoch=0, base_sequence=sequence))


async def _worst_stall(work: asyncio.Future[object], interval: float = 0.002) -> float:
    worst = 0.0
    while not work.done():
        before = time.perf_counter()
        await asyncio.sleep(interval)
        worst = max(worst, time.perf_counter() - before - interval)
    await work
    return worst


def test_snapshots_flushes_and_deletion_do_not_stall_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = LogManager([tmp_path], LogConfig(segment_bytes=4096))
    replicas = ReplicaManager(1, logs, {})
    image = MetadataImage()
    topic = TopicImage("busy", uuid.uuid4(), {p: PartitionState(p, [1], [1], 1) for p in range(PARTITIONS)})
    image.topics["busy"] = topic
    image.topics_by_id[topic.topic_id] = topic
    replicas.load(image)
    for sequence in range(3):
        for p in range(PARTITIONS):
            replicas.get("busy", p).append(_idempotent_batch(1000 + p, sequence))
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:
        time.sleep(SLOW_FSYNC_S)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)

    async def scenario() -> tuple[float, float, float]:
        snapshots = asyncio.ensure_future(replicas.snapshot_producers())
        snapshot_stall = await _worst_stall(snapshots)
        assert len(list(tmp_path.glob("busy-*/*.snapshot"))) == PARTITIONS
        for p in range(PARTITIONS):
            logs.get(("busy", p)).roll()  # every partition has a sealed segment due for the flusher
        flush = asyncio.ensure_future(asyncio.to_thread(logs.flush_dirty, int(time.time() * 1000)))
        flush_stall = await _worst_stall(flush)
        replicas.apply(image, [{"type": "remove_topic", "topic_id": str(topic.topic_id)}])
        deletion_stall = await _worst_stall(asyncio.ensure_future(replicas.drain_background()))
        return snapshot_stall, flush_stall, deletion_stall

    stalls = asyncio.run(scenario())
    # On the loop this work took 1,000 to 3,000 slow fsyncs (2 to 6 s). The bound leaves room for a loaded
    # test machine (two cores shared by many processes); the 20 ms target is measured on a quiet machine by
    # benchmarks/broker_requests.py.
    assert max(stalls) < 0.25, stalls
    assert list(tmp_path.iterdir()) == []


def _new_topic(image: MetadataImage, name: str, partitions: int = PARTITIONS) -> TopicImage:
    topic = TopicImage(name, uuid.uuid4(), {p: PartitionState(p, [1], [1], 1) for p in range(partitions)})
    image.topics[name] = topic
    image.topics_by_id[topic.topic_id] = topic
    return topic


def _slow_mkdir(monkeypatch: pytest.MonkeyPatch) -> None:
    real_mkdir = Path.mkdir

    def slow_mkdir(self: Path, *args: object, **kwargs: object) -> None:
        time.sleep(SLOW_FSYNC_S)
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", slow_mkdir)


@pytest.fixture
def serving(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ReplicaManager, MetadataImage]:
    """A replica manager of a broker that takes connections, on a disk whose mkdir takes 2 ms."""
    replicas = ReplicaManager(1, LogManager([tmp_path], LogConfig()), {})
    replicas.serving = True
    _slow_mkdir(monkeypatch)
    return replicas, MetadataImage()


def test_creating_a_thousand_partitions_does_not_stall_the_loop(serving: tuple[ReplicaManager, MetadataImage]) -> None:
    """A new topic's logs are created in a worker thread (on the loop: a 1,000-partition topic stalled every
    connection for seconds); meanwhile its partitions answer NOT_LEADER_OR_FOLLOWER, which clients retry."""
    replicas, image = serving

    async def scenario() -> float:
        topic = _new_topic(image, "wide")
        replicas.apply(image, [{"type": "topic", "name": "wide", "topic_id": str(topic.topic_id)}])
        with pytest.raises(PartitionError) as refused:
            replicas.get("wide", 0)
        assert refused.value.code == ErrorCode.not_leader_or_follower
        return await _worst_stall(asyncio.ensure_future(replicas.settled()))

    stall = asyncio.run(scenario())
    # On the loop, the 1,000 slow mkdirs alone stall it over 2 s. Off it, the worst stall is 5-25 ms on a quiet
    # machine, but CI's loaded one once took 0.52 s (the loop thread waiting for the GIL or a core): the bound
    # separates the two cases, not a latency target (the broker benchmark measures that).
    assert stall < 1.0, stall
    assert all(replicas.get("wide", p).log.directory.is_dir() for p in range(PARTITIONS))


def test_settled_waits_for_its_own_creations_not_later_ones(serving: tuple[ReplicaManager, MetadataImage]) -> None:
    """A request that created a small topic answers once its logs exist, while a 1,000-partition topic another
    request created after it is still being made (`settled` used to wait until nothing was pending at all)."""
    replicas, image = serving

    async def scenario() -> bool:
        mine = _new_topic(image, "mine", partitions=3)
        replicas.apply(image, [{"type": "topic", "name": "mine", "topic_id": str(mine.topic_id)}])
        answer = asyncio.ensure_future(replicas.settled())
        await asyncio.sleep(0)  # the answer starts waiting; then another request creates a large topic
        other = _new_topic(image, "other")
        replicas.apply(image, [{"type": "topic", "name": "other", "topic_id": str(other.topic_id)}])
        await answer
        still_opening = any(tp.topic == "other" for tp in replicas._opening)
        await replicas.settled()
        return still_opening

    assert asyncio.run(scenario()), "the small topic's answer waited for the large topic created after it"
    assert replicas.get("mine", 2).log.directory.is_dir() and replicas.get("other", PARTITIONS - 1)


def test_a_topic_deleted_while_its_logs_are_created_leaves_nothing(
        tmp_path: Path, serving: tuple[ReplicaManager, MetadataImage]) -> None:
    replicas, image = serving

    async def scenario() -> None:
        topic = _new_topic(image, "brief")
        replicas.apply(image, [{"type": "topic", "name": "brief", "topic_id": str(topic.topic_id)}])
        del image.topics["brief"], image.topics_by_id[topic.topic_id]
        replicas.apply(image, [{"type": "remove_topic", "topic_id": str(topic.topic_id)}])
        await replicas.settled()
        await replicas.drain_background()

    asyncio.run(scenario())
    with pytest.raises(PartitionError):
        replicas.get("brief", 0)
    assert list(tmp_path.iterdir()) == []


def test_metadata_applied_again_during_creation_keeps_one_partition_per_log(
        serving: tuple[ReplicaManager, MetadataImage]) -> None:
    """A config change (or any record naming the topic) applied while its logs are being created must not open
    a second Partition over a log the worker already made: each would keep its own producer state and append
    line over the one log (idempotence and ordering checks split in two)."""
    replicas, image = serving

    async def scenario() -> None:
        topic = _new_topic(image, "twice")
        replicas.apply(image, [{"type": "topic", "name": "twice", "topic_id": str(topic.topic_id)}])
        while replicas.logs.get(TopicPartition("twice", 0)) is None:  # some logs made, no Partition registered
            await asyncio.sleep(0.001)
        replicas.apply(image, [{"type": "config", "name": "twice"}])
        await replicas.settled()

    asyncio.run(scenario())
    topic = image.topics["twice"]
    assert len(replicas.partitions_by_id[topic.topic_id]) == PARTITIONS
    assert len({id(replicas.get("twice", p)) for p in range(PARTITIONS)}) == PARTITIONS
    for p in (0, PARTITIONS - 1):
        first = replicas.get("twice", p).append(_idempotent_batch(7, 0))
        second = replicas.get("twice", p).append(_idempotent_batch(7, 1))
        assert (first.base_offset, second.base_offset) == (0, 1)


def test_a_request_that_goes_away_while_logs_are_created_leaves_them_served(
    serving: tuple[ReplicaManager, MetadataImage],
) -> None:
    """A request waiting in `settled` is cancelled (its client disconnected): the creation goes on and the
    partitions are served. Before, the cancellation reached the creation itself, and the topic answered
    NOT_LEADER_OR_FOLLOWER until the broker restarted (a CI run's producers timed out on it)."""
    replicas, image = serving

    async def scenario() -> None:
        topic = _new_topic(image, "abandoned", partitions=50)
        replicas.apply(image, [{"type": "topic", "name": "abandoned", "topic_id": str(topic.topic_id)}])
        waiter = asyncio.ensure_future(replicas.settled())
        await asyncio.sleep(0.01)
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        deadline = time.monotonic() + 30
        while replicas._opening and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert all(replicas.get("abandoned", p).log.directory.is_dir() for p in range(50))
