"""`make up CLUSTER=3 SPARK=2` (``python -m deploy.up --cluster 3 --spark-workers 2 --no-pipeline``): the solution
runs on a 3-node bus cluster, and its Spark jobs would run on a standalone cluster of two workers.

The config handed to make up points ``[bus] bootstrap_servers`` at a port nobody listens on, so the console can
only reach the bus through the derived ``DATA/solution.toml`` that names the cluster; it names the Spark master too,
which every job (the video batch jobs included) reads from there.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, PartitionMetadata

from contracts.config import load as load_config
from contracts.ports import free_port
from contracts.topics import Topics
from deploy.processes.cluster import until
from deploy.processes.make_up import MAKE_UP_PORTS, bus_settings, console_client, down, start_up, write_config

NODES = 3


def _draw(taken: set[int], count: int = 1) -> int:
    """The first of `count` consecutive free ports none of which is in `taken` (node i listens on base + i - 1)."""
    for _ in range(100):
        base = free_port()
        run = set(range(base, base + count))
        if run & taken:
            continue
        with contextlib.ExitStack() as stack:
            try:
                for port in run:
                    stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)).bind(("127.0.0.1", port))
            except OSError:
                continue
        taken |= run
        return base
    raise RuntimeError(f"no {count} consecutive free ports")


def _partitions(admin: AdminClient, topic: str) -> dict[int, PartitionMetadata] | None:
    """The topic's partitions once it exists, else None (all topics are listed: a request naming it might create it)."""
    found = admin.list_topics(timeout=5).topics.get(topic)
    return found.partitions if found is not None and found.error is None and found.partitions else None


def _read(consumer: Consumer, key: bytes) -> bool | None:
    return True if any(m.error() is None and m.key() == key for m in consumer.consume(100, 1)) else None


def _brokers_of(data_dir: Path) -> list[psutil.Process]:
    """`bus broker` processes whose command line names `data_dir` (the cluster's nodes, the DR bus)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "bus" in cmdline and "broker" in cmdline and any(str(data_dir) in arg for arg in cmdline):
            found.append(proc)
    return found


@pytest.mark.slow
def test_make_up_runs_the_solution_on_a_three_node_cluster(tmp_path: Path) -> None:
    taken: set[int] = set()
    ports = {"bus": _draw(taken, NODES), "controller": _draw(taken, NODES)}
    ports |= {name: _draw(taken) for name in ("dead", "sparkm", "sparkui", *MAKE_UP_PORTS) if name not in ports}
    config = write_config(tmp_path, ports, bus=f"127.0.0.1:{ports['dead']}")
    data_dir = tmp_path / "data"
    servers = ",".join(f"127.0.0.1:{ports['bus'] + i}" for i in range(NODES))
    proc, output = start_up(config, data_dir, ports, "--cluster", str(NODES), "--spark-workers", "2")
    try:
        # (g) the Spark standalone cluster: in the status lines with its UI, two workers alive, named in the config
        master = f"spark://127.0.0.1:{ports['sparkm']}"
        assert re.search(rf"spark cluster\s+{master}: 2 workers .*UI http://127\.0\.0\.1:{ports['sparkui']}",
                         output), output
        with urllib.request.urlopen(f"http://127.0.0.1:{ports['sparkui']}/json/", timeout=10) as answer:
            assert json.load(answer)["aliveworkers"] == 2
        assert load_config(data_dir / "solution.toml").get("spark", "master", "") == master

        # (a) the status lines name the cluster: its nodes, the quorum leader, bootstrap.servers
        assert re.search(rf"bus\s+{NODES} node\(s\) .*quorum leader [1-{NODES}]", output), output
        for i in range(NODES):
            assert re.search(rf"node {i + 1} \(broker,controller\)\s+clients 127\.0\.0\.1:{ports['bus'] + i}"
                             rf"\s+quorum 127\.0\.0\.1:{ports['controller'] + i}", output), output
        assert f"bootstrap.servers={servers}" in output, output
        assert f"bootstrap_servers = \"{servers}\"" in (data_dir / "solution.toml").read_text()

        # (b) a topic the surveillance service creates at start has three replicas
        topics = Topics.from_config(load_config(config))
        assert bus_settings(data_dir)["bootstrap.servers"] == servers  # every principal's properties name them
        admin = AdminClient(bus_settings(data_dir))
        hits = until(lambda: _partitions(admin, topics.surveillance_hits), 60,
                     f"{topics.surveillance_hits} created by the surveillance service", interval=0.5)
        assert {len(p.replicas) for p in hits.values()} == {NODES}, hits

        # (c) a capture record produced with acks=all reads back; the console reaches the bus
        vehicle = until(lambda: _partitions(admin, topics.vehicle), 10, topics.vehicle)
        producer = Producer({**bus_settings(data_dir, "simulator"), "acks": "all"})
        key = f"make-up-cluster-{time.time_ns()}".encode()
        errors: list[object] = []
        producer.produce(topics.vehicle, b'{"probe": "make up --cluster"}', key=key,
                         on_delivery=lambda error, _message: errors.append(error))
        assert producer.flush(30) == 0 and errors == [None], errors
        consumer = Consumer({**bus_settings(data_dir), "group.id": "make-up-cluster", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topics.vehicle, p, 0) for p in vehicle])
        try:
            until(lambda: _read(consumer, key), 20, "the acks=all record")
        finally:
            consumer.close()
        with console_client(data_dir, ports["console"]) as console:
            health = console.get("/api/v1/health").json()
            assert health["bus"] == {"up": True, "error": None}, health
            password = (data_dir / "console" / "admin_password").read_text().strip()
            token = console.post("/api/v1/auth/token", data={"username": "admin", "password": password}
                                 ).json()["access_token"]
            auth = {"Authorization": f"Bearer {token}"}
            brokers = console.get("/api/v1/bus/brokers", headers=auth).json()
            assert [b["id"] for b in brokers["brokers"]] == list(range(1, NODES + 1)), brokers
            # (e) a topic the console creates without a replication factor gets the cluster's default, 3
            made = console.post("/api/v1/bus/topics", json={"name": "made-on-the-cluster", "partitions": 2},
                                headers=auth)
            assert made.status_code == 201, made.text
            assert [len(p["replicas"]) for p in made.json()["partitions"]] == [NODES, NODES], made.text
            # (f) but the console's bus identity may not delete it (its ACLs): a clear 403, not a 500
            gone = console.delete("/api/v1/bus/topics/made-on-the-cluster", headers=auth)
            assert gone.status_code == 403, gone.text
    finally:
        down(data_dir, proc)
    # (d) make down left no node (nor the DR bus) running, nor a Spark master or worker
    assert not _brokers_of(data_dir)
    spark_left = [p for p in psutil.process_iter(["cmdline"])
                  if any(str(data_dir / "spark-cluster") in arg for arg in p.info["cmdline"] or [])  # workers
                  or {"org.apache.spark.deploy.master.Master", str(ports["sparkm"])} <= set(p.info["cmdline"] or [])]
    assert not spark_left
