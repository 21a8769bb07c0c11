"""One client connection: bytes in through the frame decoder, responses out in request order.

Requests on a connection are handled one at a time and answered in order (Kafka mutes a channel
while its request is in flight, and clients rely on that ordering); frames that arrive meanwhile
queue up (pipelining). The connection stops reading from its socket (is muted) for any of three
reasons, and reads again when all are gone:

- it holds `READ_AHEAD` frames, or `READ_AHEAD_BYTES` of them, not yet answered (one client cannot
  take the whole broker's queue);
- the broker-wide request queue is full (`RequestQueue`: `queued.max.requests`, `queued.max.request.bytes`)
  and this connection still holds requests it has not handled: the ones adding to the backlog wait, a
  client with one request at a time is not starved by them. A frame being received is never cut off
  (it may be up to `socket.request.max.bytes`; Kafka's memory pool is non-strict in the same way);
- its responses are not leaving: the transport's write buffer passed its high-water mark
  (`pause_writing`). No further request is handled either until the buffer drains below the low mark
  (`resume_writing`), so a client that pipelines fetches and never reads holds at most one response
  plus the high-water mark, not a thousand responses. Its unanswered requests are then parked: taken
  out of the broker-wide queue (in Kafka they would still sit in the socket buffer, as Kafka reads one
  request per connection at a time), so slow readers cannot mute everybody else; the read-ahead bound
  above still bounds what they hold.

Who the connection is (its principal, handed to every request) depends on its listener's security
(`ListenerSecurity`): User:ANONYMOUS on PLAINTEXT; on SSL, the TLS handshake runs first (`accept_tls`, bounded
by `bus.ssl.handshake.timeout.ms`; the connection is admitted and counted from the TCP accept on, so connections
stuck in handshakes are bounded by `max.connections` like any other) and the client certificate's mapped name
decides; on SASL_PLAINTEXT and SASL_SSL the connection is `authenticating` until its SASL exchange
succeeds: its frames then go to `_authenticate`, which answers ApiVersions, SaslHandshake and SaslAuthenticate only
(anything else closes the connection, nothing sent, as Kafka does) and reads frames of at most
`sasl.server.max.receive.size`. The one test per request on the hot path is `authenticating`. A failed login is
answered after `connection.failed.authentication.delay.ms`, then the connection closes (`_MUTE_CLOSING`: nothing
more is read or handled meanwhile); a session that outlives `connections.max.reauth.ms` without re-authenticating
(KIP-368) is closed when it ends.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable

from bus.network.errors import InvalidRequest
from bus.network.interfaces import RequestHandler
from bus.network.listener_security import ListenerSecurity
from bus.network.metrics import AuthenticationMetrics
from bus.network.request_queue import RequestQueue
from bus.protocol import header as hdr
from bus.protocol.framing import FrameDecoder, FrameError
from bus.security.acls import ANONYMOUS
from bus.security.authenticator import SaslAuthenticator
from bus.security.principal import ssl_principal

log = logging.getLogger(__name__)

READ_AHEAD = 32
READ_AHEAD_BYTES = 1 << 20
# Per-connection response buffer bounds: enough to keep a fast consumer's socket busy, small next to
# the one fetch response (up to fetch.max.bytes) a muted connection may still hold.
WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 256 << 10
WRITE_BATCH_BYTES = 64 << 10  # responses of one turn gathered into one write up to this size

_MUTE_READ_AHEAD = 1
_MUTE_QUEUE = 2
_MUTE_WRITE = 4
_MUTE_CLOSING = 8  # its authentication failed: its last answer is on the way, then it closes
_STOP_HANDLING = _MUTE_WRITE | _MUTE_CLOSING
SOCKET_LIMIT_KEY = "socket.request.max.bytes"
SASL_LIMIT_KEY = "sasl.server.max.receive.size"
TLS_MECHANISM = "SSL"  # how the metrics name the TLS handshake and client certificate step


class KafkaConnection(asyncio.Protocol):
    def __init__(
        self,
        apis: RequestHandler,
        listener: str,
        max_frame_bytes: int,
        queue: RequestQueue,
        admit: Callable[[KafkaConnection], str | None],
        on_close: Callable[[KafkaConnection], None],
        security: ListenerSecurity,
        authentications: AuthenticationMetrics,
    ) -> None:
        self.apis = apis
        self.listener = listener
        self.max_frame_bytes = max_frame_bytes
        self.decoder = FrameDecoder(max_frame_bytes)
        self.security = security
        self.authentications = authentications
        self.principal = ANONYMOUS
        self.sasl: SaslAuthenticator | None = None
        self.authenticating = False  # a SASL exchange is not over: frames go to `_authenticate`
        self.admitted = False  # counted in by the socket server's connection limits
        self._session_timer: asyncio.TimerHandle | None = None  # the end of a SASL session (KIP-368)
        self.queue = queue
        self.admit = admit
        self.on_close = on_close
        self.pending: collections.deque[bytes] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.ip = "?"
        self.busy = False
        self.in_flight = 0  # 1 while a frame taken off `pending` is not answered yet
        self.muted = 0  # _MUTE_* reasons; the socket is read only while this is 0
        self.closed = False
        self.held_bytes = 0  # received and not yet answered: counted in the broker-wide queue
        self.last_active = time.monotonic()
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport's methods without subclassing it.
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)  # type: ignore[attr-defined]
        if self.closed:  # a TLS connection closed (the idle reaper, a stop) while its handshake ran
            transport.close()
        elif self.admitted:  # a TLS connection, admitted before its handshake (`accept_tls`), which has just ended
            self._tls_authenticated(transport)
        elif self._admit(transport.get_extra_info("peername")) and self.security.sasl is not None:
            self._start_sasl()

    def _admit(self, peer: tuple[str, int] | None) -> bool:
        if peer:
            self.ip = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"
        refusal = self.admit(self)
        if refusal is not None:
            log.info("rejected connection from %s on %s: %s", self.peer, self.listener, refusal)
            self.close()
            return False
        self.admitted = True
        return True

    # -- authentication ------------------------------------------------------------------------

    async def accept_tls(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        """A TLS listener's new connection: admitted first, so connections in a handshake count against the
        connection limits, then the handshake, bounded by `bus.ssl.handshake.timeout.ms`; `connection_made` follows
        with the TLS transport once it succeeded. A failure is logged with the peer and counted."""
        if not self._admit(peer):
            sock.close()
            return
        security = self.security
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: self, sock, ssl=security.tls, ssl_handshake_timeout=security.handshake_timeout_s)
        except ssl.SSLError as exc:  # not a ClientHello, an untrusted or missing client certificate, ...
            self._refuse(f"SSL handshake failed: {exc.reason or exc}")
            return
        except OSError as exc:  # the peer went away, or the handshake timed out
            log.info("closing connection %s on %s during its TLS handshake: %s", self.peer, self.listener,
                     exc or type(exc).__name__)
            self._closed()
            return
        if self.transport is None:  # the peer closed before the handshake ended: no connection was made
            log.debug("connection %s on %s closed during its TLS handshake", self.peer, self.listener)
            self._closed()

    def _tls_authenticated(self, transport: asyncio.BaseTransport) -> None:
        """Who a client is once its TLS handshake succeeded: its SASL login (SASL_SSL), or on SSL the principal
        `ssl.principal.mapping.rules` makes of its certificate (ANONYMOUS without one)."""
        security = self.security
        if security.sasl is not None:
            self._start_sasl()
            return
        assert security.principal_mapper is not None
        ssl_object = transport.get_extra_info("ssl_object")
        try:
            principal = ssl_principal(ssl_object.getpeercert(binary_form=True), security.principal_mapper)
        except ValueError as exc:  # no mapping rule matches the certificate's name, or it cannot be read
            self._refuse(str(exc))
            return
        self.principal = str(principal)
        self.authentications.record("successful_authentication", self.listener, TLS_MECHANISM)

    def _refuse(self, reason: str) -> None:
        """A failed TLS authentication: logged and counted as Kafka's failed-authentication, then closed."""
        self.authentications.record("failed_authentication", self.listener, TLS_MECHANISM)
        log.info("Failed authentication with %s on %s: %s", self.peer, self.listener, reason)
        self.close()

    def _start_sasl(self) -> None:
        security = self.security
        assert security.sasl is not None
        self.sasl = SaslAuthenticator(security.sasl, self.listener, self.peer, self, self.authentications,
                                      max_reauth_ms=security.max_reauth_ms, failure_delay_s=security.failure_delay_s)
        self.reauthenticating()

    def authenticated(self, principal: str, session_lifetime_s: float) -> None:
        """The SASL exchange succeeded: requests are this principal's, in frames up to socket.request.max.bytes."""
        self.principal = principal
        self.authenticating = False
        self.decoder.max_frame_bytes, self.decoder.limit_key = self.max_frame_bytes, SOCKET_LIMIT_KEY
        if self._session_timer is not None:
            self._session_timer.cancel()
            self._session_timer = None
        if session_lifetime_s > 0:
            self._session_timer = asyncio.get_running_loop().call_later(session_lifetime_s, self._session_expired)

    def reauthenticating(self) -> None:
        """A SASL exchange begins (or begins again): only its requests, in frames up to its receive size."""
        assert self.sasl is not None
        self.authenticating = True
        self.decoder.max_frame_bytes, self.decoder.limit_key = self.sasl.listener.max_receive_size, SASL_LIMIT_KEY

    def authentication_failed(self) -> None:
        self._mute(_MUTE_CLOSING)

    def _session_expired(self) -> None:
        self._session_timer = None
        assert self.sasl is not None
        log.info("closing connection %s on %s: its SASL session ended (connections.max.reauth.ms) without "
                 "re-authentication", self.peer, self.listener)
        self.authentications.record("expired_connections_killed", self.listener, self.sasl.mechanism or "")
        self.close()

    def _authenticate(self, frame: bytes) -> bytes | memoryview | Awaitable[bytes | memoryview | None] | None:
        """A frame of a SASL connection whose exchange is not over: a bare token after a v0 handshake, else one of
        the requests the exchange expects (KafkaApis answers it, with the exchange in its context)."""
        sasl = self.sasl
        assert sasl is not None
        if sasl.raw:
            answer = sasl.evaluate_raw(frame)
            return sasl.delayed(None) if answer is None else answer
        try:
            api_key = hdr.peek_api(frame)[0]
        except hdr.HeaderError as exc:
            raise InvalidRequest(f"not a Kafka request during SASL authentication ({exc}): a client configured "
                                 "with the wrong security protocol?") from None
        if not sasl.expects(api_key):
            raise InvalidRequest(f"unexpected request of api {api_key} during SASL authentication")
        return self.apis.handle(frame, self.listener, self.peer, sasl=sasl)

    # -- reading -------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.abort(f"bad frame: {exc}")
            return
        size = len(data)
        self.held_bytes += size
        queue = self.queue
        if not self.muted & _MUTE_WRITE:
            queue.requests += len(frames)  # `queue.add`, inlined: it runs for every read
            queue.bytes += size
        pending = self.pending
        if frames:
            pending.extend(frames)
            if len(pending) >= READ_AHEAD or self.held_bytes >= READ_AHEAD_BYTES:  # `_read_ahead_full`
                self._mute(_MUTE_READ_AHEAD)
            if not self.busy:
                self._process()
        if pending and queue.full:
            self._mute(_MUTE_QUEUE)
            queue.wait(self)

    def _read_ahead_full(self) -> bool:
        return len(self.pending) >= READ_AHEAD or (bool(self.pending) and self.held_bytes >= READ_AHEAD_BYTES)

    def _mute(self, reason: int) -> None:
        if not self.muted and self.transport and not self.closed:
            self.transport.pause_reading()
        self.muted |= reason

    def _unmute(self, reason: int) -> None:
        if not self.muted & reason:
            return
        self.muted &= ~reason
        if not self.muted and self.transport and not self.closed:
            self.transport.resume_reading()

    def unmute_queue(self) -> None:
        self._unmute(_MUTE_QUEUE)

    # -- writing -------------------------------------------------------------------------------

    def pause_writing(self) -> None:
        if self.muted & _MUTE_WRITE:
            return
        self._mute(_MUTE_WRITE)
        self.queue.forget(self)
        self._unmute(_MUTE_QUEUE)  # its requests leave the queue: the queue cannot be its reason
        self.queue.release(len(self.pending) + self.in_flight, self.held_bytes)  # parked

    def resume_writing(self) -> None:
        if self.muted & _MUTE_WRITE and not self.closed:
            self.queue.add(len(self.pending) + self.in_flight, self.held_bytes)  # unparked
        self._unmute(_MUTE_WRITE)
        if not self.busy and not self.closed:
            self._process()

    # -- handling ------------------------------------------------------------------------------

    def _process(self) -> None:
        """Handle queued frames until one must wait (it continues in a task) or responses stop leaving.

        At most READ_AHEAD frames per turn of the event loop: one read can hold thousands of tiny
        pipelined requests, and handling them all at once would stall every other connection.
        Responses answered in the same turn leave in one write (one system call for a pipelining client
        instead of one per request); a batch is written out as soon as it reaches WRITE_BATCH_BYTES, so
        the transport still sees large responses at once and can mute the connection in time.
        """
        batch: list[bytes | memoryview] = []
        try:
            self._handle_pending(batch)
        finally:
            if batch and not self.closed:
                self._write(batch)

    def _handle_pending(self, batch: list[bytes | memoryview]) -> None:
        budget = READ_AHEAD
        batched = 0
        pending = self.pending
        apis = self.apis
        answered = False
        try:
            while pending and not self.closed and not self.muted & _STOP_HANDLING:
                if not budget:
                    self.busy = True
                    asyncio.get_running_loop().call_soon(self._next_turn)
                    return
                budget -= 1
                frame = pending.popleft()
                self.in_flight = 1
                try:
                    if self.authenticating:
                        result = self._authenticate(frame)
                    else:
                        result = apis.handle(frame, self.listener, self.peer, principal=self.principal,
                                             client_host=self.ip, sasl=self.sasl)
                except Exception as exc:
                    self._handling_failed(exc)
                    return
                if isinstance(result, (bytes, memoryview)):
                    batch.append(result)
                    batched += len(result)
                    if batched >= WRITE_BATCH_BYTES:
                        self._write(batch)
                        batch.clear()
                        batched = 0
                elif result is not None:
                    self.busy = True
                    self.task = asyncio.ensure_future(self._await(result, len(frame) + 4))
                    return
                self._answered(len(frame) + 4)
                answered = True
            self.busy = False
        finally:
            if answered:
                self.last_active = time.monotonic()

    def _write(self, batch: list[bytes | memoryview]) -> None:
        if len(batch) == 1:
            self.transport.write(batch[0])  # type: ignore[union-attr]
        else:
            self.transport.writelines(batch)  # type: ignore[union-attr]

    def _next_turn(self) -> None:
        self.busy = False
        if not self.closed:
            self._process()

    def _done(self, size: int) -> None:
        """A request is answered: its bytes and slot go back to the broker-wide queue."""
        self._answered(size)
        self.last_active = time.monotonic()

    def _answered(self, size: int) -> None:
        """`_done` but for `last_active`, which `_handle_pending` sets once for all it answered in a turn."""
        self.held_bytes -= size
        self.in_flight = 0
        if self.muted & _MUTE_READ_AHEAD and not self._read_ahead_full():
            self._unmute(_MUTE_READ_AHEAD)
        if not self.muted & _MUTE_WRITE:
            queue = self.queue
            if queue.waiting:
                queue.release(1, size)
            else:  # `queue.release` without connections to wake: the two subtractions, inlined
                queue.requests -= 1
                queue.bytes -= size

    def _handling_failed(self, exc: Exception) -> None:
        """Close the connection after a request that got no answer: a malformed one says why; anything else is a
        bug of ours, logged with its traceback (called inside the `except` block, so the traceback is the handler's)."""
        if isinstance(exc, InvalidRequest):
            self.abort(str(exc))
        else:
            log.exception("request handling failed on connection %s; closing it", self.peer)
            self.abort("internal error")

    async def _await(self, pending: Awaitable[bytes | memoryview | None], size: int) -> None:
        try:
            response = await pending
        except Exception as exc:
            self._handling_failed(exc)
            return
        if self.closed:
            return
        if response is not None and self.transport:
            self.transport.write(response)
        if self.muted & _MUTE_CLOSING:  # the answer to a failed authentication has left
            self.close()
            return
        self._done(size)
        self._process()

    # -- closing -------------------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        if self.closed:
            return
        log.warning("closing connection %s on %s: %s", self.peer, self.listener, reason)
        if self.transport:
            self.transport.abort()
        self._closed()

    def close(self) -> None:
        if self.transport and not self.closed:
            self.transport.close()
        self._closed()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed()

    def _closed(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._session_timer is not None:
            self._session_timer.cancel()
        unanswered = len(self.pending) + self.in_flight
        self.pending.clear()
        if self.task and not self.task.done():
            self.task.cancel()
        self.queue.forget(self)
        held, self.held_bytes = self.held_bytes, 0
        if not self.muted & _MUTE_WRITE:
            self.queue.release(unanswered, held)
        self.on_close(self)

    def idle_for(self, now: float) -> float:
        return 0.0 if self.busy else now - self.last_active

    def __repr__(self) -> str:
        return f"<KafkaConnection {self.peer} {self.listener}>"
