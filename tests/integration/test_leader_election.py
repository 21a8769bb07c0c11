"""Preferred leader election on a three-node cluster of real processes: a SIGKILLed node that was the preferred
leader of an RF=3 topic's partitions comes back, rejoins their ISRs and stays a follower (Kafka does not rebalance
on unfence) until `bus leader-election --election-type PREFERRED --all-topic-partitions` (sent to a node that is not
the active controller, so forwarded) moves the leadership back, judged by Metadata (the first replica leads, leader
epoch bumped), confluent-kafka's and kafka-python's elect_leaders and acks=all produce/consume afterwards; and with
`leader.imbalance.check.interval.seconds=2` and no command, leadership comes back by itself. On one broker: every
ElectLeaders version on the wire, and the tool's refusals of bad arguments and bad JSON files.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ElectionType, Producer
from confluent_kafka import TopicPartition as ConfluentTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient
from kio.schema.elect_leaders.v0.request import ElectLeadersRequest as ElectLeadersV0
from kio.schema.elect_leaders.v0.request import TopicPartitions as TopicPartitionsV0
from kio.schema.elect_leaders.v1.request import ElectLeadersRequest as ElectLeadersV1
from kio.schema.elect_leaders.v1.request import TopicPartitions as TopicPartitionsV1
from kio.schema.elect_leaders.v2.request import ElectLeadersRequest as ElectLeadersV2
from kio.schema.errors import ErrorCode

from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, started_cluster, until
from testkit.raw_kafka import RawKafka
from tests.integration._support_tools import bus, ok
from tests.integration.test_replication import FAST, all_in_sync, partitions_on, read_all

pytestmark = pytest.mark.slow

TOPIC = "preferred"


@pytest.fixture
def manual(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path, 3, {**FAST, "auto.leader.rebalance.enable": "false"})


@pytest.fixture
def automatic(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path, 3, {**FAST, "leader.imbalance.check.interval.seconds": "2"})


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



def partition_codes(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(r.topic, int(p.partition_id)): p.error_code for r in response.replica_election_results
            for p in r.partition_result}


def test_elect_leaders_versions_on_the_wire(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("wire", 2, 1)])["wire"].result(30)
    timeout = datetime.timedelta(seconds=10)
    with RawKafka(broker.bootstrap, timeout=15) as raw:
        # v0 has no election type: preferred. A lone broker's partitions are led by their only replica.
        v0 = raw.request(ElectLeadersV0(topic_partitions=(
            TopicPartitionsV0(topic="wire", partitions=(0, 5)), TopicPartitionsV0(topic="nope", partitions=(0,))),
            timeout=timeout))
        assert partition_codes(v0) == {("wire", 0): ErrorCode.election_not_needed,
                                       ("wire", 5): ErrorCode.unknown_topic_or_partition,
                                       ("nope", 0): ErrorCode.unknown_topic_or_partition}
        # UNCLEAN only elects where there is no leader.
        unclean = raw.request(ElectLeadersV1(election_type=1, timeout=timeout, topic_partitions=(
            TopicPartitionsV1(topic="wire", partitions=(1,)),)))
        assert unclean.error_code == ErrorCode.none
        assert partition_codes(unclean) == {("wire", 1): ErrorCode.election_not_needed}
        # An election type Kafka does not know: the whole request is refused, every partition says so.
        unknown = raw.request(ElectLeadersV1(election_type=2, timeout=timeout, topic_partitions=(
            TopicPartitionsV1(topic="wire", partitions=(0, 1)),)))
        assert unknown.error_code == ErrorCode.invalid_request
        assert partition_codes(unknown) == {("wire", 0): ErrorCode.invalid_request,
                                            ("wire", 1): ErrorCode.invalid_request}
        # Null topic_partitions: every partition; those needing no election are not reported.
        every = raw.request(ElectLeadersV2(election_type=0, topic_partitions=None, timeout=timeout))
        assert every.error_code == ErrorCode.none
        assert "wire" in {r.topic for r in every.replica_election_results}
        assert partition_codes(every) == {}


@pytest.mark.parametrize(("args", "message"), [
    (["--election-type", "PREFERRED", "--all-topic-partitions"], "Missing required option(s): bootstrap-server"),
    (["--bootstrap-server", "127.0.0.1:1", "--all-topic-partitions"], "Missing required option(s): election-type"),
    (["--bootstrap-server", "127.0.0.1:1", "--election-type", "best", "--all-topic-partitions"],
     "Invalid --election-type 'best': one of PREFERRED, UNCLEAN"),
    (["--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED"],
     "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"),
    (["--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED", "--all-topic-partitions", "--topic", "t",
      "--partition", "0"],
     "One and only one of the following options is required: topic, all-topic-partitions, path-to-json-file"),
    (["--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED", "--topic", "t"],
     "Missing required option(s): partition"),
    (["--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED", "--all-topic-partitions",
      "--partition", "0"], "Option partition is only allowed if topic is used"),
])
def test_bad_arguments_are_refused_with_kafkas_messages(args: list[str], message: str) -> None:
    result = bus("leader-election", *args)
    assert result.returncode == 1
    assert result.stderr.strip() == message and result.stdout == ""


@pytest.mark.parametrize(("content", "message"), [
    ("", "Replica election data is empty"),
    ("{not json", "Replica election data is not valid JSON"),
    ('{"partition": []}', 'Replica election data is missing "partitions" field'),
    ('{"partitions": [{"topic": "t"}]}', 'each entry needs a "topic" string and a "partition" integer'),
    ('{"partitions": [{"topic": "t", "partition": 0}, {"topic": "t", "partition": 0}]}',
     "Replica election data contains duplicate partitions: t-0"),
])
def test_a_bad_json_file_is_refused_before_anything_is_sent(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "election.json"
    path.write_text(content)
    result = bus("leader-election", "--bootstrap-server", "127.0.0.1:1", "--election-type", "PREFERRED",
                 "--path-to-json-file", str(path))
    assert result.returncode == 1 and message in result.stderr, result.stderr
