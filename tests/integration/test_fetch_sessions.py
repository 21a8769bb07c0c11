"""KIP-227 fetch sessions and the fetch purgatory, against a real broker process.

Raw Fetch requests (v12 by topic name, v13 by topic id) check the protocol as Kafka's FetchManager
answers it: a full fetch opens a session, incremental fetches carry only partitions with news and get
smaller, forgotten partitions leave the session, a wrong epoch or unknown id is refused, and a broker
restart loses sessions (clients start over). Waiting fetches complete on `min_bytes` worth of appends,
at `max_wait`, or at once when their topic is deleted. Third-party consumers keep consuming throughout.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from testkit.raw_kafka import RawKafka, metadata_request, produce_request

PARTITIONS = 200


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(15)


def _records(value: bytes) -> bytes:
    from bus.protocol import records as rb

    return rb.build_batch([rb.Record(0, int(time.time() * 1000), None, value)], base_offset=0)


def _fetch_v12(raw: RawKafka, topic: str, offsets: dict[int, int], *, session_id: int, epoch: int,
               forgotten: tuple[int, ...] = (), min_bytes: int = 0, max_wait_ms: int = 0) -> tuple[Any, int]:
    """A Fetch v12 and its response, plus the response frame's size in bytes."""
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic

    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in offsets.items())),)
        if offsets else (),
        forgotten_topics_data=(ForgottenTopic(topic=topic, partitions=forgotten),) if forgotten else (),
        rack_id="")
    raw.send_frame(raw.encode(request))
    frame = raw.read_frame()
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    response, _ = entity_reader(load_response_schema(1, 12))(frame, 5)
    return response, len(frame)


def _partitions(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for t in response.responses for p in t.partitions}


def test_sessions_answer_only_partitions_with_news(shared_broker: BrokerProcess, topic_name: str) -> None:
    _create(shared_broker.bootstrap, topic_name, PARTITIONS)
    with RawKafka(shared_broker.bootstrap) as raw:
        full, full_size = _fetch_v12(raw, topic_name, dict.fromkeys(range(PARTITIONS), 0), session_id=0, epoch=0)
        assert full.error_code == ErrorCode.none and full.session_id != 0
        assert len(_partitions(full)) == PARTITIONS
        session = full.session_id
        # Nothing changed: the incremental answer names no partition and is a fraction of the full one.
        idle, idle_size = _fetch_v12(raw, topic_name, {}, session_id=session, epoch=1)
        assert idle.error_code == ErrorCode.none and idle.session_id == session
        assert _partitions(idle) == {} and idle_size * 20 < full_size
        raw.request(produce_request(topic_name, 7, _records(b"news")))
        news, _ = _fetch_v12(raw, topic_name, {}, session_id=session, epoch=2)
        assert list(_partitions(news)) == [7] and _partitions(news)[7].records
        # The client moves its position; an unchanged high watermark then means nothing to say.
        moved, _ = _fetch_v12(raw, topic_name, {7: 1}, session_id=session, epoch=3)
        assert _partitions(moved) == {}
        # Forgetting partition 7: news on it no longer shows.
        raw.request(produce_request(topic_name, 7, _records(b"more")))
        forgot, _ = _fetch_v12(raw, topic_name, {}, session_id=session, epoch=4, forgotten=(7,))
        assert _partitions(forgot) == {}
        stale, _ = _fetch_v12(raw, topic_name, {}, session_id=session, epoch=4)
        assert stale.error_code == ErrorCode.invalid_fetch_session_epoch and stale.session_id == 0
        unknown, _ = _fetch_v12(raw, topic_name, {}, session_id=session + 1, epoch=1)
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found
        # Epoch -1 closes the session (a sessionless full fetch answers); it is gone afterwards.
        closed, _ = _fetch_v12(raw, topic_name, {0: 0}, session_id=session, epoch=-1)
        assert closed.error_code == ErrorCode.none and closed.session_id == 0
        gone, _ = _fetch_v12(raw, topic_name, {}, session_id=session, epoch=5)
        assert gone.error_code == ErrorCode.fetch_session_id_not_found


