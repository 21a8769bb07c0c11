"""`RaftNode`: one KRaft replica as a pure state machine (KafkaRaftClient's rules, sans-IO).

The caller delivers messages with `handle(envelope, now_ms)`, lets time pass with `tick(now_ms)`,
appends with `append(epoch, records, now_ms)` while leader, and sends whatever `Step.messages` holds;
`Step.events` says what changed (role, high watermark, committed entries, an installed snapshot).
The election state is written to the `QuorumStateStore` before any reply or request that depends on it
goes out, so a restarted node (a new RaftNode over the same store and log) never votes twice in an
epoch and never goes back in epoch.

Raft as KRaft runs it: followers pull with Fetch (the leader validates each fetch against its log and
answers a divergence with the epoch/offset to truncate to, or a snapshot id when the offset is gone);
a new leader announces itself with BeginQuorumEpoch and writes a LeaderChange record; the high
watermark advances to what a majority of voters has fetched once it passes the start of the leader's
epoch; a leader that loses touch with a majority, or is asked to, resigns with EndQuorumEpoch and
names its most caught-up voters as preferred successors, who skip the election backoff.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from bus.raft.config import QuorumConfig
from bus.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    Request,
    Response,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from bus.raft.quorum_state import ElectionState, QuorumStateError, QuorumStateStore
from bus.raft.replicated_log import (
    LeaderChangeMessage,
    LogEntry,
    OffsetAndEpoch,
    RaftLog,
    Record,
    Snapshot,
    ValidationKind,
    validate_offset_and_epoch,
)
from bus.raft.requests import RequestManager
from bus.raft.roles import Candidate, Follower, Leader, Resigned, Role, State, Unattached, Voted

# KafkaRaftClient.RETRY_BACKOFF_BASE_MS: the unit of a candidate's binary exponential backoff.
RETRY_BACKOFF_BASE_MS = 100


class NotLeaderError(Exception):
    """An append or resignation for an epoch this node does not lead."""


class RaftInvariantError(Exception):
    """A message contradicts what this node knows (e.g. two leaders in one epoch): a bug, never ignored."""


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    epoch: int
    leader_id: int | None


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Committed:
    """Entries now below the high watermark, in offset order (control records included)."""

    entries: tuple[LogEntry, ...]


@dataclass(frozen=True, slots=True)
class SnapshotInstalled:
    """The log was replaced by a snapshot from the leader: the state machine reloads from it."""

    snapshot: Snapshot


Event = RoleChanged | HighWatermarkAdvanced | Committed | SnapshotInstalled


@dataclass(slots=True)
class Step:
    messages: list[Envelope] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)


@dataclass(slots=True)
class _ParkedFetch:
    envelope: Envelope
    request: FetchRequest
    deadline: int


class RaftNode:
    def __init__(
        self,
        node_id: int,
        config: QuorumConfig,
        log: RaftLog,
        store: QuorumStateStore,
        rng: random.Random,
        now_ms: int,
        cluster_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.log = log
        self.store = store
        self.rng = rng
        self.cluster_id = cluster_id
        self.is_voter = node_id in config.voters
        self.high_watermark = self.snapshot_end()  # what is known committed after a restart
        self._step = Step()
        self._requests = RequestManager(config.request_timeout_ms, config.retry_backoff_ms)
        self._parked: dict[int, _ParkedFetch] = {}
        self._wake_parked = False
        self.state: State = self._initial_state(now_ms)
        self._emit_role()
        if self.is_voter and len(config.voters) == 1:
            # The only voter needs nobody's vote: it leads at once (after resigning, in a new epoch).
            if isinstance(self.state, Candidate):
                self._maybe_become_leader(now_ms)
            else:
                self._become_candidate(now_ms)

    # ---- the caller's entry points -------------------------------------------------------------------

    def tick(self, now_ms: int) -> Step:
        """Let time pass: fire timers and send whatever requests are due."""
        self._poll(now_ms)
        return self._drain()

    def handle(self, envelope: Envelope, now_ms: int) -> Step:
        """Take one inbound request or response."""
        body = envelope.body
        if isinstance(body, Request):
            self._handle_request(envelope, body, now_ms)
        else:
            expected = self._requests.take_response(envelope.source, envelope.correlation_id)
            if expected and not self._handle_response(envelope.source, body, now_ms):
                self._requests.on_failed(envelope.source, now_ms)
        self._poll(now_ms)
        return self._drain()

    def append(self, epoch: int, records: list[Record], now_ms: int) -> tuple[Step, int]:
        """Append as leader of `epoch`; returns the step and the last offset (committed once below the HW)."""
        state = self.state
        if not isinstance(state, Leader) or state.epoch != epoch or state.resign_requested:
            raise NotLeaderError(f"node {self.node_id} does not lead epoch {epoch} (epoch {self.epoch})")
        _, last = self.log.append_as_leader(records, epoch)
        self._leader_log_grew(state, now_ms)
        self._poll(now_ms)
        return self._drain(), last

    def resign(self, epoch: int, now_ms: int) -> Step:
        """Step down gracefully (controlled shutdown): EndQuorumEpoch to the voters with preferred successors."""
        state = self.state
        if not isinstance(state, Leader) or state.epoch != epoch:
            raise NotLeaderError(f"node {self.node_id} does not lead epoch {epoch} (epoch {self.epoch})")
        state.resign_requested = True
        self._poll(now_ms)
        return self._drain()

    def create_snapshot(self, end_offset: int, data: bytes) -> Snapshot:
        """Keep the state machine's image of everything below `end_offset` (<= high watermark); the log drops
        the prefix when its retention allows."""
        if not self.snapshot_end() < end_offset <= self.high_watermark:
            raise ValueError(
                f"snapshot end {end_offset} must be above the latest snapshot's end or log start "
                f"{self.snapshot_end()} and at most the high watermark {self.high_watermark}"
            )
        snapshot = Snapshot(OffsetAndEpoch(self.log.epoch_of(end_offset - 1), end_offset), data)
        self.log.create_snapshot(snapshot)
        return snapshot

    def snapshot_end(self) -> int:
        """The end of the latest snapshot, or the log start without one: everything below it is committed."""
        snapshot = self.log.latest_snapshot()
        return max(self.log.start_offset(), snapshot.snapshot_id.offset if snapshot is not None else 0)

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def role(self) -> Role:
        return self.state.role

    @property
    def leader_id(self) -> int | None:
        if isinstance(self.state, Leader | Resigned):
            return self.node_id
        if isinstance(self.state, Follower):
            return self.state.leader_id
        return None

    # ---- initialisation and transitions -------------------------------------------------------------

    def _initial_state(self, now_ms: int) -> State:
        stored = self.store.read()
        if stored is not None and stored.voters and stored.voters != self.config.voters:
            raise QuorumStateError(
                f"stored voters {sorted(stored.voters)} differ from "
                f"controller.quorum.voters {sorted(self.config.voters)}"
            )
        if stored is None:
            stored = ElectionState(0, voters=self.config.voters)
            self.store.write(stored)
        log_epoch = self.log.last_fetched_epoch()
        if stored.epoch < log_epoch:
            # The log saw a newer epoch than the state file: never go back.
            self._persist(log_epoch)
            return Unattached(log_epoch, self._election_deadline(now_ms))
        if stored.leader_id == self.node_id:
            # A leader that restarts does not resume leading: it resigns and a new election follows.
            others = set(self.config.voters) - {self.node_id}
            return Resigned(stored.epoch, self._election_deadline(now_ms), others, ())
        if stored.leader_id != NO_LEADER:
            return Follower(stored.epoch, stored.leader_id, now_ms + self.config.fetch_timeout_ms)
        if stored.voted_id == self.node_id:
            return Candidate(stored.epoch, 1, self._election_deadline(now_ms), granted={self.node_id})
        if stored.voted_id != NO_LEADER:
            return Voted(stored.epoch, stored.voted_id, self._election_deadline(now_ms))
        return Unattached(stored.epoch, self._election_deadline(now_ms))

    def _persist(self, epoch: int, leader_id: int = NO_LEADER, voted_id: int = NO_LEADER) -> None:
        self.store.write(ElectionState(epoch, leader_id, voted_id, self.config.voters))

    def _election_deadline(self, now_ms: int) -> int:
        """A random election timeout in [t, 2t) so that voters rarely time out together."""
        timeout = self.config.election_timeout_ms
        return now_ms + timeout + self.rng.randrange(timeout)

    def _set_state(self, state: State) -> None:
        previous = self.state
        if isinstance(previous, Leader):
            for parked in list(self._parked.values()):
                self._reply(parked.envelope, self._fetch_error(ErrorCode.not_leader_or_follower))
            self._parked.clear()
        self.state = state
        self._requests.reset()
        self._emit_role()

    def _emit_role(self) -> None:
        self._step.events.append(RoleChanged(self.state.role, self.state.epoch, self.leader_id))

    def _become_unattached(self, epoch: int, now_ms: int) -> None:
        """A newer epoch without a known leader. A voter that was already waiting for an election (Unattached,
        Voted or Candidate) keeps its deadline, as Kafka's QuorumState.transitionToUnattached does: restarting it
        would let a candidate that cannot win (its log is behind, e.g. a node just resumed from SIGSTOP) reset
        every other voter's timer with each new epoch it tries, and no election would ever succeed."""
        state = self.state
        if isinstance(state, Unattached | Voted | Candidate):
            deadline = state.election_deadline
        else:
            deadline = self._election_deadline(now_ms)
        self._persist(epoch)
        self._set_state(Unattached(epoch, deadline))

    def _become_voted(self, candidate_id: int, epoch: int, now_ms: int) -> None:
        self._persist(epoch, voted_id=candidate_id)
        self._set_state(Voted(epoch, candidate_id, self._election_deadline(now_ms)))

    def _become_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        voted = self.state.voted_id if isinstance(self.state, Voted) and self.state.epoch == epoch else NO_LEADER
        if isinstance(self.state, Candidate) and self.state.epoch == epoch:
            voted = self.node_id
        self._persist(epoch, leader_id=leader_id, voted_id=voted)
        self._set_state(Follower(epoch, leader_id, now_ms + self.config.fetch_timeout_ms))

    def _become_candidate(self, now_ms: int) -> None:
        if not self.is_voter:
            raise RaftInvariantError(f"observer {self.node_id} cannot become a candidate")
        retries = self.state.retries + 1 if isinstance(self.state, Candidate) else 1
        epoch = self.epoch + 1
        self._persist(epoch, voted_id=self.node_id)
        self._set_state(Candidate(epoch, retries, self._election_deadline(now_ms), granted={self.node_id}))
        self._maybe_become_leader(now_ms)

    def _maybe_become_leader(self, now_ms: int) -> None:
        state = self.state
        if not isinstance(state, Candidate) or len(state.granted) < self.config.majority:
            return
        self._persist(state.epoch, leader_id=self.node_id, voted_id=self.node_id)
        leader = Leader(
            epoch=state.epoch,
            local_id=self.node_id,
            voters=self.config.voters,
            epoch_start_offset=self.log.end_offset(),
            check_quorum_deadline=now_ms + self.config.check_quorum_timeout_ms,
        )
        self._set_state(leader)
        change = LeaderChangeMessage(self.node_id, tuple(sorted(self.config.voters)), tuple(sorted(state.granted)))
        self.log.append_as_leader([change], leader.epoch)
        self._leader_log_grew(leader, now_ms)

    def _become_resigned(self, leader: Leader, now_ms: int) -> None:
        successors = leader.successors_by_fetch_offset()
        self._set_state(Resigned(leader.epoch, self._election_deadline(now_ms), set(successors), successors))

    def _maybe_transition(self, leader_id: int | None, epoch: int, now_ms: int) -> None:
        """A request or response told us of `epoch` and maybe its leader: follow if it is news."""
        if leader_id is not None and leader_id < 0:
            leader_id = None
        if epoch == self.epoch and leader_id is not None:
            if leader_id == self.node_id and not isinstance(self.state, Leader | Resigned):
                raise RaftInvariantError(f"told that node {self.node_id} leads epoch {epoch}, which it does not")
            if self.leader_id is not None and leader_id != self.leader_id:
                raise RaftInvariantError(f"epoch {epoch} has two leaders: {self.leader_id} and {leader_id}")
        if epoch > self.epoch:
            if leader_id is not None:
                self._become_follower(epoch, leader_id, now_ms)
            else:
                self._become_unattached(epoch, now_ms)
        elif epoch == self.epoch and leader_id is not None and self.leader_id is None:
            self._become_follower(epoch, leader_id, now_ms)

    # ---- timers and outbound requests ---------------------------------------------------------------

    def _poll(self, now_ms: int) -> None:
        state = self.state
        if isinstance(state, Leader):
            self._poll_leader(state, now_ms)
        elif isinstance(state, Candidate):
            self._poll_candidate(state, now_ms)
        elif isinstance(state, Follower):
            self._poll_follower(state, now_ms)
        elif isinstance(state, Resigned):
            self._send_all(
                state.unacknowledged,
                now_ms,
                lambda: EndQuorumEpochRequest(self.cluster_id, self.node_id, state.epoch, state.preferred_successors),
            )
            if now_ms >= state.election_deadline:
                self._become_candidate(now_ms)
                self._poll(now_ms)
        elif self.is_voter:
            if now_ms >= state.election_deadline:
                self._become_candidate(now_ms)
                self._poll(now_ms)
        else:
            self._send_to_any_voter(now_ms)

    def _poll_leader(self, state: Leader, now_ms: int) -> None:
        wake, self._wake_parked = self._wake_parked, False
        self._complete_parked(now_ms, expired_only=not wake)
        expired = len(self.config.voters) > 1 and now_ms >= state.check_quorum_deadline
        if state.resign_requested or expired:
            self._become_resigned(state, now_ms)
            self._poll(now_ms)
            return
        pending = self.config.voters - state.acknowledged
        self._send_all(pending, now_ms, lambda: BeginQuorumEpochRequest(self.cluster_id, self.node_id, state.epoch))

    def _poll_candidate(self, state: Candidate, now_ms: int) -> None:
        if state.backoff_deadline is not None:
            if now_ms >= state.backoff_deadline:
                self._become_candidate(now_ms)
                self._poll(now_ms)
            return
        if now_ms >= state.election_deadline:
            state.backoff_deadline = now_ms + self._binary_exponential_backoff(state.retries)
            return
        unrecorded = self.config.voters - state.granted - state.rejected
        self._send_all(
            unrecorded,
            now_ms,
            lambda: VoteRequest(
                self.cluster_id, state.epoch, self.node_id, self.log.last_fetched_epoch(), self.log.end_offset()
            ),
        )

    def _poll_follower(self, state: Follower, now_ms: int) -> None:
        if now_ms >= state.fetch_deadline:
            if self.is_voter:
                self._become_candidate(now_ms)
                self._poll(now_ms)
            else:
                self._send_to_any_voter(now_ms)
            return
        self._send(state.leader_id, now_ms, lambda: self._fetch_or_fetch_snapshot(state))

    def _fetch_or_fetch_snapshot(self, state: Follower) -> Request:
        if state.fetching_snapshot is not None:
            snapshot_id, data = state.fetching_snapshot
            return FetchSnapshotRequest(
                self.cluster_id,
                self.node_id,
                self.config.fetch_max_bytes,
                state.epoch,
                SnapshotId(snapshot_id.offset, snapshot_id.epoch),
                len(data),
            )
        return self._fetch_request()

    def _fetch_request(self) -> FetchRequest:
        return FetchRequest(
            cluster_id=self.cluster_id,
            replica_id=self.node_id,
            max_wait_ms=self.config.fetch_max_wait_ms,
            current_leader_epoch=self.epoch,
            fetch_offset=self.log.end_offset(),
            last_fetched_epoch=self.log.last_fetched_epoch(),
            log_start_offset=self.log.start_offset(),
            partition_max_bytes=self.config.fetch_max_bytes,
        )

    def _send_to_any_voter(self, now_ms: int) -> None:
        """An observer without a leader asks a random voter, whose answer names the leader."""
        if self._requests.any_in_flight(now_ms):
            return
        ready = [voter for voter in sorted(self.config.voters) if self._requests.is_ready(voter, now_ms)]
        if ready:
            self._send(self.rng.choice(ready), now_ms, self._fetch_request)

    def _binary_exponential_backoff(self, retries: int) -> int:
        return min(
            RETRY_BACKOFF_BASE_MS * self.rng.randrange(2 << min(20, retries - 1)), self.config.election_backoff_max_ms
        )

    def _strict_exponential_backoff(self, position: int, successors: int) -> int:
        base = self.config.election_backoff_max_ms >> (successors - 1)
        return min(self.config.election_backoff_max_ms, base << (position - 1))

    def _send(self, destination: int, now_ms: int, build: Callable[[], Request]) -> None:
        if destination == self.node_id or not self._requests.is_ready(destination, now_ms):
            return
        correlation_id = self._requests.on_sent(destination, now_ms)
        self._step.messages.append(Envelope(self.node_id, destination, correlation_id, build()))

    def _send_all(self, destinations: set[int] | frozenset[int], now_ms: int, build: Callable[[], Request]) -> None:
        for destination in sorted(destinations):
            self._send(destination, now_ms, build)

    def _reply(self, request: Envelope, body: Response) -> None:
        self._step.messages.append(Envelope(self.node_id, request.source, request.correlation_id, body))

    def _drain(self) -> Step:
        step, self._step = self._step, Step()
        return step

    # ---- inbound requests ---------------------------------------------------------------------------

    def _handle_request(self, envelope: Envelope, body: Request, now_ms: int) -> None:
        if isinstance(body, FetchRequest):
            self._handle_fetch(envelope, body, now_ms)
            return
        response: Response
        if isinstance(body, VoteRequest):
            response = self._handle_vote(body, now_ms)
        elif isinstance(body, BeginQuorumEpochRequest):
            error = self._validate_voter_only(body.leader_id, body.leader_epoch)
            if error is None:
                self._maybe_transition(body.leader_id, body.leader_epoch, now_ms)
            response = BeginQuorumEpochResponse(error or ErrorCode.none, self._leader_or_none(), self.epoch)
        elif isinstance(body, EndQuorumEpochRequest):
            response = self._handle_end_quorum_epoch(body, now_ms)
        elif isinstance(body, FetchSnapshotRequest):
            response = self._handle_fetch_snapshot(body, now_ms)
        else:
            response = self._describe_quorum(now_ms)
        self._reply(envelope, response)

    def _leader_or_none(self) -> int:
        return NO_LEADER if self.leader_id is None else self.leader_id

    def _validate_voter_only(self, remote_id: int, epoch: int) -> ErrorCode | None:
        if epoch < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if remote_id < 0:
            return ErrorCode.invalid_request
        if remote_id not in self.config.voters:
            return ErrorCode.inconsistent_voter_set
        return None

    def _validate_leader_only(self, epoch: int) -> ErrorCode | None:
        if epoch < self.epoch:
            return ErrorCode.fenced_leader_epoch
        if epoch > self.epoch:
            return ErrorCode.unknown_leader_epoch
        if not isinstance(self.state, Leader):
            return ErrorCode.not_leader_or_follower
        return None

    def _handle_vote(self, request: VoteRequest, now_ms: int) -> VoteResponse:
        if (
            request.last_offset < 0
            or request.last_offset_epoch < 0
            or request.last_offset_epoch >= request.replica_epoch
        ):
            return VoteResponse(ErrorCode.invalid_request, self._leader_or_none(), self.epoch, False)
        error = self._validate_voter_only(request.replica_id, request.replica_epoch)
        if error is None and not self.is_voter:
            error = ErrorCode.inconsistent_voter_set
        if error is not None:
            return VoteResponse(error, self._leader_or_none(), self.epoch, False)
        if request.replica_epoch > self.epoch:
            self._become_unattached(request.replica_epoch, now_ms)
        candidate_log = OffsetAndEpoch(request.last_offset_epoch, request.last_offset)
        ours = OffsetAndEpoch(self.log.last_fetched_epoch(), self.log.end_offset())
        state = self.state
        if isinstance(state, Unattached):
            granted = candidate_log >= ours
            if granted:
                # Persisted before the reply leaves: one vote per epoch, even across a crash.
                self._become_voted(request.replica_id, request.replica_epoch, now_ms)
        else:
            granted = isinstance(state, Voted) and state.voted_id == request.replica_id
        return VoteResponse(ErrorCode.none, self._leader_or_none(), self.epoch, granted)

    def _handle_end_quorum_epoch(self, request: EndQuorumEpochRequest, now_ms: int) -> EndQuorumEpochResponse:
        error = self._validate_voter_only(request.leader_id, request.leader_epoch)
        if error is None:
            self._maybe_transition(request.leader_id, request.leader_epoch, now_ms)
            state = self.state
            if isinstance(state, Follower) and state.leader_id == request.leader_id:
                successors = request.preferred_successors
                position = successors.index(self.node_id) if self.node_id in successors else -1
                # The first successor runs at once; later ones wait longer, others (and non-successors)
                # the same as the first, as Kafka's endEpochElectionBackoff does.
                backoff = self._strict_exponential_backoff(position, len(successors)) if position > 0 else 0
                state.fetch_deadline = now_ms + backoff
        return EndQuorumEpochResponse(error or ErrorCode.none, self._leader_or_none(), self.epoch)

    def _fetch_error(self, error: ErrorCode) -> FetchResponse:
        return FetchResponse(
            error, high_watermark=-1, current_leader=LeaderIdAndEpoch(self._leader_or_none(), self.epoch)
        )

    def _handle_fetch(self, envelope: Envelope, request: FetchRequest, now_ms: int) -> None:
        if (
            request.max_wait_ms < 0
            or request.fetch_offset < 0
            or request.last_fetched_epoch < 0
            or request.last_fetched_epoch > request.current_leader_epoch
        ):
            self._reply(envelope, self._fetch_error(ErrorCode.invalid_request))
            return
        response = self._try_complete_fetch(request, now_ms)
        if isinstance(self.state, Leader) and response.error_code == ErrorCode.none:
            # Check quorum counts when fetches arrive, not when long polls complete.
            self.state.record_voter_contact(
                request.replica_id, self.config.majority, self.config.check_quorum_timeout_ms, now_ms
            )
        if (
            response.error_code != ErrorCode.none
            or response.records
            or request.max_wait_ms == 0
            or response.diverging_epoch.epoch >= 0
            or response.snapshot_id.epoch >= 0
        ):
            self._reply(envelope, response)
        else:
            # Long poll: answer when the log grows, the high watermark moves or max_wait passes.
            self._parked[request.replica_id] = _ParkedFetch(envelope, request, now_ms + request.max_wait_ms)

    def _try_complete_fetch(self, request: FetchRequest, now_ms: int) -> FetchResponse:
        error = self._validate_leader_only(request.current_leader_epoch)
        state = self.state
        if error is not None or not isinstance(state, Leader):
            return self._fetch_error(error or ErrorCode.not_leader_or_follower)
        kind, offset_and_epoch = validate_offset_and_epoch(self.log, request.fetch_offset, request.last_fetched_epoch)
        records: tuple[LogEntry, ...] = ()
        diverging = EpochEndOffset()
        snapshot_id = SnapshotId()
        if kind is ValidationKind.VALID:
            records = tuple(self.log.read(request.fetch_offset, request.partition_max_bytes))
            state.progress(request.replica_id).update(request.fetch_offset, self.log.end_offset(), now_ms)
            state.acknowledged.add(request.replica_id)
            self._maybe_advance_leader_high_watermark(state)
        elif kind is ValidationKind.DIVERGING:
            assert offset_and_epoch is not None
            diverging = EpochEndOffset(offset_and_epoch.epoch, offset_and_epoch.offset)
        else:
            assert offset_and_epoch is not None
            snapshot_id = SnapshotId(offset_and_epoch.offset, offset_and_epoch.epoch)
        return FetchResponse(
            ErrorCode.none,
            high_watermark=self.high_watermark if self._leader_has_high_watermark(state) else -1,
            log_start_offset=self.log.start_offset(),
            diverging_epoch=diverging,
            current_leader=LeaderIdAndEpoch(self.node_id, state.epoch),
            snapshot_id=snapshot_id,
            records=records,
        )

    def _leader_has_high_watermark(self, state: Leader) -> bool:
        """A new leader knows the high watermark only once it has committed in its own epoch."""
        return self.high_watermark > state.epoch_start_offset

    def _handle_fetch_snapshot(self, request: FetchSnapshotRequest, now_ms: int) -> FetchSnapshotResponse:
        current = LeaderIdAndEpoch(self._leader_or_none(), self.epoch)
        error = self._validate_leader_only(request.current_leader_epoch)
        if error is not None:
            return FetchSnapshotResponse(error, current_leader=current)
        snapshot = self.log.latest_snapshot()
        wanted = OffsetAndEpoch(request.snapshot_id.epoch, request.snapshot_id.end_offset)
        if snapshot is None or snapshot.snapshot_id != wanted:
            return FetchSnapshotResponse(ErrorCode.snapshot_not_found, current_leader=current)
        size = len(snapshot.data)
        if not 0 <= request.position < size:
            return FetchSnapshotResponse(ErrorCode.position_out_of_range, current_leader=current)
        state = self.state
        assert isinstance(state, Leader)
        state.record_voter_contact(
            request.replica_id, self.config.majority, self.config.check_quorum_timeout_ms, now_ms
        )
        chunk = snapshot.data[request.position : request.position + min(request.max_bytes, self.config.fetch_max_bytes)]
        return FetchSnapshotResponse(
            ErrorCode.none, request.snapshot_id, current, size=size, position=request.position, unaligned_records=chunk
        )

    def _describe_quorum(self, now_ms: int) -> DescribeQuorumResponse:
        state = self.state
        if not isinstance(state, Leader):
            return DescribeQuorumResponse(ErrorCode.not_leader_or_follower)
        own = state.replicas[self.node_id]
        own.last_fetch_ms = own.last_caught_up_ms = now_ms
        return DescribeQuorumResponse(
            ErrorCode.none,
            leader_id=self.node_id,
            leader_epoch=state.epoch,
            high_watermark=self.high_watermark if self._leader_has_high_watermark(state) else -1,
            current_voters=tuple(state.replicas[v].describe() for v in sorted(state.replicas)),
            observers=tuple(state.observers[o].describe() for o in sorted(state.observers)),
        )

    # ---- inbound responses --------------------------------------------------------------------------

    def _handle_response(self, source: int, body: Response, now_ms: int) -> bool:
        """Returns False when the request should be retried after the retry backoff."""
        if isinstance(body, DescribeQuorumResponse):
            return True
        if isinstance(body, FetchResponse | FetchSnapshotResponse):
            leader, epoch = body.current_leader.leader_id, body.current_leader.leader_epoch
        else:
            leader, epoch = body.leader_id, body.leader_epoch
        handled = self._handle_common_response(body.error_code, leader, epoch, now_ms)
        if handled is not None:
            return handled
        if body.error_code != ErrorCode.none:
            return False
        state = self.state
        if isinstance(body, VoteResponse):
            if isinstance(state, Candidate):
                if body.vote_granted:
                    state.granted.add(source)
                    self._maybe_become_leader(now_ms)
                else:
                    state.rejected.add(source)
                    # Lost for sure: back off at once instead of waiting for the election timeout.
                    if len(self.config.voters) - len(state.rejected) < self.config.majority and (
                        state.backoff_deadline is None
                    ):
                        state.backoff_deadline = now_ms + self._binary_exponential_backoff(state.retries)
        elif isinstance(body, BeginQuorumEpochResponse):
            if isinstance(state, Leader):
                state.acknowledged.add(source)
        elif isinstance(body, EndQuorumEpochResponse):
            if isinstance(state, Resigned):
                state.unacknowledged.discard(source)
        elif isinstance(body, FetchResponse):
            if isinstance(state, Follower):
                self._handle_fetch_response(state, body, now_ms)
        elif isinstance(state, Follower):
            self._handle_fetch_snapshot_response(state, body, now_ms)
        return True

    def _handle_common_response(self, error: ErrorCode, leader_id: int, epoch: int, now_ms: int) -> bool | None:
        """KafkaRaftClient.maybeHandleCommonResponse: epochs and leaders learned from any response."""
        if epoch < self.epoch or error == ErrorCode.unknown_leader_epoch:
            return True  # we are ahead of the responder: the response is stale
        if epoch > self.epoch or error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower):
            before = self.state
            self._maybe_transition(leader_id, epoch, now_ms)
            # Kafka retries at once; when nothing was learned (e.g. the leader is resigning) retrying at
            # once would spin, so wait the retry backoff.
            return self.state is not before
        if epoch == self.epoch and leader_id >= 0 and self.leader_id is None:
            self._maybe_transition(leader_id, epoch, now_ms)
            return None if error == ErrorCode.none else True
        if error in (ErrorCode.inconsistent_voter_set, ErrorCode.invalid_request):
            raise RaftInvariantError(f"node {self.node_id} got {error.name}: the voters' configurations disagree")
        return None

    def _handle_fetch_response(self, state: Follower, response: FetchResponse, now_ms: int) -> None:
        if response.diverging_epoch.epoch >= 0:
            target = OffsetAndEpoch(response.diverging_epoch.epoch, response.diverging_epoch.end_offset)
            local = self.log.end_offset_for_epoch(target.epoch)
            truncate_to = min(local.offset, target.offset)
            if truncate_to < self.high_watermark:
                raise RaftInvariantError(
                    f"leader {state.leader_id} asked node {self.node_id} to truncate to {truncate_to}, "
                    f"below its high watermark {self.high_watermark}"
                )
            self.log.truncate_to(truncate_to)
        elif response.snapshot_id.epoch >= 0 or response.snapshot_id.end_offset >= 0:
            snapshot_id = OffsetAndEpoch(response.snapshot_id.epoch, response.snapshot_id.end_offset)
            if snapshot_id.epoch >= 0 and snapshot_id.offset >= 0:
                state.fetching_snapshot = (snapshot_id, bytearray())
        else:
            if response.records:
                self.log.append_as_follower(list(response.records))
            if response.high_watermark >= 0:
                self._advance_high_watermark(min(response.high_watermark, self.log.end_offset()))
        state.fetch_deadline = now_ms + self.config.fetch_timeout_ms

    def _handle_fetch_snapshot_response(self, state: Follower, response: FetchSnapshotResponse, now_ms: int) -> None:
        state.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        fetching = state.fetching_snapshot
        if fetching is None:
            return
        if response.error_code == ErrorCode.snapshot_not_found or response.snapshot_id.epoch < 0:
            state.fetching_snapshot = None  # the leader moved on: fetch again and learn its new snapshot
            return
        snapshot_id, data = fetching
        received = OffsetAndEpoch(response.snapshot_id.epoch, response.snapshot_id.end_offset)
        if received != snapshot_id or response.position != len(data):
            raise RaftInvariantError(
                f"snapshot chunk {received}@{response.position}, expected {snapshot_id}@{len(data)}"
            )
        data.extend(response.unaligned_records)
        if len(data) < response.size:
            return
        state.fetching_snapshot = None
        if snapshot_id <= OffsetAndEpoch(self.log.last_fetched_epoch(), self.log.end_offset()):
            return  # the log already reaches past it (KRaft's truncateToLatestSnapshot declines too)
        snapshot = Snapshot(snapshot_id, bytes(data))
        self.log.install_snapshot(snapshot)
        self._step.events.append(SnapshotInstalled(snapshot))
        if snapshot_id.offset > self.high_watermark:
            self.high_watermark = snapshot_id.offset
            self._step.events.append(HighWatermarkAdvanced(self.high_watermark))

    # ---- the leader's log and high watermark --------------------------------------------------------

    def _leader_log_grew(self, state: Leader, now_ms: int) -> None:
        own = state.replicas[self.node_id]
        own.update(self.log.end_offset(), self.log.end_offset(), now_ms)
        self._maybe_advance_leader_high_watermark(state)
        self._wake_parked = True

    def _maybe_advance_leader_high_watermark(self, state: Leader) -> None:
        candidate = state.candidate_high_watermark()
        if candidate is not None and candidate > self.high_watermark:
            self._advance_high_watermark(candidate)
            self._wake_parked = True

    def _complete_parked(self, now_ms: int, expired_only: bool) -> None:
        """Answer long-polling fetches: all of them when the log or high watermark moved, else the expired."""
        for replica_id, parked in list(self._parked.items()):
            if expired_only and now_ms < parked.deadline:
                continue
            del self._parked[replica_id]
            self._reply(parked.envelope, self._try_complete_fetch(parked.request, now_ms))

    def _advance_high_watermark(self, offset: int) -> None:
        """Move the high watermark up (never down) and report the entries it commits."""
        if offset <= self.high_watermark:
            return
        first = max(self.high_watermark, self.log.start_offset())
        self.high_watermark = offset
        entries: list[LogEntry] = []
        while first < offset:
            chunk = self.log.read(first, self.config.fetch_max_bytes)[: offset - first]
            entries.extend(chunk)
            first += len(chunk)
        self._step.events.append(HighWatermarkAdvanced(offset))
        if entries:
            self._step.events.append(Committed(tuple(entries)))
