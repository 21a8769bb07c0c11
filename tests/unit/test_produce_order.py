"""Appends to a partition keep request order while a large batch is prepared in a worker thread."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from bus.broker.partition import Partition
from bus.broker.replica_manager import ReplicaManager
from bus.controller.image import MetadataImage, PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.log_validator import RecordValidationError
from bus.log.manager import LogManager
from bus.protocol import compression
from bus.protocol import records as rb

BIG = 50_000


def _batch(count: int, keyed: bool = True) -> bytes:
    now = int(time.time() * 1000)
    return rb.build_batch([(i, now, b"k%d" % i if keyed else None, b"v%d" % i) for i in range(count)],
                          base_offset=0, compression=compression.ZSTD)


def _compacted_partition(tmp_path: Path) -> Partition:
    replicas = ReplicaManager(1, LogManager([tmp_path], LogConfig()), {})
    image = MetadataImage()
    topic = TopicImage("c", uuid.uuid4(), {0: PartitionState(0, [1], [1], 1)},
                       {"cleanup.policy": "compact", "max.message.bytes": str(16 << 20)})
    image.topics["c"] = topic
    image.topics_by_id[topic.topic_id] = topic
    replicas.load(image)
    return replicas.get("c", 0)


def test_a_later_small_append_waits_for_the_large_one_before_it(tmp_path: Path) -> None:
    partition = _compacted_partition(tmp_path)
    big, small = _batch(BIG), _batch(1)
    assert partition.must_prepare_off_loop(big) and not partition.must_prepare_off_loop(small)

    async def scenario() -> tuple[int, int, object]:
        first = partition.append_in_order(big, off_loop=True)
        assert partition.appending is first  # the produce handler now routes every append of it through the line
        second = partition.append_in_order(small, off_loop=False)
        return (await first).base_offset, (await second).base_offset, partition.appending

    assert asyncio.run(scenario()) == (0, BIG, None)


def test_a_refused_large_batch_does_not_hold_up_the_line(tmp_path: Path) -> None:
    partition = _compacted_partition(tmp_path)

    async def scenario() -> int:
        first = partition.append_in_order(_batch(BIG, keyed=False), off_loop=True)
        second = partition.append_in_order(_batch(1), off_loop=False)
        with pytest.raises(RecordValidationError, match="without key"):
            await first
        return (await second).base_offset

    assert asyncio.run(scenario()) == 0
