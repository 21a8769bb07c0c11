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
        if kind == "kill":
            self.hosts.kill(node)
            self._note(f"kill -9 node {node}")
            sleep(hold)
            self.hosts.restart(node)
            self._note(f"restart node {node}")
        elif kind == "pause":
            self.hosts.pause(node)
            self._note(f"pause node {node}")
            sleep(hold)
            self.hosts.resume(node)
            self._note(f"resume node {node}")
        elif kind == "link":
            self.hosts.link_down(node)
            self._note(f"link of node {node}'s host down")
            sleep(hold)
            self.hosts.link_up(node)
            self._note(f"link of node {node}'s host up")
        elif kind == "partition":
            other = self.rng.choice([n for n in self.hosts.node_ids if n != node])
            self.hosts.partition(node, other)
            self._note(f"partition between nodes {node} and {other} (clients reach both)")
            sleep(hold)
            self.hosts.heal(node, other)
            self._note(f"partition between nodes {node} and {other} healed")
        elif kind == "clock":
            skew = self.rng.randint(-MAX_SKEW_S, MAX_SKEW_S)
            self.hosts.kill(node)
            self.hosts.step_clock(node, skew)
            self._note(f"kill -9 node {node} to step its clock to {skew:+d} s")
            sleep(hold)
            self.hosts.restart(node)
            self._note(f"restart node {node} with its clock {skew:+d} s off")
        else:
            raise ValueError(f"unknown fault {kind!r}: one of {', '.join(FAULTS)}")
        sleep(settle)

    def run(self, seconds: float, sleep: Callable[[float], None] = time.sleep) -> None:
        deadline = self.clock() + seconds
        while self.clock() < deadline:
            self.strike(sleep)
