"""A local bus cluster on 127.0.0.1 with one KRaft quorum: N combined broker+controller nodes (`--nodes 1|3|5`,
the default), or Kafka's separate roles (`--controllers 1|3|5 --brokers B`); `--add-broker` joins one more broker.

`make up` runs a single node; a user who outgrows it runs this and points the solution at the printed
`bootstrap.servers` (`[bus] bootstrap_servers` in the solution config), or runs `make up CLUSTER=3`, which
starts such a cluster with these pieces and the solution on it. Each node is a `bus broker`
process with its own data directory (`<data-dir>/node-<id>/`) and log file. With `--nodes` every node is a
voter, as in Kafka's combined mode (`process.roles=broker,controller`). With `--controllers C --brokers B`,
nodes 1..C are controller-only voters (`process.roles=controller`, a controller listener only) and nodes
C+1..C+B broker-only observers of the quorum (`process.roles=broker`), as Kafka runs production clusters.
The cluster id is made once and kept in `<data-dir>/cluster.id`, the way `kafka-storage.sh format --cluster-id`
stamps every node's storage with the same id, so a restarted cluster is the same cluster; the voters are kept in
`<data-dir>/voters` for `--add-broker`.

Ports: with `--nodes N` node i (1-based) serves clients on `base + i - 1` and its quorum on `base + N + i - 1`;
with separate roles broker j (0-based) serves clients on `base + j` and controller k its quorum on
`base + B + k`. With `--base-port 0` free ports are picked (and printed). It stays in the foreground; Ctrl-C or
SIGTERM stops the nodes (SIGTERM each, SIGKILL after `--stop-timeout`).

`--secure` secures every listener, between the nodes too (`deploy/cluster_security.py`): TLS from a local CA,
SASL (SCRAM between brokers and for clients, PLAIN on the quorum's listener), ACLs enforced; passwords in owner-only
files under `<data-dir>/security/`, the client properties printed. A cluster made so always starts secured.

Adding a broker: `python -m deploy.cluster --add-broker --data-dir <same dir>` while the cluster runs starts one
broker-only node (the next free node id, a free client port unless `--base-port` names one), waits until the
cluster's Metadata lists it and stays in the foreground like the cluster. New topics are placed on it, and
`bus reassign-partitions` moves existing partitions onto it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bus.client.admin import AdminClient
from bus.config.broker import random_cluster_id
from contracts.processes import spawn
from deploy import cluster_security
from deploy.cluster_security import ClusterSecurity

VOTER_COUNTS = (1, 3, 5)
COMBINED = "broker,controller"
VOTERS_FILE = "voters"
DEFAULT_BASE_PORT = 9192


@dataclass(frozen=True, slots=True)
class Node:
    node_id: int
    host: str
    port: int  # client listener (0: none, a controller-only node)
    controller_port: int  # controller listener (0: none, a broker-only node)
    data_dir: Path
    roles: str = COMBINED

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles


def _free_ports(count: int, host: str) -> list[int]:
    """Ports the OS hands out now (held together until all are known, so no two are the same)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def _ports(count: int, host: str, base_port: int) -> list[int]:
    return _free_ports(count, host) if base_port == 0 else list(range(base_port, base_port + count))


def plan(nodes: int, host: str, base_port: int, data_dir: Path, controller_port: int | None = None) -> list[Node]:
    """`nodes` combined nodes, every one a voter; their quorum listeners follow the client ones unless
    `controller_port` names the first of them (`make up --cluster` keeps `--controller-port`)."""
    ports = _ports(2 * nodes, host, base_port) if controller_port is None else (
        _ports(nodes, host, base_port) + _ports(nodes, host, controller_port))
    return [Node(i + 1, host, ports[i], ports[nodes + i], data_dir / f"node-{i + 1}") for i in range(nodes)]


def plan_separate(controllers: int, brokers: int, host: str, base_port: int, data_dir: Path) -> list[Node]:
    """`controllers` controller-only voters (ids 1..controllers), then `brokers` broker-only nodes."""
    ports = _ports(brokers + controllers, host, base_port)
    voters = [Node(k + 1, host, 0, ports[brokers + k], data_dir / f"node-{k + 1}", "controller")
              for k in range(controllers)]
    return voters + [Node(controllers + j + 1, host, ports[j], 0, data_dir / f"node-{controllers + j + 1}", "broker")
                     for j in range(brokers)]


