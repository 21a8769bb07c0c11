"""The controller's placement and election rules (`bus.controller.election`), as Kafka's rack-unaware assignment
and PartitionChangeBuilder decide them."""

from __future__ import annotations

from collections import Counter

import pytest

from bus.controller.election import NO_LEADER, change, place_replicas, without_brokers
from bus.controller.image import PartitionState


def state(replicas: list[int], isr: list[int], leader: int, leader_epoch: int = 4,
          partition_epoch: int = 9) -> PartitionState:
    return PartitionState(0, replicas, isr, leader, leader_epoch, partition_epoch)


# -- placement ------------------------------------------------------------------------------------


@pytest.mark.parametrize("start", [0, 1, 2])
def test_six_partitions_rf3_on_three_brokers_each_broker_leads_two(start: int) -> None:
    assignment = place_replicas([1, 2, 3], 6, 3, start)
    assert sorted(assignment) == list(range(6))
    assert all(sorted(replicas) == [1, 2, 3] for replicas in assignment.values())
    assert Counter(replicas[0] for replicas in assignment.values()) == {1: 2, 2: 2, 3: 2}
    # The follower order shifts after every round of brokers: partitions led by one broker have different
    # second replicas, so its followers' load (and the next leader after a failure) spreads too.
    for leader in (1, 2, 3):
        seconds = [r[1] for r in assignment.values() if r[0] == leader]
        assert len(set(seconds)) == 2


def test_placement_matches_kafkas_rack_unaware_assignment() -> None:
    # Kafka's AdminUtils example: 5 brokers, 10 partitions, RF 3, start index 0.
    expected = {0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
                5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}
    assert place_replicas([0, 1, 2, 3, 4], 10, 3, 0) == expected


def test_placement_continues_a_topics_pattern_for_new_partitions() -> None:
    whole = place_replicas([1, 2, 3, 4], 8, 2, 1)
    added = place_replicas([1, 2, 3, 4], 5, 2, 1, first_partition=3)
    assert added == {p: whole[p] for p in range(3, 8)}


def test_placement_needs_enough_brokers() -> None:
    with pytest.raises(ValueError, match="exceeds"):
        place_replicas([1, 2], 1, 3, 0)


def test_one_replica_per_partition_round_robin() -> None:
    assert place_replicas([1, 2, 3], 4, 1, 0) == {0: [1], 1: [2], 2: [3], 3: [1]}


# -- a broker leaves (fenced or shutting down) ---------------------------------------------------


def test_a_follower_leaving_shrinks_the_isr_only() -> None:
    new = without_brokers(state([1, 2, 3], [1, 2, 3], 1), {3}, {1, 2}, unclean=False)
    assert new == state([1, 2, 3], [1, 2], 1, leader_epoch=4, partition_epoch=10)


def test_the_leader_leaving_hands_over_to_the_first_usable_isr_replica_in_assignment_order() -> None:
    # Replica 2 is not in the ISR, replica 4 is fenced: 3 is the first in-sync, usable one.
    new = without_brokers(state([1, 2, 4, 3], [1, 4, 3], 1), {1}, {2, 3}, unclean=False)
    assert new == state([1, 2, 4, 3], [4, 3], 3, leader_epoch=5, partition_epoch=10)


def test_the_last_isr_member_leaving_leaves_no_leader_and_stays_in_the_isr() -> None:
    new = without_brokers(state([1, 2, 3], [1], 1), {1}, {2, 3}, unclean=False)
    assert new == state([1, 2, 3], [1], NO_LEADER, leader_epoch=5, partition_epoch=10)


def test_unclean_election_takes_the_first_usable_replica_with_itself_as_the_isr() -> None:
    new = without_brokers(state([1, 2, 3], [1], 1), {1}, {3, 2}, unclean=True)
    assert new == state([1, 2, 3], [2], 2, leader_epoch=5, partition_epoch=10)


def test_unclean_election_prefers_a_clean_leader() -> None:
    new = without_brokers(state([1, 2, 3], [1, 3], 1), {1}, {2, 3}, unclean=True)
    assert new == state([1, 2, 3], [3], 3, leader_epoch=5, partition_epoch=10)


def test_no_usable_replica_at_all_even_unclean_leaves_no_leader() -> None:
    new = without_brokers(state([1, 2], [1], 1), {1}, set(), unclean=True)
    assert new == state([1, 2], [1], NO_LEADER, leader_epoch=5, partition_epoch=10)


def test_several_brokers_leaving_at_once_keep_one_isr_member() -> None:
    new = without_brokers(state([1, 2, 3], [1, 2], 1), {1, 2}, {3}, unclean=False)
    assert new == state([1, 2, 3], [2], NO_LEADER, leader_epoch=5, partition_epoch=10)


def test_a_broker_outside_the_partition_changes_nothing() -> None:
    assert without_brokers(state([1, 2], [1, 2], 1), {3}, {1, 2}, unclean=True) is None
    assert without_brokers(state([1, 2, 3], [1, 2], 1), {3}, {1, 2}, unclean=False) is None


# -- a broker comes back ---------------------------------------------------------------------------


def test_a_leaderless_partition_gets_its_last_isr_member_back_as_leader() -> None:
    leaderless = state([1, 2, 3], [1], NO_LEADER, leader_epoch=5, partition_epoch=10)
    assert change(leaderless, {2, 3}, unclean=False) is None  # 1 is not back yet: nothing to do
    assert change(leaderless, {1, 2, 3}, unclean=False) == state([1, 2, 3], [1], 1, leader_epoch=6,
                                                                  partition_epoch=11)


def test_a_leaderless_partition_with_unclean_election_takes_any_usable_replica() -> None:
    leaderless = state([1, 2, 3], [1], NO_LEADER, leader_epoch=5, partition_epoch=10)
    assert change(leaderless, {3}, unclean=True) == state([1, 2, 3], [3], 3, leader_epoch=6, partition_epoch=11)


def test_a_led_partition_keeps_its_leader() -> None:
    assert change(state([1, 2, 3], [2, 3], 2), {1, 2, 3}, unclean=True) is None


# -- the leader moves the ISR (AlterPartition) ----------------------------------------------------


def test_an_isr_expansion_bumps_the_partition_epoch_only() -> None:
    new = change(state([1, 2, 3], [1], 1), {1, 2, 3}, unclean=False, target_isr=[1, 2])
    assert new == state([1, 2, 3], [1, 2], 1, leader_epoch=4, partition_epoch=10)


def test_the_same_isr_is_no_change() -> None:
    assert change(state([1, 2, 3], [1, 2], 1), {1, 2, 3}, unclean=False, target_isr=[1, 2]) is None


def test_a_new_state_is_a_new_object() -> None:
    old = state([1, 2, 3], [1, 2, 3], 1)
    new = without_brokers(old, {2}, {1, 3}, unclean=False)
    assert new is not None and new is not old
    assert old == state([1, 2, 3], [1, 2, 3], 1)  # the old state is left as it was
