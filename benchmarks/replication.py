"""Issue 16's cluster figures on one machine: how long a 3-node KRaft quorum is without a leader after its
leader is SIGKILLed (controller failover), at Kafka's default quorum timeouts and at low ones.

A trial: start (or keep) the three nodes of `deploy.cluster`, wait until every voter follows a leader, SIGKILL
the leader, and time until a surviving node answers DescribeQuorum with a new leader in a later epoch (polled
every 20 ms over one open connection per survivor). The killed node is restarted between trials and the
next trial waits for it to follow again.

Partition replication (acks=all throughput against acks=1, produce p99 with acks=all, partition leader
election after SIGKILL) is not built yet; those figures join this script with it.

    .venv/bin/python benchmarks/replication.py [--trials 5]

Print `uptime` with the figures: on a shared machine an election's time includes waiting for a CPU.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bus.client.admin import AdminClient
from deploy.cluster import Node, cluster_id, node_command, plan, wait_for_quorum

SETTINGS = {
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
    with open(logs / f"node-{node.node_id}.log", "ab") as log:
        return subprocess.Popen(node_command(node, nodes, cid, extra), stdout=log, stderr=subprocess.STDOUT)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    rows = []
    for label, extra in SETTINGS.items():
        times = failovers(extra, args.trials)
        rows.append((label, times))
        print(f"{label}: " + ", ".join(f"{t:.2f}" for t in times) + " s", flush=True)
    print(f"\n{'controller failover after SIGKILL of the leader':<52}{'median s':>10}{'max s':>8}")
    for label, times in rows:
        print(f"  {label:<50}{statistics.median(times):>10.2f}{max(times):>8.2f}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