def test_sessions_by_topic_id_from_v13(shared_broker: BrokerProcess, topic_name: str) -> None:
    from kio.schema.fetch.v13.request import FetchPartition, FetchRequest, FetchTopic

    _create(shared_broker.bootstrap, topic_name, 3)
    with RawKafka(shared_broker.bootstrap) as raw:
        [meta] = raw.request(metadata_request(topic_name)).topics
        topic_id: uuid.UUID = meta.topic_id

        def fetch(session_id: int, epoch: int, partitions: tuple[int, ...]) -> Any:
            return raw.request(FetchRequest(
                max_wait=datetime.timedelta(0), min_bytes=0, isolation_level=0, session_id=session_id,
                session_epoch=epoch, forgotten_topics_data=(), rack_id="",
                topics=(FetchTopic(topic_id=topic_id, partitions=tuple(
                    FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20) for p in partitions)),)
                if partitions else ()))

        full = fetch(0, 0, (0, 1, 2))
        assert full.session_id != 0 and [t.topic_id for t in full.responses] == [topic_id]
        raw.request(produce_request(topic_name, 2, _records(b"by id")))
        news = fetch(full.session_id, 1, ())
        assert [(t.topic_id, [p.partition_index for p in t.partitions]) for t in news.responses] == [(topic_id, [2])]
        # A session opened by topic id cannot continue by name (Kafka's FETCH_SESSION_ID_NOT_FOUND below v13).
        by_name, _ = _fetch_v12(raw, topic_name, {}, session_id=full.session_id, epoch=2)
        assert by_name.error_code == ErrorCode.fetch_session_id_not_found


def test_a_broker_restart_loses_sessions_and_consumers_carry_on(make_broker: Any, topic_name: str) -> None:
    broker = make_broker()
    _create(broker.bootstrap, topic_name, 4)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        producer.produce(topic_name, b"before-%d" % i, partition=i % 4)
    producer.flush(10)
    with RawKafka(broker.bootstrap) as raw:
        session = _fetch_v12(raw, topic_name, dict.fromkeys(range(4), 0), session_id=0, epoch=0)[0].session_id
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic_name}",
                         "auto.offset.reset": "earliest", "fetch.wait.max.ms": 200})
    consumer.subscribe([topic_name])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 40 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    assert len(seen) == 40
    broker.restart()
    with RawKafka(broker.bootstrap) as raw:
        lost, _ = _fetch_v12(raw, topic_name, {}, session_id=session, epoch=1)
        assert lost.error_code == ErrorCode.fetch_session_id_not_found
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        producer.produce(topic_name, b"after-%d" % i, partition=i % 4)
    producer.flush(10)
    deadline = time.monotonic() + 45
    while len(seen) < 80 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.close()
    assert len(seen) == 80


def test_waiting_fetches_complete_on_min_bytes_timeout_or_deletion(shared_broker: BrokerProcess,
                                                                    topic_name: str) -> None:
    _create(shared_broker.bootstrap, topic_name, 2)
    small = _records(b"x")
    with RawKafka(shared_broker.bootstrap, timeout=10) as raw, RawKafka(shared_broker.bootstrap) as writer:
        # Nothing arrives: the fetch waits out max_wait.
        started = time.monotonic()
        _fetch_v12(raw, topic_name, {0: 0, 1: 0}, session_id=0, epoch=-1, min_bytes=1, max_wait_ms=400)
        assert 0.35 < time.monotonic() - started < 3
        # min_bytes of three small batches: one append is not enough, three are (across partitions).
        raw.send_frame(raw.encode(_fetch_request_v12(topic_name, 3 * len(small), 8000, {0: 0, 1: 0})))
        started = time.monotonic()
        writer.request(produce_request(topic_name, 0, small))
        time.sleep(0.3)
        writer.request(produce_request(topic_name, 1, small))
        writer.request(produce_request(topic_name, 0, small))
        response = _read_v12(raw)
        assert time.monotonic() - started < 4
        assert sum(len(p.records or b"") for p in _partitions(response).values()) >= 3 * len(small)
        # A deleted topic answers a waiting fetch at once.
        raw.send_frame(raw.encode(_fetch_request_v12(topic_name, 1 << 20, 8000, {0: 2, 1: 1})))
        time.sleep(0.2)
        started = time.monotonic()
        admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
        admin.delete_topics([topic_name])[topic_name].result(10)
        _read_v12(raw)
        assert time.monotonic() - started < 4


