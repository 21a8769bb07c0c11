"""A three-node cluster (`process.roles=broker,controller` on each) sharing one metadata log through the KRaft
quorum, judged by confluent-kafka, kafka-python and raw requests: a topic created through any node exists on
every node, its partitions are served where the metadata places them, and the active controller's SIGKILL loses
no committed change while a new one keeps admin operations working and the restarted node catches up.
"""

from __future__ import annotations

import datetime
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition
from kio.schema.errors import ErrorCode

from bus.client.admin import AdminClient as BusAdmin
from bus.protocol.records import Record, build_batch
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, started_cluster, until
from testkit.raw_kafka import RawKafka, metadata_request, produce_error

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    # Short broker sessions, so that a killed broker is fenced within the test (Kafka's defaults: 9 s and 2 s).
    yield from started_cluster(tmp_path, 3, {"broker.session.timeout.ms": "3000",
                                             "broker.heartbeat.interval.ms": "500"})


def topic_on(node: BrokerProcess, name: str) -> tuple[uuid.UUID, dict[int, int]] | None:
    """(topic id, partition -> leader) as `node`'s Metadata describes the topic, or None while it does not."""
    try:
        with RawKafka(node.bootstrap) as raw:
            [topic] = raw.request(metadata_request(name, allow_auto_create=False)).topics
    except OSError:
        return None
    if topic.error_code != ErrorCode.none:
        return None
    return topic.topic_id, {p.partition_index: p.leader_id for p in topic.partitions}


def everywhere(cluster: ClusterProcess, name: str, partitions: int) -> tuple[uuid.UUID, dict[int, int]]:
    """The topic once every running node describes it alike, with all its partitions."""
    def same() -> tuple[uuid.UUID, dict[int, int]] | None:
        seen = [topic_on(node, name) for node in cluster.running()]
        if seen[0] is None or len(seen[0][1]) != partitions or any(s != seen[0] for s in seen):
            return None
        return seen[0]
    return until(same, 30, f"{name} on every node")


def listed_brokers(node: BrokerProcess) -> set[int] | None:
    """The brokers `node`'s DescribeCluster lists (registered and not fenced)."""
    try:
        with BusAdmin({"bootstrap.servers": node.bootstrap, "default.api.timeout.ms": 2000}) as admin:
            return {broker.node_id for broker in admin.describe_cluster().brokers}
    except Exception:
        return None


def create_raw(node: BrokerProcess, name: str, partitions: int) -> Any:
    """CreateTopics v7 sent to `node` itself (librdkafka would send it to the controller Metadata names)."""
    from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest

    request = CreateTopicsRequest(
        topics=(CreatableTopic(name=name, num_partitions=partitions, replication_factor=1, assignments=(),
                               configs=()),),
        timeout=datetime.timedelta(seconds=30), validate_only=False)
    with RawKafka(node.bootstrap, timeout=40) as raw:
        [result] = raw.request(request).topics
    return result


def init_producer_id(node: BrokerProcess) -> tuple[ErrorCode, int]:
    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest

    with RawKafka(node.bootstrap) as raw:
        response = raw.request(InitProducerIdRequest(transactional_id=None,
                                                     transaction_timeout=datetime.timedelta(seconds=60)))
    return response.error_code, int(response.producer_id)


def produce_all(bootstrap: str, topic: str, partitions: int, per_partition: int, **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    failures: list[Any] = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, _msg: failures.append(err) if err else None)
    assert producer.flush(30) == 0
    assert failures == []


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             request_timeout_ms=20000)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        got: dict[int, list[bytes]] = {}
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got.setdefault(tp.partition, []).extend(r.value for r in records)
        return got
    finally:
        consumer.close()


