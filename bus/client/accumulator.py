"""The RecordAccumulator: per-partition queues of batches being filled, bounded by buffer.memory.

`send()` appends an encoded record to the partition's open batch and returns; the sender thread takes
batches that are full, have lingered `linger.ms`, or are wanted by `flush()`. This is what turns a
stream of small sends into few large requests, so the hot path is kept lean: a record is encoded
straight into the batch's bytearray (varints for small numbers come from a table) and the batch is
compressed once, when the sender closes it. The header (producer id, epoch and sequence) is written
at drain time, because a retried batch keeps its sequence while a reset producer id changes it.

Memory is accounted per batch (at least `batch.size`, as Java's BufferPool allocates). When it runs
out, `send()` blocks until the sender frees some, up to `max.block.ms`, then raises.
"""

from __future__ import annotations

import collections
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import crc32c

from bus.client.errors import BufferExhaustedError, KafkaError, KafkaTimeoutError
from bus.protocol import compression as codecs
from bus.protocol import records as rb

HEADER = rb.HEADER
OVERHEAD = rb.BATCH_OVERHEAD
_U32 = struct.Struct(">I")
_ZERO_HEADER = bytes(OVERHEAD)


def _varint_bytes(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


# Zigzag varints of 0..16383 (one or two bytes): offsets, lengths and timestamp deltas of a batch.
_VARINT_LIMIT = 1 << 14
_VARINTS = [_varint_bytes(i) for i in range(_VARINT_LIMIT)]


def varint(value: int) -> bytes:
    return _VARINTS[value] if 0 <= value < _VARINT_LIMIT else _varint_bytes(value)


def _bytes_field(data: bytes | None) -> bytes:
    return b"\x01" if data is None else varint(len(data)) + data


def encode_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> bytes:
    if not headers:
        return b"\x00"
    parts = [varint(len(headers))]
    for name, value in headers:
        parts.append(_bytes_field(name.encode()))
        parts.append(_bytes_field(value))
    return b"".join(parts)


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: bytes) -> bytes:
    """One v2 record, length prefix included."""
    body = b"".join((b"\x00", varint(timestamp_delta), varint(offset_delta), _bytes_field(key),
                     _bytes_field(value), headers))
    return varint(len(body)) + body


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where a record landed: what the Java client's RecordMetadata holds."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int


