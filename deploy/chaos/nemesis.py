"""The faults of a chaos run: a seeded random schedule over the broker hosts, one fault at a time.

Each fault is applied, lasts a random while, and is healed before the next: kill -9 of a node's process then a
restart, a SIGSTOP pause then SIGCONT, the host's link down then up, a partition between two broker hosts that
leaves every client connected to both sides (each drops the other's packets), and a clock step (the node killed and
started again with its wall clock up to ``MAX_SKEW_S`` seconds off, where it stays). One at a time keeps a majority
of the quorum and ``min.insync.replicas`` reachable, so every fault is one the bus must ride out without losing an
acknowledged record. The same seed gives the same schedule (which fault, where, how long); how the cluster answers
depends on timing, so a failing seed is a lead, not an exact replay.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

FAULTS = ("kill", "pause", "link", "partition", "clock")
MAX_SKEW_S = 10
"""How far a stepped clock may be off, either way (seconds)."""


class Hosts(Protocol):
    """What the nemesis does to the broker hosts; node ids are the brokers' ``node.id``."""

    @property
    def node_ids(self) -> Sequence[int]: ...

    def kill(self, node_id: int) -> None: ...

    def restart(self, node_id: int) -> None: ...

    def pause(self, node_id: int) -> None: ...

    def resume(self, node_id: int) -> None: ...

    def link_down(self, node_id: int) -> None: ...

    def link_up(self, node_id: int) -> None: ...

    def partition(self, a: int, b: int) -> None: ...

    def heal(self, a: int, b: int) -> None: ...

    def step_clock(self, node_id: int, skew: int) -> None: ...


@dataclass
class Nemesis:
    hosts: Hosts
    rng: random.Random
    faults: Sequence[str] = FAULTS
    fault_s: tuple[float, float] = (1.0, 6.0)
    settle_s: tuple[float, float] = (1.0, 4.0)
    clock: Callable[[], float] = time.monotonic
    started: float = field(default_factory=time.monotonic)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def _note(self, what: str) -> None:
        self.timeline.append((round(self.clock() - self.started, 2), what))

    def strike(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """One fault: applied, held, healed, then a pause for the cluster to settle."""
        kind = self.rng.choice(list(self.faults))
        node = self.rng.choice(list(self.hosts.node_ids))
        hold = self.rng.uniform(*self.fault_s)
        settle = self.rng.uniform(*self.settle_s)
        apply, applied, heal, healed = self._plan(kind, node)
        apply()
        self._note(applied)
        sleep(hold)
        heal()
        self._note(healed)
        sleep(settle)

    def _plan(self, kind: str, node: int) -> tuple[Callable[[], None], str, Callable[[], None], str]:
        """What a fault of ``kind`` on ``node`` does and undoes, and how the timeline says each."""
        hosts = self.hosts
        if kind == "kill":
            return (partial(hosts.kill, node), f"kill -9 node {node}",
                    partial(hosts.restart, node), f"restart node {node}")
        if kind == "pause":
            return partial(hosts.pause, node), f"pause node {node}", partial(hosts.resume, node), f"resume node {node}"
        if kind == "link":
            return (partial(hosts.link_down, node), f"link of node {node}'s host down",
                    partial(hosts.link_up, node), f"link of node {node}'s host up")
        if kind == "partition":
            other = self.rng.choice([n for n in hosts.node_ids if n != node])
            return (partial(hosts.partition, node, other), f"partition between nodes {node} and {other} (clients reach"
                    " both)", partial(hosts.heal, node, other), f"partition between nodes {node} and {other} healed")
        if kind == "clock":
            skew = self.rng.randint(-MAX_SKEW_S, MAX_SKEW_S)

            def step() -> None:
                hosts.kill(node)
                hosts.step_clock(node, skew)

            return (step, f"kill -9 node {node} to step its clock to {skew:+d} s",
                    partial(hosts.restart, node), f"restart node {node} with its clock {skew:+d} s off")
        raise ValueError(f"unknown fault {kind!r}: one of {', '.join(FAULTS)}")

    def run(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> None:
        deadline = self.clock() + seconds
        while self.clock() < deadline:
            self.strike(sleep)
