"""A Kafka-aware TCP proxy for client tests: forwards frames, and on request injects broker failures.

Retries and ordering can only be tested if a broker fails at a chosen moment. This proxy sits between
the client and a broker that advertises the proxy's port (so reconnects come back through it) and
asks `rule(api_key, request_number)` what to do with each request:

- "forward": pass it on;
- ("error", code): answer a Produce request itself with `code` for every partition, never telling
  the broker (the next in-flight batches then reach the broker out of sequence);
- "lose_response": pass it on, then drop the connection instead of relaying the answer (the broker
  appended the records, the client cannot know: its retry must be deduplicated).

Responses go back in request order, as a broker's would, whether they came from the broker or not.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.protocol import header as hdr
from bus.protocol.messages import decode_request, encode_response, request_class, response_class, shapes
from contracts.ports import free_port

Rule = Callable[[int, int], Any]
_SIZE = struct.Struct(">i")


def _read_frame(sock: socket.socket) -> bytes | None:
    def exactly(n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    size = exactly(4)
    if size is None:
        return None
    return exactly(_SIZE.unpack(size)[0])


def produce_error_response(frame: bytes, code: ErrorCode) -> bytes:
    """A ProduceResponse answering every partition of the request in `frame` with `code`."""
    api_key, version, correlation = hdr.peek_api(frame)
    flexible = request_class(api_key, version).__flexible__
    header = hdr.parse_request_header(frame, flexible)
    request = decode_request(api_key, version, frame, header.body_offset)
    s = shapes(api_key, version)
    responses = [s.make("TopicProduceResponse", name=topic.name, partition_responses=[
        s.make("PartitionProduceResponse", index=p.index, error_code=code, base_offset=-1, log_append_time=-1,
               log_start_offset=-1) for p in topic.partition_data]) for topic in request.topic_data]
    body = s.make("ProduceResponse", responses=responses, throttle_time=0)
    return bytes(encode_response(correlation, body, response_class(api_key, version).__flexible__))


class KafkaProxy:
    """Listens on `port`, relays to `target_port`; `rule` decides per request (see the module doc)."""

    def __init__(self, target_port: int, rule: Rule | None = None, port: int | None = None) -> None:
        self.port = port or free_port()
        self.target_port = target_port
        self.rule: Rule = rule or (lambda api_key, n: "forward")
        self.counts: collections.Counter[int] = collections.Counter()
        self.lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._closed = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self.lock:
                self._sockets += [client, upstream]
            _Session(self, client, upstream).start()

    def decide(self, api_key: int) -> Any:
        with self.lock:
            self.counts[api_key] += 1
            number = self.counts[api_key]
        return self.rule(api_key, number)

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        with self.lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                with contextlib.suppress(OSError):
                    sock.close()


class _Session:
    """One client connection: a reader per direction and a writer that keeps responses in order."""

    def __init__(self, proxy: KafkaProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.slots: collections.deque[tuple[str, bytes | None]] = collections.deque()
        self.broker_frames: collections.deque[bytes] = collections.deque()
        self.cond = threading.Condition()
        self.done = False

    def start(self) -> None:
        for target in (self._from_client, self._from_broker, self._to_client):
            threading.Thread(target=target, daemon=True).start()

    def _stop(self) -> None:
        with self.cond:
            self.done = True
            self.cond.notify_all()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    def _from_client(self) -> None:
        try:
            while True:
                frame = _read_frame(self.client)
                if frame is None:
                    break
                api_key = hdr.peek_api(frame)[0]
                action = self.proxy.decide(api_key)
                if isinstance(action, tuple) and action[0] == "error" and api_key == 0:
                    with self.cond:
                        self.slots.append(("inject", produce_error_response(frame, action[1])))
                        self.cond.notify_all()
                    continue
                kind = "lose" if action == "lose_response" else "broker"
                with self.cond:
                    self.slots.append((kind, None))
                self.upstream.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        self._stop()

    def _from_broker(self) -> None:
        try:
            while True:
                frame = _read_frame(self.upstream)
                if frame is None:
                    break
                with self.cond:
                    self.broker_frames.append(frame)
                    self.cond.notify_all()
        except OSError:
            pass
        self._stop()

    def _to_client(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.done and not (self.slots and (self.slots[0][0] == "inject" or self.broker_frames)):
                        self.cond.wait()
                    if self.done:
                        return
                    kind, data = self.slots.popleft()
                    if kind != "inject":
                        data = self.broker_frames.popleft()
                if kind == "lose":
                    break
                assert data is not None
                if kind == "inject":
                    self.client.sendall(data)
                else:
                    self.client.sendall(_SIZE.pack(len(data)) + data)
        except OSError:
            pass
        self._stop()
