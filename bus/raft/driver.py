"""`RaftDriver`: runs a sans-IO `RaftNode` on the asyncio loop, between processes (KafkaRaftClient's poll loop
plus KafkaNetworkChannel).

The node decides; the driver only moves time and messages:

- a timer ticks the node every `tick_interval_ms` (the core has no "next deadline" query; 50 ms is a
  twentieth of the default election timeout, so timers fire at most that late), and every
  `clean_interval_ms` asks the log to apply metadata.max.retention.* (`maybe_clean`), as KafkaRaftClient's
  snapshot cleaner does every 60 s, so history expires by age without waiting for the next snapshot;
- requests the node emits go to their voter through a `NodeConnection` (`wire.to_kio` at `wire.VERSIONS`),
  and their responses come back into `node.handle` with the request's correlation id. A request that
  fails on the network comes back as an error response (`_failed`), which the node retries after its
  retry backoff, as KafkaNetworkChannel and KRaft's RequestManager do;
- a request arriving on the controller listener (`handle_request`) is handed to the node with a
  driver-local correlation id, and the handler awaits the reply the node addresses to it, which for a
  Fetch may come later (the leader parks it until data arrives or its max wait passes);
- the node's events become the driver's state: the leader, the high watermark (`wait_committed`), the
  committed entries (`committed_listeners`, which the controller's state machine will follow).

Clocks: the node runs on the monotonic clock, so a wall-clock step never fires or starves a timer.
DescribeQuorum's timestamps are wall-clock milliseconds in Kafka (kafka-metadata-quorum prints them), so
the driver shifts them onto the wall clock when a DescribeQuorum response leaves it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.network.network_client import NodeConnection, NodeConnectionError
from bus.network.node_security import NO_SECURITY, NodeSecurity
from bus.raft import wire
from bus.raft.config import QuorumConfig
from bus.raft.messages import (
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Envelope,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    ReplicaState,
    Request,
    Response,
    VoteRequest,
    VoteResponse,
)
from bus.raft.node import (
    Committed,
    HighWatermarkAdvanced,
    NotLeaderError,
    RaftInvariantError,
    RaftNode,
    RoleChanged,
    SnapshotInstalled,
    Step,
)
from bus.raft.quorum_state import QuorumStateStore
from bus.raft.replicated_log import LogEntry, RaftLog, Record, Snapshot
from bus.raft.roles import Role

log = logging.getLogger(__name__)

# Requests that arrive over the network are addressed to this pseudo-node: the node's reply to one comes
# back to the driver, which pairs it with the waiting handler by correlation id.
INBOUND = -2
TICK_INTERVAL_MS = 50
CLEAN_INTERVAL_MS = 60_000  # KafkaRaftClient's RaftMetadataLogCleanerManager interval


class RaftStoppedError(Exception):
    """The driver stopped (or failed) before the request or the wait completed."""


@dataclasses.dataclass(slots=True)
class _CommitWaiter:
    offset: int
    epoch: int | None  # the leader epoch the entry was appended in; None: any entry at that offset will do
    future: asyncio.Future[None]


class RaftDriver:
    def __init__(
        self,
        node_id: int,
        config: QuorumConfig,
        voters: Mapping[int, tuple[str, int]],
        log: RaftLog,
        store: QuorumStateStore,
        cluster_id: str | None,
        *,
        tick_interval_ms: int = TICK_INTERVAL_MS,
        clean_interval_ms: int = CLEAN_INTERVAL_MS,
        rng: random.Random | None = None,
        security: NodeSecurity = NO_SECURITY,
    ) -> None:
        if set(voters) != set(config.voters):
            raise ValueError(f"voter endpoints {sorted(voters)} do not match the voters {sorted(config.voters)}")
        self.node_id = node_id
        self.config = config
        self.voters = dict(voters)
        self.cluster_id = cluster_id
        self.security = security  # how the other voters' controller listener is reached
        self.tick_interval_s = tick_interval_ms / 1000.0
        self.clean_interval_ms = clean_interval_ms
        self.node = RaftNode(node_id, config, log, store, rng or random.Random(), self._now(), cluster_id)
        self.high_watermark = self.node.high_watermark
        self.committed_listeners: list[Callable[[tuple[LogEntry, ...]], None]] = []
        self.snapshot_listeners: list[Callable[[Snapshot], None]] = []
        self.role_listeners: list[Callable[[Role, int, int | None], None]] = []
        self.stop_callbacks: list[Callable[[], None]] = []  # run last in `stop` (e.g. closing the log's files)
        self._connections: dict[int, NodeConnection] = {}
        self._inbound: dict[int, asyncio.Future[Response]] = {}
        self._inbound_correlation = 0
        self._commit_waiters: list[_CommitWaiter] = []
        self._leader_waiters: list[asyncio.Future[int]] = []
        self._unreachable: int | None = None  # the node whose latest exchange with this one failed on the network
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._opened = False
        self._stopped = False  # no longer acting: stopped, or failed (then `failure` says why)
        self._closed = False  # `stop` ran
        self.failure: BaseException | None = None

    # ---- lifecycle ------------------------------------------------------------------------------------

    def open(self) -> None:
        """Process the events of the node's start without waiting: a lone voter leads at once and commits its
        log here, so the metadata it holds is applied before the broker opens its logs and coordinators."""
        if not self._opened:
            self._opened = True
            self._process(self.node.tick(self._now()))

    async def start(self) -> None:
        self.open()
        self._ticker = asyncio.create_task(self._tick_forever(), name=f"raft-{self.node_id}-ticker")

    async def stop(self, resign_timeout_s: float = 1.0) -> None:
        """Resign if leading (EndQuorumEpoch lets the others elect at once instead of after a fetch timeout),
        then stop ticking, fail every waiter and close the connections."""
        if self._closed:
            return
        self._closed = True
        if not self._stopped and self.node.role is Role.LEADER:
            with contextlib.suppress(NotLeaderError):
                self._process(self.node.resign(self.node.epoch, self._now()))
            if self._tasks:
                await asyncio.wait(set(self._tasks), timeout=resign_timeout_s)
        self._stopped = True
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks))
        self._fail_waiters(RaftStoppedError(f"raft node {self.node_id} stopped"))
        for connection in self._connections.values():
            await connection.close()
        for callback in self.stop_callbacks:
            callback()

    async def _tick_forever(self) -> None:
        next_clean = self._now() + self.clean_interval_ms
        while True:
            await asyncio.sleep(self.tick_interval_s)
            try:
                now = self._now()
                self._process(self.node.tick(now))
                if now >= next_clean:
                    next_clean = now + self.clean_interval_ms
                    self.node.log.maybe_clean()
            except Exception as exc:
                self._fatal(exc)
                return

    def _fatal(self, exc: BaseException) -> None:
        """The core found a broken invariant (or its log failed): stop acting rather than act on a bad state,
        as KRaft's fatal fault handler does."""
        log.critical("raft node %d stopped on an unrecoverable error", self.node_id, exc_info=exc)
        self.failure = exc
        self._stopped = True
        self._fail_waiters(RaftStoppedError(f"raft node {self.node_id} failed: {exc!r}"))

    # ---- what the broker asks -------------------------------------------------------------------------

    def leader(self) -> int | None:
        return self.node.leader_id

    def reachable_leader(self) -> int | None:
        """The leader, unless this node's latest request to it failed on the network (killed, paused, cut off):
        None then until a new leader is elected or a request gets through again. A follower learns of a leader's
        death at once (its fetch connection closes) but of the new leader only after an election timeout, and
        clients must not be sent to the dead one meanwhile."""
        leader = self.node.leader_id
        if leader is None or (leader != self.node_id and leader == self._unreachable):
            return None
        return leader

    @property
    def epoch(self) -> int:
        return self.node.epoch

    @property
    def role(self) -> Role:
        return self.node.role

    def append(self, records: list[Record]) -> int:
        """Append as leader; returns the last record's offset (committed once `wait_committed` returns)."""
        self._check_running()
        step, last = self.node.append(self.node.epoch, records, self._now())
        self._process(step)
        return last

    def latest_snapshot(self) -> Snapshot | None:
        return self.node.log.latest_snapshot()

    def create_snapshot(self, end_offset: int, data: bytes) -> Snapshot | None:
        """Keep `data`, the state machine's image of every offset below `end_offset` (committed), as the latest
        snapshot (the log below it goes by metadata.max.retention.*). None, and nothing written, when the latest
        snapshot already ends at or past `end_offset` (a snapshot from the leader was installed meanwhile)."""
        self._check_running()
        if end_offset <= self.node.snapshot_end():
            return None
        return self.node.create_snapshot(end_offset, data)

    async def wait_committed(self, offset: int, timeout_s: float | None = None) -> None:
        """Return once `offset` is below the high watermark. On the leader, an entry appended in the current
        epoch fails with NotLeaderError if the node loses leadership first (the entry may then be truncated)."""
        self._check_running()
        if offset < self.high_watermark:
            return
        epoch = self.node.epoch if self.node.role is Role.LEADER else None
        waiter = _CommitWaiter(offset, epoch, asyncio.get_running_loop().create_future())
        self._commit_waiters.append(waiter)
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(waiter.future)
        finally:
            if waiter in self._commit_waiters:
                self._commit_waiters.remove(waiter)

    async def wait_for_leader(self, timeout_s: float | None = None) -> int:
        """The leader's id, once one is known."""
        self._check_running()
        leader = self.node.leader_id
        if leader is not None:
            return leader
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._leader_waiters.append(future)
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(future)
        finally:
            if future in self._leader_waiters:
                self._leader_waiters.remove(future)

    async def describe(self) -> DescribeQuorumResponse:
        """DescribeQuorum as an admin client gets it from a broker: answered here when this node leads, else
        forwarded to the leader's controller listener (Kafka's brokers forward it to the active controller)."""
        self._check_running()
        leader = self.node.leader_id
        if leader is None or leader == self.node_id:
            response = await self.handle_request(DescribeQuorumRequest())
        else:
            try:
                response = await self._exchange(leader, DescribeQuorumRequest())
            except (NodeConnectionError, wire.WireError) as exc:
                log.info("DescribeQuorum forwarded to leader %d failed: %s", leader, exc)
                return DescribeQuorumResponse(ErrorCode.not_leader_or_follower, leader, self.node.epoch)
        assert isinstance(response, DescribeQuorumResponse)
        return response

    async def handle_request(self, body: Request) -> Response:
        """Hand a request from the network to the node and await its reply."""
        self._check_running()
        self._inbound_correlation += 1
        correlation = self._inbound_correlation
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._inbound[correlation] = future
        try:
            try:
                self._process(self.node.handle(Envelope(INBOUND, self.node_id, correlation, body), self._now()))
            except RaftInvariantError as exc:
                self._fatal(exc)
                raise
            # The node answers every request, a parked Fetch by its max wait; the bound only guards against
            # a reply that never comes (the connection would hang on it).
            async with asyncio.timeout(self.config.request_timeout_ms / 1000.0 + 1.0):
                return await future
        finally:
            self._inbound.pop(correlation, None)

    # ---- the node's output ----------------------------------------------------------------------------

    def _process(self, step: Step) -> None:
        for envelope in step.messages:
            if isinstance(envelope.body, Request):
                self._spawn(self._send(envelope, envelope.body))
            else:
                future = self._inbound.pop(envelope.correlation_id, None)
                if future is not None and not future.done():
                    future.set_result(self._on_wall_clock(envelope.body))
        for event in step.events:
            if isinstance(event, RoleChanged):
                self._role_changed(event)
            elif isinstance(event, HighWatermarkAdvanced):
                self._high_watermark_advanced(event.high_watermark)
            elif isinstance(event, Committed):
                for listener in self.committed_listeners:
                    listener(event.entries)
            elif isinstance(event, SnapshotInstalled):
                for snapshot_listener in self.snapshot_listeners:
                    snapshot_listener(event.snapshot)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, envelope: Envelope, request: Request) -> None:
        try:
            body = await self._exchange(envelope.destination, request)
        except (NodeConnectionError, wire.WireError) as exc:
            log.debug("raft %d -> %d %s failed: %s", self.node_id, envelope.destination, type(request).__name__, exc)
            timed_out = isinstance(exc, NodeConnectionError) and exc.timed_out
            body = self._failed(request, ErrorCode.request_timed_out if timed_out else ErrorCode.broker_not_available)
            self._unreachable = envelope.destination
        else:
            if self._unreachable == envelope.destination:
                self._unreachable = None
        if self._stopped:
            return
        response = Envelope(envelope.destination, self.node_id, envelope.correlation_id, body)
        try:
            self._process(self.node.handle(response, self._now()))
        except Exception as exc:
            self._fatal(exc)

    async def _exchange(self, destination: int, body: Request) -> Response:
        message = wire.to_kio(body)
        api_key = int(message.__api_key__)
        response = wire.from_kio(await self._connection(destination).request(message, wire.VERSIONS[api_key]))
        if isinstance(response, Request):
            raise wire.WireError(f"node {destination} answered {type(body).__name__} with a request")
        return response

    def _failed(self, request: Request, error: ErrorCode) -> Response:
        """The response KafkaNetworkChannel makes up for a request lost on the network (BROKER_NOT_AVAILABLE on a
        disconnect, REQUEST_TIMED_OUT on a timeout): the node retries it after `retry_backoff_ms` instead of
        waiting out its request timeout, which a follower's fetch timeout would otherwise beat. It names no
        leader and the node's current epoch, so the node learns nothing from it (a response from an older epoch
        is ignored anyway)."""
        epoch = self.node.epoch
        if isinstance(request, VoteRequest):
            return VoteResponse(error, NO_LEADER, epoch, False)
        if isinstance(request, BeginQuorumEpochRequest):
            return BeginQuorumEpochResponse(error, NO_LEADER, epoch)
        if isinstance(request, EndQuorumEpochRequest):
            return EndQuorumEpochResponse(error, NO_LEADER, epoch)
        if isinstance(request, FetchRequest):
            return FetchResponse(error, -1, current_leader=LeaderIdAndEpoch(NO_LEADER, epoch))
        if isinstance(request, FetchSnapshotRequest):
            return FetchSnapshotResponse(error, current_leader=LeaderIdAndEpoch(NO_LEADER, epoch))
        return DescribeQuorumResponse(error)

    def _connection(self, node_id: int) -> NodeConnection:
        connection = self._connections.get(node_id)
        if connection is None:
            host, port = self.voters[node_id]
            timeout_s = self.config.request_timeout_ms / 1000.0
            connection = self._connections[node_id] = NodeConnection(
                host, port, f"raft-client-{self.node_id}", request_timeout_s=timeout_s, connect_timeout_s=timeout_s,
                security=self.security)
        return connection

    def _role_changed(self, event: RoleChanged) -> None:
        log.info("raft node %d: %s in epoch %d (leader %s)", self.node_id, event.role.value, event.epoch,
                 "unknown" if event.leader_id is None else event.leader_id)
        lost = [w for w in self._commit_waiters if w.epoch is not None and
                not (event.role is Role.LEADER and event.epoch == w.epoch)]
        for waiter in lost:
            self._commit_waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_exception(NotLeaderError(
                    f"node {self.node_id} lost the leadership of epoch {waiter.epoch} before offset "
                    f"{waiter.offset} was committed"))
        if event.leader_id is not None:
            waiters, self._leader_waiters = self._leader_waiters, []
            for future in waiters:
                if not future.done():
                    future.set_result(event.leader_id)
        for listener in self.role_listeners:
            listener(event.role, event.epoch, event.leader_id)

    def _high_watermark_advanced(self, high_watermark: int) -> None:
        self.high_watermark = high_watermark
        done = [w for w in self._commit_waiters if w.offset < high_watermark]
        for waiter in done:
            self._commit_waiters.remove(waiter)
            if not waiter.future.done():
                waiter.future.set_result(None)

    def _fail_waiters(self, error: Exception) -> None:
        futures: list[asyncio.Future[Any]] = [
            *self._inbound.values(), *(w.future for w in self._commit_waiters), *self._leader_waiters]
        self._inbound.clear()
        self._commit_waiters.clear()
        self._leader_waiters.clear()
        for future in futures:
            if not future.done():
                future.set_exception(error)

    def _check_running(self) -> None:
        if self._stopped:
            raise RaftStoppedError(f"raft node {self.node_id} is stopped" +
                                   (f" after {self.failure!r}" if self.failure else ""))

    # ---- clocks ---------------------------------------------------------------------------------------

    @staticmethod
    def _now() -> int:
        return time.monotonic_ns() // 1_000_000

    def _on_wall_clock(self, body: Response) -> Response:
        if not isinstance(body, DescribeQuorumResponse):
            return body
        shift = int(time.time() * 1000) - self._now()

        def wall(replicas: tuple[ReplicaState, ...]) -> tuple[ReplicaState, ...]:
            return tuple(dataclasses.replace(
                r,
                last_fetch_timestamp=r.last_fetch_timestamp + shift if r.last_fetch_timestamp >= 0 else -1,
                last_caught_up_timestamp=r.last_caught_up_timestamp + shift if r.last_caught_up_timestamp >= 0 else -1,
            ) for r in replicas)

        return dataclasses.replace(body, current_voters=wall(body.current_voters), observers=wall(body.observers))
