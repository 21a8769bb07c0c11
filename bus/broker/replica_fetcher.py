"""A follower's side of replication: copy partitions from their leaders (Kafka's ReplicaFetcherManager,
ReplicaFetcherThread and AbstractFetcherThread).

One fetcher per source broker, an asyncio task with one `NodeConnection`, sends Fetch v12 for the partitions
this node follows on that broker, as a replica (`replica_id` = our node id, so the leader reads up to its log
end and counts our fetch offset as our progress), in an incremental fetch session (fetch_session_handler.py):
after a first full fetch, a request names only partitions whose position changed and a response only those
with news, so a cycle costs what changed rather than every followed partition. Per partition in the response:

- records: appended with the leader's offsets (`Partition.append_as_follower`), then the leader's high
  watermark and log start offset followed as far as our log reaches;
- a diverging epoch (KIP-320/595: our last fetched epoch ends earlier on the leader): truncate to where our
  logs agree (`truncation_point`, Kafka's getOffsetTruncationState) and fetch again from there;
- OFFSET_OUT_OF_RANGE: ask the leader for its log end and start (ListOffsets) and truncate to its end, or start
  empty at its log start (Kafka's handleOutOfRangeError);
- a leadership error (the metadata is about to move the partition): that partition waits
  `replica.fetch.backoff.ms`, the others go on.

Replication throttles (replication_quota.py): a partition this broker throttles as follower and that is not caught
up is left out of the fetch while the follower quota is exceeded; the bytes fetched for throttled partitions count.

The ReplicaManager adds and removes partitions as the metadata makes this node a follower or not; any await
may see a partition removed or added again (another leader or epoch), so each response entry is applied
only if the partition is still the one fetched and its log still ends where the fetch started. A fetcher
left with no partitions stops. Nothing raises out of a fetcher: failures are logged once when they start
(and when they end), and retried after the backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.fetch_session_handler import FetchSessionHandler, PartitionFetch, SessionFetch
from bus.broker.partition import Partition, PartitionError
from bus.broker.replication_quota import ReplicationQuota
from bus.config.broker import BrokerConfig
from bus.config.definitions import ConfigError
from bus.log.errors import LogClosedError
from bus.log.leader_epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from bus.network.network_client import NodeConnection, NodeConnectionError
from bus.network.node_security import NO_SECURITY, NodeSecurity
from bus.protocol.messages import request_shapes
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

FETCH = 1
FETCH_VERSION = 12  # topic names, last_fetched_epoch and diverging_epoch (KIP-595)
LIST_OFFSETS = 2
LIST_OFFSETS_VERSION = 7  # current_leader_epoch (v4+)
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
READ_UNCOMMITTED = 0
# The metadata will move the partition (another leader, a newer epoch): wait for it, as Kafka's fetcher does.
WAIT_FOR_METADATA = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
})
# The leader lost our fetch session (restarted, evicted it): the next fetch is full, and goes at once.
SESSION_ERRORS = frozenset({ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch})


@dataclasses.dataclass(frozen=True, slots=True)
class FetcherSettings:
    """What a fetcher needs of the broker's configuration (the replica.fetch.* keys, Kafka's names)."""

    node_id: int
    fetch_max_bytes: int  # replica.fetch.max.bytes, per partition
    response_max_bytes: int  # replica.fetch.response.max.bytes
    min_bytes: int  # replica.fetch.min.bytes
    wait_max_ms: int  # replica.fetch.wait.max.ms
    backoff_ms: int  # replica.fetch.backoff.ms
    socket_timeout_ms: int  # replica.socket.timeout.ms
    security: NodeSecurity = NO_SECURITY  # how the leaders' inter-broker listener is reached

    @classmethod
    def from_broker(cls, config: BrokerConfig, security: NodeSecurity) -> FetcherSettings:
        settings = cls(config.node_id, int(config["replica.fetch.max.bytes"]),
                       int(config["replica.fetch.response.max.bytes"]), int(config["replica.fetch.min.bytes"]),
                       int(config["replica.fetch.wait.max.ms"]), int(config["replica.fetch.backoff.ms"]),
                       int(config["replica.socket.timeout.ms"]), security)
        if settings.socket_timeout_ms < settings.wait_max_ms:  # Kafka refuses this too: every idle fetch would time out
            raise ConfigError("replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to "
                              "prevent unnecessary socket timeouts")
        return settings


@dataclasses.dataclass(frozen=True, slots=True)
class TruncationPoint:
    """Where a follower truncates after the leader named a diverging epoch (Kafka's OffsetTruncationState).
    Not `completed`: the leader's epoch is unknown here, so this is an intermediate point and the next fetch
    (with an older last fetched epoch) may name an earlier divergence."""

    offset: int
    completed: bool


def truncation_point(leader_epoch: int, leader_end_offset: int, own_epoch_end: tuple[int, int],
                     log_end_offset: int, fetch_offset: int) -> TruncationPoint:
    """Kafka's getOffsetTruncationState. `leader_epoch`/`leader_end_offset`: the diverging epoch the leader
    answered and where that epoch ends on it; `own_epoch_end`: this log's `end_offset_for_epoch(leader_epoch)`,
    (-1, -1) when undefined here."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return TruncationPoint(fetch_offset, True)  # the leader knows no end: keep what was fetched
    if leader_epoch == UNDEFINED_EPOCH:
        return TruncationPoint(min(leader_end_offset, log_end_offset), True)
    own_epoch, own_end = own_epoch_end
    if own_end == UNDEFINED_EPOCH_OFFSET:
        # Our log tracks no epoch at or below the leader's: its end offset is the safe point (pre-KIP-279 rule).
        return TruncationPoint(min(leader_end_offset, log_end_offset), True)
    if own_epoch != leader_epoch:
        # We never saw the leader's epoch: cut to the end of our largest epoch below it and ask again.
        return TruncationPoint(min(own_end, log_end_offset), False)
    return TruncationPoint(min(own_end, leader_end_offset, log_end_offset), True)


@dataclasses.dataclass(eq=False, slots=True)
class _FetchState:
    """One followed partition. A new object whenever the partition is added again, so a response to a fetch
    sent for the old one is recognised and dropped."""

    partition: Partition
    delayed_until: float = 0.0  # monotonic seconds: a partition error holds the partition back until then
    leader_high_watermark: int = -1
    error: ErrorCode | None = None  # the error it waits out, to log each change once


def _tp(partition: Partition) -> TopicPartition:
    return TopicPartition(partition.topic, partition.index)


class ReplicaFetcherManager:
    """Which fetcher copies which partition: one fetcher per source broker (Kafka's num.replica.fetchers = 1)."""

    def __init__(self, settings: FetcherSettings, endpoint_of: Callable[[int], tuple[str, int] | None],
                 quota: ReplicationQuota | None = None) -> None:
        """`quota`: the follower replication quota (follower.replication.throttled.rate), None: never throttled."""
        self.settings = settings
        self.endpoint_of = endpoint_of
        self.quota = quota
        self._fetchers: dict[int, _Fetcher] = {}
        self._leader_of: dict[TopicPartition, int] = {}
        self._stopping: set[asyncio.Task[None]] = set()

    def add(self, leader_id: int, partition: Partition) -> None:
        """Follow `partition` on `leader_id` from its log end on, replacing an earlier entry for the partition
        (at this leader or another). Call on the event loop."""
        tp = _tp(partition)
        previous = self._leader_of.get(tp)
        if previous is not None and previous != leader_id:
            self._drop(previous, tp)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = _Fetcher(leader_id, self.settings, self.endpoint_of, self.quota)
        fetcher.add(tp, _FetchState(partition))
        self._leader_of[tp] = leader_id

    def remove(self, partition: Partition) -> None:
        """Stop following `partition` (this node leads it now, or no longer hosts it)."""
        tp = _tp(partition)
        leader_id = self._leader_of.get(tp)
        if leader_id is not None and self._fetchers[leader_id].follows(tp, partition):
            self._drop(leader_id, tp)

    def _drop(self, leader_id: int, tp: TopicPartition) -> None:
        self._leader_of.pop(tp, None)
        fetcher = self._fetchers[leader_id]
        fetcher.states.pop(tp, None)
        if not fetcher.states:  # Kafka's shutdownIdleFetcherThreads
            del self._fetchers[leader_id]
            task = fetcher.stop()
            if task is not None:
                self._stopping.add(task)
                task.add_done_callback(self._stopping.discard)

    def max_lag(self) -> int:
        """The largest lag over the followed partitions: the leader's high watermark (the end its fetch
        responses tell) less our log end, as Kafka's ReplicaFetcherManager MaxLag gauge."""
        return max((max(0, state.leader_high_watermark - state.partition.log.log_end_offset)
                    for fetcher in self._fetchers.values() for state in fetcher.states.values()), default=0)

    async def close(self) -> None:
        """Stop every fetcher and close its connection."""
        tasks = [task for fetcher in self._fetchers.values() if (task := fetcher.stop()) is not None]
        self._fetchers.clear()
        self._leader_of.clear()
        tasks += self._stopping
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


class _Fetcher:
    """The partitions fetched from one broker and the task that fetches them (Kafka's ReplicaFetcherThread)."""

    def __init__(self, leader_id: int, settings: FetcherSettings,
                 endpoint_of: Callable[[int], tuple[str, int] | None], quota: ReplicationQuota | None) -> None:
        self.leader_id = leader_id
        self.quota = quota
        self.settings = settings
        self.endpoint_of = endpoint_of
        self.states: dict[TopicPartition, _FetchState] = {}
        self._wake = asyncio.Event()
        self._connection: NodeConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._failing: str | None = None  # the failure being backed off from, logged once
        self._session = FetchSessionHandler(leader_id)
        self.backoff_s = settings.backoff_ms / 1000.0

    def add(self, tp: TopicPartition, state: _FetchState) -> None:
        self.states[tp] = state
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def follows(self, tp: TopicPartition, partition: Partition) -> bool:
        state = self.states.get(tp)
        return state is not None and state.partition is partition

    def stop(self) -> asyncio.Task[None] | None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return task

    # -- the loop --------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while self.states:
                try:
                    await self._round()
                except Exception as exc:  # a bug: never end the fetcher on it, nor log it at every retry
                    if self._failing is None:
                        log.exception("replica fetcher for broker %d: unexpected failure; retrying every %.1fs",
                                      self.leader_id, self.backoff_s)
                    self._failing = repr(exc)
                    await self._sleep(self.backoff_s)
        finally:
            connection, self._connection = self._connection, None
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.close()

    async def _sleep(self, seconds: float) -> None:
        """Wait `seconds`, or less if a partition is added meanwhile. `asyncio.timeout`, not `wait_for`: on
        Python 3.11 `wait_for` can swallow a cancellation that arrives as the event is set, and the fetcher's task
        then never ends (`close()` and the broker's shutdown hung on it)."""
        self._wake.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(seconds, 0.0)):
                await self._wake.wait()

    async def _round(self) -> None:
        now = time.monotonic()
        waiting = {tp: state for tp, state in self.states.items() if state.delayed_until <= now}
        ready = {tp: state for tp, state in waiting.items() if not self._throttled(tp, state)}
        if not ready:
            # Only throttled partitions are due: wait the backoff, as Kafka's fetcher does with nothing to fetch.
            await self._sleep(self.backoff_s if waiting else
                              min(state.delayed_until for state in self.states.values()) - now)
            return
        connection = await self._connect()
        if connection is None:
            self._failed(f"broker {self.leader_id} has no known endpoint")
            await self._sleep(self.backoff_s)
            return
        wanted = {tp: self._partition_fetch(state.partition) for tp, state in ready.items()}
        fetch = self._session.build(wanted)
        try:
            response = await connection.request(self._fetch_request(fetch), FETCH_VERSION)
        except NodeConnectionError as exc:
            self._session.handle_error()
            self._failed(f"fetch from broker {self.leader_id} at {connection.host}:{connection.port} failed: {exc}")
            await self._sleep(self.backoff_s)
            return
        answered = [(TopicPartition(topic.topic, int(data.partition_index)), data)
                    for topic in response.responses for data in topic.partitions]
        if not self._session.handle_response(fetch, response.error_code, response.session_id,
                                             (tp for tp, _ in answered)):
            if response.error_code not in SESSION_ERRORS:  # a session lost is retried at once, with a full fetch
                self._failed(f"broker {self.leader_id} refused the fetch: {response.error_code.name}"
                             if response.error_code != ErrorCode.none else
                             f"broker {self.leader_id} answered partitions outside the fetch session")
                await self._sleep(self.backoff_s)
            return
        self._recovered()
        for tp, data in answered:
            state = ready.get(tp)
            if state is None or self.states.get(tp) is not state:
                continue  # removed or added again while the fetch was out
            try:
                await self._process(connection, tp, state, wanted[tp].fetch_offset, data)
            except (PartitionError, NodeConnectionError, ValueError, OSError, LogClosedError) as exc:
                self._hold(tp, state, exc)

    async def _connect(self) -> NodeConnection | None:
        """The connection to the leader's current endpoint (a new one if the broker moved), None while unknown."""
        endpoint = self.endpoint_of(self.leader_id)
        connection = self._connection
        if connection is not None and (connection.host, connection.port) != endpoint:
            self._connection = None
            self._session.handle_error()  # another endpoint, perhaps another process: a new session
            await connection.close()
        if endpoint is None:
            return None
        if self._connection is None:
            timeout_s = self.settings.socket_timeout_ms / 1000.0
            self._connection = NodeConnection(endpoint[0], endpoint[1],
                                              f"broker-{self.settings.node_id}-fetcher-{self.leader_id}",
                                              request_timeout_s=timeout_s, connect_timeout_s=timeout_s,
                                              security=self.settings.security)
        return self._connection

    def _throttled(self, tp: TopicPartition, state: _FetchState) -> bool:
        """Kafka's shouldFollowerThrottle: a partition this broker throttles as follower, not caught up with the
        leader's high watermark, waits while the follower quota is exceeded; an in-sync replica never does."""
        quota = self.quota
        if quota is None or not quota.is_throttled(tp):
            return False
        in_sync = 0 <= state.leader_high_watermark <= state.partition.log.log_end_offset
        return not in_sync and quota.is_quota_exceeded()

    def _partition_fetch(self, partition: Partition) -> PartitionFetch:
        log_ = partition.log
        return PartitionFetch(log_.log_end_offset, log_.log_start_offset, self.settings.fetch_max_bytes,
                              partition.leader_epoch, log_.latest_epoch)

    def _fetch_request(self, fetch: SessionFetch) -> Any:
        shapes = request_shapes(FETCH, FETCH_VERSION)
        settings = self.settings
        by_topic: dict[str, list[Any]] = {}
        for tp, wanted in fetch.to_send.items():
            by_topic.setdefault(tp.topic, []).append(shapes.make(
                "FetchPartition", partition=tp.partition, current_leader_epoch=wanted.current_leader_epoch,
                fetch_offset=wanted.fetch_offset, last_fetched_epoch=wanted.last_fetched_epoch,
                log_start_offset=wanted.log_start_offset, partition_max_bytes=wanted.max_bytes))
        forgotten: dict[str, list[int]] = {}
        for tp in fetch.to_forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        return shapes.make(
            "FetchRequest", replica_id=settings.node_id, max_wait=settings.wait_max_ms, min_bytes=settings.min_bytes,
            max_bytes=settings.response_max_bytes, isolation_level=READ_UNCOMMITTED, session_id=fetch.session_id,
            session_epoch=fetch.epoch,
            topics=[shapes.make("FetchTopic", topic=topic, partitions=parts) for topic, parts in by_topic.items()],
            forgotten_topics_data=[shapes.make("ForgottenTopic", topic=topic, partitions=parts)
                                   for topic, parts in forgotten.items()],
            rack_id="")

    # -- one partition's answer ------------------------------------------------------------------------------

    async def _process(self, connection: NodeConnection, tp: TopicPartition, state: _FetchState,
                       fetch_offset: int, data: Any) -> None:
        partition = state.partition
        code = data.error_code
        if code == ErrorCode.offset_out_of_range:
            await self._out_of_range(connection, tp, state)
            return
        if code != ErrorCode.none:
            self._hold(tp, state, PartitionError(code))
            return
        if partition.log.log_end_offset != fetch_offset:
            return  # truncated meanwhile (a new epoch): the next fetch starts from the new end
        self._clear(tp, state)
        diverging = data.diverging_epoch
        if diverging.epoch >= 0:
            self._truncate_diverging(tp, partition, int(diverging.epoch), int(diverging.end_offset), fetch_offset)
            return
        if data.records:
            partition.append_as_follower(bytes(data.records))
            if self.quota is not None and self.quota.is_throttled(tp):
                self.quota.record(len(data.records))
        leader_high_watermark = int(data.high_watermark)
        state.leader_high_watermark = leader_high_watermark
        partition.update_follower_high_watermark(leader_high_watermark)
        leader_start = int(data.log_start_offset)
        if partition.log.log_start_offset < leader_start <= partition.log.log_end_offset:
            partition.log.delete_records_before(leader_start)  # DeleteRecords or retention on the leader

    def _truncate_diverging(self, tp: TopicPartition, partition: Partition, epoch: int, end_offset: int,
                            fetch_offset: int) -> None:
        log_ = partition.log
        point = truncation_point(epoch, end_offset, log_.end_offset_for_epoch(epoch), log_.log_end_offset,
                                 fetch_offset)
        if point.offset < partition.high_watermark:
            log.warning("%s: truncating to %d, below the high watermark %d (the leader diverges at epoch %d, end "
                        "offset %d)", tp, point.offset, partition.high_watermark, epoch, end_offset)
        else:
            log.info("%s: truncating from %d to %d: the leader diverges at epoch %d, end offset %d%s", tp,
                     log_.log_end_offset, point.offset, epoch, end_offset,
                     "" if point.completed else " (an epoch unknown here: intermediate)")
        partition.truncate_to(point.offset)

    async def _out_of_range(self, connection: NodeConnection, tp: TopicPartition, state: _FetchState) -> None:
        """Kafka's fetchOffsetAndTruncate: our log runs past the leader's end (an unclean election) or ends
        before its start (it deleted what we lack)."""
        leader_end = await self._list_offset(connection, tp, state, LATEST_TIMESTAMP)
        partition = state.partition
        if self.states.get(tp) is not state:
            return
        end = partition.log.log_end_offset
        if leader_end < end:
            log.warning("%s: the leader's log ends at %d, before ours at %d (high watermark %d): truncating",
                        tp, leader_end, end, partition.high_watermark)
            partition.truncate_to(leader_end)
            return
        leader_start = await self._list_offset(connection, tp, state, EARLIEST_TIMESTAMP)
        if self.states.get(tp) is not state or partition.log.log_end_offset != end:
            return
        if leader_start > end:
            log.info("%s: the leader's log starts at %d, past our end %d: starting over there", tp, leader_start, end)
            partition.truncate_fully_and_start_at(leader_start)
            return
        # Our end lies within the leader's log after all (it moved meanwhile): fetch it again, after the backoff
        # so a leader that keeps refusing it is not asked in a tight loop.
        self._hold(tp, state, PartitionError(ErrorCode.offset_out_of_range,
                                             f"offset {end} is within the leader's [{leader_start}, {leader_end}]"))

    async def _list_offset(self, connection: NodeConnection, tp: TopicPartition, state: _FetchState,
                           timestamp: int) -> int:
        shapes = request_shapes(LIST_OFFSETS, LIST_OFFSETS_VERSION)
        request = shapes.make(
            "ListOffsetsRequest", replica_id=self.settings.node_id, isolation_level=READ_UNCOMMITTED,
            topics=[shapes.make("ListOffsetsTopic", name=tp.topic, partitions=[shapes.make(
                "ListOffsetsPartition", partition_index=tp.partition,
                current_leader_epoch=state.partition.leader_epoch, timestamp=timestamp)])])
        response = await connection.request(request, LIST_OFFSETS_VERSION)
        for topic in response.topics:
            for data in topic.partitions:
                if topic.name == tp.topic and data.partition_index == tp.partition:
                    if data.error_code != ErrorCode.none:
                        raise PartitionError(data.error_code, f"ListOffsets of {tp} on broker {self.leader_id}")
                    return int(data.offset)
        raise PartitionError(ErrorCode.unknown_server_error, f"broker {self.leader_id} did not answer for {tp}")

    # -- failures --------------------------------------------------------------------------------------------

    def _hold(self, tp: TopicPartition, state: _FetchState, exc: Exception) -> None:
        """The partition waits `replica.fetch.backoff.ms`; the others go on. A new kind of error is logged."""
        state.delayed_until = time.monotonic() + self.backoff_s
        code = exc.code if isinstance(exc, PartitionError) else ErrorCode.unknown_server_error
        if state.error != code:
            state.error = code
            level = logging.INFO if code in WAIT_FOR_METADATA else logging.WARNING
            detail = code.name if str(exc) == code.name else f"{code.name} ({exc})"
            log.log(level, "%s: fetching from broker %d paused for %.1fs: %s", tp, self.leader_id, self.backoff_s,
                    detail)

    def _clear(self, tp: TopicPartition, state: _FetchState) -> None:
        if state.error is not None:
            log.info("%s: fetching from broker %d again after %s", tp, self.leader_id, state.error.name)
            state.error = None

    def _failed(self, reason: str) -> None:
        if self._failing is None:
            log.warning("replica fetcher for broker %d: %s; retrying every %.1fs", self.leader_id, reason,
                        self.backoff_s)
        self._failing = reason

    def _recovered(self) -> None:
        if self._failing is not None:
            log.info("replica fetcher for broker %d: fetching again (after: %s)", self.leader_id, self._failing)
            self._failing = None
