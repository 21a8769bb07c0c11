"""A blocking connection to one broker: framed requests out, responses in, in order (pipelining allowed).

Both the producer's sender thread (several requests in flight, answered in order) and the admin
client (one request at a time) sit on this. It negotiates API versions once per connection with
ApiVersions, as every Kafka client does, and picks for each request the highest version both sides
serve, so the same code talks to our broker and to Apache Kafka.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema
from kio.schema.errors import ErrorCode

from bus.protocol import client_codec
from bus.protocol.messages import Shapes, request_shapes

API_VERSIONS = 18
_SIZE = struct.Struct(">i")


class KafkaConnectionError(ConnectionError):
    """The broker could not be reached, closed the connection, or sent something unreadable."""


class UnsupportedVersionError(RuntimeError):
    """Neither side serves a common version of the API the client needs."""


@functools.cache
def client_versions(api_key: int) -> range:
    """The versions of `api_key` this client can encode (what kio has schemas for)."""
    versions: list[int] = []
    for version in range(0, 30):
        try:
            load_request_schema(api_key, version)
        except Exception:  # kio raises several lookup errors for unknown versions
            if versions:
                break
            continue
        versions.append(version)
    return range(versions[0], versions[-1] + 1) if versions else range(0)


class BrokerConnection:
    """One TCP connection to `host:port`. Thread-safe for one sender and one receiver."""

    def __init__(self, host: str, port: int, *, client_id: str = "bus-client", timeout: float = 30.0,
                 connect_timeout: float | None = None) -> None:
        """`timeout` bounds each response; `connect_timeout` (Java's socket.connection.setup.timeout.ms),
        when given, bounds the connect and the ApiVersions exchange instead, so that an unreachable
        (blackholed) server fails in seconds rather than after a whole request timeout."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout if connect_timeout is None else connect_timeout
        try:
            self._sock = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send_lock = threading.Lock()
        self._correlation = 0
        self._pending: collections.deque[tuple[int, int, int]] = collections.deque()  # (corr, key, version)
        self.api_versions: dict[int, range] = {}
        self._negotiate()
        self.timeout = timeout
        self._sock.settimeout(timeout)

    # -- versions --------------------------------------------------------------------------------

    def _negotiate(self) -> None:
        response = self.request(request_shapes(API_VERSIONS, 3).make(
            "ApiVersionsRequest", client_software_name="bus-client", client_software_version="0.1"), version=3)
        if response.error_code != ErrorCode.none:
            # An older broker answers v0 with its list; retry at v0 as Kafka clients do.
            response = self.request(load_request_schema(API_VERSIONS, 0)(), version=0)
        self.api_versions = {k.api_key: range(k.min_version, k.max_version + 1) for k in response.api_keys}

    def version_for(self, api_key: int, wanted: range | None = None) -> int:
        """The highest version both this client and the broker serve (optionally within `wanted`)."""
        ours = client_versions(api_key)
        theirs = self.api_versions.get(api_key, range(0))
        common = [v for v in ours if v in theirs and (wanted is None or v in wanted)]
        if not common:
            raise UnsupportedVersionError(f"the broker at {self.host}:{self.port} serves no version of api {api_key} "
                                          f"this client speaks ({theirs.start}-{theirs.stop - 1} vs "
                                          f"{ours.start}-{ours.stop - 1})")
        return common[-1]

    # -- framing --------------------------------------------------------------------------------

    def send(self, request: Any, version: int | None = None, *, expect_response: bool = True) -> int:
        """Write one request; returns its correlation id (responses come back in this order).

        `expect_response=False` is for produce with acks=0, which the broker never answers: such a
        request must not hold a place in the queue of responses to read.
        """
        api_key = int(request.__api_key__)
        version = int(request.__version__) if version is None else version
        with self._send_lock:
            self._correlation = (self._correlation + 1) & 0x7FFFFFFF
            correlation = self._correlation
            frame = client_codec.encode_request(correlation, self.client_id, request, version)
            if expect_response:
                self._pending.append((correlation, api_key, version))
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise KafkaConnectionError(f"send to {self.host}:{self.port} failed: {exc}") from None
        return correlation

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self._sock.recv(min(size - len(chunks), 1 << 20))
            except TimeoutError:
                raise KafkaConnectionError(f"no response from {self.host}:{self.port} in {self.timeout}s") from None
            except OSError as exc:
                raise KafkaConnectionError(f"receive from {self.host}:{self.port} failed: {exc}") from None
            if not chunk:
                raise KafkaConnectionError(f"{self.host}:{self.port} closed the connection")
            chunks += chunk
        return bytes(chunks)

    def receive(self) -> tuple[int, Any]:
        """Read the next response (the oldest request in flight): (correlation id, decoded response)."""
        correlation, api_key, version = self._pending.popleft()
        (size,) = _SIZE.unpack(self._read_exactly(4))
        frame = self._read_exactly(size)
        got = client_codec.response_correlation_id(frame)
        if got != correlation:
            raise KafkaConnectionError(f"correlation id {got} does not match the request's {correlation}")
        return correlation, client_codec.decode_response(frame, api_key, version)

    def request(self, request: Any, version: int | None = None) -> Any:
        """Send one request and wait for its response (no other request may be in flight)."""
        self.send(request, version)
        return self.receive()[1]

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def fileno(self) -> int:
        """The socket's descriptor, so a sender or fetcher can wait on many connections with `selectors`."""
        return self._sock.fileno()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def request_for(conn: BrokerConnection, api_key: int, build: Callable[[Shapes], Any],
                wanted: range | None = None) -> Any:
    """Build a request at the best common version and send it.

    `build` receives the version's `Shapes` and returns e.g.
    `shapes.make("MetadataRequest", topics=None)`: fields the version lacks are dropped, missing ones
    zero-filled, so one builder serves every version.
    """
    version = conn.version_for(api_key, wanted)
    return conn.request(build(request_shapes(api_key, version)), version)
