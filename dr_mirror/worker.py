"""The data plane: one worker thread per task (`tasks.max`, `--num.streams`), each mirroring its partitions.

A worker loops in rounds. It fetches (read_committed) from the source leaders the partitions that have
nothing left to send, keeps the committed batches (`batches.committed`), and produces them to the same
partition numbers on the target with its own idempotent producer id, pipelining up to
`max.in.flight.requests.per.connection` Produce requests per target broker, each holding at most one
batch per partition (consecutive small batches joined into one of up to `batch.size`). A batch keeps its
sequence number and bytes until the target acknowledges it, so a target that is unreachable or has no
leader is waited for and retried, never skipped or reordered.

Where a batch begins a new run of offsets (a gap in the source), its offset sync is written and
acknowledged first, so the target log plus the syncs always say exactly how far the mirror got:
after a crash a worker resumes each partition from the target's log end (`OffsetMap.resume`).
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from bus.client.admin import AdminClient, OffsetSpec
from bus.client.admin import TopicPartition as AdminTP
from bus.client.cluster import Metadata, NodeConnections
from bus.client.connection import BrokerConnection, KafkaConnectionError, UnsupportedVersionError
from bus.client.security import client_security
from bus.protocol import records as rb
from dr_mirror import batches as bt
from dr_mirror import wire
from dr_mirror.formats import OffsetSync
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.offset_map import OffsetMap
from dr_mirror.settings import Settings
from dr_mirror.syncs import SyncStore

log = logging.getLogger(__name__)

_LEADER_ERRORS = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                  ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                  ErrorCode.kafka_storage_error, ErrorCode.unknown_topic_id, ErrorCode.not_enough_replicas,
                  ErrorCode.not_enough_replicas_after_append, ErrorCode.request_timed_out}
_SEQUENCE_ERRORS = {ErrorCode.out_of_order_sequence_number, ErrorCode.unknown_producer_id,
                    ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced}
_FATAL = {ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_record,
          ErrorCode.corrupt_message, ErrorCode.topic_authorization_failed, ErrorCode.invalid_topic_exception,
          ErrorCode.unsupported_for_message_format, ErrorCode.invalid_timestamp}
_MAX_INT = 2**31 - 1


@dataclass(slots=True)
class Pending:
    """One dense batch waiting for the target: the source offsets it covers and its bytes."""

    source_base: int
    source_next: int
    data: bytes
    info: rb.BatchInfo
    max_timestamp: int
    sequence: int = -1
    payload: bytearray | None = None

    @property
    def count(self) -> int:
        return self.info.records_count


@dataclass(slots=True)
class PartitionState:
    topic: str
    partition: int
    target_topic: str
    offsets: OffsetMap = field(default_factory=OffsetMap)
    queue: collections.deque[Pending] = field(default_factory=collections.deque)
    fetch_position: int = -1  # -1 until resumed from the target's log end
    next_sequence: int = 0
    high_watermark: int = -1
    stopped: str | None = None
    mirrored_ms: int = -1
    """The newest record timestamp the target holds of this partition (-1: unknown)."""
    timed: bool = False
    """Its lag-in-seconds gauge is registered."""

    def lag_seconds(self) -> float:
        """While records wait, now minus :attr:`mirrored_ms`: the span of writes that losing the source now loses."""
        if self.high_watermark < 0 or self.high_watermark <= self.offsets.source_position:
            return 0.0
        return math.nan if self.mirrored_ms < 0 else max(0.0, time.time() - self.mirrored_ms / 1000)

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)


def _newest_timestamps(admin: AdminClient, states: list[PartitionState]) -> dict[tuple[str, int], int]:
    """Per partition, the newest record timestamp the target holds (ListOffsets MAX_TIMESTAMP, KIP-734); empty
    when the target cannot say (an older Kafka): the lag's age is then unknown until a batch is mirrored."""
    try:
        found = admin.list_offsets({AdminTP(s.target_topic, s.partition): OffsetSpec.MAX_TIMESTAMP for s in states})
    except Exception as exc:  # a figure, not the mirroring: never stop for it
        log.info("the target's newest timestamps are unknown: %s", exc)
        return {}
    return {s.key: found[AdminTP(s.target_topic, s.partition)].timestamp for s in states
            if found[AdminTP(s.target_topic, s.partition)].offset >= 0}


