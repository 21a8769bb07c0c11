"""Leadership and ISR changes made by the real `QuorumController` over the local metadata log: a broker whose
session expires leaves every ISR and leadership in one committed entry, one that comes back leads its leaderless
partitions again, and AlterPartition is checked as Kafka's ReplicationControlManager checks it."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from bus.controller.controller import ControllerError, QuorumController, TopicSpec
from bus.controller.image import PartitionState
from bus.controller.metadata_log.local_file import METADATA_PARTITION_DIR, MetadataLog

SESSION_MS = 300
ENDPOINT = [("PLAINTEXT", "127.0.0.1", 9092)]


def controller_of(tmp_path: Path, unclean: bool = False) -> QuorumController:
    """Node 1 runs the controller; brokers 2, 3 and 4 are registered."""
    controller = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1,
                                  default_replication_factor=1, broker_session_timeout_ms=SESSION_MS,
                                  unclean_leader_election=unclean)
    controller.ensure_cluster_id(lambda: "test-cluster")
    for broker in (2, 3, 4):
        controller.register_broker(broker, ENDPOINT, None)
    return controller


def fence(controller: QuorumController, broker: int) -> None:
    """Let `broker`'s session expire while every other broker heartbeats: only it is fenced."""
    time.sleep(SESSION_MS / 1000 + 0.05)
    for other in controller.image.brokers:
        if other != broker and not controller.image.brokers[other].fenced:
            controller.broker_heartbeat(other)
    controller.fence_expired_brokers()
    assert controller.image.brokers[broker].fenced


def entries(tmp_path: Path) -> list[dict[str, object]]:
    """The records in the metadata log file, as stored."""
    lines = (tmp_path / METADATA_PARTITION_DIR / "metadata.log").read_text().splitlines()
    return [json.loads(line.split(" ", 1)[1]) for line in lines]


def partitions(controller: QuorumController, topic: str) -> dict[int, PartitionState]:
    return dict(controller.image.topics[topic].partitions)


def test_a_fenced_broker_leaves_isrs_and_hands_its_leaderships_to_the_next_in_sync_replica(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3, 4], 1: [3, 2, 4], 2: [3, 4, 1]}))
    controller.create_topic(TopicSpec("solo", assignments={0: [2]}))
    before = partitions(controller, "t")
    stored = len(entries(tmp_path))
    appends = controller.log.written

    fence(controller, 2)

    after = partitions(controller, "t")
    # Partition 0: 2 led; 3 is the next in-sync replica in assignment order. Leader epoch and partition epoch up.
    assert after[0] == PartitionState(0, [2, 3, 4], [3, 4], 3, leader_epoch=1, partition_epoch=1)
    # Partition 1: 2 followed; only the ISR shrinks.
    assert after[1] == PartitionState(1, [3, 2, 4], [3, 4], 3, leader_epoch=0, partition_epoch=1)
    # Partition 2: 2 is not a replica: untouched (the same object: the image replaces changed states only).
    assert after[2] is before[2]
    # 2 was the only replica of solo-0: no leader, and 2 stays in the ISR to be elected back cleanly.
    assert partitions(controller, "solo")[0] == PartitionState(0, [2], [2], -1, leader_epoch=1, partition_epoch=1)
    assert before[0] == PartitionState(0, [2, 3, 4], [2, 3, 4], 2)  # states are replaced, never edited
    # One append (committed together) holding the changes and the fence, which comes last as in Kafka.
    assert controller.log.written == appends + 1
    new = entries(tmp_path)[stored:]
    assert [r["type"] for r in new] == ["partition", "partition", "partition", "broker_fence"]
    assert new[0] == {"type": "partition", "topic_id": str(controller.image.topics["t"].topic_id), "partition": 0,
                      "replicas": [2, 3, 4], "isr": [3, 4], "leader": 3, "leader_epoch": 1, "partition_epoch": 1}


def test_the_image_replayed_from_the_log_has_the_same_partition_states(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3], 1: [3, 2]}))
    fence(controller, 2)
    replayed = QuorumController(MetadataLog(tmp_path), node_id=1, default_partitions=1, default_replication_factor=1)
    assert partitions(replayed, "t") == partitions(controller, "t")