class FutureRecordMetadata:
    """The future `send()` returns: `get(timeout)`, `done()`, callbacks. Resolved by its batch."""

    __slots__ = ("_callbacks", "batch", "key_size", "relative", "timestamp", "value_size")

    def __init__(self, batch: ProducerBatch, relative: int, timestamp: int, key_size: int, value_size: int,
                 callback: Callable[[RecordMetadata | None, Exception | None], Any] | None) -> None:
        self.batch = batch
        self.relative = relative
        self.timestamp = timestamp
        self.key_size = key_size
        self.value_size = value_size
        self._callbacks = None if callback is None else [callback]

    def done(self) -> bool:
        batch = self.batch
        return batch.done and not batch.split

    def _wait(self, timeout: float | None) -> ProducerBatch:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            batch = self.batch
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not batch.event.wait(remaining):
                raise KafkaTimeoutError(f"record not acknowledged within {timeout}s")
            if batch is self.batch and not batch.split:
                return batch

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Block until the record is acknowledged; raise its error if it failed."""
        batch = self._wait(timeout)
        if batch.error is not None:
            raise batch.error
        return self._metadata(batch)

    def exception(self, timeout: float | None = None) -> Exception | None:
        return self._wait(timeout).error

    def _metadata(self, batch: ProducerBatch) -> RecordMetadata:
        offset = -1 if batch.base_offset < 0 else batch.base_offset + self.relative
        timestamp = batch.log_append_time if batch.log_append_time >= 0 else self.timestamp
        return RecordMetadata(batch.topic, batch.partition, offset, timestamp, self.key_size, self.value_size)

    def add_callback(self, callback: Callable[[RecordMetadata | None, Exception | None], Any]) -> None:
        """`callback(metadata, exception)`, run once: now if already done, else on the sender thread."""
        with self.batch.lock:
            if not (self.batch.done and not self.batch.split):
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(callback)
                return
        batch = self.batch
        callback(None if batch.error else self._metadata(batch), batch.error)

    def _fire(self, batch: ProducerBatch, on_error: Callable[[Exception], None]) -> None:
        callbacks = self._callbacks
        if not callbacks:
            return
        self._callbacks = None
        metadata = None if batch.error else self._metadata(batch)
        for callback in callbacks:
            try:
                callback(metadata, batch.error)
            except Exception as exc:  # a user callback must not kill the sender thread
                on_error(exc)


class ProducerBatch:
    """Records for one partition, encoded in place; completed once with an offset or an error."""

    __slots__ = ("attempts", "base_offset", "base_sequence", "base_timestamp", "body", "buf", "children", "codec",
                 "count",
                 "created", "done", "drained", "error", "event", "futures", "limit", "lock", "log_append_time",
                 "max_timestamp", "partition", "payload", "producer_epoch", "producer_id", "reserved", "retry_at",
                 "split", "topic", "tp", "transactional")

    def __init__(self, topic: str, partition: int, codec: int, limit: int, reserved: int, now: float) -> None:
        self.topic = topic
        self.partition = partition
        self.tp = (topic, partition)
        self.codec = codec
        self.limit = limit  # uncompressed bytes this batch may grow to
        self.reserved = reserved  # bytes of buffer.memory it holds
        self.buf = bytearray(_ZERO_HEADER)
        self.count = 0
        self.base_timestamp = -1
        self.max_timestamp = -1
        self.futures: list[FutureRecordMetadata] = []
        self.created = now
        self.drained = 0.0
        self.attempts = 0
        self.retry_at = 0.0
        self.body: bytes | bytearray | None = None  # records section after close (compressed if codec)
        self.payload: bytearray | None = None  # the whole batch as last sent
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = -1
        self.transactional = False
        self.done = False
        self.split = False
        self.children: list[ProducerBatch] = []
        self.error: Exception | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.event = threading.Event()
        self.lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ProducerBatch({self.topic}-{self.partition}, {self.count} records, seq {self.base_sequence})"

    @property
    def closed(self) -> bool:
        return self.body is not None

    @property
    def size(self) -> int:
        return len(self.buf) if self.payload is None else len(self.payload)

    def try_append(self, timestamp: int, key: bytes | None, value: bytes | None, headers: bytes,
                   callback: Any) -> FutureRecordMetadata | None:
        """Encode one record into the batch; None when it does not fit (the batch stays as it was)."""
        count = self.count
        if count == 0:
            self.base_timestamp = timestamp
        delta = timestamp - self.base_timestamp
        value_part = b"\x01" if value is None else (
            _VARINTS[len(value)] + value if len(value) < _VARINT_LIMIT else _varint_bytes(len(value)) + value)
        key_part = b"\x01" if key is None else (
            _VARINTS[len(key)] + key if len(key) < _VARINT_LIMIT else _varint_bytes(len(key)) + key)
        if 0 <= delta < _VARINT_LIMIT and count < _VARINT_LIMIT:
            ts_part = _VARINTS[delta]
            off_part = _VARINTS[count]
        else:
            ts_part = _varint_bytes(delta)
            off_part = _varint_bytes(count)
        size = 1 + len(ts_part) + len(off_part) + len(key_part) + len(value_part) + len(headers)
        buf = self.buf
        if count and len(buf) + size + 3 > self.limit:
            return None
        buf += b"%b\x00%b%b%b%b%b" % (_VARINTS[size] if size < _VARINT_LIMIT else _varint_bytes(size),
                                      ts_part, off_part, key_part, value_part, headers)
        self.count = count + 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        future = FutureRecordMetadata(self, count, timestamp, -1 if key is None else len(key),
                                      -1 if value is None else len(value), callback)
        self.futures.append(future)
        return future

    def close(self) -> None:
        """Freeze the records section (compressing it once); the header comes with `build`."""
        if self.body is None:
            if self.codec:
                self.body = codecs.compress(self.codec, memoryview(self.buf)[OVERHEAD:])
            else:
                self.body = self.buf

    def build(self, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool) -> bytearray:
        """The wire batch with this producer state (re-built only if the state changed since last time)."""
        self.close()
        if (self.payload is not None and self.producer_id == producer_id and self.producer_epoch == producer_epoch
                and self.base_sequence == base_sequence and self.transactional == transactional):
            return self.payload
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.base_sequence, self.transactional = base_sequence, transactional
        if self.codec:
            assert self.body is not None  # a compressed batch is closed with its body
            out = bytearray(_ZERO_HEADER)
            out += self.body
        else:
            out = self.buf  # header space was reserved in front of the records
        attributes = self.codec | (rb.TRANSACTIONAL_FLAG if transactional else 0)
        HEADER.pack_into(out, 0, 0, len(out) - rb.LOG_OVERHEAD, -1, rb.MAGIC, 0, attributes, self.count - 1,
                         self.base_timestamp, self.max_timestamp, producer_id, producer_epoch, base_sequence,
                         self.count)
        _U32.pack_into(out, rb.CRC_OFFSET, crc32c.crc32c(memoryview(out)[rb.ATTRIBUTES_OFFSET:]))
        self.payload = out
        return out

    def records(self) -> list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]]:
        """(timestamp, key, value, headers) of every record: what a split re-encodes."""
        view = bytes(self.buf[:OVERHEAD])
        header = bytearray(view)
        HEADER.pack_into(header, 0, 0, len(self.buf) - rb.LOG_OVERHEAD, -1, rb.MAGIC, 0, 0, self.count - 1,
                         self.base_timestamp, self.max_timestamp, -1, -1, -1, self.count)
        data = bytes(header) + bytes(memoryview(self.buf)[OVERHEAD:])
        info = rb.scan_batches(data, verify_crc=False)[0]
        return [(r.timestamp, r.key, r.value, r.headers) for r in rb.iter_records(data, info)]

    def complete(self, base_offset: int, log_append_time: int, error: Exception | None,
                 on_callback_error: Callable[[Exception], None]) -> bool:
        """Resolve every record's future and run callbacks, exactly once; False if already done."""
        with self.lock:
            if self.done:
                return False
            self.done = True
            self.base_offset = base_offset
            self.log_append_time = log_append_time
            self.error = error
        for future in self.futures:
            if future._callbacks:
                future._fire(self, on_callback_error)
        self.event.set()
        return True


