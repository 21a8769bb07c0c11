"""Partition reassignment on a three-node cluster of real processes (one cluster for the module).

`bus reassign-partitions --execute` moves an RF=2 topic holding acknowledged records from nodes {a, b} to {b, c},
its leader a included, while an acks=all producer keeps writing; `--verify` reports the move completed; then every
node's Metadata shows replicas [b, c], node a's partition directory is gone, a consumer reads every acknowledged
record once and in order, and acks=all produce goes on. `--generate`
proposes a placement over the listed brokers. kafka-python's KafkaAdminClient judges the wire: a move towards a
paused (SIGSTOP) node stays in progress and ListPartitionReassignments shows it (so does `--list`), `--cancel` and
kafka-python cancel it, and an unregistered broker or a cancel with nothing under way is refused with Kafka's
errors.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import kafka.errors
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

from deploy.processes.cluster import ClusterProcess, started_cluster, until
from tests.integration._support_tools import bus, ok
from tests.integration.test_replication import FAST, AckedProducer, all_in_sync, partitions_on, read_all

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path_factory.mktemp("reassign"), 3, FAST)


def create_on(cluster: ClusterProcess, topic: str, replicas: list[int]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[replicas])])[topic].result(30)
    until(lambda: all_in_sync(cluster, topic, 1, len(replicas)), 30, f"{topic} in sync")


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []
    for value in values:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda error, _msg: failures.append(str(error)) if error else None)
    assert producer.flush(30) == 0 and not failures, failures[:3]


def everywhere(cluster: ClusterProcess, topic: str, replicas: list[int]) -> object | None:
    """topic-0's Metadata entry once every node shows `replicas`, all of them in sync and one of them leading."""
    seen = [partitions_on(node.bootstrap, topic) for node in cluster.running()]
    if any(s is None for s in seen):
        return None
    entries = [s[0] for s in seen if s is not None]
    good = all(list(e.replica_nodes) == replicas and sorted(e.isr_nodes) == sorted(replicas)
               and e.leader_id in replicas for e in entries)
    return entries[0] if good else None


def reassignment_file(tmp_path: Path, topic: str, replicas: list[int]) -> str:
    path = tmp_path / f"{topic}.json"
    path.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": replicas}]}))
    return str(path)


def test_the_tool_moves_a_partition_and_its_leader_to_other_nodes(cluster: ClusterProcess, tmp_path: Path) -> None:
    a, b, c = 1, 2, 3
    create_on(cluster, "moved", [a, b])
    assert partitions_on(cluster[a].bootstrap, "moved")[0].leader_id == a  # type: ignore[index]
    before = [b"m%05d" % n for n in range(500)]
    produce(cluster.bootstrap, "moved", before)
    plan = reassignment_file(tmp_path, "moved", [b, c])
    elsewhere = next(n for n in (a, b, c) if n != cluster.leader())  # forwarded to the active controller
    load = AckedProducer(cluster.bootstrap, "moved", 1).start()  # acks=all all along the move

    out = ok(bus("reassign-partitions", "--bootstrap-server", cluster[elsewhere].bootstrap, "--execute",
                 "--reassignment-json-file", plan))

    assert out.splitlines() == [
        "Current partition replica assignment", "",
        '{"version":1,"partitions":[{"topic":"moved","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}', "",
        "Save this to use as the --reassignment-json-file option during rollback",
        "Successfully started partition reassignment for moved-0"]

    def completed() -> str | None:
        verified = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                          "--reassignment-json-file", plan))
        return verified if "Reassignment of partition moved-0 is completed." in verified else None

    assert until(completed, 30, "the move completed", interval=0.5).splitlines() == [
        "Status of partition reassignment:", "Reassignment of partition moved-0 is completed.",
        # Kafka's tool clears the throttles of every broker once nothing it verifies is moving, set or not.
        "Clearing broker-level throttles on brokers 1,2,3", "Clearing topic-level throttles on topic moved"]
    entry = until(lambda: everywhere(cluster, "moved", [b, c]), 30, "replicas [b, c] on every node")
    load.stop()
    assert not load.failed and load.count() > 0, load.failed[:3]
    assert entry.leader_id == b  # type: ignore[attr-defined]  # a no longer a replica: the first of the target
    until(lambda: True if not (cluster[a].data_dir / "moved-0").exists() else None, 20, "a's replica deleted")
    assert (cluster[b].data_dir / "moved-0").is_dir() and (cluster[c].data_dir / "moved-0").is_dir()

    after = [b"n%05d" % n for n in range(100)]
    produce(cluster[c].bootstrap, "moved", after)  # acks=all: b and c both have them
    during = load.acked[0]
    # Every acknowledged record once, in order, across the leader's move from a to b.
    assert read_all(cluster.bootstrap, "moved", 1, len(before) + len(during) + len(after)) == {
        0: before + during + after}
    assert "No partition reassignments found." in ok(bus("reassign-partitions", "--bootstrap-server",
                                                         cluster.bootstrap, "--list"))


