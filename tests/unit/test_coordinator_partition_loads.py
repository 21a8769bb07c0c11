"""Coordinators following leadership, per partition, with the real coordinator classes.

The group coordinator runs over the in-memory `__consumer_offsets` of test_group_coordinator (whose writes can
be made to wait for "followers"); the transaction coordinator inside an in-process broker, as in
test_txn_coordinator. A partition elected here is loaded (COORDINATOR_LOAD_IN_PROGRESS meanwhile), a partition
resigned drops only its own groups or transactional ids, and a second election of the same leadership loads
nothing again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from bus.controller.controller import TopicSpec
from bus.coordinator.group import records as rec
from bus.coordinator.group.coordinator import GroupCoordinator
from bus.coordinator.group.namespace import GroupNamespace
from bus.coordinator.group.offset_store import OFFSETS_TOPIC, StoreError
from bus.coordinator.partitioning import partition_for
from bus.coordinator.transaction.coordinator import TOPIC as TXN_TOPIC
from bus.coordinator.transaction.coordinator import TxnError
from bus.coordinator.transaction.state import TxnState
from tests.unit.test_group_coordinator import CONFIG, PARTITIONS, FakeStore, join, join_request, run, sync
from tests.unit.test_txn_coordinator import FENCED, _close, _open

VALUE = rec.OffsetValue(10, "", 0)


def _ids_on_two_partitions(count: int) -> tuple[list[str], list[str]]:
    """Group ids on one partition and ids on another (so a resignation has something to keep)."""
    by_partition: dict[int, list[str]] = {}
    for n in range(1000):
        by_partition.setdefault(partition_for(f"group-{n}", PARTITIONS), []).append(f"group-{n}")
    first, second = sorted(by_partition)[:2]
    return by_partition[first][:count], by_partition[second][:count]


def _led(topic: str, index: int) -> SimpleNamespace:
    return SimpleNamespace(topic=topic, index=index)


def test_resignation_drops_only_that_partitions_groups_and_election_reloads_them() -> None:
    moved, kept = _ids_on_two_partitions(2)
    moved_partition = partition_for(moved[0], PARTITIONS)

    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        for group_id in moved + kept:
            assert c.commit_offsets(group_id, "", None, -1, {("t", 0): VALUE}, 8) == {("t", 0): ErrorCode.none}
        parked = join(c, join_request())  # a member of "g" waits for its rebalance
        parked_partition = partition_for("g", PARTITIONS)

        c.loads.on_leadership(_led("other-topic", moved_partition), False)  # not ours: nothing happens
        assert c.fetch_offsets(moved[0], None)[0] == ErrorCode.none
        c.loads.on_leadership(_led(OFFSETS_TOPIC, moved_partition), False)
        c.loads.on_leadership(_led(OFFSETS_TOPIC, parked_partition), False)
        for group_id in moved:
            assert c.fetch_offsets(group_id, None) == (ErrorCode.not_coordinator, {})
            assert c.coordinator_error(group_id) == ErrorCode.coordinator_not_available
            assert group_id not in c.groups
        assert (await parked).error == ErrorCode.not_coordinator  # told to find the new coordinator
        for group_id in kept:
            if partition_for(group_id, PARTITIONS) != parked_partition:
                assert c.fetch_offsets(group_id, None) == (ErrorCode.none, {("t", 0): VALUE})
        assert not c._join_timers and not c._sync_timers  # the dropped groups' timers are gone

        c.loads.on_leadership(_led(OFFSETS_TOPIC, moved_partition), True)
        assert c.fetch_offsets(moved[0], None)[0] == ErrorCode.coordinator_load_in_progress
        await asyncio.gather(*c.loads.loading.values())
        for group_id in moved:
            assert c.fetch_offsets(group_id, None) == (ErrorCode.none, {("t", 0): VALUE})

    run(body)


def test_a_new_epoch_of_the_same_leadership_loads_nothing_again() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        result = await join(c, join_request())
        partition = partition_for("g", PARTITIONS)
        group = c.groups["g"]
        store.log.setdefault(partition, []).append((rec.encode_offset_key("g", "t", 5), rec.encode_offset_value(VALUE)))
        c.loads.on_leadership(_led(OFFSETS_TOPIC, partition), True)
        assert not c.loads.loading  # already served: no reload ...
        assert c.groups["g"] is group and result.member_id in group.members  # ... members and timers stay
        assert c.fetch_offsets("g", [("t", 5)])[1] == {("t", 5): None}

    run(body)


def test_a_large_partition_loads_in_chunks_while_requests_get_load_in_progress() -> None:
    store = FakeStore()
    partition = partition_for("big", PARTITIONS)
    store.log[partition] = [(rec.encode_offset_key("big", "t", n), rec.encode_offset_value(VALUE))
                            for n in range(5000)]

    async def main() -> None:
        c = GroupCoordinator(GroupNamespace(), store, CONFIG)
        await c.start()
        try:
            c.loads.resign(partition)
            c.loads.elect(partition)
            answers = []
            while c.loads.loading:
                answers.append(c.fetch_offsets("big", [("t", 0)])[0])
                await asyncio.sleep(0)
            assert ErrorCode.coordinator_load_in_progress in answers  # the loop served requests between chunks
            assert len(c.fetch_offsets("big", None)[1]) == 5000
        finally:
            await c.stop()

    asyncio.run(main())


class ReplicatedStore(FakeStore):
    """Appends that wait for followers: `written` hands out a future the test settles."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[asyncio.Future[None]] = []

    def written(self, partition: int, next_offset: int) -> asyncio.Future[None]:  # type: ignore[override]
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        return future