def _fetch_request_v12(topic: str, min_bytes: int, max_wait_ms: int, offsets: dict[int, int]) -> Any:
    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

    return FetchRequest(
        max_wait=datetime.timedelta(milliseconds=max_wait_ms), min_bytes=min_bytes, isolation_level=0,
        session_id=0, session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=(FetchTopic(topic=topic, partitions=tuple(
            FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20) for p, o in offsets.items())),))


def _read_v12(raw: RawKafka) -> Any:
    return raw.read_response(1, 12, raw.correlation_id)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    return f"fs-{request.node.name[:40].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"


class FetchRecorder:
    """A TCP relay the broker advertises, noting each Fetch request's (session id, epoch) and the size of
    the response to it: what a client actually does with sessions, seen on the wire."""

    def __init__(self, port: int, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", port))
        self.requests: list[tuple[int, int]] = []
        self.response_sizes: list[int] = []
        self._fetch_ids: set[int] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
                threading.Thread(target=self._pump, args=(client, upstream, self._on_request), daemon=True).start()
                threading.Thread(target=self._pump, args=(upstream, client, self._on_response), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, on_frame: Callable[[bytes], None]) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while data := src.recv(1 << 16):
                buffer += data
                while len(buffer) >= 4 and len(buffer) >= 4 + (size := struct.unpack_from(">i", buffer)[0]):
                    on_frame(buffer[4 : 4 + size])
                    buffer = buffer[4 + size :]
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.close()

    def _on_request(self, frame: bytes) -> None:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        if api_key != 1 or version < 7:
            return
        from bus.protocol import header as hdr
        from bus.protocol import messages

        header = hdr.parse_request_header(frame, messages.request_class(1, version).__flexible__)
        request = messages.decode_request(1, version, frame, header.body_offset)
        self.requests.append((request.session_id, request.session_epoch))
        self._fetch_ids.add(correlation_id)

    def _on_response(self, frame: bytes) -> None:
        if struct.unpack_from(">i", frame)[0] in self._fetch_ids:
            self.response_sizes.append(len(frame))

    def close(self) -> None:
        self.listener.close()


def test_kafka_python_uses_sessions_and_idle_fetches_shrink(make_broker: Any, topic_name: str) -> None:
    """kafka-python (like the Java client) opens a session and then fetches incrementally: with 200 idle
    partitions its fetch responses shrink to a small fraction of the full one. (librdkafka 2.x does not use
    sessions for consumer fetches: it sends session id 0 and epoch -1, which stays a full fetch.)"""
    from kafka import KafkaConsumer, TopicPartition

    port = free_port()
    broker = make_broker({"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    recorder = FetchRecorder(port, broker.port)
    try:
        _create(broker.bootstrap, topic_name, PARTITIONS)
        consumer = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", fetch_max_wait_ms=100)
        consumer.assign([TopicPartition(topic_name, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and sum(1 for _, epoch in recorder.requests if epoch > 2) < 5:
            consumer.poll(200)
        consumer.close()
    finally:
        recorder.close()
    assert recorder.requests[0][1] == 0, recorder.requests[:3]  # a full fetch asking for a session
    incremental = [epoch for session, epoch in recorder.requests if session != 0 and epoch > 0]
    assert len(incremental) >= 5
    full, *later = recorder.response_sizes
    assert max(later[-5:]) * 20 < full, (full, later[-5:])

