"""A deterministic simulation of a KRaft quorum: RaftNodes over a hostile, seeded network.

Everything random comes from one `random.Random(seed)`, so a failing seed replays exactly. The
network delays (1..max_delay ms, hence reorders), drops and duplicates messages and can be split
into partitions; nodes crash and restart (a restart is a new RaftNode over the same quorum-state store
and log, as after kill -9 with a durable disk); clients append through whoever leads; nodes take
snapshots at their high watermark, so lagging followers must fetch them in chunks.

After every step the checker asserts Raft's guarantees:
- election safety: at most one leader per epoch, ever, and at most one vote granted per voter and epoch;
- the commit rule: a leader's high watermark moves only to an entry of its own epoch;
- no node's high watermark goes backwards or past its log end;
- every entry below a node's high watermark (or inside its snapshot) equals the one committed at that
  offset anywhere else: committed entries are never lost or changed, and logs match up to the HW;
- the newest committed entry is held by a majority of voters (so no future leader can lack it).
`run_until_progress` checks liveness: after healing, a leader is elected and a new append commits on
every node within a bounded simulated time.
"""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field

from bus.raft.config import QuorumConfig
from bus.raft.messages import Envelope, VoteResponse
from bus.raft.node import NotLeaderError, RaftNode, RoleChanged, SnapshotInstalled, Step
from bus.raft.quorum_state import MemoryQuorumStateStore
from bus.raft.replicated_log import InMemoryRaftLog, LogEntry, Record
from bus.raft.roles import Role
from tests.unit.raft.harness import TIMINGS

FAST = {**TIMINGS, "fetch_max_bytes": 48}  # small reads: followers catch up over several fetches


class SafetyViolation(AssertionError):
    pass


@dataclass
class SimNode:
    node_id: int
    log: InMemoryRaftLog = field(default_factory=InMemoryRaftLog)
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    raft: RaftNode | None = None
    last_hw: int = 0


@dataclass
class Faults:
    drop: float = 0.05
    duplicate: float = 0.03
    max_delay_ms: int = 15
    crash_every_ms: int = 700
    partition_every_ms: int = 900
    resign_every_ms: int = 2500
    snapshot_every_ms: int = 400
    crash_after_vote: float = 0.1
    slow: float = 0.05


def snapshot_image(entries: list[Record]) -> bytes:
    """What a state machine would store: here simply every committed record, in order."""
    return b"|".join(r if isinstance(r, bytes) else repr(r).encode() for r in entries)


