"""The consumer's Fetcher: pipelined Fetch requests per leader, batches decoded only as poll() needs them.

A fetch response's records stay one bytes object; only batch headers are scanned when it arrives
(with CRC checks, `check.crcs`). Records are decoded lazily, batch by batch, when `poll()` asks for
them, and at most `max.poll.records` at a time, so a large response costs nothing until consumed. The
next Fetch for a partition goes out as soon as its previous response is buffered, before the
application has processed it (Java's fetch pipelining), so the broker works while the caller does.

read_committed: the broker returns data up to the last stable offset plus the list of aborted
transactions in the range; batches of an aborted transaction are skipped from its first offset up
to its ABORT marker, and control batches are never returned (Java's CompletedFetch logic).
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.cluster import Metadata, NodeConnections
from bus.client.connection import BrokerConnection, KafkaConnectionError, UnsupportedVersionError
from bus.client.errors import (
    AuthenticationError,
    BrokerResponseError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    OffsetOutOfRangeError,
)
from bus.client.subscription import SubscriptionState, TopicPartition
from bus.protocol import compression as codecs
from bus.protocol import records as rb

log = logging.getLogger(__name__)

FETCH = 1
LIST_OFFSETS = 2
FETCH_VERSIONS = range(4, 13)  # v13+ names topics by id only
LIST_OFFSETS_VERSIONS = range(1, 9)
EARLIEST = -2
LATEST = -1
READ_COMMITTED = 1
_LEADER_ERRORS = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                  ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                  ErrorCode.kafka_storage_error, ErrorCode.unknown_topic_id, ErrorCode.offset_not_available}


class ConsumerRecord:
    """One fetched record (the Java client's ConsumerRecord)."""

    __slots__ = ("headers", "key", "leader_epoch", "offset", "partition", "serialized_key_size",
                 "serialized_value_size", "timestamp", "timestamp_type", "topic", "value")

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int, timestamp_type: int,
                 key: Any, value: Any, headers: tuple[tuple[str, bytes | None], ...], leader_epoch: int,
                 key_size: int, value_size: int) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.timestamp = timestamp
        self.timestamp_type = timestamp_type
        self.key = key
        self.value = value
        self.headers = headers
        self.leader_epoch = leader_epoch
        self.serialized_key_size = key_size
        self.serialized_value_size = value_size

    def __repr__(self) -> str:
        return (f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, offset={self.offset}, "
                f"timestamp={self.timestamp}, key={self.key!r}, value={self.value!r})")