class CompressionRatioEstimator:
    """Java's estimator: compressed/uncompressed per topic, quick to grow, slow to shrink."""

    IMPROVING = 0.005
    DETERIORATING = 0.05

    def __init__(self) -> None:
        self._ratios: dict[tuple[str, int], float] = {}

    def get(self, topic: str, codec: int) -> float:
        return self._ratios.get((topic, codec), 1.0)

    def update(self, topic: str, codec: int, observed: float) -> None:
        current = self._ratios.get((topic, codec), 1.0)
        if observed > current:
            current = max(current + self.DETERIORATING, observed)
        elif observed < current:
            current = max(current - self.IMPROVING, observed)
        self._ratios[(topic, codec)] = current

    def set(self, topic: str, codec: int, ratio: float) -> None:
        self._ratios[(topic, codec)] = ratio


ABORTED = object()  # append refused because a new batch was needed and the caller asked to be told


class RecordAccumulator:
    """Per-partition deques of batches plus the buffer.memory pool; shared by send() and the sender."""

    def __init__(self, *, batch_size: int, linger_ms: int, buffer_memory: int, codec: int,
                 delivery_timeout_ms: int, retry_backoff_ms: int) -> None:
        self.batch_size = max(batch_size, OVERHEAD + 1)
        self.linger = linger_ms / 1000.0
        self.total_memory = buffer_memory
        self.available = buffer_memory
        self.codec = codec
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.batches: dict[tuple[str, int], collections.deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.estimator = CompressionRatioEstimator()
        self.lock = threading.Lock()
        self._memory = threading.Condition(threading.Lock())
        self._memory_waiters = 0
        self.flushes = 0
        self.closed = False
        self.wakeup: Callable[[], None] = lambda: None

    # -- memory -------------------------------------------------------------------------------

    def allocate(self, size: int, deadline: float) -> None:
        """Take `size` bytes of buffer.memory, waiting until `deadline` for the sender to free some."""
        with self._memory:
            if self.available >= size:
                self.available -= size
                return
            self._memory_waiters += 1
            try:
                self.wakeup()  # a full pool means batches must go out now, lingering or not
                while self.available < size:
                    if self.closed:
                        raise KafkaError("producer closed while allocating memory")
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise BufferExhaustedError(
                            f"failed to allocate {size} bytes within the configured max blocking time "
                            f"(buffer.memory {self.total_memory}, available {self.available})")
                    self._memory.wait(remaining)
                self.available -= size
            finally:
                self._memory_waiters -= 1

    def deallocate(self, size: int) -> None:
        with self._memory:
            self.available += size
            self._memory.notify_all()

    @property
    def memory_exhausted(self) -> bool:
        return self._memory_waiters > 0

    # -- appending ----------------------------------------------------------------------------

    def append(self, topic: str, partition: int, timestamp: int, key: bytes | None, value: bytes | None,
               headers: bytes, callback: Any, deadline: float, abort_on_new_batch: bool) -> Any:
        """Add one record; returns its future, or ABORTED if a new batch was needed and asked about.

        Also reports through `wakeup` when a batch fills up or a new one starts, so the sender does
        not sleep through a batch it could send.
        """
        tp = (topic, partition)
        with self.lock:
            if self.closed:
                raise KafkaError("cannot send after the producer is closed")
            deque = self.batches.get(tp)
            if deque is None:
                deque = self.batches[tp] = collections.deque()
            if deque:
                last = deque[-1]
                if not last.closed:
                    future = last.try_append(timestamp, key, value, headers, callback)
                    if future is not None:
                        return future
            if abort_on_new_batch:
                return ABORTED
        record_size = OVERHEAD + 16 + len(headers) + (len(key) if key else 0) + (len(value) if value else 0)
        size = max(self.batch_size, record_size)
        self.allocate(size, deadline)
        try:
            with self.lock:
                if self.closed:
                    raise KafkaError("cannot send after the producer is closed")
                if deque:
                    last = deque[-1]
                    if not last.closed:
                        future = last.try_append(timestamp, key, value, headers, callback)
                        if future is not None:
                            self.deallocate(size)
                            return future
                limit = size
                if self.codec:
                    ratio = self.estimator.get(topic, self.codec)
                    limit = max(size, int(self.batch_size / max(ratio, 0.05))) if record_size <= size else size
                batch = ProducerBatch(topic, partition, self.codec, limit, size, time.monotonic())
                future = batch.try_append(timestamp, key, value, headers, callback)
                assert future is not None
                deque.append(batch)
                self.incomplete.add(batch)
        except BaseException:
            self.deallocate(size)
            raise
        self.wakeup()
        return future

    # -- the sender's side --------------------------------------------------------------------

    def ready(self, now: float, leader_of: Callable[[str, int], int],
              can_send: Callable[[ProducerBatch], bool]) -> tuple[set[int], float, set[str]]:
        """Nodes with a sendable batch, seconds until the next batch may become so, topics lacking a leader."""
        ready: set[int] = set()
        unknown: set[str] = set()
        next_check = 3600.0
        flushing = self.flushes > 0 or self.closed or self.memory_exhausted
        with self.lock:
            for (topic, partition), deque in self.batches.items():
                if not deque:
                    continue
                first = deque[0]
                leader = leader_of(topic, partition)
                if leader < 0:
                    unknown.add(topic)
                    continue
                if leader in ready:
                    continue
                if first.attempts and first.retry_at > now:
                    next_check = min(next_check, first.retry_at - now)
                    continue
                if not can_send(first):
                    continue
                full = len(deque) > 1 or first.closed or len(first.buf) >= first.limit - 64
                waited = now - first.created
                if full or flushing or first.attempts or waited >= self.linger:
                    ready.add(leader)
                else:
                    next_check = min(next_check, self.linger - waited)
        return ready, next_check, unknown

    def drain(self, nodes: Iterable[int], leader_of: Callable[[str, int], int], max_size: int,
              can_send: Callable[[ProducerBatch], bool], prepare: Callable[[ProducerBatch], None],
              now: float) -> dict[int, list[ProducerBatch]]:
        """At most one batch per partition per node, within max.request.size (always at least one)."""
        wanted = set(nodes)
        out: dict[int, list[ProducerBatch]] = {node: [] for node in wanted}
        sizes = dict.fromkeys(wanted, 0)
        with self.lock:
            for (topic, partition), deque in self.batches.items():
                if not deque:
                    continue
                node = leader_of(topic, partition)
                if node not in wanted:
                    continue
                first = deque[0]
                if first.attempts and first.retry_at > now:
                    continue
                if not can_send(first):
                    continue
                first.close()
                size = OVERHEAD + len(first.body)  # type: ignore[arg-type]
                if out[node] and sizes[node] + size > max_size:
                    continue
                deque.popleft()
                prepare(first)
                if self.codec and first.attempts == 0 and len(first.buf) > OVERHEAD:
                    self.estimator.update(topic, self.codec, len(first.body) / (len(first.buf) - OVERHEAD))  # type: ignore[arg-type]
                first.drained = now
                out[node].append(first)
                sizes[node] += size
        return {node: batches for node, batches in out.items() if batches}

    def reenqueue(self, batch: ProducerBatch, now: float) -> None:
        """Put a batch back for a retry, in sequence order (so retries keep the original order)."""
        batch.attempts += 1
        batch.retry_at = now + self.retry_backoff
        with self.lock:
            _insert_in_order(self.batches.setdefault(batch.tp, collections.deque()), batch)

    def split_and_reenqueue(self, batch: ProducerBatch, now: float) -> list[ProducerBatch]:
        """Halve a batch the broker called too large; the halves keep its sequence range and futures.

        Java re-splits into batch.size pieces, which never shrinks below a topic's max.message.bytes
        when that is smaller than batch.size; halving always makes progress, down to single records
        that then fail with RecordTooLarge. A split is not a retry: attempts are not counted.
        """
        records = batch.records()
        middle = (len(records) + 1) // 2
        halves = []
        sequence = batch.base_sequence
        for part, futures in ((records[:middle], batch.futures[:middle]), (records[middle:], batch.futures[middle:])):
            half = ProducerBatch(batch.topic, batch.partition, batch.codec, 1 << 62, 0, batch.created)
            for (timestamp, key, value, headers), future in zip(part, futures, strict=True):
                half.try_append(timestamp, key, value, encode_headers(headers), None)
                future.batch = half
                future.relative = half.count - 1
                half.futures[-1] = future
            half.attempts = batch.attempts
            half.retry_at = now
            if sequence >= 0:
                half.producer_id, half.producer_epoch = batch.producer_id, batch.producer_epoch
                half.base_sequence = sequence
                sequence += half.count
            halves.append(half)
        halves[0].reserved = batch.reserved  # memory is returned once, with the first half
        batch.reserved = 0
        batch.children = halves
        if self.codec:
            self.estimator.set(batch.topic, self.codec, max(1.0, self.estimator.get(batch.topic, self.codec)))
        with self.lock:
            deque = self.batches.setdefault(batch.tp, collections.deque())
            for half in reversed(halves):
                _insert_in_order(deque, half)
            self.incomplete.discard(batch)
            self.incomplete.update(halves)
        batch.split = True
        batch.done = True
        batch.event.set()  # wakes get() waiters, who then follow their future to its half
        return halves

    def expired(self, now: float) -> list[ProducerBatch]:
        """Queued batches past delivery.timeout.ms, removed from their deques."""
        out: list[ProducerBatch] = []
        limit = self.delivery_timeout
        with self.lock:
            for deque in self.batches.values():
                if deque and any(now - b.created >= limit for b in deque):
                    keep = [b for b in deque if now - b.created < limit]
                    out.extend(b for b in deque if now - b.created >= limit)
                    deque.clear()
                    deque.extend(keep)
        return out

    def finished(self, batch: ProducerBatch) -> None:
        """A batch is done for good: release its memory."""
        with self.lock:
            self.incomplete.discard(batch)
        if batch.reserved:
            self.deallocate(batch.reserved)
            batch.reserved = 0

    def abort_all(self) -> list[ProducerBatch]:
        """Every queued batch, removed (close with a timeout that ran out)."""
        with self.lock:
            out = [b for deque in self.batches.values() for b in deque]
            for deque in self.batches.values():
                deque.clear()
        return out

    def has_undrained(self) -> bool:
        with self.lock:
            return any(self.batches.values())

    def has_incomplete(self) -> bool:
        with self.lock:
            return bool(self.incomplete)

    def await_flush(self, deadline: float | None) -> bool:
        """Wait for every batch incomplete now (following splits to their halves); False on timeout."""
        with self.lock:
            pending = list(self.incomplete)
        while pending:
            batch = pending.pop()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            if not batch.event.wait(remaining):
                return False
            if batch.split:
                pending.extend(batch.children)
        return True


def _insert_in_order(deque: collections.deque[ProducerBatch], batch: ProducerBatch) -> None:
    """Front of the queue, but behind retries with lower sequence numbers (idempotent ordering)."""
    if batch.base_sequence < 0:
        deque.appendleft(batch)
        return
    for index, queued in enumerate(deque):
        if queued.base_sequence < 0 or queued.base_sequence > batch.base_sequence:
            deque.insert(index, batch)
            return
    deque.append(batch)
