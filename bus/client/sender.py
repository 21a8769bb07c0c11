"""The Sender thread: drains ready batches per broker, sends Produce requests, handles every outcome.

One thread owns all producer connections (Java's Sender + NetworkClient). Each loop it expires
batches past `delivery.timeout.ms`, asks the accumulator which leaders have sendable batches, drains
at most one batch per partition per request within `max.request.size`, keeps up to
`max.in.flight.requests.per.connection` requests outstanding per broker, and waits on the sockets
(and a wake-up pipe `send()` pokes) for responses.

Ordering with retries (idempotence, on by default): each batch gets its partition's next sequence
number when first drained and keeps it on every retry. A broker that loses one batch rejects the
following ones with OUT_OF_ORDER_SEQUENCE_NUMBER; those are retried too, and a retried batch is only
sent once its partition has nothing else in flight, lowest sequence first, so the log sees the
records in the order `send()` was called, without duplicates: a retry of a batch the broker already
holds is answered from its dedup cache. When the sequence state becomes unknowable (a batch that was
sent expires, or the broker forgot the producer), the producer waits for its in-flight requests to
drain and takes a new producer id, as the Java client bumps its epoch.

A refused login (an `AuthenticationError` from any connection, or from the metadata refresh) fails every record
waiting to be sent with that error, as Java's idempotent producer does, rather than letting them expire after
`delivery.timeout.ms`: the same credentials would be refused again. The producer stays usable; the next `send()`
logs in again (and raises the error if it is refused again). A connection whose SASL session is due for
re-authentication (KIP-368) gets no new request until its pipeline has drained, so it re-authenticates in time.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import selectors
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.accumulator import ProducerBatch, RecordAccumulator
from bus.client.cluster import Metadata, NodeConnections
from bus.client.connection import BrokerConnection, KafkaConnectionError, request_for
from bus.client.errors import (
    AuthenticationError,
    BrokerResponseError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    RecordTooLargeError,
)
from bus.protocol.messages import request_shapes

log = logging.getLogger(__name__)

PRODUCE = 0
INIT_PRODUCER_ID = 22
PRODUCE_VERSIONS = range(3, 13)  # v13 names topics by id only
_LEADER_ERRORS = {ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                  ErrorCode.leader_not_available, ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch,
                  ErrorCode.kafka_storage_error, ErrorCode.unknown_topic_id}
_TOO_LARGE = {ErrorCode.message_too_large, ErrorCode.record_list_too_large}
_MAX_INT = 2**31 - 1


@dataclass(slots=True)
class _InFlight:
    correlation: int
    batches: list[ProducerBatch]
    sent: float


@dataclass(slots=True)
class SenderMetrics:
    """Counters the producer's `metrics()` reports (a subset of Java's producer-metrics group)."""

    record_send_total: int = 0
    record_error_total: int = 0
    record_retry_total: int = 0
    batch_split_total: int = 0
    batch_size_total: int = 0
    batch_total: int = 0
    request_total: int = 0
    response_total: int = 0
    request_latency_total: float = 0.0
    request_latency_max: float = 0.0
    bytes_sent_total: int = 0
    callback_errors: list[str] = field(default_factory=list)


class Sender(threading.Thread):
    """The producer's I/O thread."""

    def __init__(self, *, accumulator: RecordAccumulator, metadata: Metadata, client_id: str, acks: int,
                 retries: int, max_in_flight: int, max_request_size: int, request_timeout_ms: int,
                 retry_backoff_ms: int, reconnect_backoff_ms: int, reconnect_backoff_max_ms: int,
                 delivery_timeout_ms: int, idempotent: bool, connection_timeout_ms: int) -> None:
        super().__init__(name=f"bus-producer-sender-{client_id}", daemon=True)
        self.accumulator = accumulator
        self.metadata = metadata
        self.client_id = client_id
        self.acks = acks
        self.retries = retries
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.request_timeout = request_timeout_ms / 1000.0
        self.retry_backoff = retry_backoff_ms / 1000.0
        self.reconnect_backoff = reconnect_backoff_ms / 1000.0
        self.reconnect_backoff_max = max(reconnect_backoff_max_ms, reconnect_backoff_ms) / 1000.0
        self.delivery_timeout = delivery_timeout_ms / 1000.0
        self.connection_timeout = connection_timeout_ms / 1000.0
        self.idempotent = idempotent
        self.metrics = SenderMetrics()
        self.running = True
        self.forced = False
        self._nodes = NodeConnections(metadata, client_id, timeout=max(self.request_timeout, self.connection_timeout),
                                      backoff=self.reconnect_backoff, backoff_max=self.reconnect_backoff_max,
                                      check=lambda conn: conn.version_for(PRODUCE, PRODUCE_VERSIONS))
        self._in_flight: dict[int, collections.deque[_InFlight]] = {}
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._nodes.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._woken = False
        # Idempotence state (Java's TransactionManager, without transactions).
        self.producer_id = -1
        self.producer_epoch = -1
        self._need_reset = False
        self._next_pid_attempt = 0.0
        self._next_sequence: dict[tuple[str, int], int] = {}
        self._partition_in_flight: dict[tuple[str, int], list[ProducerBatch]] = collections.defaultdict(list)
        self._muted: set[tuple[str, int]] = set()
        self.fatal: Exception | None = None

    # -- wake-ups -------------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Called by send()/flush() threads: a batch may have become sendable."""
        if not self._woken:
            self._woken = True
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._wake_w, b"x")

    def _drain_wakeups(self) -> None:
        self._woken = False
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._wake_r, 4096):
                pass

    # -- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while self.running:
                self._run_once()
            # Graceful close: send what is left (no lingering), unless close's timeout ran out.
            while not self.forced and (self.accumulator.has_incomplete() or self._requests_in_flight()):
                self._run_once()
        except Exception as exc:  # a bug must not leave callers waiting forever
            log.exception("producer sender thread failed")
            self.fatal = exc
        finally:
            self._fail_everything(self.fatal or ProducerClosedError("producer closed before the record was sent"))
            self._nodes.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _requests_in_flight(self) -> bool:
        return any(self._in_flight.values())

    def _run_once(self) -> None:
        try:
            self._send_ready()
        except AuthenticationError as exc:
            self._authentication_failed(exc)

    def _authentication_failed(self, exc: AuthenticationError) -> None:
        log.error("producer %s: authentication failed: %s", self.client_id, exc)
        now = time.monotonic()
        for batch in self.accumulator.abort_all():
            self._fail_sequenced(batch, exc, now)
        self._poll(self.reconnect_backoff_max)

    def _send_ready(self) -> None:
        now = time.monotonic()
        metadata = self.metadata
        if metadata.stale:
            metadata.maybe_refresh()
        self._expire(now)
        if self.idempotent and not self._ensure_producer_id(now):
            self._poll(min(self.retry_backoff, 0.1))
            return
        view = metadata.view
        leader_of = view.leader
        ready, next_check, unknown = self.accumulator.ready(now, leader_of, self._can_send)
        if unknown:
            metadata.request_update()
            next_check = min(next_check, self.retry_backoff)
        sendable = []
        drained: dict[int, list[ProducerBatch]] = {}
        for node in ready:
            if not self._pipeline_open(node):
                continue
            if self._connection(node, now) is not None:
                sendable.append(node)
        if sendable:
            drained = self.accumulator.drain(sendable, leader_of, self.max_request_size, self._can_send,
                                             self._prepare, now)
            for node, batches in drained.items():
                self._send_produce(node, batches, now)
        # Something drained: more may be sendable at once, so only look for responses before looping.
        timeout = 0.0 if drained else min(next_check, self._next_timeout(now))
        self._poll(max(timeout, 0.0))

    def _pipeline_open(self, node: int) -> bool:
        """Whether another request may go to `node`: fewer than max.in.flight outstanding, and none at all once its
        connection must re-authenticate (it does so before the next request, when nothing is outstanding)."""
        in_flight = self._in_flight.get(node, ())
        if len(in_flight) >= self.max_in_flight:
            return False
        conn = self._nodes.conns.get(node)
        return not (in_flight and conn is not None and conn.reauthentication_due)

    def _next_timeout(self, now: float) -> float:
        timeout = self.request_timeout
        for requests in self._in_flight.values():
            if requests:
                timeout = min(timeout, requests[0].sent + self.request_timeout - now)
        retry = self._nodes.next_retry(now)
        return timeout if retry is None else min(timeout, retry)

    def _poll(self, timeout: float) -> None:
        events = self._nodes.select(min(timeout, 1.0))
        now = time.monotonic()
        for key, _ in events:
            if key.data is None:
                self._drain_wakeups()
                continue
            node = key.data
            conn = self._nodes.conns.get(node)
            requests = self._in_flight.get(node)
            if conn is None:
                continue
            if not requests:
                # Readable with nothing in flight: the broker closed the connection (EOF stays readable,
                # so ignoring it would spin this loop at 100% CPU). Drop it; it reconnects on demand.
                self._disconnect(node, "connection closed by the broker while idle", now)
                continue
            request = requests.popleft()
            try:
                _, response = conn.receive()
            except (KafkaConnectionError, OSError) as exc:
                requests.appendleft(request)
                self._disconnect(node, str(exc), now)
                continue
            latency = now - request.sent
            self.metrics.response_total += 1
            self.metrics.request_latency_total += latency
            self.metrics.request_latency_max = max(self.metrics.request_latency_max, latency)
            self._handle_response(request, response, now)
        for node, requests in list(self._in_flight.items()):
            if requests and now - requests[0].sent > self.request_timeout:
                self._disconnect(node, f"request timed out after {self.request_timeout}s", now)

    # -- connections -----------------------------------------------------------------------------

    def _connection(self, node: int, now: float) -> BrokerConnection | None:
        conn = self._nodes.get(node, now)
        if conn is not None:
            self._in_flight.setdefault(node, collections.deque())
        return conn

    def _disconnect(self, node: int, reason: str, now: float) -> None:
        """A broken or silent connection: every request on it comes back as a retriable failure."""
        log.info("producer disconnected from node %s: %s", node, reason)
        self._nodes.drop(node, now)
        requests = self._in_flight.pop(node, collections.deque())
        error = KafkaConnectionError(f"connection to node {node} lost: {reason}")
        for request in requests:
            for batch in request.batches:
                self._retry_or_fail(batch, error, now, retriable=True)

    # -- idempotence -------------------------------------------------------------------------------

    def _ensure_producer_id(self, now: float) -> bool:
        """A valid producer id, taken (again) when none is held or the sequences became unknowable."""
        if self.producer_id >= 0 and not self._need_reset:
            return True
        if self._need_reset and any(self._partition_in_flight.values()):
            return False  # a new id must wait until no batch of the old one is in flight
        if now < self._next_pid_attempt:
            return False
        view = self.metadata.view
        conns = self._nodes.conns
        nodes = list(conns) + [n for n in view.brokers if n not in conns]
        for node in nodes:
            if self._in_flight.get(node):
                continue  # a pipelined connection: its next response belongs to a produce request
            conn = self._connection(node, now)
            if conn is None:
                continue
            try:
                response = request_for(conn, INIT_PRODUCER_ID, lambda s: s.make(
                    "InitProducerIdRequest", transactional_id=None, transaction_timeout=_MAX_INT,
                    producer_id=-1, producer_epoch=-1))
            except (KafkaConnectionError, OSError) as exc:
                self._disconnect(node, str(exc), now)
                continue
            if response.error_code != ErrorCode.none:
                log.info("InitProducerId failed: %s", response.error_code.name)
                break
            self.producer_id = int(response.producer_id)
            self.producer_epoch = int(response.producer_epoch)
            self._need_reset = False
            self._next_sequence.clear()
            self._partition_in_flight.clear()
            return True
        if not nodes:
            self.metadata.request_update()
        self._next_pid_attempt = now + self.retry_backoff
        return False

    def _can_send(self, batch: ProducerBatch) -> bool:
        tp = batch.tp
        if not self.idempotent:
            return tp not in self._muted
        if self._need_reset or self.producer_id < 0:
            return False
        in_flight = self._partition_in_flight.get(tp)
        if batch.base_sequence >= 0 and batch.producer_id == self.producer_id:
            return not in_flight  # a retry goes alone, lowest sequence first
        return not in_flight or len(in_flight) < self.max_in_flight

    def _prepare(self, batch: ProducerBatch) -> None:
        """Give a drained batch its producer state and build its wire bytes."""
        if not self.idempotent:
            batch.build(-1, -1, -1, False)
            if self.max_in_flight == 1:
                self._muted.add(batch.tp)
            return
        if batch.base_sequence < 0 or batch.producer_id != self.producer_id:
            sequence = self._next_sequence.get(batch.tp, 0)
            self._next_sequence[batch.tp] = (sequence + batch.count) & _MAX_INT
            batch.build(self.producer_id, self.producer_epoch, sequence, False)
        else:
            batch.build(batch.producer_id, batch.producer_epoch, batch.base_sequence, False)
        self._partition_in_flight[batch.tp].append(batch)

    def _resolved(self, batch: ProducerBatch) -> None:
        """The batch is no longer in flight (acknowledged, failed or back in the queue)."""
        if self.idempotent:
            in_flight = self._partition_in_flight.get(batch.tp)
            if in_flight and batch in in_flight:
                in_flight.remove(batch)
        else:
            self._muted.discard(batch.tp)

    # -- produce ----------------------------------------------------------------------------------

    def _send_produce(self, node: int, batches: list[ProducerBatch], now: float) -> None:
        conn = self._nodes.conns[node]
        version = conn.version_for(PRODUCE, PRODUCE_VERSIONS)
        shapes = request_shapes(PRODUCE, version)
        by_topic: dict[str, list[Any]] = {}
        size = 0
        for batch in batches:
            payload = batch.payload
            assert payload is not None
            size += len(payload)
            by_topic.setdefault(batch.topic, []).append(
                shapes.make("PartitionProduceData", index=batch.partition, records=bytes(payload)))
        request = shapes.make(
            "ProduceRequest", transactional_id=None, acks=self.acks, timeout=int(self.request_timeout * 1000),
            topic_data=[shapes.make("TopicProduceData", name=name, partition_data=parts)
                        for name, parts in by_topic.items()])
        try:
            correlation = conn.send(request, version, expect_response=self.acks != 0)
        except AuthenticationError as exc:  # its re-authentication was refused: the batches fail with the rest
            self._disconnect(node, str(exc), now)
            for batch in batches:
                self._resolved(batch)
                self._fail_sequenced(batch, exc, now)
            raise
        except (KafkaConnectionError, OSError) as exc:
            self._in_flight[node].append(_InFlight(-1, batches, now))
            self._disconnect(node, str(exc), now)
            return
        self.metrics.request_total += 1
        self.metrics.bytes_sent_total += size
        if self.acks == 0:
            for batch in batches:
                self._resolved(batch)
                self._complete(batch, -1, -1, None)
            return
        self._in_flight[node].append(_InFlight(correlation, batches, now))

    def _handle_response(self, request: _InFlight, response: Any, now: float) -> None:
        results = {}
        for topic in response.responses:
            for part in topic.partition_responses:
                results[(topic.name, int(part.index))] = part
        for batch in request.batches:
            part = results.get(batch.tp)
            if part is None:
                self._retry_or_fail(batch, KafkaError(f"no response for {batch.topic}-{batch.partition}"), now,
                                    retriable=True)
                continue
            code = part.error_code
            if code == ErrorCode.none or code == ErrorCode.duplicate_sequence_number:
                self._resolved(batch)
                append_time = part.log_append_time
                append_ms = -1 if append_time is None else int(append_time.timestamp() * 1000)
                self._complete(batch, int(part.base_offset), append_ms, None)
                continue
            message = getattr(part, "error_message", None)
            error = BrokerResponseError(code, message)
            if code in _TOO_LARGE:
                self._resolved(batch)
                if batch.count > 1:
                    self.metrics.batch_split_total += 1
                    self.accumulator.split_and_reenqueue(batch, now)
                    self.wakeup()
                else:
                    self._fail_sequenced(batch, RecordTooLargeError(
                        f"the record is larger than the topic's max.message.bytes ({error})"), now)
                continue
            if code in _LEADER_ERRORS:
                self.metadata.request_update()
            if code == ErrorCode.out_of_order_sequence_number:
                if self._earlier_unresolved(batch):
                    self._retry_or_fail(batch, error, now, retriable=True)
                else:
                    self._need_reset = True  # the broker and we disagree: start over with a new producer id
                    self._retry_or_fail(batch, error, now, retriable=True)
                continue
            if code == ErrorCode.unknown_producer_id:
                self._need_reset = True  # the broker forgot us (retention): a new id, then retry
                self._retry_or_fail(batch, error, now, retriable=True)
                continue
            if code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
                self._need_reset = True
                self._resolved(batch)
                self._fail(batch, error)
                continue
            self._retry_or_fail(batch, error, now, retriable=error.retriable)

    def _earlier_unresolved(self, batch: ProducerBatch) -> bool:
        """Some batch with a lower sequence of this partition is in flight or waiting for a retry."""
        sequence = batch.base_sequence
        if any(b.base_sequence < sequence for b in self._partition_in_flight.get(batch.tp, ()) if b is not batch):
            return True
        deque = self.accumulator.batches.get(batch.tp, ())
        return any(0 <= b.base_sequence < sequence for b in list(deque))

    def _retry_or_fail(self, batch: ProducerBatch, error: Exception, now: float, *, retriable: bool) -> None:
        self._resolved(batch)
        if batch.done:
            return
        out_of_time = now - batch.created >= self.delivery_timeout
        if retriable and batch.attempts < self.retries and not out_of_time and not self.forced:
            self.metrics.record_retry_total += batch.count
            log.debug("retrying %r after %s", batch, error)
            self.accumulator.reenqueue(batch, now)
            return
        if out_of_time:
            error = KafkaTimeoutError(f"expiring {batch.count} record(s) for {batch.topic}-{batch.partition}: "
                                      f"{int((now - batch.created) * 1000)} ms has passed since batch creation "
                                      f"({error})")
        self._fail_sequenced(batch, error, now)

    def _fail_sequenced(self, batch: ProducerBatch, error: Exception, now: float) -> None:
        """Fail a batch; if it was sent with a sequence number, later sequences would no longer line up."""
        if self.idempotent and batch.base_sequence >= 0 and batch.producer_id == self.producer_id:
            self._need_reset = True
        self._fail(batch, error)

    def _expire(self, now: float) -> None:
        for batch in self.accumulator.expired(now):
            error = KafkaTimeoutError(f"expiring {batch.count} record(s) for {batch.topic}-{batch.partition}: "
                                      f"{int((now - batch.created) * 1000)} ms has passed since batch creation")
            self._fail_sequenced(batch, error, now)

    # -- completion --------------------------------------------------------------------------------

    def _callback_error(self, exc: Exception) -> None:
        log.error("producer callback raised: %r", exc)
        if len(self.metrics.callback_errors) < 100:
            self.metrics.callback_errors.append(repr(exc))

    def _complete(self, batch: ProducerBatch, base_offset: int, append_time: int, error: Exception | None) -> None:
        if batch.complete(base_offset, append_time, error, self._callback_error):
            metrics = self.metrics
            if error is None:
                metrics.record_send_total += batch.count
                metrics.batch_total += 1
                metrics.batch_size_total += batch.size
            else:
                metrics.record_error_total += batch.count
        self.accumulator.finished(batch)

    def _fail(self, batch: ProducerBatch, error: Exception) -> None:
        self._complete(batch, -1, -1, error)

    def _fail_everything(self, error: Exception) -> None:
        for batch in self.accumulator.abort_all():
            self._fail(batch, error)
        for requests in self._in_flight.values():
            for request in requests:
                for batch in request.batches:
                    self._fail(batch, error)
        self._in_flight.clear()
        with self.accumulator.lock:
            leftovers = [b for b in self.accumulator.incomplete if not b.done]
        for batch in leftovers:
            self._fail(batch, error)

    # -- shutdown ---------------------------------------------------------------------------------

    def initiate_close(self) -> None:
        self.running = False
        self.wakeup()

    def force_close(self) -> None:
        self.forced = True
        self.running = False
        self.wakeup()
