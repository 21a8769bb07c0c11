"""The console's shared clients of HBase, the bus and object storage, and their health.

One instance per process, created at start-up and handed to routes through dependencies. Clients are
made lazily and remade after a failure, so the console starts (and shows which backend is down)
while a backend is still coming up. Every failure to reach a backend becomes
:class:`BackendUnavailable` naming it, which the app answers with 503.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import happybase
import urllib3
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from thriftpy2.transport import TTransportException

from bus.client.admin import AdminClient as GroupAdminClient
from bus.client.errors import KafkaConnectionError, KafkaError
from video import storage
from web.settings import ConsoleSettings

HBASE, BUS, OBJECT_STORE = "hbase", "bus", "object_store"
_HBASE_ERRORS = (TTransportException, socket.error, OSError, BrokenPipeError)


class BackendUnavailable(Exception):
    """A backend could not be reached (or answered with a transport error) in time."""

    def __init__(self, backend: str, error: str) -> None:
        super().__init__(f"{backend} unavailable: {error}")
        self.backend = backend
        self.error = error


class Backends:
    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._pool: happybase.ConnectionPool | None = None
        self._admin: AdminClient | None = None
        self._group_admin: GroupAdminClient | None = None
        self._s3: Any = None

    # -- HBase ------------------------------------------------------------------------------------
    def _hbase_pool(self) -> happybase.ConnectionPool:
        with self._lock:
            if self._pool is None:
                s = self.settings
                try:  # the pool opens one connection at once, so a dead gateway fails here
                    # a request waits for a backend at most backend_timeout_s, whatever [hbase] timeout_ms says
                    hbase = replace(s.hbase, timeout_ms=int(s.backend_timeout_s * 1000))
                    self._pool = hbase.pool(s.hbase_pool_size)
                except _HBASE_ERRORS as exc:
                    raise BackendUnavailable(HBASE, _describe(exc)) from None
            return self._pool

    @contextlib.contextmanager
    def hbase(self) -> Iterator[happybase.Connection]:
        """A pooled connection; transport failures become BackendUnavailable (the pool replaces the connection).

        Enter and leave it in the same thread (happybase's pool lends per thread): inside a sync route
        body, never from a generator dependency, which FastAPI may close in another worker thread.
        """
        pool = self._hbase_pool()
        try:
            with pool.connection(timeout=self.settings.backend_timeout_s) as connection:
                yield connection
        except happybase.pool.NoConnectionsAvailable:
            raise BackendUnavailable(HBASE, "all connections busy") from None
        except _HBASE_ERRORS as exc:
            raise BackendUnavailable(HBASE, _describe(exc)) from None

    # -- the bus ----------------------------------------------------------------------------------
    def bus_admin(self) -> AdminClient:
        with self._lock:
            if self._admin is None:
                # librdkafka's own log lines go to Python logging instead of stderr.
                self._admin = AdminClient({**self.settings.bus,
                                           "socket.timeout.ms": int(self.settings.backend_timeout_s * 1000),
                                           "logger": logging.getLogger("web.bus")})
            return self._admin

    def group_admin(self) -> GroupAdminClient:
        """The consumer-group calls' admin client: the bus package's own (``bus.client.admin``), in Kafka's keys and
        as the console. Not librdkafka's: its coordinator requests (DescribeGroups, OffsetFetch, OffsetCommit) can
        abort the whole process when a broker comes back while requests that timed out are still pending on it
        (an assertion, ``rd_kafka_enq_once_del_source_return``, confluentinc/librdkafka#4605; the lag sampler took a
        console down that way when a broker host returned to the network). Here such a failure is an exception.
        BackendUnavailable(bus) while no broker answers."""
        with self._lock:
            if self._group_admin is None:
                timeout_ms = str(int(self.settings.backend_timeout_s * 1000))
                try:
                    self._group_admin = GroupAdminClient({
                        **self.settings.bus_java, "client.id": "console-groups", "request.timeout.ms": timeout_ms,
                        "socket.connection.setup.timeout.ms": timeout_ms,
                        "default.api.timeout.ms": str(int(self.settings.backend_timeout_s * 2000))})
                except (KafkaError, KafkaConnectionError, OSError) as exc:
                    raise BackendUnavailable(BUS, _describe(exc)) from None
            return self._group_admin

    def bus_call(self, future: concurrent.futures.Future[Any]) -> Any:
        """Wait for an admin future within the backend timeout; failures become BackendUnavailable(bus)."""
        try:
            return future.result(timeout=self.settings.backend_timeout_s)
        except concurrent.futures.TimeoutError:
            raise BackendUnavailable(BUS, f"no answer within {self.settings.backend_timeout_s:g} s") from None
        except KafkaException as exc:
            raise BackendUnavailable(BUS, str(exc.args[0] if exc.args else exc)) from None

    # -- object storage ---------------------------------------------------------------------------
    def s3(self) -> Any:
        with self._lock:
            if self._s3 is None:
                s = self.settings
                http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=s.backend_timeout_s,
                                                                   read=s.backend_timeout_s * 4),
                                           retries=urllib3.Retry(total=1, backoff_factor=0.2))
                self._s3 = storage.connect(s.s3_endpoint, s.s3_access_key, s.s3_secret_key, http_client=http)
            return self._s3

    # -- health -----------------------------------------------------------------------------------
    def _probe_hbase(self) -> None:
        with self.hbase() as connection:
            connection.tables()

    def _probe_bus(self) -> None:
        try:
            self.bus_admin().list_topics(timeout=self.settings.backend_timeout_s)
        except KafkaException as exc:
            raise BackendUnavailable(BUS, str(exc.args[0] if exc.args else exc)) from None

    def _probe_object_store(self) -> None:
        try:
            self.s3().list_buckets()
        except Exception as exc:  # the SDK raises urllib3, S3 and socket errors alike
            raise BackendUnavailable(OBJECT_STORE, _describe(exc)) from None

    def health(self) -> dict[str, str | None]:
        """Each backend's error, or None when it answered; probed in parallel so one dead backend costs one timeout."""
        probes = {HBASE: self._probe_hbase, BUS: self._probe_bus, OBJECT_STORE: self._probe_object_store}
        with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
            futures = {name: pool.submit(probe) for name, probe in probes.items()}
        result: dict[str, str | None] = {}
        for name, future in futures.items():
            exc = future.exception()
            result[name] = None if exc is None else (exc.error if isinstance(exc, BackendUnavailable)
                                                     else _describe(exc))
        return result

    def close(self) -> None:
        with self._lock:
            self._pool = None  # happybase pools have no close(); connections close when collected
            self._admin = None
            if self._group_admin is not None:
                self._group_admin.close()
                self._group_admin = None
            self._s3 = None


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