def voters_of(cluster: Sequence[Node]) -> str:
    """`controller.quorum.voters` of the cluster: its controllers' quorum listeners."""
    return ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in cluster if n.is_controller)


def cluster_id(data_dir: Path) -> str:
    """The cluster's id, made on first start (Kafka's base64 UUID form) and read back ever after."""
    path = data_dir / "cluster.id"
    if path.exists():
        return path.read_text().strip()
    new = random_cluster_id()
    path.write_text(new + "\n")
    return new


def node_properties(node: Node, cluster: Sequence[Node], cluster_id: str, extra: Mapping[str, str] | None = None,
                    voters: str | None = None, listener: str = "PLAINTEXT") -> dict[str, str]:
    """The server properties of `node`; `extra` adds or replaces some (e.g. the quorum's timeouts); `voters`: the
    quorum when `cluster` does not list its controllers (a broker added later); `listener`: the name (and security
    protocol) of the listener clients and brokers use."""
    listeners = ([f"{listener}://{node.host}:{node.port}"] if node.is_broker else []) + (
        [f"CONTROLLER://{node.host}:{node.controller_port}"] if node.is_controller else [])
    return {
        "node.id": str(node.node_id),
        "process.roles": node.roles,
        "listeners": ",".join(listeners),
        **({"inter.broker.listener.name": listener} if listener != "PLAINTEXT" and node.is_broker else {}),
        "controller.quorum.voters": voters or voters_of(cluster),
        "log.dirs": str(node.data_dir),
        "cluster.id": cluster_id,
        **(extra or {}),
    }


def node_command(node: Node, cluster: Sequence[Node], cluster_id: str,
                 extra: Mapping[str, str] | None = None, voters: str | None = None) -> list[str]:
    """`bus broker` for `node` with its properties (as :func:`node_properties` makes them) as `--override` flags."""
    overrides = node_properties(node, cluster, cluster_id, extra, voters)
    flags = (arg for key, value in overrides.items() for arg in ("--override", f"{key}={value}"))
    return [sys.executable, "-m", "bus", "broker", *flags]


def secured_node_command(node: Node, cluster: Sequence[Node], cluster_id: str, security: ClusterSecurity,
                         extra: Mapping[str, str] | None = None, voters: str | None = None) -> list[str]:
    """`bus broker <node-dir>/server.properties` for a node of a `--secure` cluster: its passwords are in that file
    (readable by its owner only), never on the command line; its storage is formatted with the SCRAM users first."""
    properties = {**node_properties(node, cluster, cluster_id, extra, voters, cluster_security.LISTENER),
                  **security.server_properties(node.node_id, node.host)}
    path = security.write_server_properties(node.data_dir.parent / f"node-{node.node_id}.properties", properties)
    with contextlib.redirect_stdout(io.StringIO()):  # its "Formatting ..." lines are not the operator's concern
        security.format_storage(path, cluster_id)
    return [sys.executable, "-m", "bus", "broker", str(path)]


def wait_for_quorum(bootstrap: str, voters: int, timeout_s: float, client: Mapping[str, str] | None = None) -> int:
    """The quorum's leader once every voter has fetched from it; raises TimeoutError otherwise. `client`: the
    client properties a secured cluster needs."""
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000, **(client or {})})
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


