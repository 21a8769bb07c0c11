"""The solution laid out on hosts (network namespaces on this machine, `deploy/hosts.py`), every part started with its
own command line and every address it binds or dials taken from one solution config, as on real machines:

    bus-1, bus-2, bus-3   three combined broker+controller nodes (`deploy/hosted_cluster.py`)
    store                 the HBase gateway and the object store
    spark                 the Spark standalone master and the capture ingest's driver (`python -m spark_jobs.submit`)
    worker-1, worker-2    one Spark worker each (the executors run there)
    sim                   the capture simulator, uploading images
    ops                   the console and the surveillance service

A process on one host reaches another only through that host's address: nothing on 127.0.0.1 is shared. Under the
simulator's load, the host of the broker that leads a capture partition goes off the network: the console keeps
answering (its overview, a search reading HBase on the store host, a watch published to the bus), the host is back in
every partition's ISR once its link returns, and every capture the simulator had acknowledged is in HBase exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import happybase
import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from contracts.processes import ROOT
from contracts.topics import Topics
from deploy.hosted_cluster import HostedCluster
from deploy.hosts import Host, Network
from deploy.processes.cluster import until
from deploy.processes.console import password_of
from deploy.processes.spark_cluster import SparkCluster
from spark_jobs import packaging
from tests.integration._ingest_support import row_counts
from tests.integration.test_ingest_end_to_end import bus_record_ids, expected_counts, table_record_ids

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark_cluster"), pytest.mark.timeout(900)]
TOPICS = Topics()
GATEWAY, S3, SPARK, CONSOLE, METRICS = 9090, 9000, 7077, 8000, 9330
RATE = 150
"""The simulator's records/s, from before the cut until the cut host is back in sync."""
CUT_S = 20
FAILOVER_S = 12
"""Seconds after the cut by which the two brokers left lead every partition and the console is served again:
broker.session.timeout.ms (3 s here) for the controller to fence the lost broker, and the clients' retries."""
"""The simulator's records/s and records: about a minute of load, the cut in its middle."""


@dataclass
class Layout:
    network: Network
    bus: HostedCluster
    store: Host
    spark: Host
    workers: list[Host]
    sim: Host
    ops: Host
    root: Path

    @property
    def config(self) -> Path:
        return self.root / "solution.toml"

    def write_config(self) -> None:
        """One config for every part; each reads the addresses it binds and dials from it."""
        self.config.write_text(f"""
[bus]
bootstrap_servers = "{self.bus.bootstrap}"
[hbase]
host = "{self.store.address}"
port = {GATEWAY}
[object_storage]
endpoint = "{self.store.address}:{S3}"
credentials_dir = "{self.root / 'secrets'}"
[map]
path = "{self.root / 'map.json'}"
[spark]
master = "spark://{self.spark.address}:{SPARK}"
[spark.conf]
"spark.driver.host" = "{self.spark.address}"
[console]
host = "{self.ops.address}"
port = {CONSOLE}
url = "http://{self.ops.address}:{CONSOLE}"
data_dir = "{self.root / 'console'}"
[surveillance]
metrics_port = {METRICS}
metrics_host = "{self.ops.address}"
""")

    def python(self, host: Host, name: str, *args: str) -> subprocess.Popen[bytes]:
        """``python ARGS`` started on ``host`` from the checkout, its output in ``<root>/<name>.log``."""
        return host.spawn([sys.executable, *args], self.root / f"{name}.log")

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def started(self, proc: subprocess.Popen[bytes], name: str, line: str, timeout: float = 90) -> None:
        def said() -> bool | None:
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{self.log(name)[-4000:]}"
            return True if line in self.log(name) else None

        until(said, timeout, f"{name}: {line!r}")


def http_ok(url: str) -> bool | None:
    try:
        return True if httpx.get(url, timeout=2).status_code == 200 else None
    except httpx.HTTPError:
        return None


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    assert os.geteuid() == 0 and shutil.which("ip"), "hosts are network namespaces: root and iproute2's `ip` needed"
    with Network() as network:
        bus = HostedCluster(network, 3, tmp_path / "bus")
        store, spark, sim, ops = (network.host() for _ in range(4))
        workers = [network.host(), network.host()]
        site = Layout(network, bus, store, spark, workers, sim, ops, tmp_path)
        site.write_config()
        bus.start()
        yield site


