"""Preferred leader election on a three-node cluster of real processes: a SIGKILLed node that was the preferred
leader of an RF=3 topic's partitions comes back, rejoins their ISRs and stays a follower (Kafka does not rebalance
on unfence) until `bus leader-election --election-type PREFERRED --all-topic-partitions` (sent to a node that is not
the active controller, so forwarded) moves the leadership back, judged by Metadata (the first replica leads, leader
epoch bumped), confluent-kafka's and kafka-python's elect_leaders and acks=all produce/consume afterwards; and with
`leader.imbalance.check.interval.seconds=2` and no command, leadership comes back by itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from tests.integration._support_tools import bus, ok
from tests.integration.test_replication import FAST, all_in_sync, partitions_on, read_all
from tests.support.cluster_process import ClusterProcess, until

pytestmark = pytest.mark.slow

TOPIC = "preferred"


def started(tmp_path: Path, overrides: dict[str, str]) -> Iterator[ClusterProcess]:
    nodes = ClusterProcess(tmp_path, 3, {**FAST, **overrides})
    try:
        nodes.start()
        nodes.wait_for_brokers()
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started(tmp_path, {"auto.leader.rebalance.enable": "false"})


@pytest.fixture
def automatic(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started(tmp_path, {"leader.imbalance.check.interval.seconds": "2"})


def leaders(cluster: ClusterProcess) -> dict[int, Any] | None:
    """partition -> Metadata entry of TOPIC, once every running node answers the same leaders."""
    seen = [partitions_on(node.bootstrap, TOPIC) for node in cluster.running()]
    if any(s is None for s in seen):
        return None
    first = seen[0]
    assert first is not None
    same = all(s is not None and {p: e.leader_id for p, e in s.items()} == {p: e.leader_id for p, e in first.items()}
               for s in seen)
    return first if same else None


def led_by(cluster: ClusterProcess, wanted: int, negate: bool = False) -> dict[int, Any] | None:
    """TOPIC's partitions once every node agrees each is led by `wanted` (or, negated, by another live broker)."""
    entries = leaders(cluster)
    if entries is None:
        return None
    good = all((e.leader_id not in (wanted, -1)) if negate else e.leader_id == wanted for e in entries.values())
    return entries if good else None


