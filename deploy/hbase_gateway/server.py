"""Thrift wiring: listening socket, one thread per connection, and error mapping.

Why not ``thriftpy2.rpc.make_server``: its server socket sets SO_REUSEPORT (two gateways could
silently share a port), leaves Nagle on for accepted sockets (tens of ms stalls on multi-segment
replies), and its processor lets any handler exception that the IDL does not declare kill the
connection. Here every failure of a decoded request is answered (``IOError`` at worst), and only
bytes that cannot be decoded close that one connection.

A thread per connection is enough: the work is GIL-bound either way, SQLite releases the GIL
while it works, and happybase connections are long-lived and few. Their number is capped
(``Limits.max_connections``: one past the cap is closed as soon as it is accepted, the others
never notice), and with ``Limits.idle_timeout_seconds`` a connection that sends nothing for that
long is closed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import socket
import sqlite3
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from thriftpy2.protocol import TCompactProtocol, TCyBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType, TProcessor
from thriftpy2.transport import TSocket, TTransportException
from thriftpy2.transport.buffered import TCyBufferedTransport
from thriftpy2.transport.framed import TCyFramedTransport
from thriftpy2.transport.memory import TCyMemoryBuffer

from . import metrics
from .errors import HBaseError
from .idl import Hbase
from .limits import Limits, enter_connection

log = logging.getLogger(__name__)

TRANSPORTS = ("buffered", "framed")
PROTOCOLS = ("binary", "compact")
_BUFFER = 256 * 1024  # one reply of a 1,000-row scannerGetList fits in a few sends
_MAX_RECV = 1 << 20  # a bogus length prefix cannot make one recv() allocate gigabytes

# IDL field that carries each kind of error in a ``<method>_result`` struct.
_FIELD_FOR_KIND = {"io": "io", "illegal_argument": "ia", "already_exists": "exist"}
_THRIFT_ERROR = {"io": Hbase.IOError, "ia": Hbase.IllegalArgument, "exist": Hbase.AlreadyExists}
_OUTCOME = {"io": "io_error", "ia": "illegal_argument", "exist": "already_exists"}  # the metrics' label


class RequestTooLarge(Exception):
    """A request grew past ``Limits.max_request_bytes`` while being read: it cannot be answered
    (its end was never read, so the stream cannot be resynchronised), only its connection closed."""


class _BoundedSocket(TSocket):
    """recv() sizes bounded, and the bytes of one request counted against a budget, so a client
    cannot make the gateway buffer gigabytes before the per-call limits can even be checked."""

    def __init__(self, sock: socket.socket, max_request_bytes: int) -> None:
        super().__init__(sock=sock)
        self.max_request_bytes = max_request_bytes
        self.budget = max_request_bytes

    def new_request(self) -> None:
        self.budget = self.max_request_bytes

    def read(self, sz: int) -> bytes:
        data = super().read(min(sz, _MAX_RECV))
        self.budget -= len(data)
        if self.budget < 0:
            raise RequestTooLarge(f"request over {self.max_request_bytes:,} bytes")
        return data


class GatewayProcessor(TProcessor):
    """thriftpy2's processor, except that no exception escapes a decoded request, and a reply
    reaches the socket whole or not at all.

    Why whole: the connection's buffered transport sends its buffer as soon as a reply outgrows it
    (256 KiB: a big ``scannerGetList``), so a reply whose encoding failed half-way used to leave its
    first part on the wire, followed by the error answer. The client then decoded the mix as one
    reply, and thriftpy2's C decoder skips unknown type codes without reading, so a garbage list
    length kept it spinning where neither its socket timeout nor SIGALRM can reach it. Each reply is
    encoded into memory first and written in one piece.
    """

    def process(self, iprot: Any, oprot: Any) -> None:
        api, seqid, result, call = self.process_in(iprot)
        if isinstance(result, TApplicationException):  # unknown method: answered, connection kept
            self.send_exception(oprot, api, result, seqid)
            return
        assert call is not None
        started = time.perf_counter()
        outcome = "ok"
        try:
            result.success = call()
        except Exception as exc:  # every failure becomes an answer
            field, error = self._thrift_error(api, exc, result)
            outcome = _OUTCOME.get(field or "", "internal")
            if field is None:
                self.send_exception(oprot, api, error, seqid)
                return
            setattr(result, field, error)
        finally:
            metrics.observe(api, outcome, time.perf_counter() - started)
        try:
            reply = _encode(oprot, api, TMessageType.REPLY, result, seqid)
        except Exception as exc:  # a reply that cannot be encoded is a gateway bug: still answer
            field, error = self._thrift_error(api, exc, getattr(self._service, api + "_result")())
            if field is None:
                self.send_exception(oprot, api, error, seqid)
                return
            reply = _encode(oprot, api, TMessageType.REPLY,
                            getattr(self._service, api + "_result")(**{field: error}), seqid)
        _send(oprot, reply)

    @staticmethod
    def _thrift_error(api: str, exc: Exception, result: Any) -> tuple[str | None, Any]:
        declared = {spec[1] for spec in result.thrift_spec.values()}
        if isinstance(exc, HBaseError):
            field = _FIELD_FOR_KIND[exc.kind]
            message = str(exc)
            log.debug("request failed", extra={"api": api, "error": message})
        else:
            field = "io"
            kind = "storage" if isinstance(exc, sqlite3.Error) else "internal"
            message = f"{kind} error: {type(exc).__name__}: {_clip(str(exc))}"
            # The message, clipped, and where it came from: not the exception's own text, which can be megabytes.
            where = traceback.format_tb(exc.__traceback__)[-3:]
            log.error("request failed", extra={"api": api, "error": message, "traceback": "".join(where)})
        if field not in declared:
            field = "io"
        if field not in declared:
            return None, TApplicationException(TApplicationException.INTERNAL_ERROR, message)
        return field, _THRIFT_ERROR[field](message=message)

    def send_exception(self, oprot: Any, api: str, exc: Any, seqid: int) -> None:
        _send(oprot, _encode(oprot, api, TMessageType.EXCEPTION, exc, seqid))


def _clip(text: str, limit: int = 500) -> str:
    """An exception's text bounded: thriftpy2's encode errors quote the whole offending value."""
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def _encode(oprot: Any, api: str, kind: int, payload: Any, seqid: int) -> bytes:
    """One whole message in the connection's protocol, encoded in memory."""
    memory = TCyMemoryBuffer()
    proto = type(oprot)(memory)
    proto.write_message_begin(api, kind, seqid)
    payload.write(proto)
    proto.write_message_end()
    return memory.getvalue()


