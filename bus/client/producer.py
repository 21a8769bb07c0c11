"""KafkaProducer: the Java producer's behaviour and config names, in Python.

    producer = KafkaProducer({"bootstrap.servers": "127.0.0.1:9092", "linger.ms": 5})
    future = producer.send("capture.vehicle", value=b"...", key=b"110110#1#0#0")
    metadata = future.get(timeout=10)          # or callback=lambda md, exc: ...
    producer.flush(); producer.close()

`send()` waits for the topic's metadata (bounded by max.block.ms), serializes, picks a partition,
appends to the accumulator and returns a future; the sender thread does the rest. Each record's
callback (and interceptors' on_acknowledgement) runs exactly once, on the sender thread, in the
order of the records within a partition. An error `send()` can see synchronously (metadata
timeout, full buffer, serializer failure, a record over max.request.size) is raised instead, and
that record never reaches a callback.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bus.client.accumulator import ABORTED, OVERHEAD, FutureRecordMetadata, RecordAccumulator, RecordMetadata
from bus.client.accumulator import encode_headers as _encode_headers
from bus.client.cluster import Metadata
from bus.client.config import Config, instantiate, producer_config, serde_function
from bus.client.errors import (
    ConfigError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    RecordTooLargeError,
    SerializationError,
)
from bus.client.partitioner import StickyPartitioner, partition_for_key
from bus.client.sender import Sender
from bus.protocol import compression as codecs

__all__ = ["FutureRecordMetadata", "KafkaProducer", "ProducerInterceptor", "RecordMetadata"]

log = logging.getLogger(__name__)

_CODECS = {"none": codecs.NONE, "gzip": codecs.GZIP, "snappy": codecs.SNAPPY, "lz4": codecs.LZ4,
           "zstd": codecs.ZSTD}
Callback = Callable[[RecordMetadata | None, Exception | None], Any]


class ProducerInterceptor:
    """Java's ProducerInterceptor: see (and may replace) each record before it is serialized."""

    def on_send(self, record: dict[str, Any]) -> dict[str, Any]:
        """`record` holds topic, partition, key, value, timestamp, headers; return it (or a changed copy)."""
        return record

    def on_acknowledgement(self, metadata: RecordMetadata | None, exception: Exception | None) -> None:
        """Runs on the sender thread once per record, before the record's own callback."""

    def close(self) -> None:
        """Release resources at producer close."""


def make_serializer(spec: Any) -> Callable[[str, Any], bytes | None] | None:
    """A serializer as a `(topic, data) -> bytes` function: a callable, or an object with serialize()."""
    return serde_function(spec, "serialize")


def _as_bytes(data: Any, what: str) -> bytes | None:
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str):
        return data.encode()
    raise SerializationError(f"{what} must be bytes (or str) without a {what}.serializer, got {type(data).__name__}")


