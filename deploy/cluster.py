"""A local bus cluster: N combined broker+controller nodes on 127.0.0.1, one KRaft quorum (`--nodes 1|3|5`).

`make up` runs a single node; a user who outgrows it runs this and points the solution at the printed
`bootstrap.servers` (`[bus] bootstrap_servers` in the solution config). Each node is a `bus broker`
process with its own data directory (`<data-dir>/node-<id>/`) and log file; every node is a voter, as in
Kafka's combined mode (`process.roles=broker,controller`). The cluster id is made once and kept in
`<data-dir>/cluster.id`, the way `kafka-storage.sh format --cluster-id` stamps every node's storage with
the same id, so a restarted cluster is the same cluster.

Ports: node i (1-based) serves clients on `base + i - 1` and its quorum on `base + nodes + i - 1`; with
`--base-port 0` free ports are picked (and printed). It stays in the foreground; Ctrl-C or SIGTERM stops the
nodes (SIGTERM each, SIGKILL after `--stop-timeout`).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bus.client.admin import AdminClient

VOTER_COUNTS = (1, 3, 5)


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int
    controller_port: int
    data_dir: Path

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


def _free_ports(count: int, host: str) -> list[int]:
    """Ports the OS hands out now (held together until all are known, so no two are the same)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def plan(nodes: int, host: str, base_port: int, data_dir: Path) -> list[Node]:
    ports = _free_ports(2 * nodes, host) if base_port == 0 else list(range(base_port, base_port + 2 * nodes))
    return [Node(i + 1, host, ports[i], ports[nodes + i], data_dir / f"node-{i + 1}") for i in range(nodes)]


def cluster_id(data_dir: Path) -> str:
    """The cluster's id, made on first start (Kafka's base64 UUID form) and read back ever after."""
    path = data_dir / "cluster.id"
    if path.exists():
        return path.read_text().strip()
    new = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    path.write_text(new + "\n")
    return new


def node_command(node: Node, cluster: Sequence[Node], cluster_id: str,
                 extra: Mapping[str, str] | None = None) -> list[str]:
    """`bus broker` for `node`; `extra` adds or replaces server properties (e.g. the quorum's timeouts)."""
    voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in cluster)
    overrides = {
        "node.id": str(node.node_id),
        "process.roles": "broker,controller",
        "listeners": f"PLAINTEXT://{node.host}:{node.port},CONTROLLER://{node.host}:{node.controller_port}",
        "controller.quorum.voters": voters,
        "log.dirs": str(node.data_dir),
        "cluster.id": cluster_id,
        **(extra or {}),
    }
    flags = (arg for key, value in overrides.items() for arg in ("--override", f"{key}={value}"))
    return [sys.executable, "-m", "bus", "broker", *flags]


def wait_for_quorum(bootstrap: str, voters: int, timeout_s: float) -> int:
    """The quorum's leader once every voter has fetched from it; raises TimeoutError otherwise."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000})
            try:
                quorum = admin.describe_metadata_quorum()
            finally:
                admin.close()
            if quorum.leader_id >= 0 and len(quorum.voters) == voters and all(
                    v.log_end_offset >= 0 for v in quorum.voters):
                return quorum.leader_id
        except Exception as exc:  # not up yet, or no leader yet: try again until the deadline
            last = exc
        time.sleep(0.3)
    raise TimeoutError(f"no quorum of {voters} voters with a leader after {timeout_s:.0f} s (last: {last})")


def _stop(children: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    for child in children:
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + timeout_s
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3, choices=VOTER_COUNTS,
                        help="combined broker+controller nodes, all voters (default 3)")
    parser.add_argument("--data-dir", default="data/cluster", help="one directory per node under it")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--base-port", type=int, default=9192, help="first client port; 0 picks free ports")
    parser.add_argument("--start-timeout", type=float, default=60.0, help="seconds to wait for the quorum")
    parser.add_argument("--stop-timeout", type=float, default=30.0, help="seconds before a node is killed")
    args = parser.parse_args(argv)
    if not 0 <= args.base_port <= 65535 - 2 * args.nodes:
        parser.error(f"--base-port {args.base_port} leaves no room for {2 * args.nodes} ports")
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    nodes = plan(args.nodes, args.host, args.base_port, data_dir)
    cid = cluster_id(data_dir)
    children: list[subprocess.Popen[bytes]] = []
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for node in nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            log = open(data_dir / f"node-{node.node_id}.log", "ab")  # noqa: SIM115 - owned by the child
            children.append(subprocess.Popen(node_command(node, nodes, cid), stdout=log, stderr=subprocess.STDOUT))
        bootstrap = ",".join(n.bootstrap for n in nodes)
        leader = wait_for_quorum(bootstrap, len(nodes), args.start_timeout)
        print(f"bus cluster {cid}: {len(nodes)} nodes, quorum leader {leader}")
        for node in nodes:
            print(f"  node {node.node_id}  clients {node.bootstrap}  quorum {node.host}:{node.controller_port}"
                  f"  data {node.data_dir}")
        print(f"  bootstrap.servers={bootstrap}\n  logs {data_dir}/node-*.log\nPress Ctrl-C to stop.", flush=True)
        reported: set[int] = set()
        while not stopping:  # a node that dies is reported, not restarted: the others carry on, as a cluster does
            for node, child in zip(nodes, children, strict=True):
                if child.poll() is not None and node.node_id not in reported:
                    reported.add(node.node_id)
                    print(f"node {node.node_id} exited (code {child.returncode}); see "
                          f"{data_dir}/node-{node.node_id}.log", file=sys.stderr, flush=True)
            time.sleep(0.5)
        return 0
    except TimeoutError as exc:
        print(f"{exc}; see the logs in {data_dir}", file=sys.stderr)
        return 1
    finally:
        _stop(children, args.stop_timeout)


if __name__ == "__main__":
    sys.exit(main())
