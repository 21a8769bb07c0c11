"""An asyncio connection from this node to another one (Kafka's NetworkClient for inter-node traffic).

The KRaft driver sends its Vote, BeginQuorumEpoch, EndQuorumEpoch and Fetch requests through it, and the
replica fetchers will: both want many requests in flight on one connection (pipelining) without a thread
per peer. A `NodeConnection` connects lazily on the first request, negotiates versions once with
ApiVersions (as every Kafka client does), and pairs each response with its request by correlation id.

A request that gets no response within `request_timeout_s` fails with `NodeConnectionError`, and the
connection is closed, failing every other request in flight on it, as Kafka's NetworkClient disconnects
on a request timeout (a late response could otherwise be taken for a newer request's). Any broken
connection fails what is in flight the same way; the next request reconnects, unless a connection attempt
just failed: then requests fail at once until the reconnect backoff passes (Kafka's `reconnect.backoff.ms`).

A `NodeSecurity` secures the connection as the listener it dials requires: a TLS handshake within the connect
timeout, then, after ApiVersions, a SASL login with the node's own credentials (`bus.security.sasl_login`). A
refused login fails the request and backs off like a failed connect; when the listener limits the session
(`connections.max.reauth.ms`, KIP-368) the connection logs in again on the same socket before the lifetime ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import struct
import time
from typing import Any

from kio.schema.errors import ErrorCode

from bus.network.node_security import NO_SECURITY, NodeSecurity
from bus.protocol import client_codec
from bus.protocol.messages import request_shapes
from bus.security.sasl_login import Login, SaslLoginError, login

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
API_VERSIONS = client_codec.API_VERSIONS
API_VERSIONS_VERSION = 3
MAX_RESPONSE_BYTES = 256 << 20  # a sanity bound on a response's size prefix, not a protocol limit
# reconnect.backoff.ms and reconnect.backoff.max.ms: after a failed connect, requests fail at once for this
# long (doubling per failure), so a caller retrying a dead node does not hammer it with connection attempts.
RECONNECT_BACKOFF_S = 0.05
RECONNECT_BACKOFF_MAX_S = 1.0
# As Java's client, log in again at a random point in this share of the session lifetime (KIP-368).
REAUTHENTICATE_WITHIN = (0.85, 0.95)


class NodeConnectionError(ConnectionError):
    """The node could not be reached, closed the connection, timed out, or sent something unreadable."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out  # the request got no response in time (Kafka's REQUEST_TIMED_OUT)


class UnsupportedVersionError(NodeConnectionError):
    """The node does not serve the API version a request needs."""


class NodeAuthenticationError(NodeConnectionError):
    """The TLS handshake or the SASL login with the node failed (wrong credentials, an untrusted certificate)."""


