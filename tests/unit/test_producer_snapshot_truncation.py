"""A producer snapshot taken before a follower's truncation and written after it must not survive: it describes
batches that are gone, and a restart would load it once the log grows past its offset again."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from pathlib import Path

import pytest

from bus.broker import replica_manager
from bus.broker.partition import Partition
from bus.broker.replica_manager import ReplicaManager
from bus.controller.image import PartitionState, TopicImage
from bus.log.config import LogConfig
from bus.log.log import Log
from bus.log.manager import LogManager
from bus.log.producer_state import load_snapshot
from bus.protocol import records as rb
from bus.protocol.topic_partition import TopicPartition

NOW = int(time.time() * 1000)


def _idempotent(offset: int, count: int, seq: int) -> bytes:
    records = [(offset + i, NOW, None, b"v") for i in range(count)]
    return rb.build_batch(records, base_offset=offset, partition_leader_epoch=0, producer_id=7, producer_epoch=0,
                          base_sequence=seq)


def test_a_snapshot_written_across_a_truncation_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = LogConfig()
    topic = TopicImage("t", uuid.uuid4(), {0: PartitionState(0, [1, 2], [1, 2], 2)})
    partition = Partition(topic, 0, Log(tmp_path / "t-0", config), config, leader_epoch=0)
    partition.append_as_follower(_idempotent(0, 5, 0) + _idempotent(5, 5, 5))
    manager = ReplicaManager(1, LogManager([tmp_path], config), {})
    manager.partitions[TopicPartition("t", 0)] = partition
    taken = threading.Event()
    truncated = threading.Event()
    real_write = replica_manager.write_snapshot_file

    def write_after_the_truncation(directory: Path, offset: int, payload: bytes) -> None:
        taken.set()  # the snapshot (at offset 10) was taken on the loop; the follower truncates before it lands
        assert truncated.wait(5)
        real_write(directory, offset, payload)

    monkeypatch.setattr(replica_manager, "write_snapshot_file", write_after_the_truncation)

    async def scenario() -> None:
        snapshotting = asyncio.create_task(manager.snapshot_producers())
        await asyncio.to_thread(taken.wait, 5)
        partition.truncate_to(5)
        truncated.set()
        await snapshotting

    asyncio.run(scenario())
    assert not list((tmp_path / "t-0").glob("*.snapshot")), "the snapshot past the cut was left behind"
    # What a restart would see once the log is at 10 again: the state of the batches actually there.
    partition.append_as_follower(_idempotent(5, 5, 5))
    assert load_snapshot(tmp_path / "t-0", 10, NOW, 86_400_000) is None
    partition.log.close()