def test_a_broker_back_from_fencing_leads_its_leaderless_partitions_again(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("solo", assignments={0: [2]}))
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3]}))
    fence(controller, 2)
    assert partitions(controller, "solo")[0].leader == -1
    stored = len(entries(tmp_path))

    controller.broker_heartbeat(2)  # its next heartbeat unfences it

    assert partitions(controller, "solo")[0] == PartitionState(0, [2], [2], 2, leader_epoch=2, partition_epoch=2)
    # t-0 has a leader (3): 2 rejoins its ISR through the leader's AlterPartition, not here.
    assert partitions(controller, "t")[0] == PartitionState(0, [2, 3], [3], 3, leader_epoch=1, partition_epoch=1)
    assert [r["type"] for r in entries(tmp_path)[stored:]] == ["broker_fence", "partition"]


def test_a_broker_registering_again_leads_its_leaderless_partitions(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [4, 2]}))
    fence(controller, 2)
    fence(controller, 4)
    assert partitions(controller, "t")[0] == PartitionState(0, [4, 2], [4], -1, leader_epoch=1, partition_epoch=2)
    controller.register_broker(2, ENDPOINT, None)  # 2 is not in the ISR: no clean leader yet
    assert partitions(controller, "t")[0].leader == -1
    controller.register_broker(4, ENDPOINT, None)
    assert partitions(controller, "t")[0] == PartitionState(0, [4, 2], [4], 4, leader_epoch=2, partition_epoch=3)


@pytest.mark.parametrize("where", ["topic", "broker"])
def test_unclean_election_takes_an_out_of_sync_replica(tmp_path: Path, where: str) -> None:
    controller = controller_of(tmp_path, unclean=where == "broker")
    configs = {"unclean.leader.election.enable": "true"} if where == "topic" else None
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3]}, configs=configs))
    topic_id = controller.image.topics["t"].topic_id
    controller.alter_partition(2, topic_id, 0, 0, 0, [2])  # 3 fell behind: out of the ISR
    fence(controller, 2)
    assert partitions(controller, "t")[0] == PartitionState(0, [2, 3], [3], 3, leader_epoch=1, partition_epoch=2)


def test_a_topic_may_refuse_unclean_election_the_broker_allows(tmp_path: Path) -> None:
    controller = controller_of(tmp_path, unclean=True)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3]},
                                      configs={"unclean.leader.election.enable": "false"}))
    controller.alter_partition(2, controller.image.topics["t"].topic_id, 0, 0, 0, [2])
    fence(controller, 2)
    assert partitions(controller, "t")[0].leader == -1


# -- AlterPartition -------------------------------------------------------------------------------


def altered(tmp_path: Path) -> tuple[QuorumController, uuid.UUID]:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3, 4]}))
    return controller, controller.image.topics["t"].topic_id


def test_alter_partition_commits_a_shrink_and_an_expansion(tmp_path: Path) -> None:
    controller, topic_id = altered(tmp_path)
    shrunk = controller.alter_partition(2, topic_id, 0, 0, 0, [2, 3])
    assert shrunk == PartitionState(0, [2, 3, 4], [2, 3], 2, leader_epoch=0, partition_epoch=1)
    assert partitions(controller, "t")[0] == shrunk
    grown = controller.alter_partition(2, topic_id, 0, 0, 1, [2, 3, 4])
    assert grown == PartitionState(0, [2, 3, 4], [2, 3, 4], 2, leader_epoch=0, partition_epoch=2)
    written = len(entries(tmp_path))
    assert controller.alter_partition(2, topic_id, 0, 0, 2, [2, 3, 4]) == grown  # the same ISR: nothing written
    assert len(entries(tmp_path)) == written


