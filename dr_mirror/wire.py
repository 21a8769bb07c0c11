"""The thin I/O edge: Fetch, Produce and InitProducerId requests over our client's BrokerConnection.

No third-party client hands out raw record batches, so the mirror speaks these three APIs itself with
kio's message classes (built version-tolerantly through `request_shapes`), on the connections and
metadata of `bus.client`. Version ranges are the native client's, so this works against any broker
that speaks them (our bus, Apache Kafka, librdkafka's mock cluster).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.connection import BrokerConnection, request_for
from bus.client.fetcher import FETCH, FETCH_VERSIONS, READ_COMMITTED
from bus.client.sender import INIT_PRODUCER_ID, PRODUCE, PRODUCE_VERSIONS
from bus.protocol.messages import request_shapes
from dr_mirror.batches import Aborted

_MAX_INT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    topic: str
    partition: int
    error: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes
    aborted: tuple[Aborted, ...]


@dataclass(frozen=True, slots=True)
class ProduceResult:
    topic: str
    partition: int
    error: ErrorCode
    base_offset: int
    message: str | None


def size_buffers(conn: BrokerConnection, send_bytes: int, receive_bytes: int) -> None:
    """SO_SNDBUF / SO_RCVBUF sized for the link (Kafka's send.buffer.bytes, receive.buffer.bytes; -1 = OS)."""
    sock = socket.socket(fileno=socket.dup(conn.fileno()))
    with contextlib.closing(sock):
        if send_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_bytes)
        if receive_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_bytes)


def send_fetch(conn: BrokerConnection, positions: Mapping[tuple[str, int], int], *, max_wait_ms: int,
               min_bytes: int, max_bytes: int, partition_max_bytes: int) -> None:
    """A read_committed Fetch for `positions` ({(topic, partition): offset}); read it with `read_fetch`."""
    version = conn.version_for(FETCH, FETCH_VERSIONS)
    shapes = request_shapes(FETCH, version)
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), offset in positions.items():
        by_topic.setdefault(topic, []).append(shapes.make(
            "FetchPartition", partition=partition, current_leader_epoch=-1, fetch_offset=offset,
            last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=partition_max_bytes))
    conn.send(shapes.make(
        "FetchRequest", replica_id=-1, max_wait=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
        isolation_level=READ_COMMITTED, session_id=0, session_epoch=-1,
        topics=[shapes.make("FetchTopic", topic=t, partitions=parts) for t, parts in by_topic.items()],
        forgotten_topics_data=[], rack_id=""), version)


def read_fetch(conn: BrokerConnection) -> tuple[ErrorCode, list[FetchedPartition]]:
    _, response = conn.receive()
    out = []
    for topic in response.responses:
        for part in topic.partitions:
            aborted = tuple(Aborted(int(a.producer_id), int(a.first_offset))
                            for a in (part.aborted_transactions or ()))
            out.append(FetchedPartition(topic.topic, int(part.partition_index), part.error_code,
                                        int(part.high_watermark), int(part.log_start_offset),
                                        part.records or b"", aborted))
    return response.error_code, out


def send_produce(conn: BrokerConnection, batches: Iterable[tuple[str, int, bytes]], *, timeout_ms: int) -> None:
    """One Produce (acks=all) carrying at most one batch per partition, as Kafka requires from v3 on."""
    version = conn.version_for(PRODUCE, PRODUCE_VERSIONS)
    shapes = request_shapes(PRODUCE, version)
    by_topic: dict[str, list[Any]] = {}
    for topic, partition, payload in batches:
        by_topic.setdefault(topic, []).append(shapes.make("PartitionProduceData", index=partition,
                                                          records=bytes(payload)))
    conn.send(shapes.make(
        "ProduceRequest", transactional_id=None, acks=-1, timeout=timeout_ms,
        topic_data=[shapes.make("TopicProduceData", name=n, partition_data=p) for n, p in by_topic.items()]), version)


def read_produce(conn: BrokerConnection) -> list[ProduceResult]:
    _, response = conn.receive()
    return [ProduceResult(topic.name, int(part.index), part.error_code, int(part.base_offset),
                          getattr(part, "error_message", None))
            for topic in response.responses for part in topic.partition_responses]


def init_producer_id(conn: BrokerConnection) -> tuple[ErrorCode, int, int]:
    """An idempotent (non-transactional) producer id: (error, id, epoch)."""
    response = request_for(conn, INIT_PRODUCER_ID, lambda s: s.make(
        "InitProducerIdRequest", transactional_id=None, transaction_timeout=_MAX_INT, producer_id=-1,
        producer_epoch=-1))
    return response.error_code, int(response.producer_id), int(response.producer_epoch)
