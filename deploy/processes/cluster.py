"""A cluster of combined (`process.roles=broker,controller`) broker processes sharing one KRaft quorum and one
cluster id, for integration tests and benchmarks: `ClusterProcess(tmp_path, 3)`; and `python -m deploy.cluster`
itself started on free ports (`start_deploy_cluster`).

Each node is a `BrokerProcess` (its own data dir and free ports); every node names all of them in
`controller.quorum.voters`, as `python -m deploy.cluster` starts them.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, TypeVar

from bus.client.admin import AdminClient, QuorumInfo
from contracts import processes as child
from deploy.processes.broker import BrokerProcess

T = TypeVar("T")
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"  # one id for every node, as `kafka-storage format -t` gives them


def until(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.05) -> T:
    """`check()`'s first result that is not None, polled until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not within {timeout}s")
        time.sleep(interval)


class StartedCluster(NamedTuple):
    proc: subprocess.Popen[bytes]
    cluster_id: str
    servers: list[str]  # the brokers' client addresses
    printed: str  # everything it printed up to "Press Ctrl-C"


def start_deploy_cluster(data_dir: Path, *flags: str) -> StartedCluster:
    """`python -m deploy.cluster --nodes 3` (and `flags`) on free ports, once it says the quorum is up."""
    proc = child.spawn([sys.executable, "-m", "deploy.cluster", "--nodes", "3", "--base-port", "0",
                        "--data-dir", str(data_dir), "--start-timeout", "90", *flags], subprocess.PIPE)
    lines = []
    assert proc.stdout is not None
    for raw in proc.stdout:
        line = raw.decode(errors="replace")
        lines.append(line)
        if line.startswith("Press Ctrl-C"):
            break
    text = "".join(lines)
    match = re.search(r"bootstrap\.servers=(\S+)", text)
    assert match, text
    cluster = re.search(r"bus cluster (\S+):", text)
    assert cluster, text
    return StartedCluster(proc, cluster.group(1), match.group(1).split(","), text)


def describe_quorum(node: BrokerProcess) -> QuorumInfo | None:
    """The quorum as `node` reports it, or None while it has no leader (or cannot be reached)."""
    try:
        with AdminClient({"bootstrap.servers": node.bootstrap, "default.api.timeout.ms": 500,
                          "socket.connection.setup.timeout.ms": 500}) as admin:
            return admin.describe_metadata_quorum()
    except Exception:
        return None


def registered_since_start(node: BrokerProcess) -> bool:
    """Whether the node's latest process has logged its registration with the active controller (its start is
    the socket server's JSON log line, not the "started ... listening on" line printed once start-up is over)."""
    logs = node.logs()
    started = logs.rfind('"listening on PLAINTEXT://')
    return started >= 0 and logs.find("registered with the active controller", started) >= 0


def is_broker(node: BrokerProcess) -> bool:
    return "broker" in node.overrides.get("process.roles", "broker,controller")


