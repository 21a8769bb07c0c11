"""Partition leadership across a three-node cluster (each node `broker,controller`), judged by confluent-kafka's
AdminClient, raw Metadata requests and raw AlterPartition requests to the active controller's controller listener:
an RF=3 topic is placed on all three nodes, a SIGKILLed leader's partitions get a new leader (bumped leader epoch,
the dead node out of the ISR and listed offline) within the session timeout and a few seconds, a partition whose
only replica died is leaderless until that node comes back, and AlterPartition commits a leader's good ISR change
and refuses stale epochs with Kafka's errors.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from bus.network.network_client import NodeConnection
from bus.protocol.messages import request_shapes
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, started_cluster, until
from testkit.raw_kafka import RawKafka, metadata_request

pytestmark = pytest.mark.slow

SESSION_S = 3.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    # Short broker sessions, so that a killed broker is fenced within the test (Kafka's defaults: 9 s and 2 s).
    yield from started_cluster(tmp_path, 3, {"broker.session.timeout.ms": str(int(SESSION_S * 1000)),
                                             "broker.heartbeat.interval.ms": "500"})


def node_id(node: BrokerProcess) -> int:
    return int(node.overrides["node.id"])


def described(node: BrokerProcess, topic: str) -> tuple[uuid.UUID, dict[int, Any]] | None:
    """(topic id, partition index -> Metadata partition entry) as `node` answers, None while it cannot."""
    try:
        with RawKafka(node.bootstrap) as raw:
            [answer] = raw.request(metadata_request(topic, allow_auto_create=False)).topics
    except OSError:
        return None
    if answer.error_code != ErrorCode.none:
        return None
    return answer.topic_id, {p.partition_index: p for p in answer.partitions}


def partition_on(node: BrokerProcess, topic: str, partition: int) -> Any:
    found = described(node, topic)
    return None if found is None else found[1].get(partition)


def isr_is(node: BrokerProcess, topic: str, isr: list[int]) -> bool | None:
    """Whether `node` lists `isr` as partition 0's ISR (None while it does not)."""
    entry = partition_on(node, topic, 0)
    return True if entry is not None and list(entry.isr_nodes) == isr else None


def create(cluster: ClusterProcess, topic: NewTopic) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([topic])[topic.topic].result(30)


def alter_partition(controller: BrokerProcess, broker: int, topic_id: uuid.UUID, leader_epoch: int,
                    partition_epoch: int, isr: list[int]) -> Any:
    """AlterPartition v3 for partition 0, sent as `broker` to `controller`'s controller listener."""
    shapes = request_shapes(56, 3)
    partition = shapes.make("PartitionData", partition_index=0, leader_epoch=leader_epoch,
                            new_isr_with_epochs=tuple(shapes.make("BrokerState", broker_id=b, broker_epoch=-1)
                                                      for b in isr),
                            leader_recovery_state=0, partition_epoch=partition_epoch)
    request = shapes.make("AlterPartitionRequest", broker_id=broker, broker_epoch=-1,
                          topics=(shapes.make("TopicData", topic_id=topic_id, partitions=(partition,)),))

    async def send() -> Any:
        connection = NodeConnection("127.0.0.1", controller.controller_port, "alter-partition-test",
                                    request_timeout_s=20)
        try:
            return await connection.request(request, 3)
        finally:
            await connection.close()

    response = asyncio.run(send())
    assert response.error_code == ErrorCode.none, response
    [topic] = response.topics
    [answer] = topic.partitions
    return answer