@pytest.mark.parametrize(("broker", "topic", "partition", "leader_epoch", "partition_epoch", "isr", "code"), [
    (2, "unknown", 0, 0, 0, [2], ErrorCode.unknown_topic_id),
    (2, "t", 5, 0, 0, [2], ErrorCode.unknown_topic_or_partition),
    (2, "t", 0, 1, 0, [2], ErrorCode.fenced_leader_epoch),
    (2, "t", 0, -1, 0, [2], ErrorCode.fenced_leader_epoch),
    (3, "t", 0, 0, 0, [3], ErrorCode.not_leader_or_follower),
    (2, "t", 0, 0, 1, [2], ErrorCode.invalid_update_version),
    (2, "t", 0, 0, 0, [2, 1], ErrorCode.invalid_request),  # 1 is not a replica
    (2, "t", 0, 0, 0, [2, 2], ErrorCode.invalid_request),
    (2, "t", 0, 0, 0, [3, 4], ErrorCode.invalid_request),  # the leader left out
])
def test_alter_partition_refusals(tmp_path: Path, broker: int, topic: str, partition: int, leader_epoch: int,
                                  partition_epoch: int, isr: list[int], code: ErrorCode) -> None:
    controller, topic_id = altered(tmp_path)
    before = partitions(controller, "t")
    with pytest.raises(ControllerError) as refused:
        controller.alter_partition(broker, topic_id if topic == "t" else uuid.uuid4(), partition, leader_epoch,
                                   partition_epoch, isr)
    assert refused.value.code == code, refused.value.message
    assert partitions(controller, "t") == before


def test_alter_partition_refuses_a_fenced_replica_in_the_isr(tmp_path: Path) -> None:
    controller, topic_id = altered(tmp_path)
    fence(controller, 4)
    state = partitions(controller, "t")[0]
    assert state.isr == [2, 3]
    with pytest.raises(ControllerError) as refused:
        controller.alter_partition(2, topic_id, 0, state.leader_epoch, state.partition_epoch, [2, 3, 4])
    assert refused.value.code == ErrorCode.ineligible_replica
    controller.broker_heartbeat(4)  # unfenced: now it may rejoin
    assert controller.alter_partition(2, topic_id, 0, state.leader_epoch, state.partition_epoch,
                                      [2, 3, 4]).isr == [2, 3, 4]


def test_a_deposed_leader_gets_fenced_leader_epoch(tmp_path: Path) -> None:
    controller, topic_id = altered(tmp_path)
    fence(controller, 2)  # 3 leads now, at leader epoch 1
    controller.broker_heartbeat(2)
    with pytest.raises(ControllerError) as refused:
        controller.alter_partition(2, topic_id, 0, 0, 0, [2, 3, 4])
    assert refused.value.code == ErrorCode.fenced_leader_epoch
    state = partitions(controller, "t")[0]
    assert (state.leader, state.leader_epoch) == (3, 1)
    assert controller.alter_partition(3, topic_id, 0, 1, state.partition_epoch, [3, 4, 2]).isr == [3, 4, 2]


# -- controlled shutdown ----------------------------------------------------------------------------


def test_controlled_shutdown_moves_leaderships_first_then_lets_the_broker_go(tmp_path: Path) -> None:
    controller = controller_of(tmp_path)
    controller.create_topic(TopicSpec("t", assignments={0: [2, 3, 4], 1: [3, 2, 4]}))
    controller.create_topic(TopicSpec("solo", assignments={0: [2]}))

    assert controller.broker_heartbeat(2, want_shut_down=True) is False  # leaderships move, in one entry
    assert partitions(controller, "t") == {
        0: PartitionState(0, [2, 3, 4], [3, 4], 3, leader_epoch=1, partition_epoch=1),
        1: PartitionState(1, [3, 2, 4], [3, 4], 3, leader_epoch=0, partition_epoch=1)}
    assert partitions(controller, "solo")[0] == PartitionState(0, [2], [2], -1, leader_epoch=1, partition_epoch=1)
    registration = controller.image.brokers[2]
    assert registration.in_controlled_shutdown and not registration.fenced  # still serving: listed, not offline

    # Shutting down, it may not lead, rejoin an ISR or get new replicas.
    with pytest.raises(ControllerError) as refused:
        controller.alter_partition(3, controller.image.topics["t"].topic_id, 0, 1, 1, [3, 4, 2])
    assert refused.value.code == ErrorCode.ineligible_replica
    created = controller.create_topic(TopicSpec("later", 3, 3))
    assert created is not None and all(sorted(s.replicas) == [1, 3, 4] for s in created.partitions.values())
    controller.broker_heartbeat(2)  # an ordinary heartbeat meanwhile does not end the shutdown
    assert controller.image.brokers[2].in_controlled_shutdown

    assert controller.broker_heartbeat(2, want_shut_down=True) is True  # leads nothing: it may stop, fenced
    assert controller.image.brokers[2].fenced
    assert controller.broker_heartbeat(2, want_shut_down=True) is True

    controller.register_broker(2, ENDPOINT, None)  # back after the restart: usable again, leads solo-0 again
    assert not controller.image.brokers[2].in_controlled_shutdown and not controller.image.brokers[2].fenced
    assert partitions(controller, "solo")[0] == PartitionState(0, [2], [2], 2, leader_epoch=2, partition_epoch=2)