class ClusterProcess:
    def __init__(self, base: Path, size: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.nodes = {i: BrokerProcess(base / f"node{i}", {"node.id": str(i), "cluster.id": CLUSTER_ID,
                                                           **(overrides or {})})
                      for i in range(1, size + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{node.controller_port}" for i, node in self.nodes.items())
        for node in self.nodes.values():
            node.overrides["controller.quorum.voters"] = voters

    def __getitem__(self, node_id: int) -> BrokerProcess:
        return self.nodes[node_id]

    def __iter__(self) -> Iterator[BrokerProcess]:
        return iter(self.nodes.values())

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes.values() if is_broker(node))

    def start(self) -> ClusterProcess:
        for node in self.nodes.values():
            node.start()
        return self

    def stop(self) -> None:
        """SIGTERM every node at once, then wait for each: one by one, the last nodes would find the quorum gone
        with the first ones and wait out their controlled shutdown."""
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                node.proc.send_signal(signal.SIGCONT)  # a paused node must be able to stop
                node.proc.send_signal(signal.SIGTERM)
        for node in self.nodes.values():
            node.stop()

    def running(self) -> list[BrokerProcess]:
        return [node for node in self if node.proc is not None and node.proc.poll() is None]

    def running_brokers(self) -> list[BrokerProcess]:
        """The running nodes that serve clients (all of them but controller-only nodes)."""
        return [node for node in self.running() if is_broker(node)]

    def wait_for_brokers(self, timeout: float = 30.0) -> None:
        """Until every running node's Metadata lists every running node and each has registered since it last
        started: a node restarted within its session is still listed under its old registration, which the
        controller fences before it accepts the new one (a client that saw it fenced meanwhile waits for its next
        metadata refresh to find it again)."""
        def listed() -> bool | None:
            expected = {int(node.overrides["node.id"]) for node in self.running_brokers()}
            if not all(registered_since_start(node) for node in self.running_brokers()):
                return None
            for node in self.running_brokers():
                try:
                    with AdminClient({"bootstrap.servers": node.bootstrap, "default.api.timeout.ms": 1000}) as admin:
                        if {b.node_id for b in admin.describe_cluster().brokers} != expected:
                            return None
                except Exception:
                    return None
            return True
        until(listed, timeout, "every node registered", interval=0.2)

    def leader(self, timeout: float = 20.0, via: BrokerProcess | None = None) -> int:
        """The active controller's id once the quorum has one (asked of `via`, else of each running node)."""
        def ask() -> int | None:
            for node in [via] if via else self.running_brokers():
                info = describe_quorum(node)
                if info is not None and info.leader_id in self.nodes:
                    return info.leader_id
            return None
        return until(ask, timeout, "a quorum leader")


class SeparateRolesCluster(ClusterProcess):
    """Kafka's separate KRaft roles: `controllers` controller-only voters (ids 1..controllers, listening on their
    controller listener only; `node.port` is that listener, which `start` waits for) and `brokers` broker-only
    observers (the next ids, a client listener only). `add_broker` starts one more broker in the running cluster."""

    def __init__(self, base: Path, controllers: int = 3, brokers: int = 2,
                 overrides: dict[str, str] | None = None) -> None:
        self.base = base
        self.common = {"cluster.id": CLUSTER_ID, **(overrides or {})}
        self.nodes = {}
        for i in range(1, controllers + 1):
            node = BrokerProcess(base / f"node{i}", {"node.id": str(i), "process.roles": "controller", **self.common})
            node.overrides["listeners"] = f"CONTROLLER://127.0.0.1:{node.controller_port}"
            node.port = node.controller_port  # what `start` waits for: it has no client listener
            self.nodes[i] = node
        self.voters = ",".join(f"{i}@127.0.0.1:{node.controller_port}" for i, node in self.nodes.items())
        for node in self.nodes.values():
            node.overrides["controller.quorum.voters"] = self.voters
        for _ in range(brokers):
            self._new_broker()

    def _new_broker(self) -> BrokerProcess:
        node_id = max(self.nodes) + 1
        node = BrokerProcess(self.base / f"node{node_id}", {"node.id": str(node_id), "process.roles": "broker",
                                                            **self.common})
        node.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{node.port}"
        node.overrides["controller.quorum.voters"] = self.voters
        self.nodes[node_id] = node
        return node

    @property
    def controllers(self) -> list[BrokerProcess]:
        return [node for node in self if not is_broker(node)]

    def add_broker(self) -> int:
        """Start one more broker-only node and wait until every broker's Metadata lists it; its id."""
        node = self._new_broker().start()
        self.wait_for_brokers()
        return int(node.overrides["node.id"])


C = TypeVar("C", bound=ClusterProcess)


def started(nodes: C) -> Iterator[C]:
    """`nodes` running with every broker registered, stopped afterwards: a fixture's body (`yield from ...`)."""
    try:
        nodes.start()
        nodes.wait_for_brokers()
        yield nodes
    finally:
        nodes.stop()


def started_cluster(base: Path, size: int = 3, overrides: dict[str, str] | None = None) -> Iterator[ClusterProcess]:
    """A running cluster of `size` combined nodes (`yield from started_cluster(tmp_path, 3, {...})`)."""
    yield from started(ClusterProcess(base, size, overrides))
