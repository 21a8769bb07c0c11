"""A blocking connection to one broker: framed requests out, responses in, in order (pipelining allowed).

Both the producer's sender thread (several requests in flight, answered in order) and the admin
client (one request at a time) sit on this. It negotiates API versions once per connection with
ApiVersions, as every Kafka client does, and picks for each request the highest version both sides
serve, so the same code talks to our broker and to Apache Kafka.

A secured connection (`ClientSecurity`, from the client's `security.protocol`, `ssl.*` and `sasl.*` configs)
runs the TLS handshake first and, for SASL, logs in after ApiVersions (`bus.client.sasl`), all within the
connection setup timeout: a refusal is an `AuthenticationError` (`SslAuthenticationError`,
`SaslAuthenticationError`), never a hang and never a retried connection error. When the broker grants a session
lifetime (`connections.max.reauth.ms`, KIP-368) the connection re-authenticates on the same socket before it
ends: at 85-95% of the lifetime, as Java's client does, before sending its next request once no response is
outstanding (a pipelining owner such as the producer holds its requests back once `reauthentication_due`).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import random
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.errors import AuthenticationError, KafkaConnectionError, SslAuthenticationError, UnsupportedVersionError
from bus.client.sasl import authenticate
from bus.client.security import PLAINTEXT, ClientSecurity
from bus.protocol import client_codec
from bus.protocol.messages import Shapes, request_shapes
from bus.protocol.schemas import request_schema

__all__ = ["BrokerConnection", "KafkaConnectionError", "UnsupportedVersionError", "client_versions", "request_for"]

API_VERSIONS = 18
_SIZE = struct.Struct(">i")
# Java's client re-authenticates at a random point in this share of the session lifetime (KIP-368).
REAUTHENTICATE_WITHIN = (0.85, 0.95)


@functools.cache
def client_versions(api_key: int) -> range:
    """The versions of `api_key` this client can encode (what kio has schemas for)."""
    versions: list[int] = []
    for version in range(0, 30):
        try:
            request_schema(api_key, version)
        except Exception:  # kio raises several lookup errors for unknown versions
            if versions:
                break
            continue
        versions.append(version)
    return range(versions[0], versions[-1] + 1) if versions else range(0)


class BrokerConnection:
    """One TCP connection to `host:port`. Thread-safe for one sender and one receiver."""

    def __init__(self, host: str, port: int, *, client_id: str = "bus-client", timeout: float = 30.0,
                 connect_timeout: float | None = None, security: ClientSecurity = PLAINTEXT) -> None:
        """`timeout` bounds each response; `connect_timeout` (Java's socket.connection.setup.timeout.ms),
        when given, bounds the connect, the TLS handshake, ApiVersions and each step of the SASL login instead, so
        that an unreachable (blackholed) server fails in seconds rather than after a whole request timeout."""
        self.host = host
        self.port = port
        self.client_id = client_id
        self.security = security
        self.timeout = timeout if connect_timeout is None else connect_timeout
        try:
            self._sock: socket.socket = socket.create_connection((host, port), timeout=self.timeout)
        except OSError as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._send_lock = threading.Lock()
        self._correlation = 0
        self._pending: collections.deque[tuple[int, int, int]] = collections.deque()  # (corr, key, version)
        self.api_versions: dict[int, range] = {}
        self._established = False  # TLS failures before this are authentication failures
        self._answered = False  # whether a request after the setup has been answered
        self._reauthenticate_at: float | None = None
        try:
            if security.ssl_context is not None:
                self._start_tls(security.ssl_context)
            self._negotiate()
            if security.sasl is not None:
                self._authenticate()
        except BaseException:
            self.close()
            raise
        self._established = True
        self.timeout = timeout
        self._sock.settimeout(timeout)

    @property
    def _where(self) -> str:
        return f"{self.host}:{self.port}"

    # -- security --------------------------------------------------------------------------------

    def _start_tls(self, context: ssl.SSLContext) -> None:
        try:
            self._sock = context.wrap_socket(self._sock, server_hostname=self.host)
        except ssl.SSLError as exc:
            raise self._tls_failure(exc) from None
        except TimeoutError:
            raise KafkaConnectionError(f"TLS handshake with {self._where} timed out after {self.timeout:g}s") \
                from None
        except OSError as exc:
            raise KafkaConnectionError(f"TLS handshake with {self._where} failed: {exc.strerror or exc}") from None

    def _tls_failure(self, exc: ssl.SSLError) -> Exception:
        """An SSLError during the setup (the handshake, or the first read, where TLS 1.3 reports a refused client
        certificate) is an authentication failure, as Java's SslAuthenticationException; later, a broken connection."""
        reason = f"certificate verify failed: {exc.verify_message}" if isinstance(exc, ssl.SSLCertVerificationError) \
            else exc.reason or str(exc)
        if self._established:
            return KafkaConnectionError(f"TLS connection to {self._where} failed: {reason}")
        if isinstance(exc, ssl.SSLEOFError):
            reason = f"the broker closed the connection ({reason}): not a TLS listener?"
        return SslAuthenticationError(f"SSL handshake with {self._where} failed: {reason}")

    def _authenticate(self) -> None:
        """Log in (again) with SASL; plans the next re-authentication if the broker limits the session."""
        assert self.security.sasl is not None
        lifetime_ms = authenticate(self._exchange, self.version_for, self.security.sasl)
        self._reauthenticate_at = None if lifetime_ms == 0 else \
            time.monotonic() + lifetime_ms / 1000 * random.uniform(*REAUTHENTICATE_WITHIN)

    @property
    def reauthentication_due(self) -> bool:
        """Whether the SASL session must be renewed before the next request (KIP-368)."""
        return self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at

    def _reauthenticate(self) -> None:
        """Re-authenticate on this connection; a refusal closes it, as the broker does."""
        try:
            self._authenticate()
        except AuthenticationError:
            self.close()
            raise

    # -- versions --------------------------------------------------------------------------------

    def _negotiate(self) -> None:
        response = self._exchange(request_shapes(API_VERSIONS, 3).make(
            "ApiVersionsRequest", client_software_name="bus-client", client_software_version="0.1"), 3)
        if response.error_code != ErrorCode.none:
            # An older broker answers v0 with its list; retry at v0 as Kafka clients do.
            response = self._exchange(request_schema(API_VERSIONS, 0)(), 0)
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
        request must not hold a place in the queue of responses to read. A SASL session due for
        re-authentication is renewed first if no response is outstanding.
        """
        version = int(request.__version__) if version is None else version
        with self._send_lock:
            if not self._pending and self.reauthentication_due:
                self._reauthenticate()
            return self._write(request, version, expect_response)

    def _write(self, request: Any, version: int, expect_response: bool) -> int:
        """Frame and send one request (the caller holds the send lock, or is the only user of the connection)."""
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        frame = client_codec.encode_request(correlation, self.client_id, request, version)
        if expect_response:
            self._pending.append((correlation, int(request.__api_key__), version))
        try:
            self._sock.sendall(frame)
        except ssl.SSLError as exc:
            raise self._tls_failure(exc) from None
        except OSError as exc:
            raise KafkaConnectionError(f"send to {self._where} failed: {exc}") from None
        return correlation

    def _exchange(self, request: Any, version: int) -> Any:
        """One request and its response, while nothing else is in flight (setup and re-authentication)."""
        self._write(request, version, True)
        return self.receive()[1]

    def _read_exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:
            try:
                chunk = self._sock.recv(min(size - len(chunks), 1 << 20))
            except TimeoutError:
                raise KafkaConnectionError(f"no response from {self.host}:{self.port} in {self.timeout}s") from None
            except ssl.SSLError as exc:
                raise self._tls_failure(exc) from None
            except OSError as exc:
                raise KafkaConnectionError(f"receive from {self.host}:{self.port} failed: {exc}") from None
            if not chunk:
                raise self._closed_by_broker()
            chunks += chunk
        return bytes(chunks)

    def _closed_by_broker(self) -> Exception:
        """The broker closed the connection. Before it answered the first request, that is how a listener turns away
        a client of another security protocol (or, after a TLS handshake, a certificate it refused), so say so."""
        if self._answered:
            return KafkaConnectionError(f"{self._where} closed the connection")
        if not self._established and self.security.ssl_context is not None:
            return SslAuthenticationError(f"{self._where} closed the connection after the TLS handshake: it refused "
                                          "the client certificate, or needs one (ssl.keystore.*)")
        return KafkaConnectionError(f"{self._where} closed the connection before answering a request: a listener does "
                                    "that to a client of another security protocol (security.protocol is "
                                    f"{self.security.protocol})")

    def receive(self) -> tuple[int, Any]:
        """Read the next response (the oldest request in flight): (correlation id, decoded response)."""
        correlation, api_key, version = self._pending.popleft()
        (size,) = _SIZE.unpack(self._read_exactly(4))
        frame = self._read_exactly(size)
        got = client_codec.response_correlation_id(frame)
        if got != correlation:
            raise KafkaConnectionError(f"correlation id {got} does not match the request's {correlation}")
        self._answered = self._established
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

    @property
    def buffered(self) -> bool:
        """Whether TLS holds decrypted bytes not read yet: the socket may not be readable though a response is
        (two responses in one TLS record), so a selector alone would miss it."""
        return isinstance(self._sock, ssl.SSLSocket) and self._sock.pending() > 0

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
