"""The network edge (Kafka's SocketServer): one asyncio server per listener, connection limits, the idle reaper.

`max.connections` and `max.connections.per.ip` close a new connection over the limit at once, as
Kafka does for the per-IP limit. (For the broker-wide limit Kafka's acceptor instead stops accepting,
leaving new connections in the listen backlog; asyncio cannot pause an accepting server, so ours
closes them too, and the client reconnects after its backoff.) The per-IP overrides
(`max.connections.per.ip.overrides`) are not supported.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import socket
import time

from bus.broker.connection import KafkaConnection
from bus.broker.kafka_apis import KafkaApis
from bus.broker.request_queue import RequestQueue
from bus.config.broker import BrokerConfig, Listener

log = logging.getLogger(__name__)


class SocketServer:
    def __init__(self, config: BrokerConfig, apis: KafkaApis,
                 listener_apis: dict[str, KafkaApis] | None = None) -> None:
        """`listener_apis`: listeners (by name) that serve another API table than `apis`, e.g. the controller's."""
        self.config = config
        self.apis = apis
        self.listener_apis = listener_apis or {}
        self.servers: list[asyncio.Server] = []
        self.connections: set[KafkaConnection] = set()
        self.per_ip: collections.Counter[str] = collections.Counter()
        self.max_connections = int(config["max.connections"])
        self.max_per_ip = int(config["max.connections.per.ip"])
        self.queue = RequestQueue(int(config["queued.max.requests"]), int(config["queued.max.request.bytes"]))
        self._reaper: asyncio.Task[None] | None = None
        self.bound: dict[str, tuple[str, int]] = {}

    async def start(self) -> None:
        _raise_open_files_limit()
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
        return KafkaConnection(
            self.listener_apis.get(listener.name, self.apis),
            listener.name,
            max_frame_bytes=int(self.config["socket.request.max.bytes"]),
            queue=self.queue,
            admit=self._admit,
            on_close=self._closed,
        )

    def _admit(self, conn: KafkaConnection) -> str | None:
        """Count a new connection in, or say why it is refused."""
        if len(self.connections) >= self.max_connections:
            return f"the broker has the configured maximum of {self.max_connections} connections"
        if self.per_ip[conn.ip] >= self.max_per_ip:
            return f"{conn.ip} already has the configured maximum of {self.max_per_ip} connections"
        self.connections.add(conn)
        self.per_ip[conn.ip] += 1
        return None

    def _closed(self, conn: KafkaConnection) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            self.per_ip[conn.ip] -= 1
            if not self.per_ip[conn.ip]:
                del self.per_ip[conn.ip]

    async def _reap_idle(self) -> None:
        """Close connections idle longer than connections.max.idle.ms, as Kafka's processors do.

        Idle means no request read and no response written for that long (Kafka's Selector counts any
        socket activity); a connection waiting on a long-poll fetch is not idle. The check runs every
        quarter of the limit (at most every 10 s), so a connection goes within 1.25x the limit.
        """
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


def _raise_open_files_limit() -> None:
    """Every connection is a file descriptor: lift the soft limit to the hard one (Kafka's docs ask
    operators for 100,000), so `max.connections` and not a default of 1,024 decides how many we serve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            log.warning("cannot raise the open files limit from %d to %d", soft, hard)
