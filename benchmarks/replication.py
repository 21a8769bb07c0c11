"""Issue 16's cluster figures on one machine, on the three nodes `deploy.cluster` starts:

- **Throughput**: confluent-kafka producing `--records` records of 100 bytes (linger.ms 5) to a 3-partition topic
  with 3 replicas and acks=all, against the same to a 3-partition topic with 1 replica and acks=1 (the ratio is
  the figure; target >= 0.5).
- **Latency**: one acks=all record at a time on the replicated topic (median of 50, the replication cycle at
  idle), then a paced producer (1,000 records/s for `--seconds`, linger.ms 0) with acks=all: p50 and p99 from
  produce() to its delivery report. The internal topics (50 + 50 partitions, 3 replicas) exist first, as on a
  cluster in use: every follower fetch session holds their partitions too.
- **Partition leader election**: SIGKILL a node leading a partition of the replicated topic, not the active
  controller (that would add a controller failover), and time until a surviving node's Metadata names a new
  leader (polled every 20 ms), at Kafka's default broker session timeout (9 s) and at a low one (1.5 s,
  heartbeats every 250 ms): the controller fences the dead broker when its session expires and moves its
  leaderships in the same step.
- **Controller failover**: SIGKILL the quorum leader and time until a survivor answers DescribeQuorum with a new
  leader in a later epoch, at Kafka's default quorum timeouts and at low ones.

The killed node is restarted between trials and the next trial waits for it to rejoin.

    .venv/bin/python benchmarks/replication.py [--trials 5] [--records 100000] [--seconds 10]

Print `uptime` with the figures: on a shared machine an election's time includes waiting for a CPU.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic

from bus.client.admin import AdminClient
from contracts.processes import spawn
from deploy.cluster import Node, cluster_id, node_command, plan, wait_for_quorum

CONTROLLER_SETTINGS = {
    "Kafka defaults (election 1000 ms, fetch 2000 ms)": {},
    "low (election 300 ms, fetch 600 ms)": {"controller.quorum.election.timeout.ms": "300",
                                            "controller.quorum.fetch.timeout.ms": "600",
                                            "controller.quorum.election.backoff.max.ms": "300"},
}


def _quorum(admin: AdminClient) -> tuple[int, int] | None:
    try:
        info = admin.describe_metadata_quorum()
    except Exception:  # the survivor is between leaders or busy electing: ask again
        return None
    return info.leader_id, info.leader_epoch


def _start(node: Node, nodes: list[Node], cid: str, extra: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    node.data_dir.mkdir(parents=True, exist_ok=True)
    return spawn(node_command(node, nodes, cid, extra), logs / f"node-{node.node_id}.log")


def failovers(extra: dict[str, str], trials: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        nodes = plan(3, "127.0.0.1", 0, data)
        cid = cluster_id(data)
        procs = {n.node_id: _start(n, nodes, cid, extra, data) for n in nodes}
        bootstrap = ",".join(n.bootstrap for n in nodes)
        times = []
        try:
            for _ in range(trials):
                leader = wait_for_quorum(bootstrap, 3, 90)
                old_epoch = _quorum(AdminClient({"bootstrap.servers": bootstrap}))
                survivors = ",".join(n.bootstrap for n in nodes if n.node_id != leader)
                admin = AdminClient({"bootstrap.servers": survivors, "default.api.timeout.ms": 2000,
                                     "request.timeout.ms": 1000})
                _quorum(admin)  # connected before the kill
                killed_at = time.perf_counter()
                os.kill(procs[leader].pid, signal.SIGKILL)
                procs[leader].wait()
                while True:
                    now = _quorum(admin)
                    if now is not None and now[0] not in (leader, -1) and (old_epoch is None or now[1] > old_epoch[1]):
                        times.append(time.perf_counter() - killed_at)
                        break
                    if time.perf_counter() - killed_at > 60:
                        raise TimeoutError("no new leader within 60 s")
                    time.sleep(0.02)
                admin.close()
                killed = next(n for n in nodes if n.node_id == leader)
                procs[leader] = _start(killed, nodes, cid, extra, data)
        finally:
            for proc in procs.values():
                proc.kill()
                proc.wait()
        return times


SESSION_SETTINGS = {
    "Kafka default session (9 s, heartbeat 2 s)": {},
    "low session (1.5 s, heartbeat 250 ms)": {"broker.session.timeout.ms": "1500",
                                              "broker.heartbeat.interval.ms": "250"},
}
VALUE = b"x" * 100


class Cluster:
    """Three combined nodes in a temporary directory, started with `extra` config."""

    def __init__(self, extra: dict[str, str]) -> None:
        self._tmp = tempfile.TemporaryDirectory()
        self.data = Path(self._tmp.name)
        self.extra = {"offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3",
                      **extra}
        self.nodes = plan(3, "127.0.0.1", 0, self.data)
        self.cid = cluster_id(self.data)
        self.procs = {n.node_id: _start(n, self.nodes, self.cid, self.extra, self.data) for n in self.nodes}
        self.bootstrap = ",".join(n.bootstrap for n in self.nodes)
        wait_for_quorum(self.bootstrap, 3, 90)
        _wait_for_brokers(self.bootstrap, 3)

    def restart(self, node_id: int) -> None:
        node = next(n for n in self.nodes if n.node_id == node_id)
        self.procs[node_id] = _start(node, self.nodes, self.cid, self.extra, self.data)

    def close(self) -> None:
        for proc in self.procs.values():
            proc.kill()
            proc.wait()
        self._tmp.cleanup()


def _wait_for_brokers(bootstrap: str, count: int, timeout_s: float = 60) -> None:
    admin = KafkaAdmin({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_s
    while len(admin.list_topics(timeout=5).brokers) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} brokers registered after {timeout_s:.0f} s")
        time.sleep(0.2)


def _create(bootstrap: str, name: str, replicas: int) -> None:
    admin = KafkaAdmin({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 3, replicas)])[name].result(timeout=60)
    deadline = time.monotonic() + 60
    while True:  # every partition led, with its full ISR
        topic = admin.list_topics(name, timeout=5).topics[name]
        if len(topic.partitions) == 3 and all(p.leader >= 0 and len(p.isrs) == replicas
                                              for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not fully in sync")
        time.sleep(0.1)


def throughput(bootstrap: str, topic: str, acks: str, records: int) -> float:
    """Records per second from the first produce() to the last delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "queue.buffering.max.messages": records + 1})
    producer.produce(topic, VALUE)  # connections and metadata before the clock starts
    producer.flush(30)
    failed = []
    started = time.perf_counter()
    for i in range(records):
        producer.produce(topic, VALUE, partition=i % 3, on_delivery=lambda e, _m: failed.append(e) if e else None)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(300) or failed:
        raise RuntimeError(f"{len(failed)} records failed: {failed[:3]}")
    return records / (time.perf_counter() - started)