class KafkaProducer:
    """A thread-safe producer; share one per process, as with the Java client."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        self.config: Config = producer_config(config, **kwargs)
        cfg = self.config
        self.client_id = cfg["client.id"] or f"producer-{id(self):x}"
        self._key_serializer = make_serializer(cfg["key.serializer"])
        self._value_serializer = make_serializer(cfg["value.serializer"])
        self._interceptors: list[Any] = [instantiate(spec) for spec in cfg["interceptor.classes"]]
        self._custom_partitioner = instantiate(cfg["partitioner.class"]) if cfg["partitioner.class"] else None
        self._ignore_keys = cfg["partitioner.ignore.keys"]
        self._sticky = StickyPartitioner()
        self._max_block = cfg["max.block.ms"] / 1000.0
        self._max_request_size = cfg["max.request.size"]
        self._buffer_memory = cfg["buffer.memory"]
        if cfg["transactional.id"]:
            raise ConfigError("transactional.id: transactions are not supported by this client yet")
        self.metadata = Metadata.from_config(cfg, self.client_id)
        self._accumulator = RecordAccumulator(
            batch_size=cfg["batch.size"], linger_ms=cfg["linger.ms"], buffer_memory=cfg["buffer.memory"],
            codec=_CODECS[cfg["compression.type"]], delivery_timeout_ms=cfg["delivery.timeout.ms"],
            retry_backoff_ms=cfg["retry.backoff.ms"])
        self._sender = Sender(
            accumulator=self._accumulator, metadata=self.metadata, client_id=self.client_id, acks=cfg["acks"],
            retries=cfg["retries"], max_in_flight=cfg["max.in.flight.requests.per.connection"],
            max_request_size=cfg["max.request.size"], request_timeout_ms=cfg["request.timeout.ms"],
            retry_backoff_ms=cfg["retry.backoff.ms"], reconnect_backoff_ms=cfg["reconnect.backoff.ms"],
            reconnect_backoff_max_ms=cfg["reconnect.backoff.max.ms"],
            delivery_timeout_ms=cfg["delivery.timeout.ms"], idempotent=cfg["enable.idempotence"],
            connection_timeout_ms=cfg["socket.connection.setup.timeout.ms"])
        self._accumulator.wakeup = self._sender.wakeup
        self._closed = False
        self._close_lock = threading.Lock()
        self._started = time.monotonic()
        self._sender.start()

    # -- sending ----------------------------------------------------------------------------------

    def send(self, topic: str, value: Any = None, key: Any = None, partition: int | None = None,
             timestamp: int | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
             callback: Callback | None = None) -> FutureRecordMetadata:
        """Queue one record; returns a future of its RecordMetadata. See the module doc for errors."""
        if self._closed:
            raise IllegalStateError("cannot send after the producer is closed")
        if self._interceptors:
            topic, value, key, partition, timestamp, headers, callback = self._intercept(
                topic, value, key, partition, timestamp, headers, callback)
        deadline = time.monotonic() + self._max_block
        info = self.metadata.view.topics.get(topic)
        if info is None or not info.partitions or info.error:
            info = self.metadata.wait_for_topic(topic, deadline)
        try:
            key_bytes = self._key_serializer(topic, key) if self._key_serializer else key
            value_bytes = self._value_serializer(topic, value) if self._value_serializer else value
        except SerializationError:
            raise
        except Exception as exc:
            raise SerializationError(f"cannot serialize the record for {topic}: {exc!r}") from exc
        if key_bytes is not None and type(key_bytes) is not bytes:
            key_bytes = _as_bytes(key_bytes, "key")
        if value_bytes is not None and type(value_bytes) is not bytes:
            value_bytes = _as_bytes(value_bytes, "value")
        header_bytes = _encode_headers(headers) if headers else b"\x00"
        size = OVERHEAD + 21 + len(header_bytes) + (len(key_bytes) if key_bytes else 0) + (
            len(value_bytes) if value_bytes else 0)
        if size > self._max_request_size or size > self._buffer_memory:
            raise RecordTooLargeError(f"the message is {size} bytes when serialized, which is larger than "
                                      f"max.request.size ({self._max_request_size}) or buffer.memory "
                                      f"({self._buffer_memory})")
        num_partitions = len(info.partitions)
        if timestamp is None:
            timestamp = int(time.time() * 1000)
        accumulator = self._accumulator
        if partition is None:
            if self._custom_partitioner is not None:
                partition = self._custom_partitioner.partition(topic, key_bytes, value_bytes,
                                                               sorted(info.partitions), info.available)
            elif key_bytes is not None and not self._ignore_keys:
                partition = partition_for_key(key_bytes, num_partitions)
            else:
                partition = self._sticky.partition(topic, num_partitions, info.available)
                future = accumulator.append(topic, partition, timestamp, key_bytes, value_bytes, header_bytes,
                                            callback, deadline, True)
                if future is not ABORTED:
                    return future
                # KIP-480: the sticky partition's batch is full, so move on before opening a new one.
                partition = self._sticky.next_partition(topic, num_partitions, info.available, partition)
                return accumulator.append(topic, partition, timestamp, key_bytes, value_bytes, header_bytes,
                                          callback, deadline, False)
        elif not 0 <= partition < num_partitions:
            raise KafkaError(f"partition {partition} of topic {topic} with partition count {num_partitions} "
                             f"is not present in metadata")
        return accumulator.append(topic, partition, timestamp, key_bytes, value_bytes, header_bytes, callback,
                                  deadline, False)

    def _intercept(self, topic: str, value: Any, key: Any, partition: int | None, timestamp: int | None,
                   headers: Any, callback: Callback | None) -> tuple[Any, ...]:
        record = {"topic": topic, "value": value, "key": key, "partition": partition, "timestamp": timestamp,
                  "headers": headers}
        for interceptor in self._interceptors:
            try:
                record = interceptor.on_send(record) or record
            except Exception as exc:  # Java logs interceptor failures and carries on
                log.warning("interceptor %r on_send failed: %r", interceptor, exc)
        interceptors = self._interceptors

        def acknowledged(metadata: RecordMetadata | None, exception: Exception | None) -> None:
            for interceptor in interceptors:
                try:
                    interceptor.on_acknowledgement(metadata, exception)
                except Exception as exc:
                    log.warning("interceptor %r on_acknowledgement failed: %r", interceptor, exc)
            if callback is not None:
                callback(metadata, exception)

        return (record["topic"], record["value"], record["key"], record["partition"], record["timestamp"],
                record["headers"], acknowledged)

    # -- flushing and closing ---------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now, lingering or not, and wait for the results (raises on timeout)."""
        accumulator = self._accumulator
        accumulator.flushes += 1
        self._sender.wakeup()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            if not accumulator.await_flush(deadline):
                raise KafkaTimeoutError(f"flush did not complete within {timeout}s")
        finally:
            accumulator.flushes -= 1

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued within `timeout` (forever if None), then fail the rest and stop."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        sender = self._sender
        if threading.current_thread() is sender:
            timeout = 0.0  # a callback closing its own producer cannot wait for itself
        if timeout is None or timeout > 0:
            sender.initiate_close()
            sender.join(timeout)
        if sender.is_alive():
            log.info("producer close timed out; failing unsent records")
            sender.force_close()
            if threading.current_thread() is not sender:
                sender.join(5)
        self._accumulator.closed = True
        for interceptor in self._interceptors:
            try:
                interceptor.close()
            except Exception as exc:
                log.warning("interceptor %r close failed: %r", interceptor, exc)
        self.metadata.close()

    def __enter__(self) -> KafkaProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- introspection ----------------------------------------------------------------------------

    def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids (waits for metadata up to max.block.ms)."""
        info = self.metadata.wait_for_topic(topic, time.monotonic() + self._max_block)
        return sorted(info.partitions)

    def metrics(self) -> dict[str, float]:
        """A snapshot of Java's producer-metrics names this client tracks."""
        m = self._sender.metrics
        elapsed = max(time.monotonic() - self._started, 1e-9)
        return {
            "record-send-total": m.record_send_total,
            "record-send-rate": m.record_send_total / elapsed,
            "record-error-total": m.record_error_total,
            "record-retry-total": m.record_retry_total,
            "batch-split-total": m.batch_split_total,
            "batch-size-avg": m.batch_size_total / m.batch_total if m.batch_total else 0.0,
            "records-per-request-avg": m.record_send_total / m.response_total if m.response_total else 0.0,
            "request-total": m.request_total,
            "response-total": m.response_total,
            "request-latency-avg": 1000 * m.request_latency_total / m.response_total if m.response_total else 0.0,
            "request-latency-max": 1000 * m.request_latency_max,
            "outgoing-byte-total": m.bytes_sent_total,
            "buffer-total-bytes": self._accumulator.total_memory,
            "buffer-available-bytes": self._accumulator.available,
            "producer-id": self._sender.producer_id,
        }