def _send(oprot: Any, message: bytes) -> None:
    oprot.trans.write(message)
    oprot.trans.flush()


def _peer_text(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


def _transport_factory(name: str) -> Callable[[Any], Any]:
    cls = {"buffered": TCyBufferedTransport, "framed": TCyFramedTransport}[name]
    return lambda trans: cls(trans, _BUFFER)


def _protocol_factory(name: str) -> Callable[[Any], Any]:
    # Server side must decode ``string`` fields (decode_response=True); Text/binary stay bytes.
    if name == "binary":
        return lambda trans: TCyBinaryProtocol(trans, decode_response=True)
    return lambda trans: TCompactProtocol(trans, decode_response=True)


class GatewayServer:
    """Accepts connections and serves each on its own thread until ``stop()``."""

    def __init__(
        self,
        handler: object,
        host: str,
        port: int,
        transport: str = "buffered",
        protocol: str = "binary",
        limits: Limits | None = None,
    ) -> None:
        self.processor = GatewayProcessor(Hbase.Hbase, handler)
        self.host = host
        self.port = port
        self.limits = limits or Limits()
        self._make_transport = _transport_factory(transport)
        self._make_protocol = _protocol_factory(protocol)
        self._listener: socket.socket | None = None
        self._clients: dict[socket.socket, threading.Thread] = {}
        self._clients_lock = threading.Lock()
        self._wake_r, self._wake_w = os.pipe()
        self._stopping = False

    def bind(self) -> tuple[str, int]:
        """Listen now (so the caller can announce the real port, e.g. for ``--port 0``)."""
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, address = infos[0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # not REUSEPORT: one owner
        listener.bind(address)
        listener.listen(128)
        self._listener = listener
        self.port = listener.getsockname()[1]
        return self.host, self.port

    def serve(self) -> None:
        """Accept until ``stop()``; then close the clients and wait briefly for their threads."""
        assert self._listener is not None, "bind() first"
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping:
                for key, _ in selector.select():
                    if key.fileobj is self._listener and not self._stopping:
                        self._accept()
        self._close_clients()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, peer = self._listener.accept()
        except OSError as exc:
            log.warning("accept failed", extra={"error": str(exc)})
            return
        with self._clients_lock:
            full = len(self._clients) >= self.limits.max_connections
        if full:
            log.warning(
                "connection refused: too many connections (--max-connections)",
                extra={"peer": _peer_text(peer), "max_connections": self.limits.max_connections},
            )
            with contextlib.suppress(OSError):
                sock.close()
            return
        # A timeout on every recv/send: a client silent that long is dropped (None: never).
        sock.settimeout(self.limits.idle_timeout_seconds or None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        thread = threading.Thread(target=self._serve_client, args=(sock, peer), daemon=True)
        with self._clients_lock:
            self._clients[sock] = thread
        thread.start()

    def _serve_client(self, sock: socket.socket, peer: Any) -> None:
        peer_text = _peer_text(peer)
        enter_connection()
        log.debug("client connected", extra={"peer": peer_text})
        bounded = _BoundedSocket(sock, self.limits.max_request_bytes)
        transport = self._make_transport(bounded)
        protocol = self._make_protocol(transport)
        try:
            while not self._stopping:
                bounded.new_request()
                self.processor.process(protocol, protocol)
        except TTransportException:
            pass  # the client went away
        except RequestTooLarge as exc:
            log.warning(
                "closing connection: request too large (over twice --max-mutate-bytes)",
                extra={"peer": peer_text, "error": str(exc)},
            )
        except TimeoutError:
            log.info(
                "closing idle connection (--idle-timeout-seconds)",
                extra={"peer": peer_text, "idle_timeout_seconds": self.limits.idle_timeout_seconds},
            )
        except Exception as exc:  # undecodable bytes: only this connection ends
            log.warning("closing connection after malformed request", extra={"peer": peer_text, "error": repr(exc)})
        finally:
            with self._clients_lock:
                self._clients.pop(sock, None)
            with contextlib.suppress(OSError):
                sock.close()
            log.debug("client disconnected", extra={"peer": peer_text})

    def stop(self) -> None:
        """Safe from a signal handler: sets a flag and wakes the accept loop."""
        self._stopping = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _close_clients(self, grace: float = 5.0) -> None:
        if self._listener is not None:
            self._listener.close()
        with self._clients_lock:
            clients = dict(self._clients)
        for sock in clients:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)  # idle readers see EOF; a request in flight finishes
        deadline = time.monotonic() + grace
        for thread in clients.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        os.close(self._wake_r)
        os.close(self._wake_w)