def create_internal_topics(bootstrap: str) -> None:
    """__consumer_offsets and __transaction_state, which the brokers create on first use (a group's coordinator,
    a transactional producer's)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "benchmark"})
    consumer.subscribe(["replicated"])
    deadline = time.monotonic() + 60
    while not consumer.assignment():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's consumer group never got its assignment")
        consumer.poll(0.5)
    consumer.close()
    Producer({"bootstrap.servers": bootstrap, "transactional.id": "benchmark"}).init_transactions(60)


def one_at_a_time(bootstrap: str, topic: str, count: int = 50) -> list[float]:
    """Milliseconds for each of `count` acks=all records sent alone (the next after the previous is delivered)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(topic, VALUE)
    producer.flush(30)
    out = []
    for i in range(count):
        sent = time.perf_counter()
        producer.produce(topic, VALUE, partition=i % 3)
        if producer.flush(30):
            raise RuntimeError("an acks=all record was not delivered within 30 s")
        out.append((time.perf_counter() - sent) * 1000)
        time.sleep(0.05)
    return out


def latencies(bootstrap: str, topic: str, seconds: float, rate: int = 1000) -> list[float]:
    """Milliseconds from produce() to the delivery report of acks=all records sent at `rate` per second."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(topic, VALUE)
    producer.flush(30)
    out: list[float] = []

    def delivered(error: object, _message: object, *, sent: float) -> None:
        if error is None:
            out.append((time.perf_counter() - sent) * 1000)

    count = int(seconds * rate)
    started = time.perf_counter()
    for i in range(count):
        ahead = started + i / rate - time.perf_counter()
        if ahead > 0:  # sleep, not poll(timeout): librdkafka's short poll waits spin a core the brokers need
            time.sleep(ahead)
        producer.poll(0)
        sent = time.perf_counter()
        producer.produce(topic, VALUE, partition=i % 3, on_delivery=functools.partial(delivered, sent=sent))
    producer.flush(60)
    if len(out) != count:
        raise RuntimeError(f"{count - len(out)} of {count} records failed")
    return out


def _leader(admin: KafkaAdmin, topic: str, partition: int) -> int | None:
    try:
        return int(admin.list_topics(topic, timeout=1).topics[topic].partitions[partition].leader)
    except Exception:  # a survivor busy or between answers: ask again
        return None


def _led_off_the_controller(admin: KafkaAdmin, topic: str) -> tuple[int, int] | None:
    """(partition, leader) of a partition whose leader is not the active controller, None while there is none.

    Killing the controller too would time a controller failover plus a fresh session for every broker (a new
    controller knows no heartbeat yet), which is the next figure's business, not a partition election's."""
    try:
        metadata = admin.list_topics(topic, timeout=1)
    except Exception:
        return None
    for number, partition in sorted(metadata.topics[topic].partitions.items()):
        if partition.leader >= 0 and partition.leader != metadata.controller_id >= 0:
            return number, int(partition.leader)
    return None


def elections(extra: dict[str, str], trials: int) -> list[float]:
    """Seconds from SIGKILL of a partition's leader (not the active controller) until a survivor names another."""
    cluster = Cluster(extra)
    times = []
    try:
        _create(cluster.bootstrap, "elected", 3)
        for _ in range(trials):
            admin = KafkaAdmin({"bootstrap.servers": cluster.bootstrap})
            deadline = time.perf_counter() + 30
            while (chosen := _led_off_the_controller(admin, "elected")) is None:  # a node busy answering
                if time.perf_counter() > deadline:
                    raise TimeoutError("no partition of 'elected' led off the controller 30 s after the last trial")
                time.sleep(0.1)
            partition, leader = chosen
            survivors = ",".join(n.bootstrap for n in cluster.nodes if n.node_id != leader)
            watcher = KafkaAdmin({"bootstrap.servers": survivors})
            _leader(watcher, "elected", partition)  # connected before the kill
            killed_at = time.perf_counter()
            os.kill(cluster.procs[leader].pid, signal.SIGKILL)
            cluster.procs[leader].wait()
            while _leader(watcher, "elected", partition) in (None, leader, -1):
                if time.perf_counter() - killed_at > 60:
                    raise TimeoutError("no new partition leader within 60 s")
                time.sleep(0.02)
            times.append(time.perf_counter() - killed_at)
            cluster.restart(leader)
            _wait_for_brokers(cluster.bootstrap, 3)
            _create_wait_in_sync(admin, "elected")
    finally:
        cluster.close()
    return times


