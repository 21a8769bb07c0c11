"""A lossless, hand-driven network of RaftNodes for the focused rule tests.

Messages wait in `pending` until the test delivers them (all, or only those a predicate picks), so a
test can hold a vote response back, cut a node off, or inspect exactly what a node sent.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from bus.raft.config import QuorumConfig
from bus.raft.messages import Envelope
from bus.raft.node import Event, RaftNode, Step
from bus.raft.quorum_state import MemoryQuorumStateStore
from bus.raft.replicated_log import InMemoryRaftLog
from bus.raft.roles import Role

TIMINGS = {
    "election_timeout_ms": 100,
    "fetch_timeout_ms": 200,
    "election_backoff_max_ms": 100,
    "retry_backoff_ms": 10,
    "request_timeout_ms": 200,
    "fetch_max_wait_ms": 50,
}


def config(voters: set[int], **overrides: int) -> QuorumConfig:
    return QuorumConfig(voters=frozenset(voters), **{**TIMINGS, **overrides})  # type: ignore[arg-type]


class Net:
    def __init__(
        self, voters: set[int], observers: set[int] | frozenset[int] = frozenset(), seed: int = 0, **overrides: int
    ) -> None:
        self.config = config(voters, **overrides)
        self.now = 0
        self.seed = seed
        self.logs = {i: InMemoryRaftLog() for i in voters | observers}
        self.stores = {i: MemoryQuorumStateStore() for i in voters | observers}
        self.nodes: dict[int, RaftNode] = {}
        self.down: set[int] = set()
        self.pending: list[Envelope] = []
        self.delivered: list[Envelope] = []
        self.events: dict[int, list[Event]] = {i: [] for i in voters | observers}
        for i in sorted(voters | observers):
            self.start(i)

    def start(self, node_id: int) -> RaftNode:
        """(Re)start a node over its log and quorum-state store, as after kill -9."""
        node = RaftNode(
            node_id,
            self.config,
            self.logs[node_id],
            self.stores[node_id],
            random.Random(self.seed * 100 + node_id + self.now),
            self.now,
        )
        self.nodes[node_id] = node
        self.down.discard(node_id)
        self.absorb(node_id, node.tick(self.now))
        return node

    def absorb(self, node_id: int, step: Step) -> None:
        self.events[node_id].extend(step.events)
        self.pending.extend(step.messages)

    def deliver(self, keep: Callable[[Envelope], bool] = lambda e: True, rounds: int = 100) -> None:
        """Deliver pending messages (and what they cause) that `keep` accepts; hold the rest back.

        Messages to a node that is down are lost.
        """
        for _ in range(rounds):
            batch, self.pending = self.pending, []
            held = [e for e in batch if e.destination not in self.down and not keep(e)]
            batch = [e for e in batch if e.destination not in self.down and keep(e)]
            if not batch:
                self.pending = held + self.pending
                return
            for envelope in batch:
                self.delivered.append(envelope)
                self.absorb(envelope.destination, self.nodes[envelope.destination].handle(envelope, self.now))
            self.pending = held + self.pending

    def advance(self, ms: int, keep: Callable[[Envelope], bool] = lambda e: True, step_ms: int = 5) -> None:
        """Let `ms` pass in small steps, ticking every live node and delivering what `keep` accepts."""
        for _ in range(ms // step_ms):
            self.now += step_ms
            for node_id, node in self.nodes.items():
                if node_id not in self.down:
                    self.absorb(node_id, node.tick(self.now))
            self.deliver(keep)

    def leader(self) -> RaftNode | None:
        leaders = [n for i, n in self.nodes.items() if i not in self.down and n.role is Role.LEADER]
        assert len(leaders) <= 1
        return leaders[0] if leaders else None

    def elect(self, limit_ms: int = 3000) -> RaftNode:
        for _ in range(limit_ms // 5):
            self.advance(5)
            leader = self.leader()
            if leader is not None:
                return leader
        raise AssertionError("no leader elected")

    def append(self, records: list[bytes]) -> int:
        leader = self.leader()
        assert leader is not None
        step, last = leader.append(leader.epoch, list(records), self.now)
        self.absorb(leader.node_id, step)
        return last

    def sent(self, kind: type) -> list[Envelope]:
        return [e for e in self.pending if isinstance(e.body, kind)]
