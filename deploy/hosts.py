"""Hosts made of Linux network namespaces on this machine, for tests that place the bus's nodes on different hosts.

A `Network` is one /24 subnet: a Linux bridge in the root namespace holds its first address (the "router", which the
test process itself uses to reach the hosts), and each `Host` is a network namespace with `lo` up and one veth pair,
its inner end holding the host's own address on that subnet and its outer end a port of the bridge. A process a host
spawns sees only its own interfaces: a server bound to the host's address is reachable from the other hosts and from
the test process, and nothing on 127.0.0.1 is shared with anyone, so an address that only works on loopback fails
the way it would between machines. `Host.link_down()` unplugs the host's cable (its bridge port goes down): its
processes keep running and see their packets go nowhere, as when a switch port dies.

Needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and the `ip` tool. Several Networks may exist at once (pytest-xdist
workers, other tests): each picks a random name suffix and a random 10.X.Y.0/24 that no interface here holds yet, and
`close()` (the context manager's exit, also when the test fails) kills what its hosts spawned and deletes every
namespace, veth and the bridge it made.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import random
import secrets
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

from contracts.processes import spawn, terminate

GRACE_S = 10.0
"""How long a spawned process has to stop after SIGTERM before it is killed."""


def ip(*args: str) -> str:
    """Run `ip ARGS` and return its output; a failure raises with ip's own message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 network of every address of the root namespace (`ip -o addr`), once per address."""
    networks = []
    for line in ip("-o", "-4", "addr").splitlines():
        fields = line.split()
        if "inet" in fields:
            networks.append(ipaddress.IPv4Interface(fields[fields.index("inet") + 1]).network)
    return networks


def _free_subnet() -> ipaddress.IPv4Network:
    """A random 10.X.Y.0/24 overlapping no network in use here: random, so two Networks made at the same moment (by
    two xdist workers) are unlikely to pick the same one, and checked, so none clashes with one already there."""
    in_use = _networks()
    for _ in range(100):
        candidate = ipaddress.IPv4Network(f"10.{random.randint(0, 255)}.{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(net) for net in in_use):
            return candidate
    raise RuntimeError("no free 10.X.Y.0/24 subnet found")


class Host:
    """One network namespace with its own address; made by `Network.host()`."""

    def __init__(self, name: str, address: str, outer: str) -> None:
        self.name = name  # the namespace's name (`ip netns exec NAME ...`)
        self.address = address
        self.outer = outer  # the veth end on the bridge: taking it down unplugs the host
        self.spawned: list[subprocess.Popen[bytes]] = []

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.address})"

    def spawn(self, command: Sequence[str | os.PathLike[str]], log_path: Path,
              env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start `command` inside the host, its output appended to `log_path` (`contracts.processes.spawn`); it gets
        SIGTERM if the test process dies, since nothing else would stop it. `ip netns exec` execs the command, so the
        returned process is the command itself (signals reach it directly)."""
        child = spawn(self.command(command), log_path, env=env, die_with_parent=True)
        self.spawned.append(child)
        return child

    def command(self, command: Sequence[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
        """``command`` as run inside this host (for a launcher that starts the process itself, as Spark's cluster
        does): `close` still kills it with everything else left in the namespace."""
        return ["ip", "netns", "exec", self.name, *command]

    def link_down(self) -> None:
        """Take the whole host off the network: its processes keep running, their packets are lost."""
        ip("link", "set", self.outer, "down")

    def link_up(self) -> None:
        """Plug the host back in."""
        ip("link", "set", self.outer, "up")

    def stop_spawned(self) -> None:
        """SIGTERM to every process this host spawned that still runs, without waiting for them."""
        for child in self.spawned:
            if child.poll() is None:
                child.terminate()

    def close(self) -> None:
        """Stop what this host spawned (SIGTERM, SIGKILL after `GRACE_S`), kill anything else still running in the
        namespace (a grandchild), and delete the namespace, which deletes its veth pair too."""
        self.stop_spawned()
        for child in self.spawned:
            terminate(child, GRACE_S)
        with contextlib.suppress(RuntimeError):  # the namespace may be gone already
            for pid in ip("netns", "pids", self.name).split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), 9)
        with contextlib.suppress(RuntimeError):
            ip("netns", "del", self.name)
        with contextlib.suppress(RuntimeError):  # normally gone with the namespace's end of the pair
            ip("link", "del", self.outer)


class Network:
    """A bridge on a fresh /24 and the hosts on it; `with Network() as net: a = net.host(); ...`."""

    def __init__(self) -> None:
        self.suffix = secrets.token_hex(3)  # 6 characters: interface names stay within Linux's 15
        self.bridge = f"hb{self.suffix}"
        self.hosts: list[Host] = []
        try:
            self.subnet = self._claim_subnet()
        except BaseException:
            self.close()
            raise
        addresses = self.subnet.hosts()
        self.router = str(next(addresses))  # the bridge's own address: the test process's side
        self._addresses = addresses

    def _claim_subnet(self) -> ipaddress.IPv4Network:
        """Make the bridge, up, with the first address of a free /24. Two Networks made at the same moment may still
        pick the same one: each then sees the other's address in that subnet, drops its own and picks again."""
        ip("link", "add", self.bridge, "type", "bridge")
        for _ in range(10):
            subnet = _free_subnet()
            router = f"{next(subnet.hosts())}/{subnet.prefixlen}"
            ip("addr", "add", router, "dev", self.bridge)
            if sum(net.overlaps(subnet) for net in _networks()) == 1:
                ip("link", "set", self.bridge, "up")
                return subnet
            ip("addr", "del", router, "dev", self.bridge)
        raise RuntimeError("no 10.X.Y.0/24 subnet left to itself after 10 tries")

    def host(self) -> Host:
        """A new host: a namespace with `lo` up, and a veth pair from it to the bridge with the next address."""
        index = len(self.hosts) + 1
        address = str(next(self._addresses))
        host = Host(f"hn{self.suffix}-{index}", address, f"hv{self.suffix}o{index}")
        self.hosts.append(host)  # made or half made, `close` removes it
        inner = f"hv{self.suffix}i{index}"
        ip("netns", "add", host.name)
        ip("-n", host.name, "link", "set", "lo", "up")
        ip("link", "add", host.outer, "type", "veth", "peer", "name", inner, "netns", host.name)
        ip("-n", host.name, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", inner)
        ip("-n", host.name, "link", "set", inner, "up")
        ip("link", "set", host.outer, "master", self.bridge, "up")
        return host

    def close(self) -> None:
        """Every host's processes stopped and namespace deleted, then the bridge. Every process is sent SIGTERM before
        any is waited for: a cluster's nodes stopped one by one would leave the last ones without a quorum to take
        their controlled shutdown, waiting out their grace."""
        for host in self.hosts:
            host.stop_spawned()
        for host in self.hosts:
            host.close()
        with contextlib.suppress(RuntimeError):
            ip("link", "del", self.bridge)

    def __enter__(self) -> Network:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()
