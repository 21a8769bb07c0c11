"""The bus's nodes on different hosts (network namespaces on this machine, `deploy/hosts.py`), each with its own
address for its client and quorum listeners; the test process is the client, through the hosts' bridge.

Three combined broker+controller nodes, one per host, as `deploy/cluster.py` configures them but with every address
taken from the node's host: a topic with three replicas and `min.insync.replicas=2` keeps every acknowledged record,
exactly once and in order, when the host that leads its partition is cut off the network under acks=all load; the
other two carry the load meanwhile, and the host is back in the ISR once its link returns. Metadata hands clients
each node's own address, never 127.0.0.1. The harness itself is checked first: two networks at once, each isolated
from the other, and nothing left of either after it is closed.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from contracts.ports import free_port
from deploy.cluster import Node, wait_for_quorum
from deploy.hosted_cluster import PORT, HostedCluster
from deploy.hosts import Host, Network, ip
from deploy.processes.cluster import until
from testkit.raw_kafka import RawKafka, metadata_request

TOPIC = "hosted"


def _serve(host: Host, bind: str, log: Path) -> int:
    """A TCP server in `host` on `bind` (a port free in the root namespace too) that accepts connections until
    killed; its port once it listens."""
    port = free_port()
    script = (f"import socket\ns = socket.create_server(({bind!r}, {port}))\nprint('up', flush=True)\n"
              "while True: s.accept()[0].close()")
    host.spawn([sys.executable, "-c", script], log)
    until(lambda: True if log.exists() and "up" in log.read_text() else None, 10, f"the server in {host}")
    return port


def _reaches(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def test_two_networks_coexist_isolated_and_leave_nothing_behind(tmp_path: Path) -> None:
    with Network() as first, Network() as second:
        assert first.subnet != second.subnet and first.bridge != second.bridge
        a, b = first.host(), second.host()
        port_a = _serve(a, a.address, tmp_path / "a.log")
        port_b = _serve(b, "127.0.0.1", tmp_path / "b.log")
        assert _reaches(a.address, port_a)  # from the root namespace, through the bridge
        assert not _reaches("127.0.0.1", port_b)  # a host's loopback is its own
        probe = tmp_path / "probe.log"  # host b reaches a's network only through the root namespace, not directly
        b.spawn([sys.executable, "-c", f"import socket; socket.create_connection(({a.address!r}, {port_a}), 1)"],
                probe).wait(10)
        assert "unreachable" in probe.read_text().lower()
        a.link_down()
        assert not _reaches(a.address, port_a)
        a.link_up()
        until(lambda: _reaches(a.address, port_a) or None, 10, "host a back on the network")
        namespaces = [a.name, b.name]
    assert not any(name in ip("netns", "list") for name in namespaces)
    links = ip("-o", "link")
    assert not any(suffix in links for suffix in (first.suffix, second.suffix))


@dataclass
class Acked:
    key: bytes
    value: bytes
    offset: int

    @classmethod
    def of(cls, message: Message) -> Acked:
        key, value, offset = message.key(), message.value(), message.offset()
        assert key is not None and value is not None and offset is not None  # every record here has all three
        return cls(key, value, offset)


class Load:
    """An idempotent acks=all producer sending numbered records in a thread; keeps every acknowledged one."""

    def __init__(self, bootstrap: str) -> None:
        # A request to the cut-off host gets no answer at all: give up on it after 5 s (librdkafka waits for
        # socket.timeout.ms, 60 s by default) and retry on the new leader, within a delivery timeout long enough
        # for the whole outage.
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "socket.timeout.ms": 5000, "request.timeout.ms": 5000,
                                  "message.timeout.ms": 90000, "retry.backoff.ms": 100})
        self.acked: list[Acked] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.failed.append(str(error))
        else:
            self.acked.append(Acked.of(message))

    def _run(self) -> None:
        sent = 0
        while not self._stop.is_set():
            self.producer.produce(TOPIC, b"v%08d" % sent, b"k%d" % sent, partition=0, on_delivery=self._delivered)
            sent += 1
            self.producer.poll(0)
            time.sleep(0.002)

    def start(self) -> Load:
        self._thread.start()
        return self

    def halt(self) -> None:
        """No more records (what is sent may still be in flight)."""
        self._stop.set()
        self._thread.join()

    def stop(self) -> None:
        """No more records, and every one sent acknowledged or failed."""
        self.halt()
        assert self.producer.flush(90) == 0

    def more_than(self, count: int) -> bool | None:
        return True if len(self.acked) > count else None


def metadata(node: Node) -> Any | None:
    """`node`'s Metadata answer for the topic, asked of that node alone; None if it cannot be reached."""
    try:
        with RawKafka(node.bootstrap, timeout=2) as raw:
            return raw.request(metadata_request(TOPIC, allow_auto_create=False))
    except OSError:
        return None


def advertised(node: Node) -> dict[int, tuple[str, int]] | None:
    """broker id -> the address `node`'s Metadata gives clients for it."""
    response = metadata(node)
    return None if response is None else {b.node_id: (b.host, b.port) for b in response.brokers}