class NodeProcesses:
    """The `bus broker` processes of a cluster's nodes (`python -m deploy.cluster`, `make up --cluster`), each
    logging to `<log_dir>/node-<id>.log`."""

    def __init__(self, log_dir: Path, security: ClusterSecurity | None = None) -> None:
        self.log_dir = log_dir
        self.security = security  # a `--secure` cluster's
        self.started: list[tuple[Node, subprocess.Popen[bytes]]] = []
        self._reported: set[int] = set()

    def launch(self, node: Node, cluster: Sequence[Node], cluster_id: str,
               extra: Mapping[str, str] | None = None, voters: str | None = None) -> None:
        """Start `node` (arguments as :func:`node_command`'s)."""
        node.data_dir.mkdir(parents=True, exist_ok=True)
        command = node_command(node, cluster, cluster_id, extra, voters) if self.security is None else \
            secured_node_command(node, cluster, cluster_id, self.security, extra, voters)
        self.started.append((node, spawn(command, self.log_dir / f"node-{node.node_id}.log")))

    def report_exits(self) -> None:
        """Say on stderr, once, which nodes have exited: a node that dies is reported, not restarted, and the
        others carry on, as a cluster does."""
        for node, child in self.started:
            if child.poll() is not None and node.node_id not in self._reported:
                self._reported.add(node.node_id)
                print(f"node {node.node_id} exited (code {child.returncode}); see "
                      f"{self.log_dir}/node-{node.node_id}.log", file=sys.stderr, flush=True)

    def stop(self, timeout_s: float) -> None:
        """SIGTERM (SIGKILL after `timeout_s`): brokers first, while the quorum can still take their controlled
        shutdown, then the controllers."""
        _stop([child for node, child in self.started if node.is_broker], timeout_s)
        _stop([child for node, child in self.started if not node.is_broker], timeout_s)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m deploy.cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, choices=VOTER_COUNTS,
                        help="combined broker+controller nodes, all voters (default 3)")
    parser.add_argument("--controllers", type=int, choices=VOTER_COUNTS,
                        help="controller-only voters (separate roles; needs --brokers)")
    parser.add_argument("--brokers", type=int, help="broker-only nodes (separate roles; needs --controllers)")
    parser.add_argument("--add-broker", action="store_true",
                        help="start one more broker-only node in the cluster running from --data-dir")
    parser.add_argument("--node-id", type=int, help="with --add-broker: its node id (default: the next free one)")
    parser.add_argument("--data-dir", default="data/cluster", help="one directory per node under it")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--base-port", type=int,
                        help=f"first client port (default {DEFAULT_BASE_PORT}); 0 picks free ports (with "
                             "--add-broker: its client port, default a free one)")
    parser.add_argument("--secure", action="store_true",
                        help="TLS and SASL (SCRAM) on every listener, ACLs enforced, a local CA; prints the client "
                             "properties to use (a cluster made so always starts secured)")
    parser.add_argument("--start-timeout", type=float, default=60.0, help="seconds to wait for the quorum")
    parser.add_argument("--stop-timeout", type=float, default=30.0, help="seconds before a node is killed")
    args = parser.parse_args(argv)
    separate = args.controllers is not None or args.brokers is not None
    if separate and (args.controllers is None or args.brokers is None):
        parser.error("separate roles need both --controllers and --brokers")
    if separate and args.nodes is not None:
        parser.error("--nodes (combined nodes) and --controllers/--brokers (separate roles) exclude each other")
    if args.add_broker and (separate or args.nodes is not None):
        parser.error("--add-broker joins the running cluster of --data-dir: no --nodes, --controllers or --brokers")
    if args.brokers is not None and args.brokers < 1:
        parser.error("--brokers must be at least 1")
    if args.node_id is not None and not args.add_broker:
        parser.error("--node-id goes with --add-broker")
    if args.base_port is None:
        args.base_port = 0 if args.add_broker else DEFAULT_BASE_PORT
    ports = 1 if args.add_broker else args.brokers + args.controllers if separate else 2 * (args.nodes or 3)
    if not 0 <= args.base_port <= 65535 - ports:
        parser.error(f"--base-port {args.base_port} leaves no room for {ports} ports")
    return args


def _added_broker(args: argparse.Namespace, data_dir: Path) -> tuple[Node, str]:
    """The broker `--add-broker` starts, and the quorum it joins (kept by the cluster's first start)."""
    voters_path = data_dir / VOTERS_FILE
    if not voters_path.exists() or not (data_dir / "cluster.id").exists():
        raise SystemExit(f"--add-broker: no cluster in {data_dir} (start one there first with --nodes or "
                         "--controllers/--brokers)")
    taken = [int(d.name.removeprefix("node-")) for d in data_dir.glob("node-*")
             if d.is_dir() and d.name.removeprefix("node-").isdigit()]
    node_id = args.node_id if args.node_id is not None else max(taken, default=0) + 1
    if args.node_id is not None and node_id in taken:
        raise SystemExit(f"--add-broker: node {node_id} already has a directory in {data_dir}")
    port = args.base_port or _free_ports(1, args.host)[0]
    return Node(node_id, args.host, port, 0, data_dir / f"node-{node_id}", "broker"), voters_path.read_text().strip()