def _create_wait_in_sync(admin: KafkaAdmin, topic: str) -> None:
    deadline = time.monotonic() + 90
    while not all(len(p.isrs) == 3 for p in admin.list_topics(topic, timeout=5).topics[topic].partitions.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} not back in sync")
        time.sleep(0.2)


def data_path(records: int, seconds: float) -> None:
    cluster = Cluster({})
    try:
        _create(cluster.bootstrap, "single", 1)
        _create(cluster.bootstrap, "replicated", 3)
        create_internal_topics(cluster.bootstrap)
        single = throughput(cluster.bootstrap, "single", "1", records)
        replicated = throughput(cluster.bootstrap, "replicated", "all", records)
        print(f"throughput, {records} records of 100 B: acks=1 RF=1 {single:,.0f}/s, acks=all RF=3 "
              f"{replicated:,.0f}/s, ratio {replicated / single:.2f} (target >= 0.5)", flush=True)
        alone = one_at_a_time(cluster.bootstrap, "replicated")
        print(f"acks=all RF=3 latency of a record sent alone: median {statistics.median(alone):.1f} ms, "
              f"max {max(alone):.1f} ms (50 records)", flush=True)
        lat = sorted(latencies(cluster.bootstrap, "replicated", seconds))
        p50, p99 = lat[len(lat) // 2], lat[int(len(lat) * 0.99)]
        print(f"acks=all RF=3 latency at 1,000 records/s for {seconds:.0f} s: p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
              f"max {lat[-1]:.1f} ms", flush=True)
    finally:
        cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    if args.trials < 1 or args.records < 1 or args.seconds <= 0:
        parser.error("--trials and --records must be at least 1, --seconds positive")
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    data_path(args.records, args.seconds)
    for label, extra in SESSION_SETTINGS.items():
        times = elections(extra, args.trials)
        print(f"partition leader election after SIGKILL, {label}: " + ", ".join(f"{t:.2f}" for t in times)
              + f" s (median {statistics.median(times):.2f})", flush=True)
    rows = []
    for label, extra in CONTROLLER_SETTINGS.items():
        times = failovers(extra, args.trials)
        rows.append((label, times))
        print(f"{label}: " + ", ".join(f"{t:.2f}" for t in times) + " s", flush=True)
    print(f"\n{'controller failover after SIGKILL of the leader':<52}{'median s':>10}{'max s':>8}")
    for label, times in rows:
        print(f"  {label:<50}{statistics.median(times):>10.2f}{max(times):>8.2f}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