def test_offset_commit_is_answered_and_visible_once_replicated() -> None:
    async def body(c: GroupCoordinator, store: ReplicatedStore) -> None:
        pending = c.commit_offsets("simple", "", None, -1, {("t", 0): VALUE}, 8)
        assert asyncio.iscoroutine(pending)
        task = asyncio.ensure_future(pending)
        await asyncio.sleep(0)
        assert c.fetch_offsets("simple", [("t", 0)])[1] == {("t", 0): None}  # not committed: not visible
        store.waiting.pop().set_result(None)
        assert await task == {("t", 0): ErrorCode.none}
        assert c.fetch_offsets("simple", [("t", 0)])[1] == {("t", 0): VALUE}

        lost = asyncio.ensure_future(c.commit_offsets("simple", "", None, -1, {("t", 1): VALUE}, 8))
        await asyncio.sleep(0)
        store.waiting.pop().set_exception(StoreError(ErrorCode.not_leader_or_follower, "leadership lost"))
        assert await lost == {("t", 1): ErrorCode.not_coordinator}
        late = asyncio.ensure_future(c.commit_offsets("simple", "", None, -1, {("t", 2): VALUE}, 8))
        await asyncio.sleep(0)
        store.waiting.pop().set_exception(StoreError(ErrorCode.request_timed_out, "followers too slow"))
        assert await late == {("t", 2): ErrorCode.request_timed_out}
        assert set(c.fetch_offsets("simple", None)[1]) == {("t", 0)}

        # Replicated, but the partition moved away meanwhile: not answered as done, nothing left behind here.
        moved = asyncio.ensure_future(c.commit_offsets("simple", "", None, -1, {("t", 3): VALUE}, 8))
        await asyncio.sleep(0)
        c.loads.resign(partition_for("simple", PARTITIONS))
        store.waiting.pop().set_result(None)
        assert await moved == {("t", 3): ErrorCode.not_coordinator}
        assert "simple" not in c.offsets.group_ids()

    run(body, ReplicatedStore())  # type: ignore[arg-type]


def test_sync_group_waits_for_the_assignment_to_be_replicated() -> None:
    async def body(c: GroupCoordinator, store: ReplicatedStore) -> None:
        first = await join(c, join_request())
        member = first.member_id
        answer = sync(c, member, first.generation_id, {member: b"A"})
        await asyncio.sleep(0.01)
        assert not answer.done()  # the assignment is not committed yet
        store.waiting.pop().set_result(None)
        assert (await answer).assignment == b"A"

    run(body, ReplicatedStore())  # type: ignore[arg-type]


def test_transaction_coordinator_resigns_and_reloads_one_partition(tmp_path: Path) -> None:
    broker = _open(tmp_path / "data")
    broker.controller.create_topic(TopicSpec("t", 2, 1))
    tc = broker.transactions
    ids_by_partition: dict[int, str] = {}
    for n in range(100):
        ids_by_partition.setdefault(partition_for(f"tx-{n}", tc.topic.partitions), f"tx-{n}")
    (p_moved, moved), (_p_kept, kept) = sorted(ids_by_partition.items())[:2]
    pid, _ = tc.init_producer_id(moved, 5000)
    tc.add_partitions(moved, pid, 0, [("t", 0)], FENCED)
    kept_pid, _ = tc.init_producer_id(kept, 5000)

    async def body() -> None:
        tc.loads.on_leadership(_led(TXN_TOPIC, p_moved), False)
        assert moved not in tc.txns and kept in tc.txns
        assert tc.coordinator_error(moved) == ErrorCode.not_coordinator and tc.coordinator_error(kept) is None
        for call in (lambda: tc.init_producer_id(moved, 5000), lambda: tc.end_txn(moved, pid, 0, True, FENCED)):
            with pytest.raises(TxnError) as refused:
                call()
            assert refused.value.code == ErrorCode.not_coordinator
        assert tc.add_partitions(moved, pid, 0, [("t", 1)], FENCED) == {("t", 1): ErrorCode.not_coordinator}

        tc.loads.on_leadership(_led(TXN_TOPIC, p_moved), True)
        assert tc.coordinator_error(moved) == ErrorCode.coordinator_load_in_progress
        await asyncio.gather(*tc.loads.loading.values())
        md = tc.txns[moved]
        assert (md.producer_id, md.state, md.partitions) == (pid, TxnState.ONGOING, {("t", 0)})
        assert tc.end_txn(moved, pid, 0, True, FENCED) is None
        assert tc.txns[moved].state is TxnState.COMPLETE_COMMIT
        assert tc.txns[kept].producer_id == kept_pid

    try:
        asyncio.run(body())
    finally:
        _close(broker)
