"""Partition reassignment on the real `QuorumController` over the local metadata log: AlterPartitionReassignments
and ListPartitionReassignments as Kafka's KRaft ReplicationControlManager answers them, the move completed by the
AlterPartition that brings the last target replica into the ISR, cancel, replacement, every refusal, and fencing
and controlled shutdown during a move; a broker's replica deleted once moved away; and `bus reassign-partitions`
refusals, files and proposals (its runs against a cluster are in tests/integration/test_reassignment.py)."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.broker.partition import PartitionError
from bus.broker.replica_manager import ReplicaManager
from bus.cli import main
from bus.controller.controller import QuorumController, TopicSpec
from bus.controller.image import MetadataImage, PartitionState
from bus.controller.metadata_log.local_file import MetadataLog
from bus.log.config import LogConfig
from bus.log.manager import LogManager
from bus.protocol.topic_partition import TopicPartition
from bus.tools import reassign_partitions_cmd
from bus.tools._common import ToolError
from tests.unit.test_controller_partition_leadership import controller_of, entries, fence, partitions
from tests.unit.test_preferred_election import codes


def moving(tmp_path: Path, replicas: list[int], target: list[int] | None,
           unclean: bool = False) -> QuorumController:
    """A controller with topic t, partition 0 on `replicas`, being moved to `target` (accepted)."""
    controller = controller_of(tmp_path, unclean)
    controller.create_topic(TopicSpec("t", assignments={0: replicas}))
    if target is not None:
        assert codes(controller.alter_partition_reassignments({"t": {0: target}})) == {"t": {0: ErrorCode.none}}
    return controller


def join_isr(controller: QuorumController, *brokers: int) -> PartitionState:
    """The leader of t-0 takes `brokers` into its ISR (AlterPartition), as once they caught up."""
    state = partitions(controller, "t")[0]
    return controller.alter_partition(state.leader, controller.image.topics["t"].topic_id, 0, state.leader_epoch,
                                      state.partition_epoch, [*state.isr, *brokers])


def test_a_move_starts_then_completes_when_the_last_target_replica_joins_the_isr(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], None)
    stored = len(entries(tmp_path))

    results = controller.alter_partition_reassignments({"t": {0: [3, 4]}})

    assert codes(results) == {"t": {0: ErrorCode.none}}
    started = PartitionState(0, [3, 4, 2], [2, 3], 2, leader_epoch=0, partition_epoch=1, adding_replicas=[4],
                             removing_replicas=[2])
    assert partitions(controller, "t")[0] == started
    assert controller.list_partition_reassignments(None) == {"t": {0: started}}
    assert controller.list_partition_reassignments({"t": [0, 7], "nope": [0]}) == {"t": {0: started}}
    start_record = entries(tmp_path)[stored:]
    assert [(r["adding_replicas"], r["removing_replicas"]) for r in start_record] == [([4], [2])]

    done = join_isr(controller, 4)

    # 2 led but is no longer a replica: the first target replica in the ISR leads, the leader epoch goes up.
    completed = PartitionState(0, [3, 4], [3, 4], 3, leader_epoch=1, partition_epoch=2)
    assert done == completed
    assert partitions(controller, "t")[0] == completed
    assert controller.list_partition_reassignments(None) == {}
    last = entries(tmp_path)[-1]
    assert "adding_replicas" not in last and "removing_replicas" not in last  # absent: nothing under way


def test_a_move_whose_target_is_in_sync_completes_at_once_with_a_new_leader_epoch(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3, 4], None)
    appends = controller.log.written

    controller.alter_partition_reassignments({"t": {0: [2, 3]}})

    # 4 leaves the replicas: the leader stays but the epoch goes up, fencing 4's fetches (Kafka does the same).
    assert partitions(controller, "t")[0] == PartitionState(0, [2, 3], [2, 3], 2, leader_epoch=1, partition_epoch=1)
    assert controller.log.written == appends + 1


def test_reordering_the_replicas_needs_no_move_and_the_same_target_changes_nothing(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], None)
    controller.alter_partition_reassignments({"t": {0: [3, 2]}})
    assert partitions(controller, "t")[0] == PartitionState(0, [3, 2], [2, 3], 2, leader_epoch=0, partition_epoch=1)
    appends = controller.log.written

    assert codes(controller.alter_partition_reassignments({"t": {0: [3, 2]}})) == {"t": {0: ErrorCode.none}}
    assert controller.log.written == appends


def test_cancel_reverts_to_the_replicas_before_the_move(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], [3, 4])

    assert codes(controller.alter_partition_reassignments({"t": {0: None}})) == {"t": {0: ErrorCode.none}}

    # The replicas being added leave, the others keep their order in the moving list (the target's first), as
    # Kafka's PartitionReassignmentRevert: the set is the original one; the leader stays.
    assert partitions(controller, "t")[0] == PartitionState(0, [3, 2], [2, 3], 2, leader_epoch=1, partition_epoch=2)
    assert controller.list_partition_reassignments(None) == {}


def test_cancel_takes_an_added_replica_already_in_sync_out_of_the_isr(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2], [3, 4])
    join_isr(controller, 3)  # 4 is still catching up: not done
    assert partitions(controller, "t")[0].isr == [2, 3]

    controller.alter_partition_reassignments({"t": {0: None}})

    assert partitions(controller, "t")[0] == PartitionState(0, [2], [2], 2, leader_epoch=1, partition_epoch=3)


@pytest.mark.parametrize("unclean", [False, True], ids=["refused", "unclean-allowed"])
def test_cancel_when_only_added_replicas_are_in_sync_needs_unclean_election(tmp_path: Path, unclean: bool) -> None:
    controller = moving(tmp_path, [2], [3, 4], unclean)
    join_isr(controller, 3)
    fence(controller, 2)  # 3 leads; the ISR holds only a replica being added
    controller.broker_heartbeat(2)
    before = partitions(controller, "t")[0]
    assert (before.leader, before.isr) == (3, [3])

    results = controller.alter_partition_reassignments({"t": {0: None}})

    if not unclean:
        assert codes(results) == {"t": {0: ErrorCode.invalid_replica_assignment}}
        assert "unclean leader election" in str(results["t"][0])
        assert partitions(controller, "t")[0] == before
    else:
        assert codes(results) == {"t": {0: ErrorCode.none}}
        after = partitions(controller, "t")[0]
        assert (after.replicas, after.isr, after.leader, after.reassigning) == ([2], [2], 2, False)


def test_a_new_target_replaces_the_move_under_way(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], [3, 4])

    controller.alter_partition_reassignments({"t": {0: [2, 4]}})

    # Computed against the current replicas [3, 4, 2]: 3 is removed now; 4 is still being added (not in sync).
    replaced = partitions(controller, "t")[0]
    assert (replaced.replicas, replaced.isr, replaced.leader) == ([2, 4, 3], [2, 3], 2)
    assert (replaced.adding_replicas, replaced.removing_replicas) == ([4], [3])
    assert join_isr(controller, 4) == PartitionState(0, [2, 4], [2, 4], 2, leader_epoch=1, partition_epoch=3)

    # Replaced once more and cancelled: back to the replicas before the last move.
    controller.alter_partition_reassignments({"t": {0: [3, 4]}})
    controller.alter_partition_reassignments({"t": {0: None}})
    reverted = partitions(controller, "t")[0]
    assert (reverted.replicas, reverted.isr, reverted.reassigning) == ([4, 2], [2, 4], False)


def test_refusals_commit_nothing_and_leave_the_other_partitions_of_the_request_alone(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3], 1: [3, 4], 2: [2, 4]}))

    results = controller.alter_partition_reassignments({
        "t": {0: [], 1: [3, 3], 2: [2, 99], 5: [2], 6: None},
        "nope": {0: [2]},
    })
    assert codes(results) == {
        "t": {0: ErrorCode.invalid_replica_assignment, 1: ErrorCode.invalid_replica_assignment,
              2: ErrorCode.invalid_replica_assignment, 5: ErrorCode.unknown_topic_or_partition,
              6: ErrorCode.unknown_topic_or_partition},
        "nope": {0: ErrorCode.unknown_topic_or_partition},
    }
    assert "empty replica list" in str(results["t"][0])
    assert "broker 3 more than once" in str(results["t"][1])
    assert "broker 99, but no such broker is registered" in str(results["t"][2])

    appends = controller.log.written
    results = controller.alter_partition_reassignments({"t": {0: None, 1: [4, 2]}})
    assert codes(results) == {"t": {0: ErrorCode.no_reassignment_in_progress, 1: ErrorCode.none}}
    assert controller.log.written == appends + 1
    assert partitions(controller, "t")[1].replicas == [4, 2, 3]


def test_a_replication_factor_change_refused_when_the_request_forbids_it(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], [3, 4])  # heading for 2 replicas

    refused = controller.alter_partition_reassignments({"t": {0: [2, 3, 4]}}, allow_replication_factor_change=False)
    allowed = controller.alter_partition_reassignments({"t": {0: [4, 2]}}, allow_replication_factor_change=False)

    assert codes(refused) == {"t": {0: ErrorCode.invalid_replication_factor}}
    assert codes(allowed) == {"t": {0: ErrorCode.none}}


def test_a_fenced_broker_may_be_a_target_but_blocks_the_move_until_it_is_back(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], None)
    fence(controller, 4)
    controller.alter_partition_reassignments({"t": {0: [3, 4]}})
    topic_id = controller.image.topics["t"].topic_id
    state = partitions(controller, "t")[0]

    with pytest.raises(Exception) as refused:  # the leader cannot take a fenced replica into the ISR
        controller.alter_partition(2, topic_id, 0, state.leader_epoch, state.partition_epoch, [2, 3, 4])
    assert getattr(refused.value, "code", None) == ErrorCode.ineligible_replica
    assert partitions(controller, "t")[0].reassigning

    controller.broker_heartbeat(4)
    assert join_isr(controller, 4).replicas == [3, 4]


def test_the_removed_leader_fenced_during_a_move_hands_over_and_the_move_completes(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], [3, 4])

    fence(controller, 2)

    during = partitions(controller, "t")[0]
    assert (during.replicas, during.isr, during.leader, during.leader_epoch) == ([3, 4, 2], [3], 3, 1)
    assert (during.adding_replicas, during.removing_replicas) == ([4], [2])
    assert join_isr(controller, 4) == PartitionState(0, [3, 4], [3, 4], 3, leader_epoch=2, partition_epoch=3)


def test_controlled_shutdown_of_the_removed_leader_during_a_move(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], [3, 4])

    assert controller.broker_heartbeat(2, want_shut_down=True) is False

    during = partitions(controller, "t")[0]
    assert (during.leader, during.isr, during.reassigning) == (3, [3], True)
    assert controller.broker_heartbeat(2, want_shut_down=True) is True
    assert join_isr(controller, 4).replicas == [3, 4]


def test_the_image_replayed_mid_move_has_the_same_state(tmp_path: Path) -> None:
    controller = moving(tmp_path, [2, 3], [3, 4])
    replayed = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1, default_replication_factor=1)
    assert partitions(replayed, "t") == partitions(controller, "t")
    assert partitions(replayed, "t")[0].adding_replicas == [4]


def test_a_partition_record_from_before_reassignment_loads_with_nothing_under_way() -> None:
    image = MetadataImage()
    topic_id = str(uuid.uuid4())
    image.apply({"type": "topic", "name": "t", "topic_id": topic_id})
    image.apply({"type": "partition", "topic_id": topic_id, "partition": 0, "replicas": [2, 3], "isr": [2, 3],
                 "leader": 2, "leader_epoch": 4, "partition_epoch": 7})

    state = image.topics["t"].partitions[0]
    assert state == PartitionState(0, [2, 3], [2, 3], 2, leader_epoch=4, partition_epoch=7)
    assert (state.adding_replicas, state.removing_replicas, state.reassigning) == ([], [], False)


# -- the brokers' side: a replica moved away is deleted ------------------------------------------------------


def test_a_broker_moved_off_a_partition_stops_leading_it_and_deletes_its_log(tmp_path: Path) -> None:
    controller = moving(tmp_path / "meta", [2, 3], None)
    node = ReplicaManager(2, LogManager([tmp_path / "node-2"], LogConfig()), {})
    told: list[tuple[str, bool]] = []
    node.leadership_listeners.append(lambda partition, leading: told.append((partition.topic, leading)))
    node.load(controller.image)
    controller.listeners.append(lambda records: node.apply(controller.image, records))
    directory = node.get("t", 0).log.directory
    assert directory.is_dir() and told == [("t", True)]

    controller.alter_partition_reassignments({"t": {0: [3, 4]}})
    assert node.get("t", 0).is_leader  # still a replica (being removed) and the leader until the move completes
    join_isr(controller, 4)

    assert TopicPartition("t", 0) not in node.partitions and node.partitions_by_id[node_topic_id(controller)] == []
    assert told == [("t", True), ("t", False)]
    assert not directory.exists()
    with pytest.raises(PartitionError) as refused:
        node.get("t", 0)
    assert refused.value.code == ErrorCode.not_leader_or_follower


def test_a_log_left_by_a_move_made_while_the_node_was_away_is_deleted(tmp_path: Path) -> None:
    controller = moving(tmp_path / "meta", [3, 4], None)
    logs = LogManager([tmp_path / "node-2"], LogConfig())
    stray = logs.get_or_create("t", 0).directory  # a replica of t-0 from before it moved to 3 and 4
    node = ReplicaManager(2, logs, {})

    node.load(controller.image)

    assert not stray.exists() and logs.get(TopicPartition("t", 0)) is None


def node_topic_id(controller: QuorumController) -> uuid.UUID:
    return controller.image.topics["t"].topic_id


# -- bus reassign-partitions: what it refuses before connecting, its files and its proposal ---------------------


@pytest.mark.parametrize(("argv", "says"), [
    ([], "exactly one action"),
    (["--execute", "--verify"], "exactly one action"),
    (["--list"], "--bootstrap-server"),
    (["--bootstrap-server", "h:1", "--execute"], "--reassignment-json-file"),
    (["--bootstrap-server", "h:1", "--generate", "--broker-list", "1,2"], "--topics-to-move-json-file"),
    (["--bootstrap-server", "h:1", "--list", "--additional"], "--additional can't be used with --list"),
    (["--bootstrap-server", "h:1", "--verify", "--reassignment-json-file", "f", "--broker-list", "1"],
     "--broker-list can't be used with --verify"),
    (["--bootstrap-server", "h:1", "--verify", "--reassignment-json-file", "f", "--throttle", "1000"],
     "--throttle can't be used with --verify"),
    (["--bootstrap-server", "h:1", "--execute", "--reassignment-json-file", "/nonexistent/r.json"],
     "Cannot read --reassignment-json-file"),
    (["--bootstrap-server", "h:1", "--generate", "--topics-to-move-json-file", "TOPICS", "--broker-list", "1,x"],
     "--broker-list must be broker ids"),
    (["--bootstrap-server", "h:1", "--generate", "--topics-to-move-json-file", "TOPICS", "--broker-list", "1,1"],
     "Broker list contains duplicate entries: 1"),
])
def test_the_tool_refuses_bad_arguments_with_one_line_and_exit_code_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"topic": "t"}], "version": 1}')
    argv = [str(topics) if a == "TOPICS" else a for a in argv]

    assert main(["reassign-partitions", *argv]) == 1

    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize(("text", "says"), [
    ("", "not valid JSON"),
    ("[1]", "must be a JSON object"),
    ('{"version": 2, "partitions": []}', "Not supported version field value 2"),
    ('{"version": 1, "partitions": []}', "Partition reassignment list cannot be empty"),
    ('{"partitions": {"t": 0}}', '"partitions" must be a list'),
    ('{"partitions": [{"topic": "t", "partition": "0", "replicas": [1]}]}', '"partition" integer'),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [true]}]}', '"replicas" list of broker ids'),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": []}]}', "Partition replica list cannot be empty"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 1]}]}',
     "may not contain duplicate entries: t-0 contains multiple entries for 1"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1]}, {"topic": "t", "partition": 0, '
     '"replicas": [2]}]}', "duplicate topic partitions: t-0"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2], "log_dirs": ["any"]}]}',
     "different from size of log dirs list"),
    ('{"partitions": [{"topic": "t", "partition": 0, "replicas": [1], "log_dirs": ["/data"]}]}',
     "between log directories is not supported"),
])
def test_bad_reassignment_files_are_refused_with_a_reason(text: str, says: str) -> None:
    with pytest.raises(ToolError) as refused:
        reassign_partitions_cmd.parse_reassignment(text)
    assert says in str(refused.value)


def test_reassignment_files_round_trip_in_kafkas_format() -> None:
    text = ('{"version":1,"partitions":[{"topic":"t","partition":1,"replicas":[3,2],"log_dirs":["any","any"]},'
            '{"topic":"a","partition":0,"replicas":[1]}]}')
    parsed = reassign_partitions_cmd.parse_reassignment(text)

    assert parsed == {TopicPartition("t", 1): [3, 2], TopicPartition("a", 0): [1]}
    assert reassign_partitions_cmd.format_assignment(parsed) == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["any"]},'
        '{"topic":"t","partition":1,"replicas":[3,2],"log_dirs":["any","any"]}]}')
    assert reassign_partitions_cmd.parse_topics_to_move('{"topics": [{"topic": "t"}, {"topic": "a"}]}') == ["t", "a"]
    with pytest.raises(ToolError, match="duplicate entries: t"):
        reassign_partitions_cmd.parse_topics_to_move('{"topics": [{"topic": "t"}, {"topic": "t"}]}')


def test_the_proposal_keeps_each_topics_replication_factor_on_the_listed_brokers() -> None:
    current = {TopicPartition("t", p): [1, 2] for p in range(6)} | {TopicPartition("solo", 0): [1]}

    proposed = reassign_partitions_cmd.propose(current, [4, 2, 3])

    assert sorted(proposed) == sorted(current)
    assert all(len(set(r)) == len(current[tp]) and set(r) <= {2, 3, 4} for tp, r in proposed.items())
    leaders = Counter(proposed[TopicPartition("t", p)][0] for p in range(6))
    assert sorted(leaders.values()) == [2, 2, 2]  # leaders spread evenly, as the controller places them
    with pytest.raises(ToolError, match="Replication factor: 2 larger than available brokers: 1"):
        reassign_partitions_cmd.propose(current, [4])