def create_retrying(admin: AdminClient, topic: NewTopic, timeout: float = 30.0) -> None:
    """CreateTopics, retried on NOT_CONTROLLER as a client retries a retriable error: on a loaded machine the new
    active controller may lose its leadership again right after a failover."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            admin.create_topics([topic])[topic.topic].result(timeout)
            return
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.NOT_CONTROLLER or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_topic_created_on_any_node_is_on_every_node_and_served_by_its_leaders(cluster: ClusterProcess) -> None:
    leader = cluster.leader()
    follower = next(node for node in cluster.running() if node is not cluster[leader])

    admin = AdminClient({"bootstrap.servers": follower.bootstrap})
    admin.create_topics([NewTopic("orders", num_partitions=6, replication_factor=1)])["orders"].result(30)
    # The same through the follower itself: it forwards the request to the active controller (Envelope).
    forwarded = create_raw(follower, "payments", 3)
    assert (forwarded.error_code, forwarded.num_partitions) == (ErrorCode.none, 3), forwarded
    again = create_raw(follower, "payments", 3)
    assert again.error_code == ErrorCode.topic_already_exists  # validated by the controller, not by the follower

    _orders_id, leaders = everywhere(cluster, "orders", 6)
    assert sorted(set(leaders.values())) == [1, 2, 3]  # placed round robin over the three registered brokers
    payments_id, _ = everywhere(cluster, "payments", 3)
    assert payments_id == forwarded.topic_id

    produce_all(cluster.bootstrap, "orders", 6, 10, **{"enable.idempotence": True})
    got = consume_all(cluster.bootstrap, "orders", 6, 60)
    assert {p: values for p, values in got.items()} == {p: [f"{p}-{i}".encode() for i in range(10)] for p in range(6)}

    batch = build_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None, value=b"x")], base_offset=0)
    for partition, owner in leaders.items():
        elsewhere = next(node for node in cluster.running() if node is not cluster[owner])
        with RawKafka(elsewhere.bootstrap) as raw:
            code, _ = produce_error(raw, "orders", partition, batch)
        assert code == ErrorCode.not_leader_or_follower.value, (partition, owner)

    # Producer ids on a node that is not the active controller come in blocks from it (AllocateProducerIds):
    # retriable COORDINATOR_LOAD_IN_PROGRESS until the block arrives, then ids no other node hands out.
    assert init_producer_id(follower)[0] in (ErrorCode.coordinator_load_in_progress, ErrorCode.none)
    def granted() -> int | None:
        code, producer_id = init_producer_id(follower)
        return producer_id if code == ErrorCode.none else None

    followers_id = until(granted, 10, "a producer id from the follower")
    code, leaders_id = init_producer_id(cluster[leader])
    assert code == ErrorCode.none and followers_id // 1000 != leaders_id // 1000


def test_the_active_controller_killed_keeps_every_committed_change_and_a_new_one_serves(
        cluster: ClusterProcess) -> None:
    old = cluster.leader()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("before", num_partitions=3, replication_factor=1)])["before"].result(30)
    before = everywhere(cluster, "before", 3)

    cluster[old].kill()
    survivors = [node for node in cluster if node is not cluster[old]]
    new = cluster.leader(via=survivors[0])
    assert new != old
    # The killed broker's session expires: it is fenced, and no node offers it to clients any more.
    until(lambda: listed_brokers(survivors[0]) == {int(n.overrides["node.id"]) for n in survivors} or None, 15,
          "the killed broker fenced")
    survivor_bootstrap = ",".join(node.bootstrap for node in survivors)
    admin = AdminClient({"bootstrap.servers": survivor_bootstrap})  # no connection to the killed node yet
    create_retrying(admin, NewTopic("after", num_partitions=2, replication_factor=1))
    after = everywhere(cluster, "after", 2)
    assert old not in after[1].values()  # a fenced broker gets no new partitions
    # The fenced broker's partitions (one replica each) have no leader until it returns; the others keep theirs.
    assert everywhere(cluster, "before", 3) == (before[0], {p: -1 if leader == old else leader
                                                            for p, leader in before[1].items()})

    cluster[old].start()
    until(lambda: topic_on(cluster[old], "before") == before or None, 30, "the restarted node leads 'before' again")
    assert until(lambda: topic_on(cluster[old], "after"), 30, "the restarted node has 'after'") == after
    cluster.wait_for_brokers()  # registered and heartbeating again: unfenced, listed by every node
    # The restarted node serves its partitions of 'before' again.
    produce_all(cluster.bootstrap, "before", 3, 5)
    got = consume_all(cluster.bootstrap, "before", 3, 15)
    assert sum(map(len, got.values())) == 15


def test_a_topic_created_right_after_the_active_controller_died_does_not_wait_for_its_session(
        cluster: ClusterProcess) -> None:
    """Until its session expires a killed controller is still a registered broker; Metadata naming it as the
    controller made librdkafka send CreateTopics to the dead node and wait there (30 s in CI, past the fencing:
    it does not ask Metadata again while the connection is refused). A node whose connection to the leader failed
    names itself until a new leader is elected, and forwards the request. The client starts 0.2 s after the kill:
    the survivors have seen the connection close (within milliseconds) and no election has ended yet (about 2 s)."""
    old = cluster.leader()
    cluster[old].kill()
    time.sleep(0.2)
    survivors = ",".join(node.bootstrap for node in cluster if node is not cluster[old])
    admin = AdminClient({"bootstrap.servers": survivors})
    started = time.monotonic()
    admin.create_topics([NewTopic("right-after", num_partitions=1, replication_factor=1)])["right-after"].result(20)
    assert time.monotonic() - started < 10  # an election (about 2 s here), not a session plus a metadata refresh
    everywhere(cluster, "right-after", 1)


def test_a_change_the_active_controller_cannot_commit_is_answered_not_controller(cluster: ClusterProcess) -> None:
    """The leader appends the topic but, cut off from both voters (SIGSTOP), cannot commit it and resigns: the
    client gets NOT_CONTROLLER, which it retries, never the success the handler had built."""
    leader = cluster[cluster.leader()]
    others = [node for node in cluster.running() if node is not leader]
    for node in others:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGSTOP)
    try:
        result = create_raw(leader, "stranded", 1)
    finally:
        for node in others:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGCONT)
    assert result.error_code == ErrorCode.not_controller and not result.topic_id, result
    assert cluster.leader() in cluster.nodes  # the quorum recovers once the voters are back


def test_groups_and_transactions_find_their_coordinator_from_any_node(cluster: ClusterProcess) -> None:
    """FindCoordinator names the leader of the key's `__consumer_offsets` / `__transaction_state` partition, so
    a client that only knows another node still reaches the coordinator (it answered "this node" before).
    The transaction writes to a partition on its coordinator's node: commit markers for partitions on other
    brokers need WriteTxnMarkers between brokers, which is not built yet."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as Tp

    from bus.coordinator.partitioning import partition_for

    node = cluster.running()[0]
    admin = AdminClient({"bootstrap.servers": node.bootstrap})

    def leader_for(topic: str, key: str) -> int:
        leaders = until(lambda: ((t := topic_on(node, topic)) and t[1]) or None, 30, f"{topic} in the metadata")
        return leaders[partition_for(key, len(leaders))]

    def stranger_to(owner: int) -> str:
        return next(n.bootstrap for i, n in cluster.nodes.items() if i != owner)

    # A consumer group, through a node that does not coordinate it.
    group = "operators"
    admin.create_topics([NewTopic("grouped", num_partitions=3, replication_factor=1)])["grouped"].result(30)
    everywhere(cluster, "grouped", 3)
    stranger = stranger_to(leader_for("__consumer_offsets", group))
    produce_all(stranger, "grouped", 3, 4)

    def consume(expected: int) -> tuple[int, list[int]]:
        """(records read, committed offsets) for the group."""
        consumer = Consumer({"bootstrap.servers": stranger, "group.id": group, "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.subscribe(["grouped"])
        seen = 0
        deadline = time.monotonic() + (40 if expected else 8)
        try:
            while (seen < expected or not expected) and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen += 1
            if seen:
                consumer.commit(asynchronous=False)
            committed = consumer.committed([Tp("grouped", p) for p in range(3)], timeout=20)
            return seen, [tp.offset for tp in committed]
        finally:
            consumer.close()

    assert consume(12) == (12, [4, 4, 4])  # every record, offsets committed through the coordinator
    assert consume(0) == (0, [4, 4, 4])  # a new member resumes there: nothing more to read

    # A transaction, through a node that does not coordinate it.
    txn_id = "tx-from-a-stranger"
    coordinator = leader_for("__transaction_state", txn_id)
    audited = NewTopic("audited", num_partitions=1, replica_assignment=[[coordinator]])
    admin.create_topics([audited])["audited"].result(30)
    everywhere(cluster, "audited", 1)
    producer = Producer({"bootstrap.servers": stranger_to(coordinator), "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("audited", value=f"entry-{i}".encode(), partition=0)
    producer.commit_transaction(30)
    reader = Consumer({"bootstrap.servers": stranger_to(coordinator), "group.id": "auditors",
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    reader.assign([Tp("audited", 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(values) < 4 and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        reader.close()
    assert values == [f"entry-{i}".encode() for i in range(4)]
