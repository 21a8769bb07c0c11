"""GroupCoordinator flows over an in-memory `__consumer_offsets`: rebalances, timers, persistence.

Each test runs its own event loop (`asyncio.run`) because the coordinator's timers are loop timers;
timeouts are a few tens of milliseconds so the whole module stays fast.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Iterator, Sequence

from kio.schema.errors import ErrorCode

from bus.coordinator.group import records as rec
from bus.coordinator.group.classic.group import GroupState
from bus.coordinator.group.classic.member import JoinResult, SyncResult
from bus.coordinator.group.classic.protocol import JoinRequest, pending_answer
from bus.coordinator.group.config import GroupConfig
from bus.coordinator.group.consumer.group import ConsumerGroup, ConsumerMember
from bus.coordinator.group.coordinator import GroupCoordinator
from bus.coordinator.group.namespace import GroupNamespace
from bus.coordinator.group.offset_store import StoredRecord, StoreError
from bus.coordinator.partitioning import partition_for
from bus.protocol.topic_partition import TopicPartition

PARTITIONS = 5
CONFIG = GroupConfig(min_session_timeout_ms=10, initial_rebalance_delay_ms=0)


class FakeStore:
    """Keeps appended records per partition, so a second coordinator can load what the first wrote."""

    num_partitions = PARTITIONS

    def __init__(self) -> None:
        self.log: dict[int, list[tuple[bytes, bytes | None]]] = {}
        self.fail_with: ErrorCode | None = None

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, PARTITIONS)

    def ensure_topic(self) -> None:
        pass

    def is_local(self, partition: int) -> bool:
        return True

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int:
        if self.fail_with is not None:
            raise StoreError(self.fail_with, "injected")
        self.log.setdefault(partition, []).extend(records)
        return len(self.log[partition])

    def written(self, partition: int, next_offset: int) -> None:
        return None  # one replica: committed as soon as appended

    def read_partition(self, partition: int, open_transactions: dict | None = None) -> Iterator[StoredRecord]:
        for offset, (key, value) in enumerate(self.log.get(partition, [])):
            yield StoredRecord(partition, offset, key, value)


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 0, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">i", -1)


def join_request(member_id: str = "", *, instance: str | None = None, protocols: Sequence[str] = ("range",),
                 session_ms: int = 200, rebalance_ms: int = 300, known_id: bool = False,
                 topics: tuple[str, ...] = ("t",)) -> JoinRequest:
    return JoinRequest("g", member_id, instance, "client", "/127.0.0.1", session_ms, rebalance_ms, "consumer",
                       tuple((p, subscription(*topics)) for p in protocols), require_known_member_id=known_id)


def run(test: Callable[[GroupCoordinator, FakeStore], Awaitable[None]], store: FakeStore | None = None) -> FakeStore:
    store = store or FakeStore()

    async def main() -> None:
        coordinator = GroupCoordinator(GroupNamespace(), store, CONFIG)
        await coordinator.start()
        try:
            await test(coordinator, store)
        finally:
            await coordinator.stop()

    asyncio.run(main())
    return store


def join(c: GroupCoordinator, req: JoinRequest) -> asyncio.Future[JoinResult]:
    future, respond = pending_answer()
    c.join_group(req, respond)
    return future


def sync(c: GroupCoordinator, member_id: str, generation: int,
         assignments: dict[str, bytes] | None = None) -> asyncio.Future[SyncResult]:
    future, respond = pending_answer()
    c.sync_group("g", generation, member_id, None, None, None, assignments or {}, respond)
    return future


async def stable_pair(c: GroupCoordinator) -> tuple[str, str, int]:
    """Two dynamic members through join and sync; returns (leader, follower, generation)."""
    first = await join(c, join_request())
    a = first.member_id
    await sync(c, a, first.generation_id, {a: b"A"})
    b_join = join(c, join_request())  # b's arrival starts a rebalance ...
    assert c.heartbeat("g", a, None, first.generation_id) == ErrorCode.rebalance_in_progress
    rejoin_a = join(c, join_request(a))  # ... which completes once a rejoins
    ra, rb = await asyncio.gather(rejoin_a, b_join)
    assert ra.generation_id == rb.generation_id == 2
    assert ra.leader_id == a and len(ra.members) == 2 and rb.members == []
    leader_sync = sync(c, a, 2, {a: b"A2", rb.member_id: b"B2"})
    follower_sync = sync(c, rb.member_id, 2)
    sa, sb = await asyncio.gather(leader_sync, follower_sync)
    assert (sa.assignment, sb.assignment) == (b"A2", b"B2")
    return a, rb.member_id, 2


def test_single_member_join_sync_heartbeat() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        result = await join(c, join_request())
        assert result.error == ErrorCode.none and result.generation_id == 1
        assert result.leader_id == result.member_id and result.protocol_name == "range"
        assert c.heartbeat("g", result.member_id, None, 1) == ErrorCode.none  # CompletingRebalance
        synced = await sync(c, result.member_id, 1, {result.member_id: b"assignment"})
        assert synced.assignment == b"assignment" and synced.protocol_type == "consumer"
        assert c.groups["g"].is_(GroupState.STABLE)
        assert c.heartbeat("g", result.member_id, None, 0) == ErrorCode.illegal_generation
        assert c.heartbeat("g", "nobody", None, 1) == ErrorCode.unknown_member_id
        assert c.heartbeat("", "x", None, 1) == ErrorCode.invalid_group_id

    run(body)


def test_member_id_required_then_join() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        first = await join(c, join_request(known_id=True))
        assert first.error == ErrorCode.member_id_required and first.member_id.startswith("client-")
        second = await join(c, join_request(first.member_id, known_id=True))
        assert second.error == ErrorCode.none and second.member_id == first.member_id

    run(body)


def test_invalid_session_timeout_and_inconsistent_protocol() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        assert (await join(c, join_request(session_ms=5))).error == ErrorCode.invalid_session_timeout
        await join(c, join_request())
        other = await join(c, join_request(protocols=("roundrobin",)))
        assert other.error == ErrorCode.inconsistent_group_protocol

    run(body)


def test_rebalance_when_member_joins_and_leaves() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        a, b, generation = await stable_pair(c)
        assert c.heartbeat("g", a, None, generation) == ErrorCode.none
        error, results = c.leave_group("g", [(b, None)])
        assert (error, results) == (ErrorCode.none, [ErrorCode.none])
        assert c.heartbeat("g", a, None, generation) == ErrorCode.rebalance_in_progress
        result = await join(c, join_request(a))
        assert result.generation_id == generation + 1 and [m[0] for m in result.members] == [a]

    run(body)


def test_session_expiry_removes_silent_member() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        a, b, generation = await stable_pair(c)
        for _ in range(6):  # a keeps heartbeating, b goes silent
            await asyncio.sleep(0.05)
            c.heartbeat("g", a, None, generation)
        assert b not in c.groups["g"].members
        assert c.heartbeat("g", a, None, generation) == ErrorCode.rebalance_in_progress

    run(body)


def test_follower_that_never_syncs_is_removed() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        first = await join(c, join_request())
        a = first.member_id
        await sync(c, a, 1, {a: b""})
        rb_future = join(c, join_request())
        _ra, rb = await asyncio.gather(join(c, join_request(a)), rb_future)
        await sync(c, a, 2, {})  # leader syncs, follower never does
        await asyncio.sleep(0.4)  # > rebalance timeout
        assert rb.member_id not in c.groups["g"].members

    run(body)


def test_static_member_rejoin_keeps_assignment_without_rebalance() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        a = await join(c, join_request(instance="i-a"))
        await sync(c, a.member_id, 1, {a.member_id: b"A"})
        b = join(c, join_request(instance="i-b"))
        # a must rejoin to let b in
        a2 = join(c, join_request(a.member_id, instance="i-a"))
        ra, rb = await asyncio.gather(a2, b)
        generation = ra.generation_id
        await asyncio.gather(sync(c, ra.member_id, generation, {ra.member_id: b"A", rb.member_id: b"B"}),
                             sync(c, rb.member_id, generation))
        # b restarts: same instance id, no member id
        again = await join(c, join_request(instance="i-b"))
        assert again.error == ErrorCode.none and again.generation_id == generation
        assert again.member_id != rb.member_id and again.leader_id == ra.member_id
        assert c.groups["g"].is_(GroupState.STABLE)
        assert (await sync(c, again.member_id, generation)).assignment == b"B"
        # the old incarnation is fenced
        assert c.heartbeat("g", rb.member_id, "i-b", generation) == ErrorCode.fenced_instance_id
        assert c.heartbeat("g", ra.member_id, "i-a", generation) == ErrorCode.none

    run(body)


def test_static_member_is_not_dropped_by_a_rebalance_it_misses() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        a = await join(c, join_request(instance="i-a", session_ms=2000))
        await sync(c, a.member_id, 1, {a.member_id: b"A"})
        b = join(c, join_request())  # a does not rejoin within the rebalance timeout
        result = await b
        assert result.generation_id == 2
        assert a.member_id in c.groups["g"].members  # static: kept until session expiry

    run(body)


def test_commit_fetch_and_reload() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        a, _b, generation = await stable_pair(c)
        value = rec.OffsetValue(10, "meta", c.clock(), 3)
        assert c.commit_offsets("g", a, None, generation, {("t", 0): value}, 8) == {("t", 0): ErrorCode.none}
        assert c.commit_offsets("g", a, None, generation - 1, {("t", 0): value}, 8) == {
            ("t", 0): ErrorCode.illegal_generation}
        too_big = rec.OffsetValue(1, "x" * 5000, 0)
        assert c.commit_offsets("g", a, None, generation, {("t", 1): too_big}, 8) == {
            ("t", 1): ErrorCode.offset_metadata_too_large}
        assert c.commit_offsets("simple", "", None, -1, {("t", 0): value}, 8) == {("t", 0): ErrorCode.none}
        assert c.commit_offsets("nope", "m", None, 4, {("t", 0): value}, 9) == {("t", 0): ErrorCode.group_id_not_found}
        assert c.fetch_offsets("g", [("t", 0), ("t", 1)]) == (ErrorCode.none, {("t", 0): value, ("t", 1): None})

    store = run(body)

    async def reloaded(c: GroupCoordinator, _store: FakeStore) -> None:
        group = c.groups["g"]
        assert group.is_(GroupState.STABLE) and len(group.members) == 2 and group.generation_id == 2
        assert c.fetch_offsets("g", None)[1][("t", 0)].offset == 10
        assert c.fetch_offsets("simple", None)[1][("t", 0)].leader_epoch == 3
        assert c.groups["simple"].protocol_type is None

    run(reloaded, store)


def test_store_failure_is_reported_and_nothing_is_cached() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        store.fail_with = ErrorCode.not_leader_or_follower
        value = rec.OffsetValue(1, "", 0)
        assert c.commit_offsets("s", "", None, -1, {("t", 0): value}, 8) == {("t", 0): ErrorCode.not_coordinator}
        assert c.fetch_offsets("s", [("t", 0)])[1] == {("t", 0): None}

    run(body)


def test_delete_groups_and_offsets() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        a, b, generation = await stable_pair(c)
        value = rec.OffsetValue(1, "", c.clock())
        c.commit_offsets("g", a, None, generation, {("t", 0): value, ("gone", 0): value}, 8)
        assert c.delete_groups(["g", "missing"]) == {"g": ErrorCode.non_empty_group,
                                                    "missing": ErrorCode.group_id_not_found}
        error, results = c.delete_offsets("g", [("t", 0), ("gone", 0)])
        assert error == ErrorCode.none
        assert results == {("t", 0): ErrorCode.group_subscribed_to_topic, ("gone", 0): ErrorCode.none}
        c.leave_group("g", [(a, None), (b, None)])
        assert c.groups["g"].is_(GroupState.EMPTY)
        assert c.delete_groups(["g"]) == {"g": ErrorCode.none}
        assert "g" not in c.groups and c.fetch_offsets("g", None) == (ErrorCode.none, {})

    store = run(body)
    run(lambda c, _s: _assert_absent(c, "g"), store)  # tombstones win on reload


async def _assert_absent(c: GroupCoordinator, group_id: str) -> None:
    assert group_id not in c.groups


def test_offsets_of_an_empty_group_expire_and_the_group_goes_away() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        c.commit_offsets("s", "", None, -1, {("t", 0): rec.OffsetValue(1, "", 0)}, 8)
        c.commit_offsets("fresh", "", None, -1, {("t", 0): rec.OffsetValue(1, "", c.clock())}, 8)
        assert c.expire_offsets() == 1
        assert "s" not in c.groups and "fresh" in c.groups

    run(body)


def test_list_and_describe() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        await stable_pair(c)
        c.commit_offsets("s", "", None, -1, {("t", 0): rec.OffsetValue(1, "", c.clock())}, 8)
        error, groups = c.list_groups(set(), set())
        assert error == ErrorCode.none and sorted(g.group_id for g in groups) == ["g", "s"]
        assert [g.group_id for g in c.list_groups({"STABLE"}, set())[1]] == ["g"]
        assert c.list_groups(set(), {"consumer"})[1] == []
        assert c.describe_group("unknown") == (ErrorCode.none, None)

    run(body)



def test_offsets_of_deleted_topics_are_removed() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        value = rec.OffsetValue(1, "", c.clock())
        c.commit_offsets("s", "", None, -1, {("kept", 0): value, ("deleted", 0): value}, 8)
        c.on_metadata([{"type": "topic", "name": "x"}], {"kept"})  # not a deletion: nothing happens
        assert len(c.offsets.of("s")) == 2
        c.on_metadata([{"type": "remove_topic", "topic_id": "..."}], {"kept"})
        assert list(c.offsets.of("s")) == [("kept", 0)]

    store = run(body)
    run(lambda c, _s: _assert_offsets(c, "s", [("kept", 0)]), store)


async def _assert_offsets(c: GroupCoordinator, group_id: str, expected: list[tuple[str, int]]) -> None:
    assert list(c.offsets.of(group_id)) == expected


def test_group_max_size() -> None:
    async def main() -> None:
        coordinator = GroupCoordinator(GroupNamespace(), FakeStore(), GroupConfig(min_session_timeout_ms=10,
                                                                initial_rebalance_delay_ms=0, max_group_size=1))
        await coordinator.start()
        try:
            first = await join(coordinator, join_request())
            assert first.error == ErrorCode.none
            second = await join(coordinator, join_request())
            assert second.error == ErrorCode.group_max_size_reached and second.member_id == ""
            assert list(coordinator.groups["g"].members) == [first.member_id]
        finally:
            await coordinator.stop()

    asyncio.run(main())


def test_failed_assignment_store_fails_the_sync_and_rebalances() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        joined = await join(c, join_request())
        store.fail_with = ErrorCode.message_too_large  # e.g. assignments bigger than max.message.bytes
        synced = await sync(c, joined.member_id, 1, {joined.member_id: b"x"})
        assert synced.error == ErrorCode.unknown_server_error  # not the offset-commit mapping
        assert c.groups["g"].is_(GroupState.PREPARING_REBALANCE)
        value = rec.OffsetValue(1, "", 0)
        assert c.commit_offsets("s", "", None, -1, {("t", 0): value}, 8) == {
            ("t", 0): ErrorCode.invalid_commit_offset_size}

    run(body)


def test_initial_rebalance_delay_gathers_early_joiners_into_one_generation() -> None:
    async def main() -> None:
        coordinator = GroupCoordinator(GroupNamespace(), FakeStore(), GroupConfig(min_session_timeout_ms=10,
                                                                initial_rebalance_delay_ms=100))
        await coordinator.start()
        try:
            first = join(coordinator, join_request())
            await asyncio.sleep(0.05)
            assert not first.done()  # an empty group waits group.initial.rebalance.delay.ms ...
            second = join(coordinator, join_request())
            await asyncio.sleep(0.08)
            assert not first.done()  # ... and waits again while new members keep arriving
            a, b = await asyncio.gather(first, second)
            assert a.generation_id == b.generation_id == 1 and len(a.members) == 2
        finally:
            await coordinator.stop()

    asyncio.run(main())


class FakeModernGroups:
    """Stands in for the KIP-848 coordinator: one consumer group "m" with member "x" at epoch 4, in the group
    namespace the classic coordinator shares."""

    def __init__(self, namespace: GroupNamespace) -> None:
        self.groups = namespace.consumer
        member = ConsumerMember("x", None, None, "c", "/h", 300, member_epoch=4)
        self.groups["m"] = ConsumerGroup("m", group_epoch=4, assignment_epoch=4, members={"x": member})


def test_kip848_groups_share_the_offsets_and_the_admin_apis() -> None:
    async def body(c: GroupCoordinator, store: FakeStore) -> None:
        modern = FakeModernGroups(c.namespace)
        value = rec.OffsetValue(8, "", c.clock())
        assert c.commit_offsets("m", "x", None, 4, {("t", 0): value}, 9) == {("t", 0): ErrorCode.none}
        assert c.commit_offsets("m", "x", None, 3, {("t", 0): value}, 9) == {("t", 0): ErrorCode.stale_member_epoch}
        assert c.fetch_offsets("m", [("t", 0)], "x", 4) == (ErrorCode.none, {("t", 0): value})
        assert c.fetch_offsets("m", [("t", 0)], "x", 2)[0] == ErrorCode.stale_member_epoch
        listed = c.list_groups(set(), set())[1]
        assert [(g.group_id, g.state, g.group_type) for g in listed] == [("m", "Stable", "consumer")]
        assert c.list_groups(set(), {"classic"})[1] == []
        assert c.describe_group("m") == (ErrorCode.none, None)  # not a classic group
        assert (await join(c, join_request())).error == ErrorCode.none  # group "g" is unrelated
        joined = join(c, JoinRequest("m", "", None, "c", "/h", 200, 300, "consumer", (("range", b""),)))
        assert (await joined).error == ErrorCode.inconsistent_group_protocol
        c.offsets.load("m", {TopicPartition("t", 0): rec.OffsetValue(8, "", 0)})  # ancient, but the group is alive
        c.expire_offsets()
        assert ("t", 0) in c.offsets.of("m")
        assert c.delete_groups(["m"]) == {"m": ErrorCode.non_empty_group}
        modern.groups["m"].members.clear()
        assert c.delete_groups(["m"]) == {"m": ErrorCode.none}
        assert "m" not in c.groups and "m" not in modern.groups and not c.offsets.of("m")

    run(body)
