"""Which partitions of a coordinator's internal topic this node serves, and which it is still loading.

Kafka's coordinators follow leadership of their internal topic's partitions (GroupCoordinator.onElection /
onResignation, the CoordinatorRuntime's per-partition contexts): when this node becomes leader of a partition
it replays it and serves its keys (COORDINATOR_LOAD_IN_PROGRESS meanwhile); when it stops leading, it drops
that partition's state and answers NOT_COORDINATOR, so clients find the new leader. A partition is loaded once
per leadership: a new leader epoch that keeps this node as leader changes nothing in its log, so nothing is
reloaded.

Loading is a generator (`load(partition)` yields every so often): at start-up, without a loop, it runs
straight through; on an election it runs as a task that lets the loop serve other requests between chunks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from kio.schema.errors import ErrorCode

log = logging.getLogger(__name__)


class LedPartition(Protocol):
    """What a leadership change names (the replica manager's Partition)."""

    topic: str
    index: int


class PartitionLoads:
    def __init__(self, topic: str, load: Callable[[int], Iterator[None]], unload: Callable[[int], None]) -> None:
        self.topic = topic
        self._load = load
        self._unload = unload
        self.active: set[int] = set()
        self.loading: dict[int, asyncio.Task[None]] = {}
        self.started = False
        """Until the coordinator starts, leadership changes are not followed: start-up loads what is led then."""

    def error(self, partition: int) -> ErrorCode | None:
        """None when this node serves the partition's keys, else the error a request for them gets."""
        if partition in self.active:
            return None
        if partition in self.loading:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    def load_now(self, partitions: Iterable[int]) -> None:
        """Load these partitions before returning (start-up, which may run before the loop does)."""
        self.started = True
        for partition in partitions:
            if partition not in self.active and partition not in self.loading:
                for _ in self._load(partition):
                    pass
                self.active.add(partition)

    async def load_all(self, partitions: Iterable[int]) -> None:
        """Start following leadership and load these partitions (those led now), returning once loaded."""
        self.started = True
        for partition in partitions:
            self.elect(partition)
        await asyncio.gather(*self.loading.values(), return_exceptions=True)

    def on_leadership(self, partition: LedPartition, leading: bool) -> None:
        """The replica manager's leadership listener: this node started (or stopped) leading `partition`."""
        if partition.topic != self.topic or not self.started:
            return
        if leading:
            self.elect(partition.index)
        else:
            self.resign(partition.index)

    def elect(self, partition: int) -> None:
        if partition in self.active or partition in self.loading:
            return  # the same leadership under a new epoch: what is loaded stays right
        self.loading[partition] = asyncio.get_running_loop().create_task(self._run(partition))

    async def _run(self, partition: int) -> None:
        try:
            for _ in self._load(partition):
                await asyncio.sleep(0)  # a chunk done: let the loop serve other requests
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed: its keys stay unavailable here", self.topic, partition)
            del self.loading[partition]
            self._unload(partition)
            return
        del self.loading[partition]
        self.active.add(partition)
        log.debug("%s-%d loaded: this node now coordinates its keys", self.topic, partition)

    def resign(self, partition: int) -> None:
        """Stop serving the partition: a load in progress is cancelled, and what was loaded is dropped."""
        task = self.loading.pop(partition, None)
        if task is not None:
            task.cancel()
        if task is not None or partition in self.active:
            self.active.discard(partition)
            self._unload(partition)
            log.info("%s-%d resigned: its keys are coordinated elsewhere now", self.topic, partition)

    def close(self) -> None:
        self.started = False
        for task in self.loading.values():
            task.cancel()
        self.loading.clear()