def in_sync(admin: AdminClient, topics: list[str], replicas: int = 3) -> bool | None:
    """Every partition of ``topics`` led and with every replica in its ISR, as Metadata says."""
    try:
        described = admin.list_topics(timeout=3).topics
    except KafkaException:  # no broker answered in time: not in sync
        return None
    ok = all(topic in described and described[topic].partitions and all(
        p.leader >= 0 and len(p.isrs) == replicas for p in described[topic].partitions.values()) for topic in topics)
    return True if ok else None


def test_the_solution_on_hosts_keeps_its_data_and_its_console_when_a_broker_host_is_cut_off(layout: Layout) -> None:
    site, config = layout, str(layout.config)
    # The store host: HBase gateway and object store, bound to the host's address.
    gateway = site.python(site.store, "gateway", "-m", "deploy.hbase_gateway", "--host", site.store.address,
                          "--port", str(GATEWAY), "--data-dir", str(site.root / "hbase"))
    store = site.python(site.store, "object-store", "-m", "deploy.object_store", "--config", config,
                        "--data-dir", str(site.root / "s3"), "--host", site.store.address)
    site.started(gateway, "gateway", "hbase-gateway listening on")
    site.started(store, "object-store", "S3 API ready")

    # The executors' environment is packed where the package index is reachable, as a deployment packs it once on
    # a build host: the hosts here reach nothing beyond their bridge, so a driver that had to pack it would fail.
    packaging.executor_environment()
    # Spark: the master on the spark host, a worker on each worker host, each advertising its own address.
    cluster = SparkCluster(site.root / "spark", workers=2, host=site.spark.address, port=SPARK, webui_port=8080,
                           worker_hosts=[w.address for w in site.workers],
                           wrap=lambda index, cmd: [str(part) for part in site.workers[index].command(cmd)],
                           wrap_master=lambda cmd: [str(part) for part in site.spark.command(cmd)])
    cluster.start()
    try:
        # The load (its producer makes the capture topics), and the ingest's driver, whose start is the longest.
        simulator = site.python(site.sim, "simulator", "-m", "ingest.simulate", "--config", config,
                                "--rate", str(RATE), "--seed", "31", "--failure-rate", "0.02",
                                "--status-interval", "0", "--map", str(site.root / "map.json"))
        admin = AdminClient({"bootstrap.servers": site.bus.bootstrap, "socket.timeout.ms": 5000})
        until(lambda: in_sync(admin, list(TOPICS.captures)), 60, "the capture topics made, in sync")
        driver = site.python(site.spark, "driver", "-m", "spark_jobs.submit", "ingest_captures", "--config", config,
                             "--", "--checkpoint", str(site.root / "checkpoint"), "--trigger-ms", "200")
        # The console's admin, kept in HBase on the store host; the console and surveillance on the ops host.
        added = subprocess.run(site.ops.command([sys.executable, "-m", "web", "--config", config, "users", "add",
                                                 "admin", "--role", "admin"]),
                               input=password_of("admin").encode(), capture_output=True, cwd=ROOT, timeout=60,
                               check=False)
        assert added.returncode == 0, added.stderr.decode()[-2000:]
        console = site.python(site.ops, "console", "-m", "web", "--config", config)
        surveillance = site.python(site.ops, "surveillance", "-m", "surveillance", "--config", config)
        base = f"http://{site.ops.address}:{CONSOLE}"
        until(lambda: http_ok(f"{base}/api/v1/health"), 90, "the console answering on its host's address")
        site.started(surveillance, "surveillance", "surveillance ready")

        conn = happybase.Connection(site.store.address, GATEWAY, timeout=60_000)
        try:
            cut_under_load(site, admin, base, conn, driver, simulator)
            simulator.terminate()  # SIGTERM: the simulator stops, flushes and prints its summary
            assert simulator.wait(120) == 0, site.log("simulator")[-3000:]
            summary = json_summary(site.log("simulator"))
            expected = expected_counts(summary)

            def all_in() -> bool | None:
                assert driver.poll() is None, site.log("driver")[-5000:]
                return True if row_counts(conn) == expected else None

            until(all_in, 300, "every valid capture acknowledged by the bus in HBase")
            ids = table_record_ids(conn)
            assert len(ids) == len(set(ids)) == sum(summary["produced"].values())
            assert set(ids) == bus_record_ids(site.bus)  # type: ignore[arg-type]
            executors = [cluster.executor_dirs(index) for index in range(cluster.workers)]
            assert all(executors), f"executors per worker: {executors}"
            images = summary.get("images", {})
            assert images.get("uploaded", 0) > 0, summary
            assert surveillance.poll() is None and console.poll() is None
            metrics = httpx.get(f"http://{site.ops.address}:{METRICS}/metrics", timeout=5).text
            assert "surveillance_" in metrics
        finally:
            conn.close()
    finally:
        cluster.stop()


