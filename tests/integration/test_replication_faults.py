"""A randomized fault test in the manner of Jepsen's Kafka checks: three real nodes, an idempotent acks=all
producer running throughout, and a nemesis that SIGKILLs and restarts nodes, pauses them with SIGSTOP and resumes
them, one node at a time (the quorum and min.insync.replicas=2 stay reachable), for `FAULT_SECONDS`. Then every
node is healed, the producer drains, and the whole topic is read back: every acknowledged record must be there
exactly once, and each partition's records in the order they were acknowledged.

The seed is printed; a failure reproduces with `BUS_FAULT_SEED=<seed>`.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.processes.cluster import ClusterProcess, started_cluster, until
from tests.integration.test_replication import FAST, AckedProducer, all_in_sync, create, read_all

pytestmark = pytest.mark.slow

FAULT_SECONDS = 40.0
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ClusterProcess]:
    yield from started_cluster(tmp_path, 3, FAST)


class Nemesis:
    """One fault at a time: kill -9 then restart, or SIGSTOP then SIGCONT, of a random node."""

    def __init__(self, cluster: ClusterProcess, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.history: list[str] = []

    def strike(self) -> None:
        node_id = self.rng.choice(sorted(self.cluster.nodes))
        node = self.cluster[node_id]
        if self.rng.random() < 0.5:
            node.kill()
            self.history.append(f"kill -9 node {node_id}")
            time.sleep(self.rng.uniform(0.5, 4.0))
            node.start()
            self.history.append(f"restart node {node_id}")
        else:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGSTOP)
            self.history.append(f"pause node {node_id}")
            time.sleep(self.rng.uniform(0.5, 5.0))
            node.proc.send_signal(signal.SIGCONT)
            self.history.append(f"resume node {node_id}")
        time.sleep(self.rng.uniform(1.0, 3.0))  # let the cluster settle a little before the next fault


def test_random_kills_and_pauses_lose_duplicate_and_reorder_no_acknowledged_record(cluster: ClusterProcess) -> None:
    seed = int(os.environ.get("BUS_FAULT_SEED", random.randrange(1 << 32)))
    print(f"BUS_FAULT_SEED={seed}")
    rng = random.Random(seed)
    create(cluster, "jepsen", PARTITIONS, 3, **{"min.insync.replicas": "2"})
    load = AckedProducer(cluster.bootstrap, "jepsen", PARTITIONS).start()
    until(lambda: load.count() > 200 or None, 30, "records acknowledged before the faults")
    nemesis = Nemesis(cluster, rng)
    deadline = time.monotonic() + FAULT_SECONDS
    while time.monotonic() < deadline:
        nemesis.strike()
    until(lambda: all_in_sync(cluster, "jepsen", PARTITIONS, 3), 90, "every replica back in sync")
    load.stop()
    print("faults: " + "; ".join(nemesis.history))
    print(f"sent {load.sent}, acknowledged {load.count()}, failed {len(load.failed)}")
    assert load.count() > 1000, "too little got through to say anything"
    seen = read_all(cluster.bootstrap, "jepsen", PARTITIONS, load.count())
    for partition, acked in load.acked.items():
        stored = seen[partition]
        assert len(stored) == len(set(stored)), f"partition {partition}: a record is stored twice ({nemesis.history})"
        missing = set(acked) - set(stored)
        assert not missing, f"partition {partition}: {len(missing)} acknowledged records lost ({nemesis.history})"
        position = {value: i for i, value in enumerate(stored)}
        order = [position[value] for value in acked]
        assert order == sorted(order), f"partition {partition}: acknowledged records out of order"