class NodeConnection:
    def __init__(self, host: str, port: int, client_id: str, *, request_timeout_s: float = 30.0,
                 connect_timeout_s: float = 10.0, security: NodeSecurity = NO_SECURITY) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.security = security
        self.api_versions: dict[int, range] = {}
        self._reauthenticate_at: float | None = None  # monotonic; None: the session has no lifetime
        self._renewal: asyncio.TimerHandle | None = None  # the timer that renews the session in time
        self._renewing: asyncio.Task[None] | None = None
        self._not_renewing = asyncio.Event()  # cleared while a re-authentication runs: no request goes out then
        self._not_renewing.set()
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}  # correlation -> (future, key, version)
        self._correlation = 0
        self._connecting: asyncio.Lock | None = None
        self._closed = False
        self._connect_failures = 0
        self._reconnect_at = 0.0  # monotonic time before which no new connection is attempted

    def __repr__(self) -> str:
        return f"<NodeConnection {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def request(self, request: Any, version: int) -> Any:
        """Send a kio request at `version` and await its response (other requests may be in flight)."""
        if self._closed:
            raise NodeConnectionError(f"connection to {self.host}:{self.port} is closed")
        await self._ensure_connected()
        if self._reauthenticate_at is not None and time.monotonic() >= self._reauthenticate_at:
            await self._reauthenticate()
        await self._not_renewing.wait()
        api_key = int(request.__api_key__)
        served = self.api_versions.get(api_key)
        if served is None or version not in served:
            raise UnsupportedVersionError(f"{self.host}:{self.port} does not serve api {api_key} v{version} "
                                          f"(it serves {_describe(served)})")
        return await self._send(request, version)

    async def _send(self, request: Any, version: int) -> Any:
        writer = self._writer
        if writer is None:
            raise NodeConnectionError(f"connection to {self.host}:{self.port} was lost")
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        correlation = self._correlation
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation] = (future, int(request.__api_key__), version)
        writer.write(client_codec.encode_request(correlation, self.client_id, request, version))
        try:
            async with asyncio.timeout(self.request_timeout_s):
                return await asyncio.shield(future)
        except TimeoutError:
            self._disconnect(NodeConnectionError(
                f"no response from {self.host}:{self.port} to api {request.__api_key__} in {self.request_timeout_s}s"))
            raise NodeConnectionError(f"request to {self.host}:{self.port} timed out after "
                                      f"{self.request_timeout_s}s", timed_out=True) from None
        finally:
            self._pending.pop(correlation, None)

    async def _ensure_connected(self) -> None:
        if self._writer is not None:
            return
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._writer is not None:
                return
            wait = self._reconnect_at - time.monotonic()
            if wait > 0:
                raise NodeConnectionError(f"cannot connect to {self.host}:{self.port}: backing off {wait:.2f}s "
                                          "after a failed connection attempt")
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    reader, writer = await asyncio.open_connection(self.host, self.port,
                                                                   ssl=self.security.ssl_context)
            except ssl.SSLError as exc:
                self._back_off()
                raise NodeAuthenticationError(f"TLS handshake with {self.host}:{self.port} ({self.security.listener}) "
                                              f"failed: {exc.reason or exc}") from None
            except (OSError, TimeoutError) as exc:
                self._back_off()
                raise NodeConnectionError(f"cannot connect to {self.host}:{self.port}: {exc or 'timed out'}") from None
            self._writer = writer
            self._reader_task = asyncio.create_task(self._read_responses(reader, writer))
            try:
                await self._negotiate()
                if self.security.credentials is not None:
                    await self._login()
            except SaslLoginError as exc:
                self._back_off()
                error = NodeAuthenticationError(f"SASL login to {self.host}:{self.port} ({self.security.listener}) as "
                                                f"{self.security.credentials and self.security.credentials.username} "
                                                f"failed: {exc}")
                self._disconnect(error)
                raise error from None
            except BaseException:
                self._disconnect(NodeConnectionError(f"ApiVersions with {self.host}:{self.port} failed"))
                raise
            self._connect_failures = 0

    def _back_off(self) -> None:
        """No new connection attempt for a while, doubling per failure (`reconnect.backoff.ms`)."""
        self._connect_failures += 1
        backoff = RECONNECT_BACKOFF_S * 2 ** min(self._connect_failures - 1, 10)
        self._reconnect_at = time.monotonic() + min(backoff, RECONNECT_BACKOFF_MAX_S)

    async def _login(self) -> None:
        """The SASL exchange on this connection; plans the next one if the listener limits the session."""
        assert self.security.credentials is not None
        steps: Login = login(self.security.credentials, self._version_for)
        try:
            request = next(steps)
            while True:
                request = steps.send(await self._send(*request))
        except StopIteration as done:
            lifetime_ms = int(done.value)
        if lifetime_ms == 0:
            self._reauthenticate_at = None
            return
        delay = lifetime_ms / 1000 * random.uniform(*REAUTHENTICATE_WITHIN)
        self._reauthenticate_at = time.monotonic() + delay
        # In time even on an idle connection (a node that only long-polls would otherwise let the session lapse).
        self._renewal = asyncio.get_running_loop().call_later(delay, self._renew)

    def _renew(self) -> None:
        self._renewal = None
        if self._writer is not None and (self._renewing is None or self._renewing.done()):
            self._renewing = asyncio.create_task(self._renew_quietly())

    async def _renew_quietly(self) -> None:
        """The timer's re-authentication: a failure has closed the connection, and the next request says why."""
        with contextlib.suppress(NodeConnectionError):
            await self._reauthenticate()

    async def _reauthenticate(self) -> None:
        """Log in again before the session expires (KIP-368); a refusal closes the connection, as the node does."""
        assert self._connecting is not None
        async with self._connecting:
            if self._reauthenticate_at is None or time.monotonic() < self._reauthenticate_at:
                return  # renewed meanwhile
            self._not_renewing.clear()
            try:
                await self._login()
            except SaslLoginError as exc:
                error = NodeAuthenticationError(f"SASL re-authentication with {self.host}:{self.port} failed: {exc}")
                self._disconnect(error)
                raise error from None
            finally:
                self._not_renewing.set()

    def _version_for(self, api_key: int, wanted: range | None) -> int:
        """The newest version of `api_key` both the node serves and `wanted` allows."""
        served = self.api_versions.get(api_key, range(0))
        usable = served if wanted is None else range(max(served.start, wanted.start), min(served.stop, wanted.stop))
        if not usable:
            asked = "" if wanted is None else f" {_describe(wanted)}"
            raise UnsupportedVersionError(f"{self.host}:{self.port} does not serve api {api_key}{asked} "
                                          f"(it serves {_describe(served)})")
        return usable[-1]

    async def _negotiate(self) -> None:
        request = request_shapes(API_VERSIONS, API_VERSIONS_VERSION).make(
            "ApiVersionsRequest", client_software_name="bus-node", client_software_version="0.1")
        response = await self._send(request, API_VERSIONS_VERSION)
        if response.error_code != ErrorCode.none:
            raise UnsupportedVersionError(f"{self.host}:{self.port} refused ApiVersions "
                                          f"v{API_VERSIONS_VERSION}: {response.error_code.name}")
        self.api_versions = {int(k.api_key): range(k.min_version, k.max_version + 1) for k in response.api_keys}

    async def _read_responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: NodeConnectionError
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise NodeConnectionError(f"{self.host}:{self.port} sent a response frame of {size} bytes")
                frame = await reader.readexactly(size)
                correlation = client_codec.response_correlation_id(frame)
                entry = self._pending.pop(correlation, None)
                if entry is None:
                    continue  # its request timed out or was cancelled
                future, api_key, version = entry
                if future.done():
                    continue
                try:
                    future.set_result(client_codec.decode_response(frame, api_key, version))
                except Exception as exc:  # kio raises assorted errors on a malformed body
                    raise NodeConnectionError(f"unreadable response to api {api_key} v{version} from "
                                              f"{self.host}:{self.port}: {exc!r}") from None
        except asyncio.IncompleteReadError:
            error = NodeConnectionError(f"{self.host}:{self.port} closed the connection")
        except OSError as exc:
            error = NodeConnectionError(f"connection to {self.host}:{self.port} failed: {exc}")
        except NodeConnectionError as exc:
            error = exc
        if self._writer is writer:
            self._disconnect(error)

    def _disconnect(self, error: NodeConnectionError) -> None:
        """Close the socket and fail every request in flight with `error`."""
        writer, self._writer = self._writer, None
        task, self._reader_task = self._reader_task, None
        if writer is not None:
            writer.close()
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        pending, self._pending = self._pending, {}
        for future, _key, _version in pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # retrieved here: a caller that gave up must not log "never retrieved"
        self.api_versions = {}
        self._reauthenticate_at = None
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None

    async def close(self) -> None:
        """Close for good: requests in flight fail, later ones are refused."""
        self._closed = True
        task = self._reader_task
        self._disconnect(NodeConnectionError(f"connection to {self.host}:{self.port} closed"))
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def _describe(served: range | None) -> str:
    return "no version" if not served else f"v{served.start}-v{served.stop - 1}"
