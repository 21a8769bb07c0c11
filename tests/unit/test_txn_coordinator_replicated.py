"""The transaction coordinator when `__transaction_state` has followers: every state change is answered only
once the partition's high watermark covers it, a change that never gets there is undone, and markers for
partitions led elsewhere go to the marker sender.

The coordinator runs over a small in-memory PartitionWriter (the narrow interface coordinators are given)
whose `committed` futures the test settles, standing in for followers that copy or fail to copy a write.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.partition import PartitionError
from bus.controller.image import TopicImage
from bus.coordinator.transaction.coordinator import TOPIC, TransactionCoordinator, TxnConfig, TxnError
from bus.coordinator.transaction.state import TxnState

FENCED = ErrorCode.producer_fenced
LOCAL, REMOTE = ("t", 0), ("t", 1)


class FollowedWriter:
    """Appends go nowhere; every write of `__transaction_state` and of local markers waits for the test."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[None]] = []
        self.markers: list[tuple[str, int, bool]] = []

    def is_local(self, topic: str, partition: int) -> bool:
        return True

    def append(self, topic: str, partition: int, payload: bytes, *, transactional: bool = False) -> int:
        return 0

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> int:
        if (topic, partition) == REMOTE:
            raise PartitionError(ErrorCode.not_leader_or_follower)
        self.markers.append((topic, partition, commit))
        return 0

    def committed(self, topic: str, partition: int, next_offset: int) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        return future

    def bounds(self, topic: str, partition: int) -> tuple[int, int]:
        return 0, 0  # nothing to load

    def read(self, topic: str, partition: int, offset: int, max_bytes: int, max_offset: int) -> bytes:
        return b""

    def settle(self, error: Exception | None = None) -> None:
        for future in self.waiting:
            if error is None:
                future.set_result(None)
            else:
                future.set_exception(error)
        self.waiting.clear()


class RemoteLeader:
    """The marker sender: remembers what it was asked to write elsewhere."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bool]] = []

    async def write(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> None:
        self.sent.append((topic, partition, commit))


def coordinator(writer: FollowedWriter, markers: Any = None) -> TransactionCoordinator:
    def topic(name: str, partitions: int) -> TopicImage:
        return TopicImage(name, uuid.uuid4(), dict.fromkeys(range(partitions)))  # type: ignore[arg-type]

    topics = SimpleNamespace(create_internal_topic=lambda name, partitions, _rf, _configs: topic(name, partitions))
    metadata = SimpleNamespace(topics={"t": topic("t", 2), TOPIC: topic(TOPIC, 3)})
    ids = itertools.count(1000)
    tc = TransactionCoordinator(TxnConfig(num_partitions=3, request_timeout_ms=200), writer, topics,  # type: ignore[arg-type]
                                metadata, SimpleNamespace(next_id=lambda: next(ids)), markers)  # type: ignore[arg-type]
    tc.load()
    return tc


async def settled(writer: FollowedWriter, pending: Any, error: Exception | None = None) -> Any:
    task = asyncio.ensure_future(pending)
    await asyncio.sleep(0)
    writer.settle(error)
    return await task


def test_each_state_change_is_answered_once_replicated() -> None:
    async def body() -> None:
        writer = FollowedWriter()
        tc = coordinator(writer, RemoteLeader())
        pid, epoch = await settled(writer, tc.init_producer_id("tx", 5000))
        adding = asyncio.ensure_future(tc.add_partitions("tx", pid, epoch, [LOCAL, REMOTE], FENCED))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        with pytest.raises(TxnError) as busy:  # a second change waits for the first (Kafka's pendingState)
            tc.end_txn("tx", pid, epoch, True, FENCED)
        assert busy.value.code == ErrorCode.concurrent_transactions
        writer.settle()
        assert await adding == {LOCAL: ErrorCode.none, REMOTE: ErrorCode.none}

        ending = asyncio.ensure_future(tc.end_txn("tx", pid, epoch, True, FENCED))  # type: ignore[arg-type]
        await asyncio.sleep(0)
        assert not ending.done() and writer.markers == []  # the decision first, then the markers
        writer.settle()
        await ending
        await asyncio.sleep(0)  # the completion runs on its own
        assert writer.markers == [("t", 0, True)] and tc.markers.sent == [("t", 1, True)]
        assert tc.txns["tx"].state is TxnState.PREPARE_COMMIT  # the local marker still waits for followers
        writer.settle()
        await asyncio.sleep(0.01)
        assert tc.txns["tx"].state is TxnState.COMPLETE_COMMIT

    asyncio.run(body())


@pytest.mark.parametrize(("failure", "answer"), [
    (PartitionError(ErrorCode.not_leader_or_follower), ErrorCode.not_coordinator),
    (None, ErrorCode.coordinator_not_available),  # not replicated within request.timeout.ms
])
def test_a_change_that_is_not_replicated_is_undone(failure: Exception | None, answer: ErrorCode) -> None:
    async def body() -> None:
        writer = FollowedWriter()
        tc = coordinator(writer)
        pid, epoch = await settled(writer, tc.init_producer_id("tx", 5000))
        adding = tc.add_partitions("tx", pid, epoch, [LOCAL], FENCED)
        if failure is not None:
            result = await settled(writer, adding, failure)
        else:
            result = await adding  # nobody settles: the coordinator's own timeout (200 ms here) answers
        assert result == {LOCAL: answer}
        md = tc.txns["tx"]
        assert (md.state, md.partitions, md.start_ms) == (TxnState.EMPTY, set(), -1)  # as before the request
        writer.waiting.clear()
        with pytest.raises(TxnError) as refused:
            await settled(writer, tc.init_producer_id("new", 5000), PartitionError(ErrorCode.not_leader_or_follower))
        assert refused.value.code == ErrorCode.not_coordinator and "new" not in tc.txns

    asyncio.run(body())
