"""The network edge (Kafka's SocketServer): one asyncio server per listener and the idle reaper."""

from __future__ import annotations

import asyncio
import logging
import socket
import time

from bus.broker.connection import KafkaConnection
from bus.broker.kafka_apis import KafkaApis
from bus.config.broker import BrokerConfig, Listener

log = logging.getLogger(__name__)


class SocketServer:
    def __init__(self, config: BrokerConfig, apis: KafkaApis) -> None:
        self.config = config
        self.apis = apis
        self.servers: list[asyncio.Server] = []
        self.connections: set[KafkaConnection] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.bound: dict[str, tuple[str, int]] = {}

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for listener in self.config.listeners:
            server = await loop.create_server(
                lambda lst=listener: self._connection(lst),
                host=listener.host or None,
                port=listener.port,
                reuse_address=True,
                backlog=512,
            )
            self._tune(server)
            self.servers.append(server)
            sock = server.sockets[0].getsockname()
            self.bound[listener.name] = (sock[0], sock[1])
            log.info("listening on %s://%s:%d", listener.name, sock[0], sock[1])
        self._reaper = asyncio.create_task(self._reap_idle())

    def _tune(self, server: asyncio.Server) -> None:
        for sock in server.sockets:
            for option, key in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                                (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
                size = int(self.config[key])
                if size > 0:
                    sock.setsockopt(socket.SOL_SOCKET, option, size)

    def _connection(self, listener: Listener) -> KafkaConnection:
        conn = KafkaConnection(
            self.apis,
            listener.name,
            max_frame_bytes=int(self.config["socket.request.max.bytes"]),
            max_queued=int(self.config["queued.max.requests"]),
            on_close=self.connections.discard,
        )
        self.connections.add(conn)
        return conn

    async def _reap_idle(self) -> None:
        """Close connections idle longer than connections.max.idle.ms, as Kafka's processors do."""
        idle_ms = int(self.config["connections.max.idle.ms"])
        if idle_ms < 0:
            return
        limit = idle_ms / 1000.0
        while True:
            await asyncio.sleep(min(max(limit / 4, 0.05), 10.0))
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.idle_for(now) > limit:
                    log.info("closing idle connection %s", conn.peer)
                    conn.close()

    async def stop(self) -> None:
        if self._reaper:
            self._reaper.cancel()
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in self.servers:
            await server.wait_closed()