class Registry:
    """Every partition of every worker, for the checkpointer (translation under one lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.partitions: dict[tuple[str, int], PartitionState] = {}

    def translate(self, topic: str, partition: int, offset: int) -> int | None:
        with self.lock:
            state = self.partitions.get((topic, partition))
            if state is None or state.fetch_position < 0:
                return None
            return state.offsets.translate(offset)


class Worker(threading.Thread):
    def __init__(self, index: int, settings: Settings, registry: Registry, syncs: SyncStore,
                 known_syncs: dict[tuple[str, int], list[tuple[int, int]]], metrics: MirrorMetrics) -> None:
        super().__init__(name=f"dr-mirror-task-{index}", daemon=True)
        self.settings = settings
        self.registry = registry
        self.syncs = syncs
        self.known_syncs = known_syncs
        self.metrics = metrics
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self._incoming: collections.deque[PartitionState] = collections.deque()
        self.states: dict[tuple[str, int], PartitionState] = {}
        c, p = settings.consumer_int, settings.producer_int
        self.max_wait_ms = c("fetch.max.wait.ms", 100)
        self.min_bytes = c("fetch.min.bytes", 1)
        self.max_bytes = c("fetch.max.bytes", 52_428_800)
        self.partition_max_bytes = c("max.partition.fetch.bytes", 1_048_576)
        self.receive_buffer = c("receive.buffer.bytes", 1 << 20)
        self.send_buffer = p("send.buffer.bytes", 1 << 20)
        self.request_timeout_ms = p("request.timeout.ms", 30_000)
        self.max_request_size = p("max.request.size", 16 << 20)
        self.batch_size = p("batch.size", 16_384)  # small source batches are joined up to this (batches.joined)
        self.in_flight = min(max(p("max.in.flight.requests.per.connection", 5), 1), 5)
        self.backoff = p("retry.backoff.ms", 100) / 1000
        self.producer_id = -1
        self.producer_epoch = -1

    # -- assignment -------------------------------------------------------------------------------

    def assign(self, topic: str, partition: int) -> None:
        """Hand a partition to this worker (thread-safe; picked up at the next round)."""
        state = PartitionState(topic, partition, self.settings.target_topic(topic))
        with self.registry.lock:
            self.registry.partitions[state.key] = state
        self._incoming.append(state)

    def stop(self) -> None:
        self.stopping.set()

    # -- main loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        s = self.settings
        self.source_meta = Metadata([s.source_bootstrap], client_id=self.name, request_timeout_ms=30_000,
                                    retry_backoff_ms=100, metadata_max_age_ms=30_000, allow_auto_create=False,
                                    security=client_security(s.source_cluster))
        self.target_meta = Metadata([s.target_bootstrap], client_id=self.name, request_timeout_ms=30_000,
                                    retry_backoff_ms=100, metadata_max_age_ms=30_000, allow_auto_create=True,
                                    security=client_security(s.target_cluster))
        self.source_nodes = NodeConnections(self.source_meta, self.name, timeout=30 + self.max_wait_ms / 1000,
                                            backoff=self.backoff, backoff_max=5.0,
                                            check=lambda conn: wire.size_buffers(conn, -1, self.receive_buffer))
        self.target_nodes = NodeConnections(self.target_meta, self.name, timeout=self.request_timeout_ms / 1000 + 5,
                                            backoff=self.backoff, backoff_max=5.0,
                                            check=lambda conn: wire.size_buffers(conn, self.send_buffer, -1))
        try:
            while not self.stopping.is_set():
                self._round()
        except BaseException as exc:  # surfaced by the supervisor, which exits non-zero
            log.exception("%s failed", self.name)
            self.failure = exc
        finally:
            self.source_nodes.close()
            self.target_nodes.close()
            self.source_meta.close()
            self.target_meta.close()

    def _round(self) -> None:
        while self._incoming:
            state = self._incoming.popleft()
            self.states[state.key] = state
            self.source_meta.add_topics([state.topic])
            self.target_meta.add_topics([state.target_topic])
        self.source_meta.maybe_refresh()
        self.target_meta.maybe_refresh()
        if not self._ensure_producer_id():
            time.sleep(self.backoff)
            return
        self._resume_new()
        # The next fetch goes out while the produce is in flight: a partition whose whole queue is in
        # flight may fetch more (appended behind it, so order holds; at most one fetch is buffered).
        produce, in_flight = self._send_produce()
        fetch = self._send_fetch(in_flight)
        produced = self._read_produce(produce)
        fetched = self._read_fetch(fetch)
        if not fetched and not produced:
            time.sleep(min(self.max_wait_ms / 1000, 0.1))

    # -- producer id and resumption ----------------------------------------------------------------

    def _ensure_producer_id(self) -> bool:
        if self.producer_id >= 0:
            return True
        now = time.monotonic()
        for node in list(self.target_meta.view.brokers):
            conn = self.target_nodes.get(node, now)
            if conn is None:
                continue
            try:
                error, pid, epoch = wire.init_producer_id(conn)
            except (KafkaConnectionError, OSError) as exc:
                self.target_nodes.drop(node, now)
                log.info("InitProducerId on node %s failed: %s", node, exc)
                continue
            if error == ErrorCode.none:
                self.producer_id, self.producer_epoch = pid, epoch
                for state in self.states.values():
                    state.next_sequence = 0
                return True
            log.info("InitProducerId failed: %s", error.name)
        self.target_meta.request_update()
        return False

    def _reset_producer(self, reason: str) -> None:
        """The target forgot or rejected our producer state: take a new id and re-derive every position
        from the target's log (what a restart does)."""
        log.warning("%s: %s; taking a new producer id and resuming from the target's log end", self.name, reason)
        self.producer_id = -1
        for state in self.states.values():
            state.queue.clear()
            state.fetch_position = -1

    def _resume_new(self) -> None:
        """Position each new (or reset) partition from the target's log end and the known syncs."""
        waiting = [s for s in self.states.values() if s.fetch_position < 0 and s.stopped is None]
        if not waiting:
            return
        present = [s for s in waiting if self.target_meta.view.partition_count(s.target_topic) is not None
                   and s.partition < (self.target_meta.view.partition_count(s.target_topic) or 0)]
        if not present:
            self.target_meta.request_update()
            return
        try:
            with AdminClient({**self.settings.target_cluster, "client.id": self.name,
                              "default.api.timeout.ms": 10_000}) as admin:
                ends = admin.list_offsets({AdminTP(s.target_topic, s.partition): OffsetSpec.LATEST for s in present})
                newest = _newest_timestamps(admin, present)
        except Exception as exc:  # the target is unreachable: try again next round
            log.info("%s: cannot read the target's log ends yet: %s", self.name, exc)
            time.sleep(self.backoff)
            return
        with self.registry.lock:
            for state in present:
                end = ends[AdminTP(state.target_topic, state.partition)].offset
                offsets = OffsetMap()
                for upstream, downstream in self.known_syncs.get(state.key, ()):
                    offsets.add(upstream, downstream)
                state.fetch_position = offsets.resume(end)
                state.offsets = offsets
                state.mirrored_ms = newest.get(state.key, -1)
                state.next_sequence = 0
                log.info("%s: %s-%s resumes at source offset %s (target log end %s)", self.name, state.topic,
                         state.partition, state.fetch_position, end)

    # -- fetch ------------------------------------------------------------------------------------

    def _send_fetch(self, in_flight: dict[tuple[str, int], int]) -> list[tuple[int, BrokerConnection, dict]]:
        view = self.source_meta.view
        by_node: dict[int, dict[tuple[str, int], int]] = {}
        for state in self.states.values():
            if state.fetch_position < 0 or len(state.queue) > in_flight.get(state.key, 0) or state.stopped:
                continue
            leader = view.leader(state.topic, state.partition)
            if leader < 0:
                self.source_meta.request_update()
                continue
            by_node.setdefault(leader, {})[state.key] = state.fetch_position
        now = time.monotonic()
        sent: list[tuple[int, BrokerConnection, dict[tuple[str, int], int]]] = []
        for node, positions in by_node.items():
            conn = self.source_nodes.get(node, now)
            if conn is None:
                continue
            try:
                wire.send_fetch(conn, positions, max_wait_ms=self.max_wait_ms, min_bytes=self.min_bytes,
                                max_bytes=self.max_bytes, partition_max_bytes=self.partition_max_bytes)
            except (KafkaConnectionError, OSError, UnsupportedVersionError) as exc:
                self.source_nodes.drop(node, now)
                log.info("fetch from source node %s failed: %s", node, exc)
                continue
            sent.append((node, conn, positions))
        return sent

    def _read_fetch(self, sent: list[tuple[int, BrokerConnection, dict]]) -> bool:
        got = False
        for node, conn, positions in sent:
            try:
                error, parts = wire.read_fetch(conn)
            except (KafkaConnectionError, OSError) as exc:
                self.source_nodes.drop(node, time.monotonic())
                log.info("fetch from source node %s failed: %s", node, exc)
                continue
            if error != ErrorCode.none:
                log.info("fetch from source node %s failed: %s", node, error.name)
                continue
            for part in parts:
                state = self.states.get((part.topic, part.partition))
                if state is not None and not state.stopped and positions.get(state.key) == state.fetch_position:
                    got |= self._absorb(state, part)
        return got

    def _absorb(self, state: PartitionState, part: wire.FetchedPartition) -> bool:
        if part.error == ErrorCode.offset_out_of_range:
            self._reset_to_log_start(state, part.log_start_offset)
            return False
        if part.error in _LEADER_ERRORS:
            self.source_meta.request_update()
            return False
        if part.error != ErrorCode.none:
            log.warning("fetch of %s-%s failed: %s", state.topic, state.partition, part.error.name)
            return False
        state.high_watermark = part.high_watermark
        self._update_lag(state)
        if not part.records:
            return False
        data = part.records
        found, _ = rb.scan_batches_prefix(data)
        if not found:
            if len(data) >= self.partition_max_bytes:
                self._stop_partition(state, f"the batch at source offset {state.fetch_position} fails its CRC or "
                                            f"exceeds max.partition.fetch.bytes={self.partition_max_bytes}")
            return False
        committed = bt.committed(data, found, part.aborted, state.fetch_position)
        for group in bt.joined(committed, state.fetch_position, self.batch_size):
            if len(group) == 1:
                self._enqueue(state, data, group[0])
                continue
            built = bt.merge(data, group)
            info = rb.scan_batches_prefix(built, verify_crc=False)[0][0]
            state.queue.append(Pending(group[0].base_offset, group[-1].next_offset, built, info,
                                       max(batch.max_timestamp for batch in group)))
        state.fetch_position = max(state.fetch_position, found[-1].next_offset)
        if not state.queue:
            self._settle(state)
        return True

    def _enqueue(self, state: PartitionState, data: bytes, batch: rb.BatchInfo) -> None:
        if bt.is_dense(batch) and batch.base_offset >= state.fetch_position:
            raw = bytes(memoryview(data)[batch.position : batch.position + batch.size])
            info = rb.scan_batches_prefix(raw, verify_crc=False)[0][0]
            state.queue.append(Pending(batch.base_offset, batch.next_offset, raw, info, batch.max_timestamp))
            return
        # Holes inside the batch (compaction) or a fetch from its middle: one dense batch per run of offsets.
        for built, first, source_next in bt.dense_runs(data, batch, state.fetch_position):
            info = rb.scan_batches_prefix(built, verify_crc=False)[0][0]
            state.queue.append(Pending(first, source_next, built, info, batch.max_timestamp))

    def _reset_to_log_start(self, state: PartitionState, log_start: int) -> None:
        if log_start < 0:
            try:
                with AdminClient({**self.settings.source_cluster, "client.id": self.name}) as a:
                    log_start = a.list_offsets({AdminTP(state.topic, state.partition): OffsetSpec.EARLIEST})[
                        AdminTP(state.topic, state.partition)].offset
            except Exception as exc:
                log.info("cannot read the log start of %s-%s: %s", state.topic, state.partition, exc)
                return
        if log_start > state.fetch_position:
            log.warning("%s-%s: source offsets %s..%s were deleted before they were mirrored", state.topic,
                        state.partition, state.fetch_position, log_start - 1)
            state.fetch_position = log_start
        else:
            self._stop_partition(state, f"source offset {state.fetch_position} is out of range (log start "
                                        f"{log_start}): the source partition was truncated below what the target holds")

    def _stop_partition(self, state: PartitionState, reason: str) -> None:
        state.stopped = reason
        state.queue.clear()
        self.metrics.stopped.labels(state.topic, str(state.partition)).set(1)
        log.error("mirroring of %s-%s stopped: %s", state.topic, state.partition, reason)

    def _settle(self, state: PartitionState) -> None:
        """Everything fetched is on the target: skipped batches at the end count as mirrored too."""
        with self.registry.lock:
            state.offsets.source_position = max(state.offsets.source_position, state.fetch_position)
        self._update_lag(state)

    def _update_lag(self, state: PartitionState) -> None:
        if not state.timed:
            self.metrics.lag_seconds.labels(state.topic, str(state.partition)).set_function(state.lag_seconds)
            state.timed = True
        if state.high_watermark >= 0:
            lag = max(0, state.high_watermark - state.offsets.source_position)
            self.metrics.lag.labels(state.topic, str(state.partition)).set(lag)

    # -- produce ----------------------------------------------------------------------------------

    def _sendable(self, state: PartitionState, syncs: list[OffsetSync]) -> list[Pending]:
        """The queue's head up to the next gap: a gap's batch may only go first, after its sync."""
        out: list[Pending] = []
        target = state.offsets.target_position
        delta = state.offsets.upstream[-1] - state.offsets.downstream[-1]
        for item in state.queue:
            if len(out) == self.in_flight:
                break
            if item.source_base - target != delta:
                if out:
                    break
                if item.sequence < 0:
                    syncs.append(OffsetSync(state.topic, state.partition, item.source_base, target))
                delta = item.source_base - target
            out.append(item)
            target += item.count
        return out

    def _send_produce(self) -> tuple[list[tuple[int, BrokerConnection, list]], dict[tuple[str, int], int]]:
        """Produce requests for every partition with queued batches; returns them and how many batches of
        each partition are in flight."""
        syncs: list[OffsetSync] = []
        plan: dict[tuple[str, int], list[Pending]] = {}
        for state in self.states.values():
            if state.queue and state.stopped is None:
                plan[state.key] = self._sendable(state, syncs)
        in_flight: dict[tuple[str, int], int] = {}
        if not plan:
            return [], in_flight
        if syncs:
            self.syncs.write(syncs)
            self.metrics.syncs.inc(len(syncs))
            with self.registry.lock:
                for sync in syncs:
                    self.states[(sync.topic, sync.partition)].offsets.add(sync.upstream_offset,
                                                                          sync.downstream_offset)
        view = self.target_meta.view
        by_node: dict[int, list[tuple[PartitionState, list[Pending]]]] = {}
        for key, items in plan.items():
            state = self.states[key]
            leader = view.leader(state.target_topic, state.partition)
            if leader < 0:
                self.target_meta.request_update()
                continue
            by_node.setdefault(leader, []).append((state, items))
        now = time.monotonic()
        sent: list[tuple[int, BrokerConnection, list[list[tuple[PartitionState, Pending]]]]] = []
        for node, work in by_node.items():
            conn = self.target_nodes.get(node, now)
            if conn is None:
                self.metrics.retries.inc()
                continue
            requests = self._requests(work)
            try:
                for request in requests:
                    wire.send_produce(conn, [(st.target_topic, st.partition, item.payload or b"")
                                             for st, item in request], timeout_ms=self.request_timeout_ms)
            except (KafkaConnectionError, OSError, UnsupportedVersionError) as exc:
                self._lost(node, exc)
                continue
            sent.append((node, conn, requests))
            for request in requests:
                for st, _ in request:
                    in_flight[st.key] = in_flight.get(st.key, 0) + 1
        return sent, in_flight

    def _read_produce(self, sent: list[tuple[int, BrokerConnection, list]]) -> bool:
        for node, conn, requests in sent:
            outcome: dict[tuple[str, int], list[tuple[Pending, ErrorCode, str | None]]] = {}
            try:
                for request in requests:
                    results = {(r.topic, r.partition): r for r in wire.read_produce(conn)}
                    for st, item in request:
                        r = results.get((st.target_topic, st.partition))
                        code = r.error if r else ErrorCode.unknown_server_error
                        outcome.setdefault(st.key, []).append((item, code, r.message if r else None))
            except (KafkaConnectionError, OSError) as exc:
                self._lost(node, exc)
            for key, results in outcome.items():
                self._resolve(self.states[key], results)
        return bool(sent)

    def _requests(self, work: list[tuple[PartitionState, list[Pending]]]) -> list[list[tuple[PartitionState, Pending]]]:
        """Up to `in_flight` Produce requests: the k-th holds the k-th sendable batch of each partition."""
        requests: list[list[tuple[PartitionState, Pending]]] = []
        deferred: set[tuple[str, int]] = set()
        for k in range(self.in_flight):
            request = []
            size = 0
            for state, items in work:
                if k < len(items) and state.key not in deferred:
                    item = items[k]
                    if request and size + len(item.data) > self.max_request_size:
                        deferred.add(state.key)  # this partition's later batches wait for the next round
                        continue
                    self._prepare(state, item)
                    request.append((state, item))
                    size += len(item.data)
            if not request:
                break
            requests.append(request)
        return requests

    def _prepare(self, state: PartitionState, item: Pending) -> None:
        if item.sequence < 0:
            item.sequence = state.next_sequence
            state.next_sequence = (state.next_sequence + item.count) & _MAX_INT
            item.payload = bt.passthrough(item.data, item.info, self.producer_id, self.producer_epoch, item.sequence)

    def _lost(self, node: int, exc: BaseException) -> None:
        log.info("target node %s unreachable (%s); batches wait and are sent again", node, exc)
        self.metrics.retries.inc()
        self.target_nodes.drop(node, time.monotonic())

    def _resolve(self, state: PartitionState, results: list[tuple[Pending, ErrorCode, str | None]]) -> None:
        """Acknowledged batches leave the queue in order; a later success implies the earlier ones landed
        (the target accepts sequence n + 1 only after n)."""
        last_ok = max((i for i, (_, code, _) in enumerate(results)
                       if code in (ErrorCode.none, ErrorCode.duplicate_sequence_number)), default=-1)
        for item, _code, _ in results[: last_ok + 1]:
            self._acknowledged(state, item)
        if last_ok + 1 == len(results):
            if not state.queue:
                self._settle(state)
            return
        item, code, message = results[last_ok + 1]
        if code in _FATAL:
            self._stop_partition(state, f"the target refused the batch of {item.count} records at source offset "
                              f"{item.source_base} ({len(item.data)} bytes): {code.name}"
                              + (f" ({message})" if message else "")
                              + (" - larger than the target's message.max.bytes" if code in
                                 (ErrorCode.message_too_large, ErrorCode.record_list_too_large) else ""))
        elif code in _SEQUENCE_ERRORS:
            self._reset_producer(f"{code.name} for {state.target_topic}-{state.partition}")
        else:
            if code in _LEADER_ERRORS:
                self.target_meta.request_update()
            self.metrics.retries.inc()
            log.info("produce of %s-%s will be retried: %s", state.target_topic, state.partition, code.name)

    def _acknowledged(self, state: PartitionState, item: Pending) -> None:
        if state.queue and state.queue[0] is item:
            state.queue.popleft()
        with self.registry.lock:
            state.offsets.target_position += item.count
            state.offsets.source_position = item.source_next
        state.mirrored_ms = max(state.mirrored_ms, item.max_timestamp)
        self.metrics.records.labels(state.topic).inc(item.count)
        self.metrics.bytes.labels(state.topic).inc(len(item.data))
        if item.max_timestamp > 0:
            self.metrics.latency.observe(max(0.0, time.time() - item.max_timestamp / 1000))
        self._update_lag(state)