def json_summary(log: str) -> dict:
    """The simulator's summary: its last JSON line."""
    return json.loads([line for line in log.splitlines() if line.startswith("{")][-1])


def cut_under_load(site: Layout, admin: AdminClient, base: str, conn: happybase.Connection,
                   driver: subprocess.Popen[bytes], simulator: subprocess.Popen[bytes]) -> None:
    """Once captures reach HBase, the host of capture.vehicle partition 0's leader goes off the network for
    ``CUT_S`` seconds, the console asked all along; after the link returns the host is back in every ISR."""
    until(lambda: True if sum(row_counts(conn).values()) > 0 or driver.poll() is not None else None, 240,
          "the first captures in HBase")
    assert driver.poll() is None, site.log("driver")[-5000:]
    topics = list(TOPICS.captures)
    leader = admin.list_topics(TOPICS.vehicle, timeout=5).topics[TOPICS.vehicle].partitions[0].leader
    token = httpx.post(f"{base}/api/v1/auth/token", timeout=10,
                       data={"username": "admin", "password": password_of("admin")}).json()["access_token"]
    checkpoint = json.loads((site.root / "map.json").read_text())["checkpoints"][0]["checkpoint_id"]
    answers: list[tuple[float, str, int, float, str]] = []  # (since the cut, path, status, seconds, body)
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        site.bus.link_down(leader)
        cut_at = time.monotonic()
        n = 0
        while time.monotonic() - cut_at < CUT_S:
            for method, path, kwargs in (
                    ("GET", "/api/v1/overview", {}),
                    ("GET", "/api/v1/captures", {"params": {"checkpoint": checkpoint, "limit": 5}}),
                    ("POST", "/api/v1/watchlist", {"json": {"kind": "plate", "plate": f"浙A{n:05d}"}})):
                began = time.monotonic()
                response = client.request(method, path, **kwargs)
                answers.append((began - cut_at, path, response.status_code, time.monotonic() - began,
                                response.text))
            n += 1
            time.sleep(0.5)
        site.bus.link_up(leader)
    for at, path, status, took, body in answers:
        print(f"{at:6.2f} s {path:20} {status} in {took:.2f} s", body[:200] if status >= 300 else "")
    # Every request answered, within the backend timeout and its retry; the overview (from memory) always. A request
    # whose audit event or command went to the cut-off leader is refused (503 naming the backend, nothing read)
    # until the quorum has moved the leadership: a few seconds.
    assert all(took < 10 for _, _, _, took, _ in answers), max(took for _, _, _, took, _ in answers)
    assert all(status == 200 for _, path, status, _, _ in answers if path == "/api/v1/overview")
    refused = [answer for answer in answers if answer[2] not in (200, 201)]
    assert all(status == 503 and json.loads(body).get("backend") for _, _, status, _, body in refused), refused
    assert not [answer for answer in refused if answer[0] > FAILOVER_S], refused
    assert simulator.poll() is None, site.log("simulator")[-3000:]
    until(lambda: in_sync(admin, topics), 60, f"node {leader} back in every capture partition's ISR")
