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
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable

from bus.broker.errors import InvalidRequest
from bus.broker.kafka_apis import KafkaApis
from bus.broker.request_queue import RequestQueue
from bus.protocol.framing import FrameDecoder, FrameError

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


class KafkaConnection(asyncio.Protocol):
    def __init__(
        self,
        apis: KafkaApis,
        listener: str,
        max_frame_bytes: int,
        queue: RequestQueue,
        admit: Callable[[KafkaConnection], str | None],
        on_close: Callable[[KafkaConnection], None],
    ) -> None:
        self.apis = apis
        self.listener = listener
        self.decoder = FrameDecoder(max_frame_bytes)
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
        peer = transport.get_extra_info("peername")
        if peer:
            self.ip = peer[0]
            self.peer = f"{peer[0]}:{peer[1]}"
        refusal = self.admit(self)
        if refusal is not None:
            log.info("rejected connection from %s on %s: %s", self.peer, self.listener, refusal)
            self.close()

    # -- reading -------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.abort(f"bad frame: {exc}")
            return
        self.held_bytes += len(data)
        if not self.muted & _MUTE_WRITE:
            self.queue.add(len(frames), len(data))
        if frames:
            self.pending.extend(frames)
            if self._read_ahead_full():
                self._mute(_MUTE_READ_AHEAD)
        if frames and not self.busy:
            self._process()
        if self.pending and self.queue.full:
            self._mute(_MUTE_QUEUE)
            self.queue.wait(self)

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
        while self.pending and not self.closed and not self.muted & _MUTE_WRITE:
            if not budget:
                self.busy = True
                asyncio.get_running_loop().call_soon(self._next_turn)
                return
            budget -= 1
            frame = self.pending.popleft()
            self.in_flight = 1
            try:
                result = self.apis.handle(frame, self.listener, self.peer)
            except InvalidRequest as exc:
                self.abort(str(exc))
                return
            except Exception:
                log.exception("request handling failed on connection %s; closing it", self.peer)
                self.abort("internal error")
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
            self._done(len(frame) + 4)
        self.busy = False

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
        self.held_bytes -= size
        self.in_flight = 0
        self.last_active = time.monotonic()
        if not self._read_ahead_full():
            self._unmute(_MUTE_READ_AHEAD)
        if not self.muted & _MUTE_WRITE:
            self.queue.release(1, size)

    async def _await(self, pending: Awaitable[bytes | memoryview | None], size: int) -> None:
        try:
            response = await pending
        except InvalidRequest as exc:
            self.abort(str(exc))
            return
        except Exception:
            log.exception("request handling failed on connection %s; closing it", self.peer)
            self.abort("internal error")
            return
        if self.closed:
            return
        if response is not None and self.transport:
            self.transport.write(response)
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
