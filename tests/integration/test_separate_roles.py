"""Kafka's separate KRaft roles on real processes (one cluster for the module): three controller-only voters
(`process.roles=controller`, ids 1-3, a controller listener only) and broker-only observers (`process.roles=broker`,
ids 4 and 5, then 6 added while the cluster runs).

confluent-kafka creates an RF=2 topic through a broker (forwarded to the controller-only active controller),
produces with acks=all and consumes every record back; DescribeQuorum shows the three voters and the brokers as
observers, and no controller appears among Metadata's brokers or a topic's replicas. SIGKILL of the active
controller: another voter takes over and a new topic is still created. SIGKILL of a broker: the controller fences it
when its session expires and unfences it when it comes back. A third broker joins, appears in Metadata, and
`bus reassign-partitions --execute/--verify` moves a partition onto it, from which the records are read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bus.client.admin import AdminClient as BusAdmin
from deploy.processes.cluster import SeparateRolesCluster, describe_quorum, started, until
from tests.integration._support_tools import bus, ok
from tests.integration.test_reassignment import produce
from tests.integration.test_replication import FAST, partitions_on

pytestmark = pytest.mark.slow
CONTROLLERS = [1, 2, 3]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeparateRolesCluster]:
    yield from started(SeparateRolesCluster(tmp_path_factory.mktemp("roles"), controllers=3, brokers=2,
                                            overrides=FAST))


def create(cluster: SeparateRolesCluster, topic: str, replicas: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replicas)])[topic].result(30)
    until(lambda: in_sync(cluster, topic, replicas), 30, f"{topic} in sync on every broker")


def in_sync(cluster: SeparateRolesCluster, topic: str, replicas: int) -> list[int] | None:
    """topic-0's replicas once every running broker shows all of them in sync under a leader."""
    seen = [partitions_on(node.bootstrap, topic) for node in cluster.running_brokers()]
    entries = [s[0] for s in seen if s is not None and 0 in s]
    if len(entries) != len(seen) or any(len(e.isr_nodes) != replicas or e.leader_id < 0 for e in entries):
        return None
    return list(entries[0].replica_nodes)


def consume(bootstrap: str, topic: str, expected: int) -> list[bytes | None]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}-{time.monotonic_ns()}",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 30
        while len(values) < expected and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        return values
    finally:
        consumer.close()


def test_brokers_observe_the_quorum_and_serve_an_rf2_topic(cluster: SeparateRolesCluster) -> None:
    create(cluster, "separate", 2)
    values = [b"s%04d" % n for n in range(300)]
    produce(cluster.bootstrap, "separate", values)
    assert consume(cluster.bootstrap, "separate", len(values)) == values

    quorum = until(lambda: describe_quorum(cluster[4]), 20, "DescribeQuorum through a broker")
    assert sorted(v.replica_id for v in quorum.voters) == CONTROLLERS
    assert quorum.leader_id in CONTROLLERS
    assert until(lambda: sorted(o.replica_id for o in describe_quorum(cluster[5]).observers)  # type: ignore[union-attr]
                 == [4, 5] or None, 20, "both brokers among the observers")
    with BusAdmin({"bootstrap.servers": cluster.bootstrap}) as admin:
        described = admin.describe_cluster()
    assert sorted(b.node_id for b in described.brokers) == [4, 5]
    assert described.controller_id in (4, 5)  # clients cannot reach a controller-only node: a broker stands in
    assert sorted(in_sync(cluster, "separate", 2) or []) == [4, 5]


def test_a_new_active_controller_after_sigkill_still_creates_topics(cluster: SeparateRolesCluster) -> None:
    old = cluster.leader()
    cluster[old].kill()
    try:
        new = until(lambda: (lambda q: q.leader_id if q and q.leader_id not in (old, -1) else None)(
            describe_quorum(cluster[4])), 30, "a new active controller")
        assert new in CONTROLLERS
        create(cluster, "after-failover", 2)
        produce(cluster.bootstrap, "after-failover", [b"x", b"y"])
        assert consume(cluster.bootstrap, "after-failover", 2) == [b"x", b"y"]
    finally:
        cluster[old].start()
    until(lambda: (lambda q: q if q and len(q.voters) == 3 and all(v.log_end_offset >= 0 for v in q.voters) else None)(
        describe_quorum(cluster[4])), 30, "the restarted controller back in the quorum")


def test_an_added_broker_takes_a_reassigned_partition(cluster: SeparateRolesCluster, tmp_path: Path) -> None:
    create(cluster, "grown", 2)
    values = [b"g%04d" % n for n in range(200)]
    produce(cluster.bootstrap, "grown", values)

    added = cluster.add_broker()
    assert added == 6
    with BusAdmin({"bootstrap.servers": cluster[added].bootstrap}) as admin:
        assert sorted(b.node_id for b in admin.describe_cluster().brokers) == [4, 5, 6]
    plan = tmp_path / "grown.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "grown", "partition": 0, "replicas": [6]}]}))
    ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--execute",
           "--reassignment-json-file", str(plan)))

    def completed() -> str | None:
        verified = ok(bus("reassign-partitions", "--bootstrap-server", cluster.bootstrap, "--verify",
                          "--reassignment-json-file", str(plan)))
        return verified if "Reassignment of partition grown-0 is completed." in verified else None

    until(completed, 30, "the move completed", interval=0.5)
    assert until(lambda: in_sync(cluster, "grown", 1), 30, "grown-0 on broker 6 alone") == [6]
    # The partition now lives on the new broker only: reading it back reads broker 6's replica.
    assert consume(cluster[added].bootstrap, "grown", len(values)) == values


def test_a_dead_broker_only_node_is_fenced_and_unfenced_when_back(cluster: SeparateRolesCluster) -> None:
    """A broker-only node has no vote to lose, only its session: SIGKILLed, the active controller fences it once
    `broker.session.timeout.ms` passes (Metadata stops listing it, its leadership and ISR seat go to the other
    replica); restarted, it registers again, is unfenced once caught up and rejoins the ISR."""
    create(cluster, "fenced", 2)
    entry = (partitions_on(cluster.running_brokers()[0].bootstrap, "fenced") or {})[0]
    dead_id = entry.leader_id  # the leader dies: a leadership must move, not just an ISR seat
    survivor_id = next(r for r in entry.replica_nodes if r != dead_id)
    dead, survivor = cluster[dead_id], cluster[survivor_id]
    produce(cluster.bootstrap, "fenced", [b"before"])
    killed_at = time.monotonic()
    dead.kill()
    try:
        def fenced() -> bool | None:
            with BusAdmin({"bootstrap.servers": survivor.bootstrap, "default.api.timeout.ms": 2000}) as admin:
                listed = {b.node_id for b in admin.describe_cluster().brokers}
            moved = (partitions_on(survivor.bootstrap, "fenced") or {}).get(0)
            return (dead_id not in listed and moved is not None and moved.leader_id == survivor_id
                    and list(moved.isr_nodes) == [survivor_id]) or None

        until(fenced, 30, f"broker {dead_id} fenced and its leadership moved")
        session_s = int(FAST["broker.session.timeout.ms"]) / 1000
        assert time.monotonic() - killed_at >= session_s * 0.5, "fenced before its session could have expired"
        produce(survivor.bootstrap, "fenced", [b"while-fenced"])
    finally:
        dead.start()
    until(lambda: sorted(in_sync(cluster, "fenced", 2) or []) == sorted([dead_id, survivor_id]) or None, 30,
          f"broker {dead_id} unfenced and back in the ISR")
    assert consume(cluster[dead_id].bootstrap, "fenced", 2) == [b"before", b"while-fenced"]
