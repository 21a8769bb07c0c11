"""KIP-848 assignors and reconciliation, without a broker."""

import uuid

from bus.coordinator.group.consumer.assignors import range_assign, uniform_assign
from bus.coordinator.group.consumer.group import ConsumerGroup, ConsumerMember, MemberState

A = uuid.UUID(int=1)
B = uuid.UUID(int=2)


def counts(assignment):
    return {m: sum(len(p) for p in a.values()) for m, a in assignment.items()}


def all_partitions(assignment):
    return sorted((t, p) for a in assignment.values() for t, parts in a.items() for p in parts)


def test_range_gives_consecutive_ranges_per_topic():
    result = range_assign({"m1": {A}, "m2": {A}}, {A: 5}, {})
    assert result == {"m1": {A: {0, 1, 2}}, "m2": {A: {3, 4}}}


def test_uniform_balances_and_covers_every_partition_once():
    subs = {"m1": {A, B}, "m2": {A, B}, "m3": {A}}
    result = uniform_assign(subs, {A: 4, B: 3}, {})
    assert all_partitions(result) == sorted([(A, p) for p in range(4)] + [(B, p) for p in range(3)])
    assert max(counts(result).values()) - min(counts(result).values()) <= 1
    assert B not in result["m3"]


def test_uniform_is_sticky_when_a_member_joins():
    first = uniform_assign({"m1": {A}, "m2": {A}}, {A: 6}, {})
    second = uniform_assign({"m1": {A}, "m2": {A}, "m3": {A}}, {A: 6}, first)
    moved = sum(len(first[m][A] - second[m].get(A, set())) for m in ("m1", "m2"))
    assert counts(second) == {"m1": 2, "m2": 2, "m3": 2}
    assert moved == 2  # only what the newcomer needs


def member(member_id: str) -> ConsumerMember:
    return ConsumerMember(member_id, None, None, "c", "/h", 30000)


def test_a_partition_moves_only_after_its_owner_revokes_it():
    group = ConsumerGroup("g", group_epoch=1, assignment_epoch=1)
    m1 = group.members.setdefault("m1", member("m1"))
    group.target = {"m1": {A: {0, 1}}}
    group.reconcile(m1, {})
    assert m1.assigned == {A: {0, 1}} and m1.member_epoch == 1 and m1.state is MemberState.STABLE

    m2 = group.members.setdefault("m2", member("m2"))
    group.group_epoch = group.assignment_epoch = 2
    group.target = {"m1": {A: {0}}, "m2": {A: {1}}}
    group.reconcile(m2, {})
    assert m2.assigned == {} and m2.state is MemberState.UNRELEASED_PARTITIONS and m2.member_epoch == 2

    group.reconcile(m1, {A: {0, 1}})
    assert m1.state is MemberState.UNREVOKED_PARTITIONS and m1.pending_revocation == {A: {1}}
    assert m1.member_epoch == 1  # keeps its epoch until it has revoked
    group.reconcile(m2, {})
    assert m2.assigned == {}  # still held by m1

    group.reconcile(m1, {A: {0}})  # the client reports the revocation
    assert m1.state is MemberState.STABLE and m1.member_epoch == 2
    group.reconcile(m2, {})
    assert m2.assigned == {A: {1}} and m2.state is MemberState.STABLE


def test_group_state_labels():
    group = ConsumerGroup("g")
    assert group.state == "Empty"
    group.members["m1"] = member("m1")
    group.group_epoch = 1
    assert group.state == "Assigning"
    group.assignment_epoch = 1
    assert group.state == "Reconciling"
    group.members["m1"].member_epoch = 1
    assert group.state == "Stable"


def _heartbeat(group_id, epoch=0):
    from bus.coordinator.group.consumer.coordinator import HeartbeatRequest

    return HeartbeatRequest(group_id=group_id, member_id="m-1", member_epoch=epoch, instance_id=None, rack_id=None,
                            rebalance_timeout_ms=30000, subscribed_topic_names=["t"], subscribed_topic_regex=None,
                            server_assignor=None, owned=None, client_id="c", client_host="/127.0.0.1",
                            generates_member_id=False)


def test_an_active_classic_group_owns_its_id():
    """The coordinator is built from its narrow collaborators (config, metadata view, the group namespace holding
    an active classic group), so the one-namespace rule is checked without a broker: Kafka's exact error and
    message."""
    import asyncio

    import pytest
    from kio.schema.errors import ErrorCode

    from bus.controller.image import ImageView, MetadataImage
    from bus.coordinator.group.classic.group import ClassicGroup, GroupState
    from bus.coordinator.group.consumer.coordinator import (
        ConsumerGroupConfig,
        ConsumerGroupCoordinator,
        HeartbeatError,
    )
    from bus.coordinator.group.namespace import GroupNamespace

    image = MetadataImage()
    image.apply({"type": "topic", "name": "t", "topic_id": str(A)})
    image.apply({"type": "partition", "topic_id": str(A), "partition": 0, "replicas": [1], "isr": [1], "leader": 1})
    namespace = GroupNamespace()
    namespace.classic["classic"] = ClassicGroup("classic", GroupState.STABLE)
    coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(), ImageView(image, 1, lambda: [1]), namespace)

    async def main():
        with pytest.raises(HeartbeatError) as refused:
            coordinator.heartbeat(_heartbeat("classic"))
        assert (refused.value.code, refused.value.message) == (ErrorCode.group_id_not_found,
                                                               "Group classic is not a consumer group.")
        joined = coordinator.heartbeat(_heartbeat("modern"))
        assert joined.member_epoch > 0 and joined.assignment == {A: {0}}
        coordinator.stop()

    asyncio.run(main())