def partition(node: Node) -> Any | None:
    """Partition 0 of the topic as `node` describes it (leader, ISR), or None."""
    response = metadata(node)
    if response is None or response.topics[0].error_code != ErrorCode.none or not response.topics[0].partitions:
        return None
    return response.topics[0].partitions[0]


def in_sync_everywhere(nodes: list[Node]) -> bool | None:
    described = [partition(node) for node in nodes]
    ok = all(p is not None and p.leader_id >= 0 and sorted(p.isr_nodes) == [1, 2, 3] for p in described)
    return True if ok else None


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[list[Host], list[Node]]]:
    """Three hosts, a combined node on each: its client and quorum listeners, advertised listener and voter entry
    all on its host's address (`deploy/hosted_cluster.py`)."""
    assert os.geteuid() == 0 and shutil.which("ip"), "hosts are network namespaces: root and iproute2's `ip` needed"
    with Network() as network:
        hosted = HostedCluster(network, 3, tmp_path).start()
        yield hosted.hosts, hosted.nodes


def read_from_start(bootstrap: str, end: int) -> list[Acked]:
    """The partition's records from offset 0 up to `end`."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hosts-reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        records: list[Acked] = []
        deadline = time.monotonic() + 30
        while (not records or records[-1].offset < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                records.append(Acked.of(message))
        return records
    finally:
        consumer.close()


def cut_off_the_leader(hosts: list[Host], nodes: list[Node], load: Load) -> tuple[int, bool, float, float]:
    """Under `load`, the partition leader's host goes off the network until the other two have left it out of the
    ISR and acknowledged records without it, then comes back until it is in the ISR again: the leader's id, whether
    it was the active controller too (then the quorum elects another meanwhile), and the seconds it took to leave
    the ISR and to come back."""
    until(lambda: load.more_than(300), 30, "records acknowledged before the cut")
    old = until(lambda: partition(nodes[0]), 10, "the partition's leader").leader_id
    controller = wait_for_quorum(",".join(node.bootstrap for node in nodes), len(nodes), 10)
    others = [node for node in nodes if node.node_id != old]
    hosts[old - 1].link_down()
    down_at = time.monotonic()

    def shrunk() -> bool | None:
        seen = partition(others[0])
        ok = seen is not None and seen.leader_id in {n.node_id for n in others} and old not in seen.isr_nodes
        return True if ok else None

    until(shrunk, 30, f"node {old} out of the ISR")
    shrunk_after = time.monotonic() - down_at
    acked_at_shrink = len(load.acked)
    # Within seconds: a broker that waited out its request to the lost controller (30 s) was fenced meanwhile.
    until(lambda: load.more_than(acked_at_shrink + 300), 15, "records acknowledged by the two hosts left")
    hosts[old - 1].link_up()
    up_at = time.monotonic()
    until(lambda: in_sync_everywhere(nodes), 40, f"node {old} back in the ISR")
    return old, old == controller, shrunk_after, time.monotonic() - up_at


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_leader_host_cut_off_under_load_loses_nothing_and_rejoins_the_isr(
        cluster: tuple[list[Host], list[Node]]) -> None:
    hosts, nodes = cluster
    bootstrap = ",".join(node.bootstrap for node in nodes)
    expected = {node.node_id: (host.address, PORT) for host, node in zip(hosts, nodes, strict=True)}
    assert not any(address.startswith("127.") for address, _ in expected.values())

    def lists_every_address() -> bool | None:  # every node hands clients every node's own address
        return True if all(advertised(node) == expected for node in nodes) else None

    until(lists_every_address, 10, "every node's address in every node's Metadata")

    # The partition's leader is the active controller: cutting its host off also leaves the other two to elect a
    # controller, while their heartbeats and ISR changes were on their way to the lost one.
    controller = wait_for_quorum(bootstrap, len(nodes), 10)
    replicas = [controller, *(node.node_id for node in nodes if node.node_id != controller)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [created] = admin.create_topics([NewTopic(TOPIC, 1, -1, replica_assignment=[replicas],
                                              config={"min.insync.replicas": "2"})]).values()
    created.result(timeout=30)
    until(lambda: in_sync_everywhere(nodes), 30, "the topic in sync on every node")

    load = Load(bootstrap).start()
    try:
        old, was_controller, shrunk_after, rejoined_after = cut_off_the_leader(hosts, nodes, load)
        load.stop()
    finally:
        load.halt()  # a failed test leaves no thread producing into the torn-down network
    assert not load.failed, load.failed[:5]
    assert partition(nodes[old - 1]) is not None  # the node answers its clients again on its own address

    records = read_from_start(bootstrap, max(a.offset for a in load.acked) + 1)
    values = [r.value for r in records]
    assert len(values) == len(set(values)), "a record is there twice"
    assert values == sorted(values), "records out of order"
    at = {r.offset: r for r in records}
    lost = [a for a in load.acked if at.get(a.offset) != a]
    assert not lost, f"{len(lost)} acknowledged records lost or changed, first {lost[:3]}"
    assert len(records) == len(load.acked), "every record sent was acknowledged, so the log holds exactly those"
    role = " (the active controller too)" if was_controller else ""
    print(f"node {old}{role} out of the ISR {shrunk_after:.1f} s after its link went down, back {rejoined_after:.1f} s "
          f"after it returned; {len(load.acked)} records acknowledged")