def test_generate_proposes_the_topics_on_the_listed_brokers(cluster: ClusterProcess, tmp_path: Path) -> None:
    create_on(cluster, "planned", [1, 2])
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"topic": "planned"}], "version": 1}')

    out = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate",
                 "--topics-to-move-json-file", str(topics), "--broker-list", "2,3"))

    lines = out.splitlines()
    assert lines[0] == "Current partition replica assignment", out
    assert lines[3] == "Proposed partition reassignment configuration", out
    assert json.loads(lines[1]) == {"version": 1, "partitions": [
        {"topic": "planned", "partition": 0, "replicas": [1, 2], "log_dirs": ["any", "any"]}]}
    [proposed] = json.loads(lines[4])["partitions"]
    assert sorted(proposed["replicas"]) == [2, 3] and proposed["log_dirs"] == ["any", "any"]
    refused = bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--generate",
                  "--topics-to-move-json-file", str(topics), "--broker-list", "2,9")
    assert refused.returncode == 1 and "Broker(s) 9 in --broker-list are not in the cluster" in refused.stderr


def test_kafka_python_lists_and_cancels_a_move_that_waits_for_a_paused_node(cluster: ClusterProcess,
                                                                           tmp_path: Path) -> None:
    controller = cluster.leader()
    paused = next(n for n in (1, 2, 3) if n != controller)
    kept = [controller, next(n for n in (1, 2, 3) if n not in (controller, paused))]
    create_on(cluster, "waiting", kept)
    produce(cluster[controller].bootstrap, "waiting", [b"w%03d" % n for n in range(50)])
    admin = KafkaAdminClient(bootstrap_servers=cluster[controller].bootstrap)
    tp = TopicPartition("waiting", 0)
    assert admin.list_partition_reassignments() == {}  # connected to the controller before the pause
    cluster[paused].proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    try:
        assert admin.alter_partition_reassignments({tp: [kept[0], paused]}) == {tp: None}

        moving = admin.list_partition_reassignments()
        assert moving == {tp: {"replicas": [kept[0], paused, kept[1]], "adding_replicas": [paused],
                               "removing_replicas": [kept[1]]}}
        assert admin.list_partition_reassignments({"waiting": [0], "nope": [0]}) == moving
        listed = ok(bus("reassign-partitions", "--bootstrap-server", cluster[controller].bootstrap, "--list"))
        assert listed.splitlines() == ["Current partition reassignments:",
                                       f"waiting-0: replicas: {kept[0]},{paused},{kept[1]}. adding: {paused}. "
                                       f"removing: {kept[1]}."]
        plan = reassignment_file(tmp_path, "waiting", [kept[0], paused])
        in_progress = ok(bus("reassign-partitions", "--bootstrap-server", cluster[controller].bootstrap,
                             "--verify", "--reassignment-json-file", plan))
        assert "Reassignment of partition waiting-0 is still in progress." in in_progress

        cancelled = ok(bus("reassign-partitions", "--bootstrap-server", cluster[controller].bootstrap, "--cancel",
                           "--reassignment-json-file", plan))
        assert cancelled.strip() == "Successfully cancelled partition reassignment for: waiting-0"
        assert admin.list_partition_reassignments() == {}
        reverted = partitions_on(cluster[controller].bootstrap, "waiting")[0]  # type: ignore[index]
        assert list(reverted.replica_nodes) == kept and sorted(reverted.isr_nodes) == sorted(kept)

        # Refusals, judged by kafka-python's error classes.
        assert admin.alter_partition_reassignments({tp: None}) == {tp: kafka.errors.NoReassignmentInProgressError}
        assert admin.alter_partition_reassignments({tp: [kept[0], 99]}) == {
            tp: kafka.errors.InvalidReplicationAssignmentError}
        assert admin.alter_partition_reassignments({TopicPartition("waiting", 5): [kept[0]]}) == {
            TopicPartition("waiting", 5): kafka.errors.UnknownTopicOrPartitionError}
    finally:
        cluster[paused].proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        admin.close()
