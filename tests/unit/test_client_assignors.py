"""Assignors compute what Java's do, and ConsumerProtocol bytes round-trip across versions."""

from __future__ import annotations

from bus.client.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    make_assignors,
    rebalance_protocol,
)
from bus.client.subscription import TopicPartition as TP
from bus.protocol.consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)


def parts(result: dict[str, Assignment]) -> dict[str, list[tuple[str, int]]]:
    return {m: sorted((tp.topic, tp.partition) for tp in a.partitions) for m, a in result.items()}


def test_range_matches_javas_example() -> None:
    # RangeAssignor javadoc: C0, C1 on t0, t1 with 3 partitions each.
    subs = {"C0": Subscription(("t0", "t1")), "C1": Subscription(("t0", "t1"))}
    assert parts(RangeAssignor().assign({"t0": 3, "t1": 3}, subs)) == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)], "C1": [("t0", 2), ("t1", 2)]}


def test_roundrobin_matches_javas_example() -> None:
    # RoundRobinAssignor javadoc: C0 on t0; C1 on t0, t1; C2 on t0, t1, t2 (1, 2, 3 partitions).
    subs = {"C0": Subscription(("t0",)), "C1": Subscription(("t0", "t1")), "C2": Subscription(("t0", "t1", "t2"))}
    assert parts(RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs)) == {
        "C0": [("t0", 0)], "C1": [("t1", 0)], "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)]}


def test_static_members_are_ordered_by_instance_id() -> None:
    subs = {"a-member": Subscription(("t",), group_instance_id="z"), "b-member": Subscription(("t",),
                                                                                           group_instance_id="y")}
    assert parts(RangeAssignor().assign({"t": 2}, subs)) == {"b-member": [("t", 0)], "a-member": [("t", 1)]}


def test_cooperative_sticky_balances_and_withholds_moving_partitions() -> None:
    assignor = CooperativeStickyAssignor()
    first = assignor.assign({"t": 6}, {"A": Subscription(("t",))})
    assert len(first["A"].partitions) == 6
    # B joins: A still owns all six; three must move, but only after A revokes them.
    owned = first["A"].partitions
    second = assignor.assign({"t": 6}, {"A": Subscription(("t",), owned_partitions=owned, generation_id=1),
                                        "B": Subscription(("t",), generation_id=-1)})
    assert len(second["A"].partitions) == 3 and second["B"].partitions == ()
    # Next round: A owns three, the others are free and go to B; nothing A kept moves.
    third = assignor.assign({"t": 6}, {"A": Subscription(("t",), owned_partitions=second["A"].partitions,
                                                         generation_id=2),
                                       "B": Subscription(("t",), generation_id=2)})
    assert set(third["A"].partitions) == set(second["A"].partitions)
    assert len(third["B"].partitions) == 3
    assert not set(third["A"].partitions) & set(third["B"].partitions)


def test_cooperative_sticky_newest_generation_wins_a_disputed_partition() -> None:
    tp = TP("t", 0)
    result = CooperativeStickyAssignor().assign({"t": 1}, {
        "old": Subscription(("t",), owned_partitions=(tp,), generation_id=1),
        "new": Subscription(("t",), owned_partitions=(tp,), generation_id=3)})
    assert result["new"].partitions == (tp,) and result["old"].partitions == ()


def test_subscription_round_trips_every_version() -> None:
    sub = Subscription(("a", "b"), b"ud", (TP("a", 0), TP("a", 2)), 7, "rack-1")
    for version in range(4):
        decoded = decode_subscription(encode_subscription(sub, version))
        assert decoded.topics == ("a", "b")
        if version >= 1:
            assert decoded.owned_partitions == (TP("a", 0), TP("a", 2))
        if version >= 2:
            assert decoded.generation_id == 7
        if version >= 3:
            assert decoded.rack_id == "rack-1"


def test_assignment_round_trips_and_empty_means_nothing() -> None:
    assignment = Assignment((TP("a", 1), TP("b", 0)), None)
    for version in range(4):
        assert set(decode_assignment(encode_assignment(assignment, version)).partitions) == {TP("a", 1), TP("b", 0)}
    assert decode_assignment(b"").partitions == ()


def test_rebalance_protocol_is_cooperative_only_when_all_agree() -> None:
    assert rebalance_protocol(make_assignors(["cooperative-sticky"])) == "cooperative"
    assert rebalance_protocol(make_assignors(["range", "cooperative-sticky"])) == "eager"
    assert [a.name for a in make_assignors(["org.apache.kafka.clients.consumer.RoundRobinAssignor"])] == [
        "roundrobin"]