def test_a_killed_leaders_partitions_fail_over_and_a_leaderless_one_comes_back_with_its_node(
        cluster: ClusterProcess) -> None:
    create(cluster, NewTopic("replicated", num_partitions=3, replication_factor=3))

    def on_every_node() -> dict[int, Any] | None:
        seen = [described(node, "replicated") for node in cluster]
        if any(s is None or len(s[1]) != 3 for s in seen):
            return None
        first = seen[0]
        assert first is not None
        if any(s is not None and s[0] != first[0] for s in seen):
            return None
        return first[1]

    partitions = until(on_every_node, 30, "the RF=3 topic on every node")
    for node in cluster:
        found = described(node, "replicated")
        assert found is not None
        for entry in found[1].values():
            assert sorted(entry.replica_nodes) == [1, 2, 3] and sorted(entry.isr_nodes) == [1, 2, 3], entry
            assert entry.error_code == ErrorCode.none and entry.leader_id == entry.replica_nodes[0]
            assert not entry.offline_replicas
    assert sorted(p.leader_id for p in partitions.values()) == [1, 2, 3]  # one leadership per broker

    victim = partitions[0].leader_id
    old_epoch = partitions[0].leader_epoch
    create(cluster, NewTopic("solo", num_partitions=1, replica_assignment=[[victim]]))
    until(lambda: all(partition_on(n, "solo", 0) is not None for n in cluster), 30, "solo on every node")
    survivor = next(node for node in cluster if node_id(node) != victim)

    cluster[victim].kill()
    killed_at = time.monotonic()

    def failed_over() -> Any:
        entry = partition_on(survivor, "replicated", 0)
        if entry is None or entry.leader_id in (victim, -1) or victim in entry.isr_nodes:
            return None
        return entry

    entry = until(failed_over, SESSION_S + 12, "a new leader for partition 0")
    elapsed = time.monotonic() - killed_at
    print(f"partition 0 led again {elapsed:.1f} s after SIGKILL of its leader (session {SESSION_S} s)")
    assert entry.error_code == ErrorCode.none
    assert entry.leader_epoch > old_epoch
    assert entry.leader_id == next(r for r in entry.replica_nodes if r != victim)  # next in assignment order
    assert sorted(entry.isr_nodes) == sorted(r for r in entry.replica_nodes if r != victim)
    assert list(entry.offline_replicas) == [victim]
    solo = partition_on(survivor, "solo", 0)
    assert (solo.error_code, solo.leader_id, list(solo.isr_nodes), list(solo.offline_replicas)) == (
        ErrorCode.leader_not_available, -1, [victim], [victim])
    solo_epoch = solo.leader_epoch

    # The deposed leader's view of partition 0 is stale: the active controller refuses its ISR change.
    topic_id, _ = described(survivor, "replicated") or (None, None)
    assert topic_id is not None
    controller = cluster[cluster.leader(via=survivor)]
    refused = alter_partition(controller, victim, topic_id, old_epoch, 0, [1, 2, 3])
    assert refused.error_code == ErrorCode.fenced_leader_epoch, refused

    cluster[victim].start()
    cluster.wait_for_brokers()  # registered again: unfenced, listed by every node

    def led_again(node: BrokerProcess) -> Any:
        entry = partition_on(node, "solo", 0)
        return entry if entry is not None and entry.leader_id == victim else None

    for node in cluster:
        back = until(functools.partial(led_again, node), 30, f"solo-0 led by {victim} again on {node_id(node)}")
        assert back.error_code == ErrorCode.none and back.leader_epoch == solo_epoch + 1
        assert list(back.isr_nodes) == [victim] and not back.offline_replicas


def test_alter_partition_commits_a_leaders_isr_change_and_refuses_stale_epochs(cluster: ClusterProcess) -> None:
    create(cluster, NewTopic("isr", num_partitions=1, replication_factor=3))
    active = cluster.leader()
    found = until(lambda: (d := described(cluster[active], "isr")) and d[1].get(0) and d, 30, "the topic")
    topic_id, partitions = found
    leader = partitions[0].leader_id
    # A follower that does not fetch while the ISR is shrunk (so the leader cannot add it back meanwhile); not
    # the active controller, which must answer.
    stopped = next(r for r in partitions[0].replica_nodes if r not in (leader, active))
    kept = [r for r in partitions[0].replica_nodes if r != stopped]
    proc = cluster[stopped].proc
    assert proc is not None
    proc.send_signal(signal.SIGSTOP)
    try:
        answer = alter_partition(cluster[active], leader, topic_id, 0, 0, kept)
        assert (answer.error_code, answer.leader_id, list(answer.isr), answer.leader_epoch,
                answer.partition_epoch) == (ErrorCode.none, leader, kept, 0, 1)
        for node in (n for n in cluster if node_id(n) != stopped):  # committed: every running node has it
            until(functools.partial(isr_is, node, "isr", kept), 10, f"the new ISR on node {node_id(node)}")

        stale = alter_partition(cluster[active], leader, topic_id, 0, 0, kept)  # partition epoch 0 is gone
        assert stale.error_code == ErrorCode.invalid_update_version, stale
        future = alter_partition(cluster[active], leader, topic_id, 1, 1, kept)  # no leader epoch 1 yet
        assert future.error_code == ErrorCode.fenced_leader_epoch, future
        follower = alter_partition(cluster[active], kept[1] if kept[0] == leader else kept[0], topic_id, 0, 1, kept)
        assert follower.error_code == ErrorCode.not_leader_or_follower, follower
    finally:
        proc.send_signal(signal.SIGCONT)