def replication_defaults(brokers: int | None) -> dict[str, str]:
    """What a production cluster sets where Kafka's defaults suit a single broker: a new topic (the solution's
    included, which name no replication factor) gets three replicas and acks=all needs two of them, as do the
    coordinators' topics; with fewer brokers, as many as there are (with fewer than three, Kafka would leave the
    coordinators' topics uncreated, and consumer groups and transactions unavailable). `brokers` None: a broker
    added to a running cluster, which takes the full layout."""
    replicas = min(3, brokers) if brokers is not None else 3
    in_sync = str(min(2, replicas))
    return {"default.replication.factor": str(replicas), "min.insync.replicas": in_sync,
            "offsets.topic.replication.factor": str(replicas),
            "transaction.state.log.replication.factor": str(replicas), "transaction.state.log.min.isr": in_sync}


def wait_for_broker(bootstrap: str, node_id: int, timeout_s: float, client: Mapping[str, str] | None = None) -> None:
    """Until the cluster's Metadata (as `bootstrap` answers it) lists broker `node_id`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with (contextlib.suppress(Exception),  # not up or not registered yet: ask again until the deadline
              AdminClient({"bootstrap.servers": bootstrap, "default.api.timeout.ms": 5000, **(client or {})}) as admin):
            if node_id in {b.node_id for b in admin.describe_cluster().brokers}:
                return
        time.sleep(0.3)
    raise TimeoutError(f"broker {node_id} not registered after {timeout_s:.0f} s")


def describe(node: Node) -> str:
    """One status line: the node's roles, listeners and data directory."""
    clients = f"  clients {node.bootstrap}" if node.is_broker else ""
    quorum = f"  quorum {node.host}:{node.controller_port}" if node.is_controller else ""
    return f"  node {node.node_id} ({node.roles}){clients}{quorum}  data {node.data_dir}"


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    voters: str | None = None
    if args.add_broker:
        added, voters = _added_broker(args, data_dir)
        nodes = [added]
    elif args.controllers is not None:
        nodes = plan_separate(args.controllers, args.brokers, args.host, args.base_port, data_dir)
    else:
        nodes = plan(args.nodes or 3, args.host, args.base_port, data_dir)
    secured = cluster_security.is_secured(data_dir)
    if args.secure and not secured and (data_dir / "cluster.id").exists():
        raise SystemExit(f"--secure: the cluster in {data_dir} was made without it (start a new one in another "
                         "--data-dir)")
    security = ClusterSecurity.ensure(data_dir / cluster_security.SECURITY_DIR) if args.secure or secured else None
    client = security.client_properties() if security else None
    cid = cluster_id(data_dir)
    if voters is None:
        (data_dir / VOTERS_FILE).write_text(voters_of(nodes) + "\n")
    processes = NodeProcesses(data_dir, security)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        defaults = replication_defaults(None if args.add_broker else sum(n.is_broker for n in nodes))
        for node in nodes:
            processes.launch(node, nodes, cid, defaults, voters)
        bootstrap = ",".join(n.bootstrap for n in nodes if n.is_broker)
        if args.add_broker:
            wait_for_broker(bootstrap, nodes[0].node_id, args.start_timeout, client)
            print(f"bus cluster {cid}: broker {nodes[0].node_id} added")
        else:
            started = time.monotonic()
            leader = wait_for_quorum(bootstrap, sum(n.is_controller for n in nodes), args.start_timeout, client)
            for node in nodes:  # "up" means a topic can be given every broker as a replica at once
                if node.is_broker:
                    wait_for_broker(bootstrap, node.node_id, args.start_timeout - (time.monotonic() - started), client)
            print(f"bus cluster {cid}: {len(nodes)} nodes, quorum leader {leader}")
        for node in nodes:
            print(describe(node))
        print(f"  bootstrap.servers={bootstrap}")
        if security is not None:
            security.write_client_properties()
            print(security.describe_client_properties())
        print(f"  logs {data_dir}/node-*.log\nPress Ctrl-C to stop.", flush=True)
        while not stopping:
            processes.report_exits()
            time.sleep(0.5)
        return 0
    except TimeoutError as exc:
        print(f"{exc}; see the logs in {data_dir}", file=sys.stderr)
        return 1
    finally:
        processes.stop(args.stop_timeout)


if __name__ == "__main__":
    sys.exit(main())
