"""ElectLeaders and the automatic leader rebalance on the real `QuorumController` over the local metadata log:
every outcome Kafka's ReplicationControlManager.electLeader answers, the per-broker imbalance and the preferred
elections it triggers, each committed as one entry."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.controller import election
from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.controller.image import PartitionState
from bus.controller.replication_control import PREFERRED, UNCLEAN
from tests.unit.test_controller_partition_leadership import controller_of, entries, fence, partitions


def codes(results: dict[str, dict[int, ControllerError | None]]) -> dict[str, dict[int, ErrorCode]]:
    return {topic: {p: ErrorCode.none if e is None else e.code for p, e in answers.items()}
            for topic, answers in results.items()}


def led_away_and_back_in_sync(controller: QuorumController, topic: str, broker: int,
                              rejoin: list[int] | None = None) -> None:
    """Fence `broker` (its leaderships move), unfence it, and let each partition's leader take it back into the
    ISR (AlterPartition) for the partitions in `rejoin` (default: all)."""
    fence(controller, broker)
    controller.broker_heartbeat(broker)
    topic_id = controller.image.topics[topic].topic_id
    for number, state in partitions(controller, topic).items():
        if (rejoin is None or number in rejoin) and broker in state.replicas and broker not in state.isr:
            controller.alter_partition(state.leader, topic_id, number, state.leader_epoch, state.partition_epoch,
                                       [*state.isr, broker])


def test_preferred_election_gives_the_leadership_back_to_the_first_replica(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3, 4]}))
    led_away_and_back_in_sync(controller, "t", 2)
    before = partitions(controller, "t")[0]
    assert before == PartitionState(0, [2, 3, 4], [3, 4, 2], 3, leader_epoch=1, partition_epoch=2)
    stored = len(entries(tmp_path))

    results = controller.elect_leaders(PREFERRED, {"t": [0]})

    assert codes(results) == {"t": {0: ErrorCode.none}}
    assert partitions(controller, "t")[0] == PartitionState(0, [2, 3, 4], [3, 4, 2], 2, leader_epoch=2,
                                                            partition_epoch=3)
    assert [r["type"] for r in entries(tmp_path)[stored:]] == ["partition"]


def test_preferred_election_not_needed_when_the_first_replica_leads(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3]}))
    written = controller.log.written

    results = controller.elect_leaders(PREFERRED, {"t": [0]})

    assert codes(results) == {"t": {0: ErrorCode.election_not_needed}}
    assert controller.log.written == written  # nothing committed


@pytest.mark.parametrize("back", [False, True], ids=["fenced", "unfenced-but-out-of-the-isr"])
def test_preferred_leader_not_available_out_of_the_isr_or_fenced(tmp_path: Path, back: bool) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3]}))
    fence(controller, 2)
    if back:
        controller.broker_heartbeat(2)  # usable again, but not caught up: the leader has not taken it back

    results = controller.elect_leaders(PREFERRED, {"t": [0]})

    assert codes(results) == {"t": {0: ErrorCode.preferred_leader_not_available}}
    assert partitions(controller, "t")[0].leader == 3


def test_unknown_topics_and_partitions(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3]}))

    results = controller.elect_leaders(PREFERRED, {"t": [0, 7], "nope": [0]})

    assert codes(results) == {"t": {0: ErrorCode.election_not_needed, 7: ErrorCode.unknown_topic_or_partition},
                              "nope": {0: ErrorCode.unknown_topic_or_partition}}
    assert results["nope"][0] is not None and results["nope"][0].message == "No such topic as nope"


def test_unclean_election_only_for_a_partition_without_a_leader(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)  # unclean.leader.election.enable=false: the controller waits for 2
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3], 1: [3, 2]}))
    topic_id = controller.image.topics["t"].topic_id
    controller.alter_partition(2, topic_id, 0, 0, 0, [2])  # 3 fell behind on t-0
    fence(controller, 2)
    assert partitions(controller, "t")[0] == PartitionState(0, [2, 3], [2], -1, leader_epoch=1, partition_epoch=2)
    stored = len(entries(tmp_path))

    results = controller.elect_leaders(UNCLEAN, {"t": [0, 1]})

    # t-0 takes 3, out of the ISR, which becomes [3]; t-1 has a leader (3) and needs no election.
    assert codes(results) == {"t": {0: ErrorCode.none, 1: ErrorCode.election_not_needed}}
    assert partitions(controller, "t")[0] == PartitionState(0, [2, 3], [3], 3, leader_epoch=2, partition_epoch=3)
    assert [r["type"] for r in entries(tmp_path)[stored:]] == ["partition"]


def test_unclean_election_without_a_usable_replica(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("solo", assignments={0: [2]}))
    fence(controller, 2)

    assert codes(controller.elect_leaders(UNCLEAN, {"solo": [0]})) == {
        "solo": {0: ErrorCode.eligible_leaders_not_available}}
    assert codes(controller.elect_leaders(PREFERRED, {"solo": [0]})) == {
        "solo": {0: ErrorCode.preferred_leader_not_available}}


def test_an_unknown_election_type_is_refused(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    with pytest.raises(ControllerError) as refused:
        controller.elect_leaders(2, None)
    assert refused.value.code == ErrorCode.invalid_request


def test_every_partition_elects_in_one_entry_and_leaves_out_those_not_needing_it(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3], 1: [3, 2], 2: [2, 4]}))
    controller.create_topic(TopicSpec("u", assignments={0: [4, 3]}))
    led_away_and_back_in_sync(controller, "t", 2, rejoin=[0])  # t-2's ISR stays [4]: its preferred is not back
    written = controller.log.written

    results = controller.elect_leaders(PREFERRED, None)

    assert codes(results) == {"t": {0: ErrorCode.none, 2: ErrorCode.preferred_leader_not_available}, "u": {}}
    assert controller.log.written == written + 1
    assert [s.leader for s in partitions(controller, "t").values()] == [2, 3, 4]


def test_the_imbalance_counts_per_preferred_replica_the_partitions_led_elsewhere() -> None:
    states = [("a", PartitionState(0, [1, 2], [1, 2], 1)), ("a", PartitionState(1, [1, 2], [2], 2)),
              ("b", PartitionState(0, [1, 3], [3], -1)), ("b", PartitionState(1, [2, 1], [2, 1], 2))]

    shares = election.imbalance(states)

    assert sorted(shares) == [1, 2]
    assert shares[1].preferred == 3 and shares[1].led_elsewhere == [states[1], states[2]]
    assert shares[1].ratio == pytest.approx(2 / 3)
    assert shares[2].preferred == 1 and shares[2].led_elsewhere == [] and shares[2].ratio == 0


def test_the_rebalance_moves_leaderships_back_only_above_the_percentage(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    # Broker 2 is the preferred replica of ten partitions, broker 3 of ten more.
    controller.create_topic(TopicSpec("t", assignments={p: [2, 3] if p < 10 else [3, 2] for p in range(20)}))
    led_away_and_back_in_sync(controller, "t", 2, rejoin=[0, 1, 2])  # 7 of 2's partitions: 2 not in sync yet
    assert all(s.leader == 3 for s in partitions(controller, "t").values())
    assert controller.balance_leaders(100) == 0  # 100% of 2's partitions led elsewhere: not above 100%
    written = controller.log.written

    assert controller.balance_leaders(10) == 3

    assert controller.log.written == written + 1  # one entry
    assert [p for p, s in partitions(controller, "t").items() if s.leader == 2] == [0, 1, 2]
    # Now 7 of 10 (70%) are still led elsewhere, but 2 cannot lead them: nothing to do, nothing written.
    assert controller.balance_leaders(10) == 0 and controller.log.written == written + 1


def test_the_rebalance_leaves_an_imbalance_at_the_percentage_alone(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={p: [2, 3] for p in range(10)}))
    led_away_and_back_in_sync(controller, "t", 2)
    controller.elect_leaders(PREFERRED, {"t": list(range(1, 10))})  # 9 of 10 back: one (10%) led by 3
    assert [s.leader for s in partitions(controller, "t").values()] == [3] + [2] * 9

    assert controller.balance_leaders(10) == 0  # exactly 10%: Kafka moves only above the percentage
    assert controller.balance_leaders(9) == 1
    assert partitions(controller, "t")[0].leader == 2