class Simulation:
    def __init__(self, seed: int, voters: int, observers: int = 0, faults: Faults | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.faults = faults or Faults()
        ids = list(range(1, voters + 1))
        # Half the seeds resend unanswered requests well within an election timeout (a legal setting), so a
        # candidate asks a restarted voter again in the same epoch.
        timings = dict(FAST, request_timeout_ms=self.rng.choice([40, FAST["request_timeout_ms"]]))
        self.config = QuorumConfig(voters=frozenset(ids), **timings)  # type: ignore[arg-type]
        self.nodes = {i: SimNode(i) for i in ids + [100 + k for k in range(observers)]}
        self.now = 0
        self.queue: list[tuple[int, int, Envelope]] = []
        self.sequence = 0
        self.blocked: set[tuple[int, int]] = set()
        self.leaders: dict[int, int] = {}  # epoch -> leader id, for election safety
        self.votes: dict[tuple[int, int], int] = {}  # (voter, epoch) -> the one candidate it granted
        self.committed: dict[int, LogEntry] = {}  # offset -> the entry committed there
        self.appended = 0
        self.next_fault = {"crash": 300, "partition": 500, "resign": 1500, "snapshot": 400, "heal": 10**12}
        self.restart_at: dict[int, int] = {}
        for node in self.nodes.values():
            self._start(node)

    # ---- the world ---------------------------------------------------------------------------------

    def _start(self, node: SimNode) -> None:
        node.raft = RaftNode(
            node.node_id, self.config, node.log, node.store, random.Random(self.rng.random()), self.now
        )
        node.last_hw = node.raft.high_watermark
        self._absorb(node, node.raft.tick(self.now))

    def _absorb(self, node: SimNode, step: Step) -> None:
        for event in step.events:
            if isinstance(event, RoleChanged) and event.role is Role.LEADER:
                previous = self.leaders.setdefault(event.epoch, node.node_id)
                if previous != node.node_id:
                    raise SafetyViolation(f"epoch {event.epoch} has two leaders: {previous} and {node.node_id}")
            if isinstance(event, SnapshotInstalled):
                end = event.snapshot.snapshot_id.offset
                expected = [self.committed[o].record for o in range(end) if o in self.committed]
                if len(expected) == end and event.snapshot.data != snapshot_image(expected):
                    raise SafetyViolation(f"node {node.node_id} installed a snapshot that differs from the history")
        for envelope in step.messages:
            if isinstance(envelope.body, VoteResponse) and envelope.body.vote_granted:
                key = (node.node_id, envelope.body.leader_epoch)
                voted = self.votes.setdefault(key, envelope.destination)
                if voted != envelope.destination:
                    raise SafetyViolation(
                        f"voter {key[0]} granted {voted} and {envelope.destination} in epoch {key[1]}"
                    )
            self._send(envelope)
        if (
            node.raft is not None
            and any(isinstance(e.body, VoteResponse) and e.body.vote_granted for e in step.messages)
            and self.rng.random() < self.faults.crash_after_vote
        ):
            # The nemesis strikes right after a vote: the restarted node must remember it.
            self.crash(node.node_id)
            self.restart_at[node.node_id] = self.now + self.rng.randint(1, 100)

    def _send(self, envelope: Envelope) -> None:
        copies = 1
        if self.rng.random() < self.faults.drop:
            copies = 0
        elif self.rng.random() < self.faults.duplicate:
            copies = 2
        for _ in range(copies):
            delay = self.rng.randint(1, self.faults.max_delay_ms)
            if self.rng.random() < self.faults.slow:
                delay = self.rng.randint(1, 20 * self.faults.max_delay_ms)  # stuck in a queue somewhere
            self.sequence += 1
            heapq.heappush(self.queue, (self.now + delay, self.sequence, envelope))

    def _deliver(self) -> None:
        while self.queue and self.queue[0][0] <= self.now:
            _, _, envelope = heapq.heappop(self.queue)
            node = self.nodes[envelope.destination]
            if node.raft is None or (envelope.source, envelope.destination) in self.blocked:
                continue
            self._absorb(node, node.raft.handle(envelope, self.now))

    def partition(self, groups: list[set[int]]) -> None:
        self.blocked = {(a, b) for a in self.nodes for b in self.nodes if not any(a in g and b in g for g in groups)}

    def heal(self) -> None:
        self.blocked = set()

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].raft = None

    def leader(self) -> SimNode | None:
        for node in self.nodes.values():
            if node.raft is not None and node.raft.role is Role.LEADER:
                return node
        return None

    def client_append(self) -> None:
        node = self.leader()
        if node is None or node.raft is None:
            return
        self.appended += 1
        try:
            step, _ = node.raft.append(node.raft.epoch, [f"v{self.appended}".encode()], self.now)
        except NotLeaderError:
            return  # resigning
        self._absorb(node, step)

    def _inject_faults(self) -> None:
        live = [n for n in self.nodes.values() if n.raft is not None]
        for node_id, when in list(self.restart_at.items()):
            if self.now >= when:
                del self.restart_at[node_id]
                self._start(self.nodes[node_id])
        if self.now >= self.next_fault["crash"]:
            self.next_fault["crash"] = self.now + self.rng.randint(1, 2 * self.faults.crash_every_ms)
            if live:
                victim = self.rng.choice(live)
                self.crash(victim.node_id)
                self.restart_at[victim.node_id] = self.now + self.rng.randint(50, 600)
        if self.now >= self.next_fault["partition"]:
            self.next_fault["partition"] = self.now + self.rng.randint(1, 2 * self.faults.partition_every_ms)
            ids = list(self.nodes)
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.partition([set(ids[:cut]), set(ids[cut:])])
            self.next_fault["heal"] = self.now + self.rng.randint(100, 800)
        if self.now >= self.next_fault["heal"]:
            self.heal()
            self.next_fault["heal"] = 10**12
        if self.now >= self.next_fault["resign"]:
            self.next_fault["resign"] = self.now + self.rng.randint(1, 2 * self.faults.resign_every_ms)
            node = self.leader()
            if node is not None and node.raft is not None:
                self._absorb(node, node.raft.resign(node.raft.epoch, self.now))
        if self.now >= self.next_fault["snapshot"]:
            self.next_fault["snapshot"] = self.now + self.rng.randint(1, 2 * self.faults.snapshot_every_ms)
            if live:
                self.take_snapshot(self.rng.choice(live))

    def take_snapshot(self, node: SimNode) -> None:
        raft = node.raft
        if raft is None or raft.high_watermark <= raft.snapshot_end():
            return
        end = raft.high_watermark
        raft.create_snapshot(end, snapshot_image([self.committed[o].record for o in range(end)]))

    def step(self, ms: int = 5, faults: bool = True) -> None:
        self.now += ms
        if faults:
            self._inject_faults()
        self._deliver()
        for node in self.nodes.values():
            if node.raft is not None:
                self._absorb(node, node.raft.tick(self.now))
        if self.rng.random() < 0.3:
            self.client_append()
        self.check()

    # ---- the checker -------------------------------------------------------------------------------

    def check(self) -> None:
        for node in self.nodes.values():
            raft = node.raft
            if raft is None:
                continue
            hw = raft.high_watermark
            if hw < node.last_hw:
                raise SafetyViolation(f"node {node.node_id}'s high watermark went back from {node.last_hw} to {hw}")
            if hw > node.log.end_offset():
                raise SafetyViolation(f"node {node.node_id}'s high watermark {hw} is past its log end")
            if hw > node.last_hw and raft.role is Role.LEADER and node.log.epoch_of(hw - 1) != raft.epoch:
                # Raft's commit rule: a leader exposes older entries only with one of its own epoch.
                raise SafetyViolation(
                    f"leader {node.node_id} of epoch {raft.epoch} committed up to {hw} "
                    f"whose last entry is of epoch {node.log.epoch_of(hw - 1)}"
                )
            start = max(node.last_hw, node.log.start_offset())
            for entry in node.log.read(start, 1 << 30)[: hw - start] if hw > start else []:
                self._commit(node, entry)
            node.last_hw = hw
        self._check_majority_holds_newest()

    def _commit(self, node: SimNode, entry: LogEntry) -> None:
        known = self.committed.setdefault(entry.offset, entry)
        if known != entry:
            raise SafetyViolation(
                f"node {node.node_id} committed {entry} at offset {entry.offset}, but {known} was committed there"
            )

    def _check_majority_holds_newest(self) -> None:
        if not self.committed:
            return
        newest = max(self.committed)
        entry = self.committed[newest]
        holders = 0
        for voter in self.config.voters:
            log = self.nodes[voter].log
            snapshot = log.latest_snapshot()
            in_snapshot = snapshot is not None and snapshot.snapshot_id.offset > newest
            in_log = log.start_offset() <= newest < log.end_offset() and log.read(newest, 1)[0] == entry
            holders += in_snapshot or in_log
        if holders < self.config.majority:
            raise SafetyViolation(f"committed offset {newest} is held by only {holders} voters")

    def full_check(self) -> None:
        """Every entry below every node's high watermark matches the committed history."""
        for node in self.nodes.values():
            if node.raft is None:
                continue
            start = node.log.start_offset()
            for entry in node.log.read(start, 1 << 30)[: node.raft.high_watermark - start]:
                self._commit(node, entry)

    # ---- runs --------------------------------------------------------------------------------------

    def run(self, duration_ms: int) -> None:
        end = self.now + duration_ms
        while self.now < end:
            self.step()
        self.full_check()

    def run_until_progress(self, limit_ms: int) -> int:
        """Heal everything, then wait for a leader and one new committed append on every node."""
        self.heal()
        for node_id in list(self.restart_at):
            del self.restart_at[node_id]
            self._start(self.nodes[node_id])
        self.faults = Faults(
            drop=0.0, duplicate=0.0, max_delay_ms=self.faults.max_delay_ms, crash_after_vote=0.0, slow=0.0
        )
        start = self.now
        target: int | None = None
        while self.now - start < limit_ms:
            self.step(faults=False)
            leader = self.leader()
            if target is None and leader is not None and leader.raft is not None:
                try:
                    step, target = leader.raft.append(leader.raft.epoch, [b"final"], self.now)
                except NotLeaderError:
                    continue
                self._absorb(leader, step)
            if target is not None and all(
                n.raft is not None and n.raft.high_watermark > target for n in self.nodes.values()
            ):
                self.full_check()
                return self.now - start
            if target is not None and leader is None:
                target = None  # that leader lost its epoch before committing: append again under the next
        raise SafetyViolation(f"no progress within {limit_ms} ms after healing (seed {self.seed})")
