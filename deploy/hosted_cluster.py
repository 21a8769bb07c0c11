"""A bus cluster with each node on a host of its own (a network namespace, :mod:`deploy.hosts`), and the faults the
nemesis deals it: the process killed or paused, the host's link down, two hosts cut off from each other.

The nodes are combined broker+controller nodes configured as :mod:`deploy.cluster` configures them, every listener
and advertised address on the node's host address. The sessions and lag limits are short (as the replication tests
set them) so that a fault is noticed within seconds.

Hosts' clocks disagree in a real city: ``skews`` runs a node with its wall clock that many seconds off, through
libfaketime (Debian's ``faketime``; namespaces share this machine's clock, so the library fakes it per process). The
offset is set when the process starts and applies to every clock it reads, the monotonic one too: libfaketime 0.9.10
fails Python's sleeps (EINVAL) when the monotonic clock is left real, and a constant offset to a monotonic clock is
harmless, where stepping it while the process runs would be a fault no real host has. A clock step is therefore a
node restarted with another offset (:meth:`step_clock`), as a host whose clock NTP stepped while it rebooted.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from deploy.cluster import Node, cluster_id, node_command, replication_defaults, wait_for_broker, wait_for_quorum
from deploy.hosts import Host, Network, ip

PORT, QUORUM_PORT = 9092, 9093
FAST = {
    # Short sessions and lag limits so that failures are noticed within seconds (Kafka: 9 s, 2 s and 30 s); the
    # replication tests run their clusters with these too.
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
}
CLIENT = {"socket.timeout.ms": "5000", "request.timeout.ms": "5000", "retry.backoff.ms": "100"}
"""Client settings for a cluster whose hosts may stop answering: a request to a cut-off host is given up after 5 s
(librdkafka waits 60 s by default) and retried elsewhere."""


FAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))), None)
"""libfaketime's library for multi-threaded programs (a broker runs threads), if installed."""


class HostedCluster:
    """``size`` nodes on ``size`` hosts of ``network``; node ``i`` (1-based) on host ``i - 1``, its clock
    ``skews[i]`` seconds off (whole seconds, default 0)."""

    def __init__(self, network: Network, size: int, data_dir: Path, skews: Mapping[int, int] | None = None) -> None:
        self.skews = dict(skews or {})
        self.hosts = [network.host() for _ in range(size)]
        self.nodes = [Node(i, host.address, PORT, QUORUM_PORT, data_dir / f"node-{i}")
                      for i, host in enumerate(self.hosts, 1)]
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self._id = cluster_id(data_dir)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def node_ids(self) -> Sequence[int]:
        return [node.node_id for node in self.nodes]

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def client(self) -> dict[str, str]:
        return {"bootstrap.servers": self.bootstrap, **CLIENT}

    def start(self, timeout: float = 60.0) -> HostedCluster:
        for node in self.nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            self._launch(node.node_id)
        wait_for_quorum(self.bootstrap, len(self.nodes), timeout)
        for node in self.nodes:
            wait_for_broker(self.bootstrap, node.node_id, timeout)
        return self

    def _launch(self, node_id: int) -> None:
        node = self.nodes[node_id - 1]
        extra = {**replication_defaults(len(self.nodes)), **FAST,
                 "advertised.listeners": f"PLAINTEXT://{node.bootstrap}"}
        self.procs[node_id] = self._host(node_id).spawn(node_command(node, self.nodes, self._id, extra),
                                                        self.data_dir / f"node-{node_id}.log", self._env(node_id))

    def _env(self, node_id: int) -> dict[str, str] | None:
        """The node's environment: this one, with its clock offset when it has one."""
        skew = self.skews.get(node_id, 0)
        if not skew:
            return None
        if FAKETIME is None:
            raise RuntimeError("a node with its clock off needs libfaketime: apt-get install faketime")
        return {**os.environ, "LD_PRELOAD": str(FAKETIME), "FAKETIME": f"{skew:+d}"}

    def _host(self, node_id: int) -> Host:
        return self.hosts[node_id - 1]

    # --- the nemesis' faults (deploy.chaos.nemesis.Hosts) -------------------------------------------------------

    def kill(self, node_id: int) -> None:
        self.procs[node_id].kill()
        self.procs[node_id].wait(10)

    def restart(self, node_id: int) -> None:
        self._launch(node_id)

    def pause(self, node_id: int) -> None:
        self.procs[node_id].send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.procs[node_id].send_signal(signal.SIGCONT)

    def link_down(self, node_id: int) -> None:
        self._host(node_id).link_down()

    def link_up(self, node_id: int) -> None:
        self._host(node_id).link_up()

    def step_clock(self, node_id: int, skew: int) -> None:
        """The node, stopped (a fault before it), starts again with its clock ``skew`` seconds off."""
        self.skews[node_id] = skew

    def partition(self, a: int, b: int) -> None:
        """Hosts ``a`` and ``b`` drop each other's packets (a blackhole route each way); both still reach every
        other host and every client."""
        for here, there in ((a, b), (b, a)):
            ip("-n", self._host(here).name, "route", "add", "blackhole", f"{self._host(there).address}/32")

    def heal(self, a: int, b: int) -> None:
        for here, there in ((a, b), (b, a)):
            ip("-n", self._host(here).name, "route", "del", "blackhole", f"{self._host(there).address}/32")
