"""The consumer's side of the classic group protocol: coordinator, join/sync, heartbeats, offsets.

Java's ConsumerCoordinator + AbstractCoordinator. The consumer's thread drives rebalances from
`poll()`: FindCoordinator, JoinGroup (the leader then runs the agreed assignor over every member's
subscription), SyncGroup, and the listener calls around them, eager (revoke everything before
joining) or cooperative (KIP-429: keep what stays, revoke only what moves, then rejoin). A background
heartbeat thread keeps the membership alive between polls on its own connection, notices a
rebalance or a lost membership, sends asynchronous commits, and leaves the group if the application
stops polling for longer than max.poll.interval.ms, exactly as the Java heartbeat thread does.

A refused login (`AuthenticationError`) on the consumer's thread reaches the caller of `poll()` or `commit_sync()`;
the heartbeat thread, which has no caller, logs it and treats its connection as lost, like any broken one.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.assignors import COOPERATIVE, AbstractAssignor, rebalance_protocol
from bus.client.cluster import Metadata
from bus.client.connection import BrokerConnection, KafkaConnectionError, request_for
from bus.client.errors import (
    AuthenticationError,
    BrokerResponseError,
    CommitFailedError,
    KafkaError,
    KafkaTimeoutError,
)
from bus.client.subscription import OffsetAndMetadata, SubscriptionState, TopicPartition
from bus.protocol.consumer_protocol import Assignment, decode_assignment, decode_subscription, encode_assignment

log = logging.getLogger(__name__)

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
OFFSET_COMMIT_VERSIONS = range(2, 10)  # v10 names topics by id
OFFSET_FETCH_VERSIONS = range(1, 10)
_COORDINATOR_ERRORS = {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
                       ErrorCode.coordinator_load_in_progress}
_MEMBERSHIP_LOST = {ErrorCode.unknown_member_id, ErrorCode.illegal_generation, ErrorCode.fenced_instance_id}
# How the heartbeat connection fails; the heartbeat thread drops it and carries on.
_HEARTBEAT_CONNECTION_FAILURES = (KafkaConnectionError, AuthenticationError, OSError)

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], Any]


class ConsumerCoordinator:
    """Membership in one group and the group's committed offsets."""

    def __init__(self, *, group_id: str, group_instance_id: str | None, metadata: Metadata,
                 subscriptions: SubscriptionState, assignors: list[AbstractAssignor], client_id: str,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 request_timeout_ms: int, retry_backoff_ms: int, rack: str | None,
                 exclude_internal_topics: bool) -> None:
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.assignors = assignors
        self.protocol = rebalance_protocol(assignors)
        self.client_id = client_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000.0
        self.request_timeout = request_timeout_ms / 1000.0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.rack = rack
        self.exclude_internal = exclude_internal_topics
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader_id = ""
        self.need_rejoin = True
        self.lost = False  # membership lost since the last join: partitions go to on_partitions_lost
        self.joined_partition_counts: dict[str, int] = {}
        self.coordinator: tuple[int, str, int] | None = None
        self._conn: BrokerConnection | None = None  # the consumer thread's
        self._hb_conn: BrokerConnection | None = None  # the heartbeat thread's
        self._state_lock = threading.RLock()
        self._wake = threading.Condition(threading.Lock())
        self._async_commits: collections.deque[tuple[dict[TopicPartition, OffsetAndMetadata], CommitCallback | None]] \
            = collections.deque()
        self.completed_commits: collections.deque[tuple[CommitCallback, dict[TopicPartition, OffsetAndMetadata],
                                                        Exception | None]] = collections.deque()
        # One commit on the wire at a time, in the order the consumer made them: async commits go out
        # on the heartbeat connection, sync ones on the consumer's, so without this an older queued
        # offset could land after a newer synchronous one (e.g. close()'s final commit).
        self._commit_lock = threading.Lock()
        self.last_poll = time.monotonic()
        self.max_poll_interval = rebalance_timeout_ms / 1000.0
        self._stable = False
        self._closed = False
        # Set by the consumer: commit consumed offsets (auto-commit) before partitions may move.
        self.before_rebalance: Callable[[], None] = lambda: None
        self._heartbeat = threading.Thread(target=self._heartbeat_loop, name=f"bus-heartbeat-{group_id}",
                                           daemon=True)
        self._heartbeat.start()

    # -- coordinator discovery ------------------------------------------------------------------

    def _find_coordinator(self, deadline: float) -> tuple[int, str, int]:
        last: Exception | None = None
        while True:
            try:
                with self.metadata._lock:
                    conn = self.metadata._connection()
                    response = request_for(conn, FIND_COORDINATOR, lambda s: s.make(
                        "FindCoordinatorRequest", key=self.group_id, key_type=0, coordinator_keys=[self.group_id]))
                entry = response.coordinators[0] if hasattr(response, "coordinators") else response
                if entry.error_code == ErrorCode.none:
                    return int(entry.node_id), entry.host, int(entry.port)
                last = BrokerResponseError(entry.error_code, getattr(entry, "error_message", None))
                if not entry.error_code.retriable:
                    raise last
            except (KafkaConnectionError, OSError) as exc:
                self.metadata._drop_connection()
                last = exc
            if time.monotonic() + self.retry_backoff > deadline:
                raise KafkaTimeoutError(f"no coordinator for group {self.group_id}: {last}")
            time.sleep(self.retry_backoff)

    def _coordinator_conn(self, deadline: float) -> BrokerConnection:
        if self._conn is not None:
            return self._conn
        while True:
            if self.coordinator is None:
                self.coordinator = self._find_coordinator(deadline)
            _, host, port = self.coordinator
            try:
                # JoinGroup legitimately waits up to the rebalance timeout for other members.
                self._conn = self.metadata.open(host, port,
                                                timeout=max(self.request_timeout, self.rebalance_timeout_ms / 1000 + 5))
                return self._conn
            except (KafkaConnectionError, OSError) as exc:
                self.coordinator_dead(str(exc))
                if time.monotonic() + self.retry_backoff > deadline:
                    raise KafkaTimeoutError(f"cannot reach the coordinator of {self.group_id}: {exc}") from None
                time.sleep(self.retry_backoff)

    def coordinator_dead(self, reason: str) -> None:
        if self.coordinator is not None:
            log.info("group %s: coordinator %s marked dead: %s", self.group_id, self.coordinator, reason)
        self.coordinator = None
        for attr in ("_conn", "_hb_conn"):
            conn = getattr(self, attr)
            if conn is not None:
                conn.close()
                setattr(self, attr, None)

    def _request(self, api_key: int, build: Callable[[Any], Any], deadline: float,
                 wanted: range | None = None) -> Any:
        """One request to the coordinator on the consumer thread's connection, rediscovering on failure."""
        while True:
            conn = self._coordinator_conn(deadline)
            try:
                response = request_for(conn, api_key, build, wanted)
            except (KafkaConnectionError, OSError) as exc:
                self.coordinator_dead(str(exc))
                if time.monotonic() + self.retry_backoff > deadline:
                    raise KafkaTimeoutError(f"group {self.group_id}: {exc}") from None
                time.sleep(self.retry_backoff)
                continue
            return response

    # -- joining --------------------------------------------------------------------------------

    @property
    def rejoin_needed(self) -> bool:
        return self.need_rejoin or self._subscription_changed()

    def _subscription_changed(self) -> bool:
        """New topics (pattern or metadata) or a changed partition count since the last join."""
        view = self.metadata.view
        counts = {t: view.partition_count(t) for t in self.subscriptions.topics}
        return any(c is not None and self.joined_partition_counts.get(t) != c for t, c in counts.items())

    def poll(self, deadline: float) -> None:
        """Keep the membership: rejoin if needed, deliver finished async-commit callbacks."""
        self.last_poll = time.monotonic()
        self.invoke_completed_commits()
        if self.subscriptions.kind == SubscriptionState.AUTO_PATTERN:
            self._match_pattern()
        if self.rejoin_needed:
            self.ensure_active_group(deadline)

    def _match_pattern(self) -> None:
        self.metadata.all_topics = True
        view = self.metadata.maybe_refresh()
        internal = {name for name, t in view.topics.items() if t.internal}
        if self.subscriptions.match_pattern(view.topics, self.exclude_internal, internal):
            self.metadata.add_topics(self.subscriptions.topics)

    def ensure_active_group(self, deadline: float) -> None:
        while self.rejoin_needed:
            self.metadata.add_topics(self.subscriptions.topics)
            with contextlib.suppress(KafkaConnectionError, OSError):
                self.metadata.refresh()
            self._on_join_prepare()
            assignment = self._join_and_sync(deadline)
            if assignment is not None:
                self._on_join_complete(assignment)
            elif time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"group {self.group_id}: rebalance did not finish in time")

    def _on_join_prepare(self) -> None:
        owned = set(self.subscriptions.assignment)
        listener = self.subscriptions.listener
        if owned and not self.lost and self.generation >= 0:
            self.before_rebalance()  # Java's maybeAutoCommitOffsetsSync in onJoinPrepare
        self._stable = False
        if self.lost or self.generation < 0:
            if owned:
                log.info("group %s: partitions lost: %s", self.group_id, sorted(owned))
                _call(listener.on_partitions_lost, owned)
                self.subscriptions.assign_from_group([])
            self.lost = False
        elif self.protocol != COOPERATIVE and owned:
            _call(listener.on_partitions_revoked, owned)
            self.subscriptions.assign_from_group([])

    def _join_and_sync(self, deadline: float) -> Assignment | None:
        """One JoinGroup + SyncGroup; None if it must be retried (errors reset what they must)."""
        with self._state_lock:
            owned = list(self.subscriptions.assignment)
            generation = self.generation
        topics = sorted(self.subscriptions.topics)
        protocols = [(a.name, a.metadata(topics, owned, generation, self.rack)) for a in self.assignors]
        response = self._request(JOIN_GROUP, lambda s: s.make(
            "JoinGroupRequest", group_id=self.group_id, session_timeout=self.session_timeout_ms,
            rebalance_timeout=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type="consumer",
            protocols=[s.make("JoinGroupRequestProtocol", name=n, metadata=m) for n, m in protocols],
            reason="joining" if self.member_id == "" else "rejoining"), deadline)
        code = response.error_code
        if code == ErrorCode.member_id_required:
            self.member_id = response.member_id
            return None
        if code in _COORDINATOR_ERRORS:
            self.coordinator_dead(code.name)
            time.sleep(self.retry_backoff)
            return None
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self._reset_generation(lost=True)
            return None
        if code == ErrorCode.rebalance_in_progress:
            return None
        if code != ErrorCode.none:
            raise BrokerResponseError(code, f"JoinGroup of {self.group_id}")
        with self._state_lock:
            self.member_id = response.member_id
            self.generation = int(response.generation_id)
            self.protocol_name = response.protocol_name
            self.leader_id = response.leader
        assignments: list[Any] = []
        if response.leader == response.member_id and not getattr(response, "skip_assignment", False):
            assignments = self._perform_assignment(response)
        sync = self._request(SYNC_GROUP, lambda s: s.make(
            "SyncGroupRequest", group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type="consumer", protocol_name=self.protocol_name,
            assignments=[s.make("SyncGroupRequestAssignment", member_id=m, assignment=a) for m, a in assignments]),
            deadline)
        code = sync.error_code
        if code == ErrorCode.none:
            return decode_assignment(sync.assignment)
        if code in _COORDINATOR_ERRORS:
            self.coordinator_dead(code.name)
        elif code in _MEMBERSHIP_LOST:
            self._reset_generation(lost=True)
        elif code != ErrorCode.rebalance_in_progress:
            raise BrokerResponseError(code, f"SyncGroup of {self.group_id}")
        return None

    def _perform_assignment(self, response: Any) -> list[tuple[str, bytes]]:
        """The leader's job: run the group's assignor over every member's subscription."""
        assignor = next((a for a in self.assignors if a.name == response.protocol_name), None)
        if assignor is None:
            raise KafkaError(f"the group chose assignor {response.protocol_name!r}, which this consumer lacks")
        subscriptions = {}
        for member in response.members:
            sub = decode_subscription(member.metadata)
            subscriptions[member.member_id] = type(sub)(sub.topics, sub.user_data, sub.owned_partitions,
                                                        sub.generation_id, sub.rack_id,
                                                        getattr(member, "group_instance_id", None))
        topics = {t for sub in subscriptions.values() for t in sub.topics}
        self.metadata.add_topics(topics)
        with contextlib.suppress(KafkaConnectionError, OSError):
            self.metadata.refresh()
        view = self.metadata.view
        counts = {t: c for t in topics if (c := view.partition_count(t))}
        result = assignor.assign(counts, subscriptions)
        log.info("group %s generation %s: leader assigned %s", self.group_id, self.generation,
                 {m: len(a.partitions) for m, a in result.items()})
        return [(member, encode_assignment(assignment)) for member, assignment in result.items()]

    def _on_join_complete(self, assignment: Assignment) -> None:
        listener = self.subscriptions.listener
        assigned = set(assignment.partitions)
        owned = set(self.subscriptions.assignment)
        view = self.metadata.view
        self.joined_partition_counts = {t: c for t in self.subscriptions.topics
                                        if (c := view.partition_count(t)) is not None}
        self.need_rejoin = False
        if self.protocol == COOPERATIVE:
            revoked = owned - assigned
            added = assigned - owned
            if revoked:
                self.subscriptions.assign_from_group(owned & assigned)
                _call(listener.on_partitions_revoked, revoked)
                self.need_rejoin = True  # KIP-429: give them back, then let the group hand them on
            self.subscriptions.assign_from_group(assigned)
            _call(listener.on_partitions_assigned, added)
        else:
            self.subscriptions.assign_from_group(assigned)
            _call(listener.on_partitions_assigned, assigned)
        self._stable = True
        self._next_heartbeat = time.monotonic() + self.heartbeat_interval
        with self._wake:
            self._wake.notify_all()

    def _reset_generation(self, *, lost: bool) -> None:
        with self._state_lock:
            self.generation = -1
            self.member_id = ""
            self.protocol_name = None
            self.need_rejoin = True
            self._stable = False
            if lost:
                self.lost = True

    def request_rejoin(self) -> None:
        self.need_rejoin = True

    # -- heartbeats (background thread) ---------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        self._next_heartbeat = time.monotonic() + self.heartbeat_interval
        last_success = time.monotonic()
        while not self._closed:
            with self._wake:
                timeout = max(0.0, min(self._next_heartbeat - time.monotonic(), 0.5))
                if not self._async_commits or self._commit_lock.locked():  # a sync commit is draining them
                    self._wake.wait(timeout)
            if self._closed:
                break
            self._send_async_commits(wait=False)
            now = time.monotonic()
            if not self._stable or now < self._next_heartbeat:
                last_success = max(last_success, now - self.heartbeat_interval)
                continue
            if now - self.last_poll > self.max_poll_interval:
                log.warning("group %s: poll() not called for more than max.poll.interval.ms (%s ms); leaving the "
                            "group so its partitions can be reassigned", self.group_id, self.rebalance_timeout_ms)
                self._leave_from_heartbeat()
                continue
            self._next_heartbeat = now + self.heartbeat_interval
            code = self._send_heartbeat()
            if code == ErrorCode.none:
                last_success = now
            elif code == ErrorCode.rebalance_in_progress:
                self.need_rejoin = True
            elif code in _MEMBERSHIP_LOST:
                log.info("group %s: heartbeat says %s; membership lost", self.group_id, code.name)
                self._reset_generation(lost=True)
            elif code is not None and code in _COORDINATOR_ERRORS:
                self._drop_hb_conn()
                self.coordinator = None
            if now - last_success > self.session_timeout_ms / 1000.0:
                self.coordinator = None
                self.need_rejoin = True

    def _hb_connection(self) -> BrokerConnection | None:
        if self._hb_conn is None:
            coordinator = self.coordinator
            if coordinator is None:
                return None
            try:
                self._hb_conn = self.metadata.open(coordinator[1], coordinator[2], timeout=self.request_timeout)
            except _HEARTBEAT_CONNECTION_FAILURES as exc:
                if isinstance(exc, AuthenticationError):
                    log.error("group %s: heartbeat connection: %s", self.group_id, exc)
                return None
        return self._hb_conn

    def _drop_hb_conn(self) -> None:
        conn, self._hb_conn = self._hb_conn, None
        if conn is not None:
            conn.close()

    def _send_heartbeat(self) -> ErrorCode | None:
        conn = self._hb_connection()
        if conn is None:
            return None
        with self._state_lock:
            generation, member_id = self.generation, self.member_id
        if generation < 0:
            return None
        try:
            response = request_for(conn, HEARTBEAT, lambda s: s.make(
                "HeartbeatRequest", group_id=self.group_id, generation_id=generation, member_id=member_id,
                group_instance_id=self.group_instance_id))
        except _HEARTBEAT_CONNECTION_FAILURES:
            self._drop_hb_conn()
            return None
        if generation != self.generation:
            return ErrorCode.none  # a rejoin happened meanwhile; this answer is about the old generation
        return response.error_code

    def _leave_from_heartbeat(self) -> None:
        conn = self._hb_connection()
        if conn is not None:
            with contextlib.suppress(*_HEARTBEAT_CONNECTION_FAILURES):
                self._send_leave(conn)
        self._reset_generation(lost=True)

    # -- leaving --------------------------------------------------------------------------------

    def _send_leave(self, conn: BrokerConnection) -> None:
        if self.member_id == "" or self.group_instance_id is not None:
            return  # static members keep their place across restarts (KIP-345)
        response = request_for(conn, LEAVE_GROUP, lambda s: s.make(
            "LeaveGroupRequest", group_id=self.group_id, member_id=self.member_id,
            members=[s.make("MemberIdentity", member_id=self.member_id, group_instance_id=None,
                            reason="the consumer is being closed")]))
        if response.error_code != ErrorCode.none:
            log.info("group %s: LeaveGroup answered %s", self.group_id, response.error_code.name)

    def leave_group(self, timeout: float) -> None:
        """Leave now, so the group rebalances at once instead of after session.timeout.ms."""
        if self.generation < 0 and self.member_id == "":
            return
        try:
            conn = self._coordinator_conn(time.monotonic() + timeout)
            self._send_leave(conn)
        except (KafkaConnectionError, OSError, KafkaTimeoutError) as exc:
            log.info("group %s: could not leave cleanly: %s", self.group_id, exc)
        self._reset_generation(lost=False)

    def close(self, timeout: float) -> None:
        """Revoke (listener), leave the group, stop heartbeating."""
        deadline = time.monotonic() + timeout
        self._closed = True  # the heartbeat thread stops first: from here on one thread uses the connections
        with self._wake:
            self._wake.notify_all()
        self._heartbeat.join(max(0.1, deadline - time.monotonic()))
        self._send_async_commits()  # what is still queued: a final commit_sync would have sent it first
        self.invoke_completed_commits()
        owned = set(self.subscriptions.assignment)
        if owned and self.subscriptions.group_managed:
            if self.lost or self.generation < 0:
                _call(self.subscriptions.listener.on_partitions_lost, owned)
            else:
                _call(self.subscriptions.listener.on_partitions_revoked, owned)
        self.leave_group(max(0.0, deadline - time.monotonic()))
        self.coordinator_dead("closed")

    # -- offsets --------------------------------------------------------------------------------

    def _commit_request(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], generation: int,
                        member_id: str) -> Callable[[Any], Any]:
        by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
        for tp, om in offsets.items():
            by_topic.setdefault(tp.topic, []).append((tp.partition, om))

        def build(s: Any) -> Any:
            return s.make(
                "OffsetCommitRequest", group_id=self.group_id,
                generation_id_or_member_epoch=generation, member_id=member_id,
                group_instance_id=self.group_instance_id,
                topics=[s.make("OffsetCommitRequestTopic", name=topic, partitions=[
                    s.make("OffsetCommitRequestPartition", partition_index=p, committed_offset=om.offset,
                           committed_leader_epoch=om.leader_epoch, committed_metadata=om.metadata)
                    for p, om in parts]) for topic, parts in by_topic.items()])
        return build

    def _commit_generation(self) -> tuple[int, str]:
        if self.subscriptions.group_managed:
            return self.generation, self.member_id
        return -1, ""  # assign(): a "simple" consumer commits outside any generation

    def _check_commit(self, response: Any) -> Exception | None:
        for topic in response.topics:
            for part in topic.partitions:
                code = part.error_code
                if code == ErrorCode.none:
                    continue
                if code in _MEMBERSHIP_LOST:
                    self._reset_generation(lost=True)
                    return CommitFailedError(
                        "commit cannot be completed since the group has already rebalanced and assigned the "
                        f"partitions to another member ({code.name})")
                if code == ErrorCode.rebalance_in_progress:
                    self.need_rejoin = True
                    return CommitFailedError("commit cannot be completed: the group is rebalancing")
                return BrokerResponseError(code, f"commit of {topic.name}-{part.partition_index}")
        return None

    def commit_sync(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], timeout: float) -> None:
        """Commit and wait; async commits queued before this one are sent first (they are older)."""
        if not offsets:
            return
        deadline = time.monotonic() + timeout
        with self._commit_lock:
            self._drain_async_commits(lambda build: self._commit_on_own_conn(build, deadline))
            while True:
                generation, member_id = self._commit_generation()
                if self.subscriptions.group_managed and generation < 0:
                    raise CommitFailedError("not a member of the group (rejoin by calling poll())")
                response = self._request(OFFSET_COMMIT, self._commit_request(offsets, generation, member_id),
                                         deadline, OFFSET_COMMIT_VERSIONS)
                error = self._check_commit(response)
                if error is None:
                    return
                if isinstance(error, BrokerResponseError) and (error.code in _COORDINATOR_ERRORS or error.retriable):
                    if error.code in _COORDINATOR_ERRORS:
                        self.coordinator_dead(error.code.name)
                    if time.monotonic() + self.retry_backoff > deadline:
                        raise KafkaTimeoutError(f"commit did not complete in {timeout}s: {error}")
                    time.sleep(self.retry_backoff)
                    continue
                raise error

    def commit_async(self, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                     callback: CommitCallback | None) -> None:
        """Queue a commit for the heartbeat thread; its callback runs in a later poll() or commit."""
        with self._wake:
            self._async_commits.append((dict(offsets), callback))
            self._wake.notify_all()

    def _send_async_commits(self, *, wait: bool = True) -> None:
        """Send the queued commits on the heartbeat connection (the heartbeat thread, or close once it stopped).

        With `wait=False` (the heartbeat thread) a commit lock held by a synchronous commit means
        skipping: that commit drains the queue itself, and heartbeats must not stall behind it.
        """
        if not self._async_commits or not self._commit_lock.acquire(blocking=wait):
            return
        try:
            self._drain_async_commits(self._commit_on_hb_conn)
        finally:
            self._commit_lock.release()

    def _drain_async_commits(self, send: Callable[[Callable[[Any], Any]], Exception | None]) -> None:
        """Send every queued async commit in order (the caller holds the commit lock); no retries."""
        while self._async_commits:
            offsets, callback = self._async_commits.popleft()
            generation, member_id = self._commit_generation()
            error = send(self._commit_request(offsets, generation, member_id))
            if error is not None:
                log.info("group %s: async commit failed: %s", self.group_id, error)
            if callback is not None:
                self.completed_commits.append((callback, offsets, error))

    def _commit_on_hb_conn(self, build: Callable[[Any], Any]) -> Exception | None:
        conn = self._hb_connection()
        if conn is None:
            state = "unknown" if self.coordinator is None else "unreachable"
            return KafkaError(f"coordinator {state}; commit not sent (retriable)")
        try:
            return self._check_commit(request_for(conn, OFFSET_COMMIT, build, OFFSET_COMMIT_VERSIONS))
        except _HEARTBEAT_CONNECTION_FAILURES as exc:
            self._drop_hb_conn()
            return exc

    def _commit_on_own_conn(self, build: Callable[[Any], Any], deadline: float) -> Exception | None:
        try:
            return self._check_commit(self._request(OFFSET_COMMIT, build, deadline, OFFSET_COMMIT_VERSIONS))
        except KafkaError as exc:
            return exc

    def invoke_completed_commits(self) -> None:
        while self.completed_commits:
            callback, offsets, error = self.completed_commits.popleft()
            _call(callback, offsets, error)

    def fetch_committed(self, partitions: list[TopicPartition], timeout: float
                        ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """OffsetFetch (require_stable, so pending transactional offsets are waited for)."""
        deadline = time.monotonic() + timeout
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        while True:
            def build(s: Any) -> Any:
                plural = s.has("OffsetFetchRequestTopics")
                topic_cls = "OffsetFetchRequestTopics" if plural else "OffsetFetchRequestTopic"
                topics = [s.make(topic_cls, name=t, partition_indexes=p) for t, p in by_topic.items()]
                groups = [s.make("OffsetFetchRequestGroup", group_id=self.group_id, topics=topics)] \
                    if s.has("OffsetFetchRequestGroup") else []
                return s.make("OffsetFetchRequest", group_id=self.group_id, topics=topics, groups=groups,
                              require_stable=True)

            response = self._request(OFFSET_FETCH, build, deadline, OFFSET_FETCH_VERSIONS)
            group = response.groups[0] if getattr(response, "groups", None) else response
            code = group.error_code
            retry = code in _COORDINATOR_ERRORS or code == ErrorCode.unstable_offset_commit
            out: dict[TopicPartition, OffsetAndMetadata | None] = {}
            if code == ErrorCode.none:
                for topic in group.topics:
                    for part in topic.partitions:
                        if part.error_code == ErrorCode.unstable_offset_commit:
                            retry = True
                        elif part.error_code != ErrorCode.none:
                            raise BrokerResponseError(part.error_code, f"offset fetch of {topic.name}")
                        offset = int(part.committed_offset)
                        out[TopicPartition(topic.name, int(part.partition_index))] = None if offset < 0 else \
                            OffsetAndMetadata(offset, part.metadata or "", int(getattr(part, "committed_leader_epoch",
                                                                                        -1)))
                if not retry:
                    return {tp: out.get(tp) for tp in partitions}
            elif not retry:
                raise BrokerResponseError(code, f"offset fetch of group {self.group_id}")
            if code in _COORDINATOR_ERRORS:
                self.coordinator_dead(code.name)
            if time.monotonic() + self.retry_backoff > deadline:
                raise KafkaTimeoutError(f"committed offsets not fetched in {timeout}s ({code.name})")
            time.sleep(self.retry_backoff)


def _call(function: Callable[..., Any], *args: Any) -> None:
    """Run a user callback; Java logs listener errors (and rethrows from poll); we log and go on."""
    try:
        function(*args)
    except Exception:
        log.exception("user callback %r failed", function)
