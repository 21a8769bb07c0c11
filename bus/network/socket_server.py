"""The network edge (Kafka's SocketServer): one asyncio server per listener, connection limits, the idle reaper.

`max.connections` and `max.connections.per.ip` close a new connection over the limit at once, as
Kafka does for the per-IP limit. (For the broker-wide limit Kafka's acceptor instead stops accepting,
leaving new connections in the listen backlog; asyncio cannot pause an accepting server, so ours
closes them too, and the client reconnects after its backoff.) The per-IP overrides
(`max.connections.per.ip.overrides`) are not supported.

Each listener secures its connections as `ListenerSecurity` says (TLS, SASL, neither). A TLS listener accepts its
connections itself (`_accept_tls`) rather than through `loop.create_server(ssl=...)`, whose handshake the
application never sees fail: each connection is admitted before its handshake, so the connection limits bound
connections that never finish one too, and a failed handshake is logged with its peer and counted (see
`KafkaConnection.accept_tls`). Authentication outcomes are counted in `authentications` (Kafka's
successful/failed-authentication-total).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
import socket
import time
from asyncio import trsock
from collections.abc import Mapping

from bus.config.broker import BrokerConfig, Listener
from bus.network.connection import KafkaConnection
from bus.network.interfaces import RequestHandler
from bus.network.listener_security import ListenerSecurity
from bus.network.metrics import AuthenticationMetrics
from bus.network.request_queue import RequestQueue

log = logging.getLogger(__name__)

BACKLOG = 512
ACCEPT_RETRY_S = 0.1


class SocketServer:
    def __init__(self, config: BrokerConfig, apis: RequestHandler, security: dict[str, ListenerSecurity],
                 listener_apis: Mapping[str, RequestHandler] | None = None) -> None:
        """`security`: each listener's, by name; `listener_apis`: listeners (by name) that serve another API table
        than `apis`, e.g. the controller's."""
        self.config = config
        self.apis = apis
        self.security = security
        self.authentications = AuthenticationMetrics()
        self.listener_apis = listener_apis or {}
        self.servers: list[asyncio.Server] = []
        self.tls_sockets: list[socket.socket] = []  # the listening sockets of TLS listeners
        self._accepting: list[asyncio.Task[None]] = []  # their accept loops
        self._handshakes: set[asyncio.Task[None]] = set()  # their connections' TLS handshakes
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
            if self.security[listener.name].tls is None:
                server = await loop.create_server(
                    lambda lst=listener: self._connection(lst),
                    host=listener.host or None,
                    port=listener.port,
                    reuse_address=True,
                    backlog=BACKLOG,
                )
                self.servers.append(server)
                bound = [sock.getsockname() for sock in server.sockets]
            else:
                sockets = _listening_sockets(listener.host, listener.port)
                self.tls_sockets += sockets
                self._accepting += [asyncio.create_task(self._accept_tls(listener, sock)) for sock in sockets]
                bound = [sock.getsockname() for sock in sockets]
            self.bound[listener.name] = (bound[0][0], bound[0][1])
            log.info("listening on %s://%s:%d (%s)", listener.name, bound[0][0], bound[0][1],
                     self.security[listener.name].protocol)
        for sock in [*self.tls_sockets, *(sock for server in self.servers for sock in server.sockets)]:
            self._tune(sock)
        self._reaper = asyncio.create_task(self._reap_idle())

    def _tune(self, sock: socket.socket | trsock.TransportSocket) -> None:
        for option, key in ((socket.SO_SNDBUF, "socket.send.buffer.bytes"),
                            (socket.SO_RCVBUF, "socket.receive.buffer.bytes")):
            size = int(self.config[key])
            if size > 0:
                sock.setsockopt(socket.SOL_SOCKET, option, size)

    async def _accept_tls(self, listener: Listener, sock: socket.socket) -> None:
        """Accept a TLS listener's connections; each runs its handshake in a task of its own."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                accepted, address = await loop.sock_accept(sock)
            except OSError as exc:  # out of file descriptors, ...: the backlog keeps the client waiting meanwhile
                log.warning("cannot accept a connection on %s: %s", listener.name, exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            handshake = asyncio.create_task(self._connection(listener).accept_tls(accepted, address[:2]))
            self._handshakes.add(handshake)
            handshake.add_done_callback(self._handshakes.discard)

    def _connection(self, listener: Listener) -> KafkaConnection:
        return KafkaConnection(
            self.listener_apis.get(listener.name, self.apis),
            listener.name,
            max_frame_bytes=int(self.config["socket.request.max.bytes"]),
            queue=self.queue,
            admit=self._admit,
            on_close=self._closed,
            security=self.security[listener.name],
            authentications=self.authentications,
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
        for task in [*self._accepting, *self._handshakes]:
            task.cancel()
        for sock in self.tls_sockets:
            sock.close()
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            conn.close()
        for server in self.servers:
            await server.wait_closed()


def _listening_sockets(host: str, port: int) -> list[socket.socket]:
    """Listening sockets on every address of `host` (all interfaces when empty), as `loop.create_server` binds."""
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _name, address in socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                                      flags=socket.AI_PASSIVE):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as asyncio does: the IPv4 addresses get their own socket
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def _raise_open_files_limit() -> None:
    """Every connection is a file descriptor: lift the soft limit to the hard one (Kafka's docs ask
    operators for 100,000), so `max.connections` and not a default of 1,024 decides how many we serve."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            log.warning("cannot raise the open files limit from %d to %d", soft, hard)
