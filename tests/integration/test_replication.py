"""Partition replication across real broker processes, judged by confluent-kafka, kafka-python and aiokafka.

Three combined nodes (five where two must die without taking the quorum with them): a topic with three
replicas keeps every acknowledged record when its leader is SIGKILLed under acks=all load, the old leader
truncates and rejoins the ISR, a follower cut off by SIGSTOP leaves the ISR and comes back, and with two of
three replicas gone acks=all is refused with NOT_ENOUGH_REPLICAS instead of pretending.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from bus.protocol.records import Record, build_batch
from deploy.hosted_cluster import FAST
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, started_cluster, until
from testkit.raw_kafka import RawKafka, metadata_request, produce_error

pytestmark = pytest.mark.slow



@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path, 3, FAST)


def partitions_on(bootstrap: str, topic: str) -> dict[int, Any] | None:
    """partition -> Metadata partition entry (leader, epoch, replicas, isr) as one node describes the topic."""
    try:
        with RawKafka(bootstrap) as raw:
            [described] = raw.request(metadata_request(topic, allow_auto_create=False)).topics
    except OSError:
        return None
    if described.error_code != ErrorCode.none:
        return None
    return {p.partition_index: p for p in described.partitions}


def create(cluster: ClusterProcess, topic: str, partitions: int, replicas: int, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    [future] = admin.create_topics([NewTopic(topic, partitions, replicas, config=configs)]).values()
    future.result(timeout=30)
    until(lambda: all_in_sync(cluster, topic, partitions, replicas), 30, f"{topic} fully in sync")


def all_in_sync(cluster: ClusterProcess, topic: str, partitions: int, replicas: int) -> bool | None:
    for node in cluster.running():
        seen = partitions_on(node.bootstrap, topic)
        if seen is None or len(seen) != partitions:
            return None
        if any(len(p.isr_nodes) != replicas or p.leader_id < 0 for p in seen.values()):
            return None
    return True


def isr_is(bootstrap: str, topic: str, isr: list[int]) -> bool | None:
    seen = partitions_on(bootstrap, topic)
    return True if seen is not None and sorted(seen[0].isr_nodes) == isr else None


def leader_of(cluster: ClusterProcess, topic: str, partition: int) -> Any:
    def ask() -> Any:
        for node in cluster.running():
            seen = partitions_on(node.bootstrap, topic)
            if seen is not None and seen[partition].leader_id in cluster.nodes:
                return seen[partition]
        return None
    return until(ask, 20, "a leader")


class AckedProducer:
    """acks=all, idempotent producer sending numbered values in a thread; remembers what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 60000, "retry.backoff.ms": 100})
        self.topic = topic
        self.partitions = partitions
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        self.failed: list[str] = []
        self.acked_at: list[float] = []  # monotonic time of every acknowledgment
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        if error is not None:
            self.failed.append(str(error))
        else:
            self.acked[message.partition()].append(message.value())
            self.acked_at.append(time.monotonic())

    def _run(self) -> None:
        while not self._stop.is_set():
            partition = self.sent % self.partitions
            self.producer.produce(self.topic, b"v%08d" % self.sent, partition=partition, on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(0.002)

    def start(self) -> AckedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        assert self.producer.flush(60) == 0

    def count(self) -> int:
        return sum(len(v) for v in self.acked.values())


def read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> dict[int, list[bytes]]:
    """Every record of the topic, per partition, read with kafka-python from the beginning."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        assigned = [KafkaTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(assigned)
        consumer.seek_to_beginning(*assigned)
        seen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 60
        while sum(len(v) for v in seen.values()) < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                seen[tp.partition] += [r.value for r in records]
        return seen
    finally:
        consumer.close()


def test_a_replicated_topic_is_on_every_replica_and_acks_all_waits_for_them(cluster: ClusterProcess) -> None:
    create(cluster, "replicated", 3, 3, **{"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    errors: list[KafkaError] = []
    for i in range(300):
        producer.produce("replicated", b"r%d" % i, partition=i % 3,
                         on_delivery=lambda e, _m: errors.append(e) if e else None)
    assert producer.flush(30) == 0 and not errors
    # Every replica holds every record: each node's log end, asked as a follower would (ListOffsets latest of
    # the leader) and read back through each node while it leads, is 100 per partition.
    seen = read_all(cluster.bootstrap, "replicated", 3, 300)
    assert {p: len(v) for p, v in seen.items()} == {0: 100, 1: 100, 2: 100}
    for node in cluster:
        described = partitions_on(node.bootstrap, "replicated")
        assert described is not None
        assert all(sorted(p.replica_nodes) == [1, 2, 3] and sorted(p.isr_nodes) == [1, 2, 3]
                   for p in described.values())
    # The data itself is on the followers: every node's copy of each partition holds the same bytes.
    copies = {node_id: [segment_bytes(node.data_dir, "replicated", p) for p in range(3)]
              for node_id, node in cluster.nodes.items()}
    assert copies[1] == copies[2] == copies[3] and all(copies[1]), {n: [len(c) for c in v] for n, v in copies.items()}


def segment_bytes(data_dir: Path, topic: str, partition: int) -> bytes:
    """A partition's log bytes on one node, its segments in offset order (flushed or not, the page cache has them);
    empty while the node hosts no such partition (a restarted broker opens none before it is registered)."""
    directory = next(data_dir.glob(f"{topic}-{partition}"), None)
    return b"" if directory is None else b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))


def test_the_leader_killed_under_acks_all_load_loses_no_acknowledged_record(cluster: ClusterProcess) -> None:
    create(cluster, "survivor", 2, 3, **{"min.insync.replicas": "2"})
    load = AckedProducer(cluster.bootstrap, "survivor", 2).start()
    until(lambda: load.count() > 500 or None, 30, "records acknowledged before the kill")
    old = leader_of(cluster, "survivor", 0)
    cluster[old.leader_id].kill()
    killed_at = time.monotonic()
    survivors = cluster.running()
    new = until(lambda: (lambda p: p if p is not None and p[0].leader_id not in (old.leader_id, -1) else None)(
        partitions_on(survivors[0].bootstrap, "survivor")), 20, "a new leader")[0]
    elected = time.monotonic() - killed_at
    assert new.leader_epoch > old.leader_epoch
    acked_at_election = load.count()
    until(lambda: load.count() > acked_at_election + 300 or None, 30, "records acknowledged by the new leader")
    # The old leader comes back: it truncates what only it had, catches up, and rejoins the ISR.
    cluster[old.leader_id].start()
    load.stop()
    assert not load.failed, load.failed[:5]
    until(lambda: all_in_sync(cluster, "survivor", 2, 3), 60, "the old leader back in the ISR")
    seen = read_all(cluster.bootstrap, "survivor", 2, load.count())
    for partition, values in load.acked.items():
        assert set(values) <= set(seen[partition]), f"partition {partition} lost acknowledged records"
        assert len(seen[partition]) == len(set(seen[partition])), "a record is there twice"
        assert seen[partition] == sorted(seen[partition]), "records out of order"
    print(f"leader elected {elected:.1f} s after SIGKILL")


def test_a_paused_follower_leaves_the_isr_and_comes_back(cluster: ClusterProcess) -> None:
    create(cluster, "paused", 1, 3)
    leader = leader_of(cluster, "paused", 0)
    follower = next(n for n in (1, 2, 3) if n != leader.leader_id and n != cluster.leader())
    leader_node = cluster[leader.leader_id]
    # The producer learns the topic before the pause, from the leader's node: kafka-python asks its least loaded
    # node for metadata, and a request to the paused one waits out the whole request timeout (CI at 3f602d5).
    producer = KafkaProducer(bootstrap_servers=leader_node.bootstrap, acks="all")
    assert producer.partitions_for("paused") == {0}
    # kafka-python's producer is idempotent by default: its sender asks a random node for a producer id and sends
    # nothing until it has one. A record acknowledged before the pause makes sure that is done, so the request
    # cannot be the one waiting on the paused node (CI at 15a2797: the write after the shrink timed out).
    producer.send("paused", b"before the pause", partition=0).get(timeout=30)
    cluster[follower].proc.send_signal(signal.SIGSTOP)
    try:
        producer.send("paused", b"while paused", partition=0)
        until(lambda: (lambda p: True if p and follower not in p[0].isr_nodes else None)(
            partitions_on(leader_node.bootstrap, "paused")), 30, "the paused follower out of the ISR")
        # acks=all is answered by the ISR that is left.
        producer.send("paused", b"after the shrink", partition=0).get(timeout=20)
    finally:
        cluster[follower].proc.send_signal(signal.SIGCONT)
    until(lambda: all_in_sync(cluster, "paused", 1, 3), 60, "the follower back in the ISR")
    producer.close()


def test_consumers_read_only_what_the_isr_has(cluster: ClusterProcess) -> None:
    """aiokafka reads a replicated topic to its high watermark: every record produced with acks=all."""
    create(cluster, "visible", 1, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(50):
        producer.produce("visible", b"%d" % i, partition=0)
    assert producer.flush(30) == 0

    async def consume() -> list[bytes]:
        consumer = AIOKafkaConsumer("visible", bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            values: list[bytes] = []
            while len(values) < 50:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                values += [r.value for records in batch.values() for r in records]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(consume()) == [b"%d" % i for i in range(50)]


@pytest.fixture
def five(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path, 5, FAST)


def test_two_of_three_replicas_gone_acks_all_is_refused_not_pretended(five: ClusterProcess) -> None:
    """Five voters, so the quorum outlives two deaths; the topic's replicas are on three of them."""
    controller = five.leader()
    placed = [n for n in (1, 2, 3, 4, 5) if n != controller][:3]
    admin = AdminClient({"bootstrap.servers": five.bootstrap})
    topic = NewTopic("fragile", num_partitions=1, replica_assignment=[placed], config={"min.insync.replicas": "2"})
    admin.create_topics([topic])["fragile"].result(timeout=30)
    until(lambda: all_in_sync(five, "fragile", 1, 3), 30, "fragile in sync")
    leader = leader_of(five, "fragile", 0).leader_id
    for node_id in placed:
        if node_id != leader:
            five[node_id].kill()
    bootstrap = five[leader].bootstrap
    until(lambda: isr_is(bootstrap, "fragile", [leader]), 30, "the ISR down to the leader")
    batch = build_batch([Record(offset=0, timestamp=int(time.time() * 1000), key=None, value=b"x")], base_offset=0)
    with RawKafka(bootstrap) as raw:
        code, _offset = produce_error(raw, "fragile", 0, batch)
    assert code == ErrorCode.not_enough_replicas.value
    # acks=1 still works: the leader alone has it.
    one = Producer({"bootstrap.servers": bootstrap, "acks": 1})
    one.produce("fragile", b"acks=1", partition=0)
    assert one.flush(20) == 0
    # The high watermark follows the ISR (the leader alone now), so the acks=1 record is readable.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fragile-check", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition("fragile", 0, 0)])
        message = consumer.poll(20)
        assert message is not None and message.error() is None and message.value() == b"acks=1"
    finally:
        consumer.close()


def test_a_node_restarted_with_an_empty_disk_copies_every_replica_again(cluster: ClusterProcess) -> None:
    """The victim leads both partitions when its disk is wiped. Restarted within its session, it must not lead
    them again with an empty log (its followers would truncate every acknowledged record to match it, as a CI run
    once showed): the controller refuses the new process's registration until the old one's session expires and
    the leaderships move, then it copies every replica again, and every acknowledged record is still there."""
    victim = next(n for n in (1, 2, 3) if n != cluster.leader())  # the quorum keeps its leader meanwhile
    others = [n for n in (1, 2, 3) if n != victim]
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic("rebuilt", 2, replica_assignment=[[victim, *others], [victim, *reversed(others)]])
    admin.create_topics([topic])["rebuilt"].result(timeout=30)
    until(lambda: all_in_sync(cluster, "rebuilt", 2, 3), 30, "rebuilt fully in sync")
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    values = [b"b%d" % i for i in range(400)]
    for i, value in enumerate(values):
        producer.produce("rebuilt", value, partition=i % 2)
    assert producer.flush(30) == 0
    assert {leader_of(cluster, "rebuilt", p).leader_id for p in range(2)} == {victim}
    node = cluster[victim]
    node.kill()
    shutil.rmtree(node.data_dir)  # the disk replaced: no partition, metadata log or meta.properties left
    node.start()
    until(lambda: all_in_sync(cluster, "rebuilt", 2, 3), 60, "the rebuilt node back in every ISR")
    other = others[0]

    def copied() -> bool | None:
        for partition in range(2):
            mine = segment_bytes(cluster[victim].data_dir, "rebuilt", partition)
            if not mine or mine != segment_bytes(cluster[other].data_dir, "rebuilt", partition):
                return None
        return True

    until(copied, 60, "every partition copied again to the rebuilt node")
    assert read_all(cluster.bootstrap, "rebuilt", 2, len(values)) == {p: values[p::2] for p in range(2)}
    assert any(f"fencing broker {victim}:" in other.logs() for other in cluster), "the old incarnation never fenced"


def test_a_deleted_replicated_topic_leaves_no_replica_behind(cluster: ClusterProcess) -> None:
    create(cluster, "doomed", 2, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce("doomed", b"x", partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics(["doomed"])["doomed"].result(timeout=30)

    def gone() -> bool | None:
        # Partition directories sit right under log.dirs; a recursive walk would descend into a "-delete" directory
        # the broker is removing at that moment and fail on it.
        left = [path for node in cluster for path in node.data_dir.glob("doomed-*") if path.is_dir()]
        return True if not left else None

    until(gone, 30, "every replica's directory removed")


def test_sigterm_hands_leadership_over_before_the_broker_stops(tmp_path: Path) -> None:
    """Controlled shutdown: with Kafka's 9 s session timeout an unannounced death would stall acks=all producers
    for 9 s or more; a SIGTERMed leader moves its partitions first, so acknowledgments barely pause."""
    cluster = ClusterProcess(tmp_path, 3, {**FAST, "broker.session.timeout.ms": "9000",
                                           "broker.heartbeat.interval.ms": "500"})
    try:
        cluster.start()
        cluster.wait_for_brokers()
        create(cluster, "handover", 2, 3, **{"min.insync.replicas": "2"})
        load = AckedProducer(cluster.bootstrap, "handover", 2).start()
        until(lambda: load.count() > 300 or None, 30, "records acknowledged before the shutdown")
        leader = leader_of(cluster, "handover", 0).leader_id
        stopping = time.monotonic()
        assert cluster[leader].stop(timeout=60) == 0
        stopped = time.monotonic()
        survivor = next(node for node_id, node in cluster.nodes.items() if node_id != leader)
        moved = partitions_on(survivor.bootstrap, "handover")
        assert moved is not None and all(p.leader_id not in (leader, -1) for p in moved.values())
        until(lambda: True if load.acked_at[-1] > stopped + 5 else None, 30, "acknowledgments after the shutdown")
        load.stop()
        assert not load.failed, load.failed[:5]
        window = [t for t in load.acked_at if stopping - 2 <= t <= stopped + 5]
        longest = max(b - a for a, b in itertools.pairwise(window))
        assert longest < 3.0, f"acks=all producers waited {longest:.1f} s across the controlled shutdown"
    finally:
        cluster.stop()


def test_a_whole_cluster_sigtermed_at_once_stops_within_seconds(cluster: ClusterProcess) -> None:
    """Every node asked to stop together (`make down`, deploy.cluster's Ctrl-C): the last ones to try their
    controlled shutdown find the quorum gone. Each step waited a whole request timeout (30 s) for a controller
    before; now a few heartbeats, and after three unanswered steps the broker stops without it."""
    create(cluster, "everywhere", 3, 3)
    asked = time.monotonic()
    for node in cluster:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGTERM)
    # Waited for, not stopped again: a second SIGTERM that lands after a node's event loop has closed (its handlers
    # gone, the interpreter exiting) kills it with the signal, which CI once saw as [0, -15, -15] under load.
    assert [node.proc.wait(60) for node in cluster if node.proc is not None] == [0, 0, 0]
    assert time.monotonic() - asked < 15, "a node waited for a quorum that had gone"


def _sessions_opened(node: BrokerProcess, leader: int) -> list[str]:
    """The ids of the fetch sessions `node`'s fetcher opened with `leader` (fetch_session_handler logs each)."""
    return re.findall(rf"fetch session (\d+) opened with broker {leader} ", node.logs())


def test_followers_in_fetch_sessions_keep_idle_partitions_in_sync_and_start_over_after_a_leader_restart(
        tmp_path: Path) -> None:
    """KIP-227 for followers: once a session is open, a follower's fetch names only partitions whose position
    moved, yet the leader renews the follower on every session partition, so partitions without news stay in
    the ISR for three times replica.lag.time.max.ms while one partition takes records. A leader SIGKILLed and
    restarted (a session timeout long enough that it keeps its leaderships) has lost the sessions: each
    follower starts over with a full fetch, a new session opens and replication goes on."""
    cluster = ClusterProcess(tmp_path, 3, {**FAST, "broker.session.timeout.ms": "20000"})
    try:
        cluster.start()
        cluster.wait_for_brokers()
        create(cluster, "quiet", 6, 3)
        lag_s = int(FAST["replica.lag.time.max.ms"]) / 1000
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0})
        errors: list[KafkaError] = []
        sent = 0
        ends = time.monotonic() + 3 * lag_s
        while time.monotonic() < ends:
            producer.produce("quiet", b"busy-%d" % sent, partition=0,
                             on_delivery=lambda e, _m: errors.append(e) if e else None)
            sent += 1
            assert producer.flush(10) == 0
            assert all_in_sync(cluster, "quiet", 6, 3), "an ISR shrank while its follower was fetching"
            time.sleep(0.2)
        for node_id, node in cluster.nodes.items():
            for leader in set(cluster.nodes) - {node_id}:
                assert _sessions_opened(node, leader), f"node {node_id} fetches from {leader} without a session"

        victim = next(n for n in cluster.nodes if n != cluster.leader())
        before = {n: set(_sessions_opened(node, victim)) for n, node in cluster.nodes.items() if n != victim}
        cluster[victim].kill()
        cluster[victim].start()
        until(lambda: all_in_sync(cluster, "quiet", 6, 3), 60, "every replica in sync after the restart")
        for i in range(60):
            producer.produce("quiet", b"after-%d" % i, partition=i % 6,
                             on_delivery=lambda e, _m: errors.append(e) if e else None)
        assert producer.flush(30) == 0 and not errors, errors[:3]
        for n, ids in before.items():
            assert set(_sessions_opened(cluster[n], victim)) - ids, f"node {n} opened no new session with {victim}"
        seen = read_all(cluster.bootstrap, "quiet", 6, sent + 60)
        assert {p: len(v) for p, v in seen.items()} == {0: sent + 10, **{p: 10 for p in range(1, 6)}}
        until(lambda: len({tuple(segment_bytes(node.data_dir, "quiet", p) for p in range(6)) for node in cluster}) == 1
              or None, 30, "byte-identical replicas")
    finally:
        cluster.stop()
