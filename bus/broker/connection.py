"""One client connection: bytes in through the frame decoder, responses out in request order.

Requests on a connection are handled one at a time and answered in order (Kafka mutes a channel
while its request is in flight, and clients rely on that ordering); frames that arrive meanwhile
queue up (pipelining). Reading pauses when `queued.max.requests` frames are waiting, which pushes
back on a client that produces faster than we append.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable

from bus.broker.errors import InvalidRequest
from bus.broker.kafka_apis import KafkaApis
from bus.protocol.framing import FrameDecoder, FrameError

log = logging.getLogger(__name__)


class KafkaConnection(asyncio.Protocol):
    def __init__(
        self,
        apis: KafkaApis,
        listener: str,
        max_frame_bytes: int,
        max_queued: int,
        on_close: Callable[[KafkaConnection], None],
    ) -> None:
        self.apis = apis
        self.listener = listener
        self.decoder = FrameDecoder(max_frame_bytes)
        self.max_queued = max_queued
        self.on_close = on_close
        self.pending: collections.deque[bytes] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.busy = False
        self.paused = False
        self.closed = False
        self.last_active = time.monotonic()
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport's methods without subclassing it.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.decoder.feed(data)
        except FrameError as exc:
            self.abort(f"bad frame: {exc}")
            return
        if not frames:
            return
        self.pending.extend(frames)
        if len(self.pending) >= self.max_queued and not self.paused and self.transport:
            self.transport.pause_reading()
            self.paused = True
        if not self.busy:
            self._process()

    def _process(self) -> None:
        """Handle queued frames until one must wait; that one continues in a task."""
        transport = self.transport
        while self.pending and not self.closed:
            frame = self.pending.popleft()
            try:
                result = self.apis.handle(frame, self.listener, self.peer)
            except InvalidRequest as exc:
                self.abort(str(exc))
                return
            except Exception:
                log.exception("handler failed on connection %s; closing it", self.peer)
                self.abort("internal error")
                return
            if isinstance(result, (bytes, memoryview)):
                transport.write(result)  # type: ignore[union-attr]
            elif result is not None:
                self.busy = True
                self.task = asyncio.ensure_future(self._await(result))
                return
        self.busy = False
        if self.paused and not self.closed and transport:
            transport.resume_reading()
            self.paused = False

    async def _await(self, pending: Awaitable[bytes | memoryview | None]) -> None:
        try:
            response = await pending
        except Exception:
            log.exception("handler failed on connection %s; closing it", self.peer)
            self.abort("internal error")
            return
        if self.closed:
            return
        if response is not None and self.transport:
            self.transport.write(response)
        self.last_active = time.monotonic()
        self._process()

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
        self.pending.clear()
        if self.task and not self.task.done():
            self.task.cancel()
        self.on_close(self)

    def idle_for(self, now: float) -> float:
        return 0.0 if self.busy else now - self.last_active

    def __repr__(self) -> str:
        return f"<KafkaConnection {self.peer} {self.listener}>"