def _slow_varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos`: (value, position after it); decode_batch inlines the one-byte case."""
    result = 0
    shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise rb.CorruptRecordError("varint longer than 10 bytes")


def decode_batch(data: bytes, batch: rb.BatchInfo, topic: str, partition: int, start: int,
                 key_deserializer: Callable[[str, bytes | None], Any] | None,
                 value_deserializer: Callable[[str, bytes | None], Any] | None) -> list[ConsumerRecord]:
    """Every record of one batch with offset >= start, as ConsumerRecords. Hot: one pass, no helpers.

    The one-byte varint case is inlined on purpose (the repeats are not an oversight): calling a
    helper for the five per-record varints cost 8-10% of consumer throughput in
    benchmarks/client_throughput.py.
    """
    body_start = batch.position + rb.BATCH_OVERHEAD
    end = batch.position + batch.size
    if batch.compression:
        try:
            data = codecs.decompress(batch.compression, memoryview(data)[body_start:end])
        except codecs.DecompressionError as exc:
            raise rb.CorruptRecordError(str(exc)) from exc
        pos = 0
        end = len(data)
    else:
        pos = body_start
    base_offset = batch.base_offset
    base_ts = batch.base_timestamp
    ts_type = batch.timestamp_type
    append_time = batch.max_timestamp if ts_type == rb.LOG_APPEND_TIME else None
    epoch = batch.partition_leader_epoch
    out: list[ConsumerRecord] = []
    append = out.append
    record = ConsumerRecord
    try:
        for _ in range(batch.records_count):
            v = data[pos]
            if v < 0x80:
                pos += 1
                length = (v >> 1) ^ -(v & 1)
            else:
                length, pos = _slow_varint(data, pos)
            record_end = pos + length
            pos += 1  # attributes
            v = data[pos]
            if v < 0x80:
                pos += 1
                ts_delta = (v >> 1) ^ -(v & 1)
            else:
                ts_delta, pos = _slow_varint(data, pos)
            v = data[pos]
            if v < 0x80:
                pos += 1
                offset_delta = (v >> 1) ^ -(v & 1)
            else:
                offset_delta, pos = _slow_varint(data, pos)
            v = data[pos]
            if v < 0x80:
                pos += 1
                klen = (v >> 1) ^ -(v & 1)
            else:
                klen, pos = _slow_varint(data, pos)
            if klen < 0:
                key = None
            else:
                key = data[pos:pos + klen]
                pos += klen
            v = data[pos]
            if v < 0x80:
                pos += 1
                vlen = (v >> 1) ^ -(v & 1)
            else:
                vlen, pos = _slow_varint(data, pos)
            if vlen < 0:
                value = None
            else:
                value = data[pos:pos + vlen]
                pos += vlen
            count = data[pos]
            if count == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                count, pos = _slow_varint(data, pos)
                items: list[tuple[str, bytes | None]] = []
                for _h in range(count):
                    hlen, pos = _slow_varint(data, pos)
                    name = data[pos:pos + hlen].decode()
                    pos += hlen
                    hvlen, pos = _slow_varint(data, pos)
                    if hvlen < 0:
                        items.append((name, None))
                    else:
                        items.append((name, bytes(data[pos:pos + hvlen])))
                        pos += hvlen
                headers = tuple(items)
            if pos != record_end:
                raise rb.CorruptRecordError(f"record declares {length} bytes but spans {length + pos - record_end}")
            offset = base_offset + offset_delta
            if offset < start:
                continue
            if key_deserializer is not None:
                key = key_deserializer(topic, key)
            if value_deserializer is not None:
                value = value_deserializer(topic, value)
            append(record(topic, partition, offset, append_time if append_time is not None else base_ts + ts_delta,
                          ts_type, key, value, headers, epoch, -1 if klen < 0 else klen, -1 if vlen < 0 else vlen))
    except IndexError:
        raise rb.CorruptRecordError("record data ends inside a record") from None
    if pos != end:
        raise rb.CorruptRecordError(f"{end - pos} bytes left after the last record of the batch")
    return out


@dataclass(slots=True)
class CompletedFetch:
    """One partition's part of a Fetch response, consumed batch by batch."""

    tp: TopicPartition
    fetch_offset: int
    data: bytes
    batches: list[rb.BatchInfo]
    aborted: list[tuple[int, int]]  # (first_offset, producer_id), a heap
    read_committed: bool
    next_batch: int = 0
    pending: collections.deque[ConsumerRecord] = field(default_factory=collections.deque)
    aborted_producers: set[int] = field(default_factory=set)
    next_offset: int = -1  # the position once everything decoded so far is consumed

    def __post_init__(self) -> None:
        self.next_offset = self.fetch_offset

    @property
    def exhausted(self) -> bool:
        return not self.pending and self.next_batch >= len(self.batches)

    def _skip(self, batch: rb.BatchInfo) -> bool:
        """Whether a batch is invisible: control markers always, aborted data under read_committed."""
        if self.read_committed and self.aborted:
            while self.aborted and self.aborted[0][0] <= batch.last_offset:
                self.aborted_producers.add(heapq.heappop(self.aborted)[1])
        if batch.is_control:
            if self.read_committed and batch.producer_id in self.aborted_producers and self._is_abort(batch):
                self.aborted_producers.discard(batch.producer_id)
            return True
        return self.read_committed and batch.is_transactional and batch.producer_id in self.aborted_producers

    def _is_abort(self, batch: rb.BatchInfo) -> bool:
        for record in rb.iter_records(self.data, batch):
            return record.key is not None and len(record.key) >= 4 and record.key[2:4] == b"\x00\x00"
        return False

    def take(self, limit: int, key_deserializer: Any, value_deserializer: Any) -> list[ConsumerRecord]:
        """Up to `limit` records from the current position on, decoding further batches as needed."""
        out: list[ConsumerRecord] = []
        pending = self.pending
        while len(out) < limit:
            if pending:
                room = limit - len(out)
                if len(pending) <= room:
                    out.extend(pending)
                    pending.clear()
                else:
                    out.extend(pending.popleft() for _ in range(room))
                continue
            if self.next_batch >= len(self.batches):
                break
            batch = self.batches[self.next_batch]
            self.next_batch += 1
            if batch.next_offset <= self.next_offset:
                continue  # before the position (a fetch from the middle of a batch)
            if not self._skip(batch):
                records = decode_batch(self.data, batch, self.tp.topic, self.tp.partition, self.next_offset,
                                       key_deserializer, value_deserializer)
                pending.extend(records)
            self.next_offset = batch.next_offset
        return out

    @property
    def position_after(self) -> int:
        """Where the partition's position should be once the records taken so far are consumed."""
        if self.pending:
            return self.pending[0].offset
        return self.next_offset


class Fetcher:
    """Sends fetches, buffers completed ones, hands out records; also answers offset look-ups."""

    def __init__(self, *, metadata: Metadata, subscriptions: SubscriptionState, client_id: str,
                 fetch_min_bytes: int, fetch_max_bytes: int, fetch_max_wait_ms: int, max_partition_fetch_bytes: int,
                 isolation_level: str, check_crcs: bool, request_timeout_ms: int, retry_backoff_ms: int,
                 key_deserializer: Any, value_deserializer: Any) -> None:
        self.metadata = metadata
        self.subscriptions = subscriptions
        self.client_id = client_id
        self.min_bytes = fetch_min_bytes
        self.max_bytes = fetch_max_bytes
        self.max_wait_ms = fetch_max_wait_ms
        self.partition_max_bytes = max_partition_fetch_bytes
        self.read_committed = isolation_level == "read_committed"
        self.check_crcs = check_crcs
        self.request_timeout = request_timeout_ms / 1000.0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.key_deserializer = key_deserializer
        self.value_deserializer = value_deserializer
        self._nodes = NodeConnections(metadata, client_id, timeout=self.request_timeout + fetch_max_wait_ms / 1000.0,
                                      backoff=self.retry_backoff)
        self._in_flight: dict[int, tuple[float, dict[TopicPartition, int]]] = {}
        self.completed: collections.deque[CompletedFetch] = collections.deque()
        self._error: Exception | None = None

    # -- connections -----------------------------------------------------------------------------

    def connection(self, node: int) -> BrokerConnection | None:
        return self._nodes.get(node, time.monotonic())

    def _disconnect(self, node: int, reason: str) -> None:
        log.info("consumer disconnected from node %s: %s", node, reason)
        self._in_flight.pop(node, None)
        self._nodes.drop(node, time.monotonic())

    def close(self) -> None:
        self._nodes.close()

    # -- fetching --------------------------------------------------------------------------------

    def _buffered(self) -> set[TopicPartition]:
        return {c.tp for c in self.completed}

    def send_fetches(self) -> int:
        """A Fetch to every leader with fetchable partitions and no fetch outstanding; returns how many."""
        view = self.metadata.view
        buffered = self._buffered()
        by_node: dict[int, dict[TopicPartition, int]] = {}
        for tp in self.subscriptions.fetchable():
            if tp in buffered:
                continue
            leader = view.leader(tp.topic, tp.partition)
            if leader < 0:
                self.metadata.request_update()
                continue
            if leader in self._in_flight:
                continue
            position = self.subscriptions.assignment[tp].position
            assert position is not None
            by_node.setdefault(leader, {})[tp] = position
        sent = 0
        for node, partitions in by_node.items():
            conn = self.connection(node)
            if conn is None:
                continue
            try:
                version = conn.version_for(FETCH, FETCH_VERSIONS)
                request = self._fetch_request(version, partitions)
                conn.send(request, version)
            except AuthenticationError as exc:  # its re-authentication was refused: the caller of poll() hears it
                self._disconnect(node, str(exc))
                raise
            except (KafkaConnectionError, OSError) as exc:
                self._disconnect(node, str(exc))
                continue
            except UnsupportedVersionError as exc:
                self._error = exc
                continue
            self._in_flight[node] = (time.monotonic(), partitions)
            sent += 1
        return sent

    def _fetch_request(self, version: int, partitions: dict[TopicPartition, int]) -> Any:
        from bus.protocol.messages import request_shapes

        shapes = request_shapes(FETCH, version)
        by_topic: dict[str, list[Any]] = {}
        for tp, offset in partitions.items():
            by_topic.setdefault(tp.topic, []).append(shapes.make(
                "FetchPartition", partition=tp.partition, current_leader_epoch=-1, fetch_offset=offset,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=self.partition_max_bytes))
        return shapes.make(
            "FetchRequest", replica_id=-1, max_wait=self.max_wait_ms, min_bytes=self.min_bytes,
            max_bytes=self.max_bytes, isolation_level=READ_COMMITTED if self.read_committed else 0,
            session_id=0, session_epoch=-1,
            topics=[shapes.make("FetchTopic", topic=t, partitions=parts) for t, parts in by_topic.items()],
            forgotten_topics_data=[], rack_id="")

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def poll(self, timeout: float) -> None:
        """Wait up to `timeout` for fetch responses and buffer them."""
        if not self._in_flight:
            if timeout > 0:
                time.sleep(min(timeout, self.retry_backoff))
            return
        events = self._nodes.select(max(timeout, 0.0))
        for key, _ in events:
            node = key.data
            conn = self._nodes.conns.get(node)
            pending = self._in_flight.get(node)
            if conn is None:
                continue
            if pending is None:
                # Readable with no fetch outstanding: the broker closed it (an EOF would keep select hot).
                self._disconnect(node, "connection closed by the broker while idle")
                continue
            try:
                _, response = conn.receive()
            except (KafkaConnectionError, OSError) as exc:
                self._disconnect(node, str(exc))
                continue
            del self._in_flight[node]
            self._handle(response, pending[1])
        now = time.monotonic()
        for node, (sent, _) in list(self._in_flight.items()):
            if now - sent > self.request_timeout + self.max_wait_ms / 1000.0:
                self._disconnect(node, "fetch timed out")

    def _handle(self, response: Any, requested: dict[TopicPartition, int]) -> None:
        if response.error_code != ErrorCode.none:
            log.info("fetch failed: %s", response.error_code.name)
            return
        subscriptions = self.subscriptions
        for topic in response.responses:
            for part in topic.partitions:
                tp = TopicPartition(topic.topic, int(part.partition_index))
                fetch_offset = requested.get(tp)
                state = subscriptions.assignment.get(tp)
                if fetch_offset is None or state is None or state.position != fetch_offset:
                    continue  # unassigned or sought away while the fetch was out
                code = part.error_code
                if code == ErrorCode.none:
                    state.high_watermark = int(part.high_watermark)
                    state.last_stable_offset = int(part.last_stable_offset)
                    state.log_start_offset = int(part.log_start_offset)
                    data = part.records or b""
                    if not data:
                        continue
                    batches, _ = rb.scan_batches_prefix(data, verify_crc=self.check_crcs)
                    if not batches:
                        if len(data) >= self.partition_max_bytes:
                            self._error = KafkaError(
                                f"a batch at {tp.topic}-{tp.partition} offset {fetch_offset} is larger than "
                                f"max.partition.fetch.bytes or fails its CRC")
                        continue
                    aborted: list[tuple[int, int]] = []
                    if self.read_committed and part.aborted_transactions:
                        aborted = [(int(a.first_offset), int(a.producer_id)) for a in part.aborted_transactions]
                        heapq.heapify(aborted)
                    self.completed.append(CompletedFetch(tp, fetch_offset, data, batches, aborted,
                                                         self.read_committed))
                elif code == ErrorCode.offset_out_of_range:
                    if subscriptions.default_reset == "none":
                        self._error = OffsetOutOfRangeError(
                            f"offset {fetch_offset} of {tp.topic}-{tp.partition} is out of range and "
                            f"auto.offset.reset is none")
                    else:
                        log.info("fetch offset %s of %s is out of range; resetting", fetch_offset, tp)
                        subscriptions.request_reset(tp)
                elif code in _LEADER_ERRORS:
                    self.metadata.request_update()
                else:
                    log.warning("fetch of %s failed: %s", tp, code.name)

    def raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def fetched_records(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of buffered fetches at their partitions' positions, advancing the positions."""
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        remaining = max_records
        assignment = self.subscriptions.assignment
        while remaining > 0 and self.completed:
            completed = self.completed[0]
            state = assignment.get(completed.tp)
            if state is None or state.position is None or state.position < completed.fetch_offset:
                self.completed.popleft()  # unassigned or sought away: drop
                continue
            if state.paused:
                self.completed.rotate(-1)  # keep it for resume(); look at others
                if all(assignment.get(c.tp) is None or assignment[c.tp].paused for c in self.completed):
                    break
                continue
            if state.position != completed.position_after:
                if state.position > completed.position_after and not completed.pending:
                    completed.next_offset = state.position
                else:
                    self.completed.popleft()
                    continue
            records = completed.take(remaining, self.key_deserializer, self.value_deserializer)
            if records:
                out.setdefault(completed.tp, []).extend(records)
                remaining -= len(records)
            state.position = completed.position_after
            if completed.exhausted:
                self.completed.popleft()
        return out

    def has_buffered(self) -> bool:
        assignment = self.subscriptions.assignment
        return any(c.tp in assignment and not assignment[c.tp].paused for c in self.completed)

    def clear_buffered(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        if partitions is None:
            self.completed.clear()
            return
        drop = set(partitions)
        self.completed = collections.deque(c for c in self.completed if c.tp not in drop)

    # -- offsets --------------------------------------------------------------------------------

    def list_offsets(self, timestamps: dict[TopicPartition, int], timeout: float
                     ) -> dict[TopicPartition, tuple[int, int] | None]:
        """ListOffsets per leader: {tp: (offset, timestamp)} (None where no record has that timestamp)."""
        from bus.protocol.messages import request_shapes

        deadline = time.monotonic() + timeout
        results: dict[TopicPartition, tuple[int, int] | None] = {}
        remaining = dict(timestamps)
        self.metadata.add_topics({tp.topic for tp in remaining})
        while remaining:
            view = self.metadata.view
            if any(view.leader(tp.topic, tp.partition) < 0 for tp in remaining) or self.metadata.stale:
                with contextlib.suppress(KafkaConnectionError, OSError):
                    view = self.metadata.refresh()
            by_node: dict[int, dict[TopicPartition, int]] = {}
            for tp, ts in remaining.items():
                by_node.setdefault(view.leader(tp.topic, tp.partition), {})[tp] = ts
            retry = False
            for node, wanted in by_node.items():
                conn = self.connection(node) if node >= 0 else None
                if conn is None:
                    retry = True
                    continue
                # A connection may have a fetch in flight; offsets go on a separate short-lived one.
                try:
                    with self.metadata.open(conn.host, conn.port, timeout=self.request_timeout) as side:
                        version = side.version_for(LIST_OFFSETS, LIST_OFFSETS_VERSIONS)
                        shapes = request_shapes(LIST_OFFSETS, version)
                        by_topic: dict[str, list[Any]] = {}
                        for tp, ts in wanted.items():
                            by_topic.setdefault(tp.topic, []).append(shapes.make(
                                "ListOffsetsPartition", partition_index=tp.partition, current_leader_epoch=-1,
                                timestamp=ts))
                        response = side.request(shapes.make(
                            "ListOffsetsRequest", replica_id=-1,
                            isolation_level=READ_COMMITTED if self.read_committed else 0,
                            topics=[shapes.make("ListOffsetsTopic", name=t, partitions=p)
                                    for t, p in by_topic.items()]), version)
                except (KafkaConnectionError, OSError) as exc:
                    log.debug("list offsets on node %s failed: %s", node, exc)
                    self.metadata.request_update()
                    retry = True
                    continue
                for topic in response.topics:
                    for part in topic.partitions:
                        tp = TopicPartition(topic.name, int(part.partition_index))
                        if tp not in remaining:
                            continue
                        if part.error_code == ErrorCode.none:
                            offset = int(part.offset)
                            results[tp] = None if offset < 0 else (offset, int(part.timestamp))
                            del remaining[tp]
                        elif part.error_code.retriable or part.error_code in _LEADER_ERRORS:
                            self.metadata.request_update()
                            retry = True
                        else:
                            raise BrokerResponseError(part.error_code, f"list offsets of {tp}")
            if remaining and retry:
                if time.monotonic() + self.retry_backoff > deadline:
                    raise KafkaTimeoutError(f"failed to get offsets by times in {timeout}s")
                time.sleep(self.retry_backoff)
        return results

    def reset_positions(self, timeout: float) -> None:
        """Resolve pending resets (auto.offset.reset, seek_to_beginning/end) with ListOffsets."""
        wanted = {}
        for tp in self.subscriptions.needs_reset():
            strategy = self.subscriptions.assignment[tp].reset
            if strategy == "none":
                raise NoOffsetForPartitionError(f"undefined offset with no reset policy for partition {tp}")
            wanted[tp] = EARLIEST if strategy == "earliest" else LATEST
        if not wanted:
            return
        found = self.list_offsets(wanted, timeout)
        for tp, result in found.items():
            state = self.subscriptions.assignment.get(tp)
            if state is not None and state.reset is not None and result is not None:
                state.position = result[0]
                state.reset = None
