"""The coordinators' `PartitionWriter`, backed by the ReplicaManager (as Kafka's CoordinatorPartitionWriter).

Coordinator writes go through the same partitions as produced data, so they are in the log (and
survive kill -9) before the request that caused them is answered; with followers, only once the high
watermark covers them (`committed`).
"""

from __future__ import annotations

import asyncio

from bus.broker.partition import PartitionError
from bus.broker.replica_manager import ReplicaManager


class ReplicaPartitionWriter:
    __slots__ = ("_replicas",)

    def __init__(self, replicas: ReplicaManager) -> None:
        self._replicas = replicas

    def is_local(self, topic: str, partition: int) -> bool:
        try:
            self._replicas.get(topic, partition)
        except PartitionError:
            return False
        return True

    def append(self, topic: str, partition: int, payload: bytes, *, transactional: bool = False) -> int:
        return self._replicas.get(topic, partition).append(payload, from_coordinator=transactional).base_offset

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> int:
        return self._replicas.get(topic, partition).append_marker(producer_id, producer_epoch, commit)

    def committed(self, topic: str, partition: int, next_offset: int) -> asyncio.Future[None] | None:
        return self._replicas.get(topic, partition).committed(next_offset)

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        part = self._replicas.get(topic, partition)
        return part.log_start_offset, part.log.log_end_offset

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, max_offset: int) -> bytes:
        part = self._replicas.get(topic, partition)
        return bytes(part.read(offset, max_bytes, max_offset=max_offset, min_one_batch=True).data)