def test_a_broker_leading_nothing_is_fenced_by_its_first_shutdown_heartbeat_and_comes_back_at_once(
        tmp_path: Path) -> None:
    """A SIGTERMed broker that led nothing skipped controlled shutdown, so its restart was refused
    (DUPLICATE_BROKER_REGISTRATION) until its old session expired, and other nodes dropped it from Metadata and
    listed it again meanwhile: librdkafka then waited 30 s for a DescribeConfigs to it (CI, the throttle test)."""
    controller = controller_of(tmp_path)
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    controller.register_broker(2, ENDPOINT, None, old)
    controller.create_topic(TopicSpec("followed", assignments={0: [3, 2]}))
    assert controller.broker_heartbeat(2, want_shut_down=True) is True  # one step: fenced, out of the ISR
    assert controller.image.brokers[2].fenced
    assert partitions(controller, "followed")[0].isr == [3]
    controller.register_broker(2, ENDPOINT, None, new)  # the restarted process, within the old session
    assert controller.image.brokers[2].incarnation_id == new and not controller.image.brokers[2].fenced


def test_a_new_incarnation_waits_for_the_old_ones_session_and_then_follows(tmp_path: Path) -> None:
    """Kafka's DUPLICATE_BROKER_REGISTRATION: broker 2 restarted (a new process, perhaps an empty disk) while its
    old session lives is refused; the old one is fenced when the session expires, which moves its leadership to an
    in-sync replica that has the data, and only then is the new one registered, not leading."""
    controller = controller_of(tmp_path)
    old, new = str(uuid.uuid4()), str(uuid.uuid4())
    controller.register_broker(2, ENDPOINT, None, old)
    controller.register_broker(2, ENDPOINT, None, old)  # the same process registering again: fine
    controller.create_topic(TopicSpec("kept", assignments={0: [2, 3]}))
    assert partitions(controller, "kept")[0].leader == 2

    with pytest.raises(ControllerError) as refused:
        controller.register_broker(2, ENDPOINT, None, new)
    assert refused.value.code == ErrorCode.duplicate_broker_registration
    assert controller.image.brokers[2].incarnation_id == old

    fence(controller, 2)
    assert partitions(controller, "kept")[0].leader == 3
    controller.register_broker(2, ENDPOINT, None, new)
    assert controller.image.brokers[2].incarnation_id == new and not controller.image.brokers[2].fenced
    assert partitions(controller, "kept")[0].leader == 3  # back as a follower: it must copy before it can lead


def test_the_controllers_own_node_registers_a_new_incarnation_at_once(tmp_path: Path) -> None:
    """The controller runs in its own node's process: a registration of that node comes from its new process."""
    controller = controller_of(tmp_path)
    controller.register_broker(1, ENDPOINT, None, str(uuid.uuid4()))
    controller.register_broker(1, ENDPOINT, None, str(uuid.uuid4()))
    assert not controller.image.brokers[1].fenced


def test_a_new_incarnation_after_the_session_but_before_the_fencing_pass_fences_the_old_one_first(
        tmp_path: Path) -> None:
    """The periodic fencing may not have run when the old session expires and the new process asks again (a
    looped CI run lost a partition so): the registration fences the old incarnation itself, moving its leadership."""
    controller = controller_of(tmp_path)
    controller.register_broker(2, ENDPOINT, None, str(uuid.uuid4()))
    controller.create_topic(TopicSpec("kept", assignments={0: [2, 3]}))
    time.sleep(SESSION_MS / 1000 + 0.05)  # expired, and no fence_expired_brokers() call since
    controller.register_broker(2, ENDPOINT, None, str(uuid.uuid4()))
    state = partitions(controller, "kept")[0]
    assert state.leader == 3 and state.isr == [3]
    assert not controller.image.brokers[2].fenced