def produce(bootstrap: str, count: int, start: int) -> list[bytes]:
    """`count` records over both partitions with acks=all; returns them once all are acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    failures: list[str] = []
    values = [b"r%06d" % n for n in range(start, start + count)]
    for n, value in enumerate(values):
        producer.produce(TOPIC, value, partition=n % 2,
                         on_delivery=lambda error, _msg: failures.append(str(error)) if error else None)
    assert producer.flush(60) == 0 and not failures, failures[:3]
    return values


def create_preferring_a_follower_node(cluster: ClusterProcess) -> int:
    """Create TOPIC (2 partitions, RF=3) whose preferred replica is a node that is not the active controller;
    returns that node once it leads both partitions."""
    preferred = next(n for n in (1, 2, 3) if n != cluster.leader())
    a, b = (n for n in (1, 2, 3) if n != preferred)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[preferred, a, b], [preferred, b, a]]
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=assignment)])[TOPIC].result(30)
    until(lambda: all_in_sync(cluster, TOPIC, 2, 3), 60, "every replica in sync")
    until(lambda: led_by(cluster, preferred), 20, f"{TOPIC} led by its preferred replica {preferred}")
    return preferred


def kill_and_restart(cluster: ClusterProcess, victim: int) -> dict[int, Any]:
    """kill -9 `victim`, wait for the others to lead its partitions, restart it; returns TOPIC's partitions as
    they were while it was down."""
    cluster[victim].kill()
    away = until(lambda: led_by(cluster, victim, negate=True), 30, "the survivors leading")
    cluster[victim].start()
    return away


def test_preferred_election_moves_leadership_back_to_the_restarted_node(manual: ClusterProcess,
                                                                        tmp_path: Path) -> None:
    victim = create_preferring_a_follower_node(manual)
    before = produce(manual.bootstrap, 200, 0)
    away = kill_and_restart(manual, victim)
    until(lambda: all_in_sync(manual, TOPIC, 2, 3), 60, f"node {victim} back in every ISR")
    assert led_by(manual, victim, negate=True), "leadership stays away after the node is back (no rebalance here)"
    elsewhere = next(n for n in (1, 2, 3) if n not in (victim, manual.leader()))  # forwarded to the controller

    # confluent-kafka elects partition 0 alone.
    admin = AdminClient({"bootstrap.servers": manual[elsewhere].bootstrap})
    elected = admin.elect_leaders(ElectionType.PREFERRED, [ConfluentTopicPartition(TOPIC, 0)]).result(30)
    assert [(tp.topic, tp.partition, error) for tp, error in elected.items()] == [(TOPIC, 0, None)]

    # The tool elects the rest; partitions already led by their preferred replica are not reported.
    out = ok(bus("leader-election", "--bootstrap-server", manual[elsewhere].bootstrap,
                 "--election-type", "PREFERRED", "--all-topic-partitions"))
    [line] = out.splitlines()
    assert line.startswith("Successfully completed leader election (PREFERRED) for partitions "), out
    elected_names = line.rsplit(" partitions ", 1)[1].split(", ")
    assert f"{TOPIC}-1" in elected_names and f"{TOPIC}-0" not in elected_names, out

    back = until(lambda: led_by(manual, victim), 20, "the preferred replica leading on every node")
    for partition, entry in back.items():
        assert entry.replica_nodes[0] == victim
        assert entry.leader_epoch == away[partition].leader_epoch + 1, (entry, away[partition])

    # Nothing left to do: kafka-python sees ELECTION_NOT_NEEDED, the tool says a valid replica is elected.
    kafka_admin = KafkaAdminClient(bootstrap_servers=manual.bootstrap)
    try:
        response = kafka_admin.elect_leaders(0, {TOPIC: [0, 1]}, raise_errors=False)
    finally:
        kafka_admin.close()
    codes = sorted((r.topic, p.partition_id, p.error_code) for r in response.replica_election_results
                   for p in r.partition_result)
    assert codes == [(TOPIC, 0, 84), (TOPIC, 1, 84)]  # ELECTION_NOT_NEEDED
    out = ok(bus("leader-election", "--bootstrap-server", manual.bootstrap, "--election-type", "preferred",
                 "--topic", TOPIC, "--partition", "1"))
    assert out == f"Valid replica already elected for partitions {TOPIC}-1\n"

    # A partition that does not exist fails the run with Kafka's per-partition line.
    request = tmp_path / "elect.json"
    request.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 0},
                                                  {"topic": TOPIC, "partition": 9}]}))
    failed = bus("leader-election", "--bootstrap-server", manual.bootstrap, "--election-type", "PREFERRED",
                 "--path-to-json-file", str(request))
    assert failed.returncode == 1
    assert failed.stdout.splitlines() == [
        f"Valid replica already elected for partitions {TOPIC}-0",
        f"Error completing leader election (PREFERRED) for partition: {TOPIC}-9: "
        f"No such partition as {TOPIC}-9 (UNKNOWN_TOPIC_OR_PARTITION)"]
    assert "1 replica(s) could not be elected" in failed.stderr

    # Produce and consume keep working through the new leaders.
    after = produce(manual.bootstrap, 200, 200)
    seen = read_all(manual.bootstrap, TOPIC, 2, len(before) + len(after))
    assert sorted(seen[0] + seen[1]) == sorted(before + after)


def test_leadership_comes_back_by_itself_with_the_automatic_rebalance(automatic: ClusterProcess) -> None:
    victim = create_preferring_a_follower_node(automatic)
    away = kill_and_restart(automatic, victim)
    back = until(lambda: led_by(automatic, victim), 30, "the preferred replica leading again without a command")
    for partition, entry in back.items():
        assert entry.leader_epoch > away[partition].leader_epoch
    produce(automatic.bootstrap, 100, 0)

