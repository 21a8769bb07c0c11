"""Cluster metadata: which brokers exist and which one leads each partition, kept fresh on demand.

Producer and consumer share this shape (Java's `Metadata` + `Cluster`): a bootstrap list is only a
way in; after the first Metadata response the client talks to the brokers the cluster advertises.
A refresh is synchronous on whichever thread needs it, under one lock, on a dedicated connection, so
a stale leader found by the sender thread and a topic first seen by `send()` both just call
`refresh()`. Snapshots (`ClusterView`) are immutable: readers never see half an update.

Every connection a client opens (these, and the group coordinator's) carries the client's `ClientSecurity`, held
here. A refused login is an `AuthenticationError` that reaches the caller at once: it is not a broker to skip or
a connection to retry after a backoff, as the same credentials would be refused again.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.config import bootstrap_addresses
from bus.client.connection import BrokerConnection, KafkaConnectionError, UnsupportedVersionError, request_for
from bus.client.errors import AuthenticationError, BrokerResponseError, KafkaError, KafkaTimeoutError
from bus.client.security import PLAINTEXT, ClientSecurity, client_security

log = logging.getLogger(__name__)

METADATA = 3
# Topic errors that resolve by themselves (auto-creation in progress, leader election).
_TRANSIENT_TOPIC_ERRORS = {ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
                           ErrorCode.not_leader_or_follower}


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID | None
    internal: bool
    partitions: dict[int, PartitionInfo]
    error: ErrorCode = ErrorCode.none

    @property
    def available(self) -> list[int]:
        """Partitions with a leader: where null-key records may stick."""
        return sorted(p for p, info in self.partitions.items() if info.leader >= 0)


@dataclass(frozen=True, slots=True)
class ClusterView:
    """One Metadata response, indexed."""

    brokers: dict[int, tuple[str, int]] = field(default_factory=dict)
    topics: dict[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    racks: dict[int, str | None] = field(default_factory=dict)

    def leader(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        part = info.partitions.get(partition) if info else None
        return part.leader if part else -1

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return len(info.partitions) if info and info.error == ErrorCode.none and info.partitions else None


class Metadata:
    """Thread-safe holder of the latest ClusterView and the connection used to refresh it."""

    def __init__(self, bootstrap_servers: Iterable[str], *, client_id: str, request_timeout_ms: int,
                 retry_backoff_ms: int, metadata_max_age_ms: int, allow_auto_create: bool = True,
                 connect_timeout_ms: int | None = None, security: ClientSecurity = PLAINTEXT) -> None:
        self.bootstrap = bootstrap_addresses(bootstrap_servers)
        self.client_id = client_id
        self.security = security
        self.timeout = request_timeout_ms / 1000.0
        self.connect_timeout = None if connect_timeout_ms is None else connect_timeout_ms / 1000.0
        self.backoff = retry_backoff_ms / 1000.0
        self.max_age = metadata_max_age_ms / 1000.0
        self.allow_auto_create = allow_auto_create
        self.view = ClusterView()
        self.topics: set[str] = set()  # topics this client cares about
        self.all_topics = False  # pattern subscriptions need every topic
        self._lock = threading.RLock()
        self._conn: BrokerConnection | None = None
        self._updated = 0.0
        self._need_update = True
        self.closed = False

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], client_id: str, *, allow_auto_create: bool = True) -> Metadata:
        """The metadata of a producer or consumer, from its config."""
        return cls(cfg["bootstrap.servers"], client_id=client_id, request_timeout_ms=cfg["request.timeout.ms"],
                   retry_backoff_ms=cfg["retry.backoff.ms"], metadata_max_age_ms=cfg["metadata.max.age.ms"],
                   allow_auto_create=allow_auto_create, security=client_security(cfg))

    # -- what to fetch --------------------------------------------------------------------------

    def add_topics(self, names: Iterable[str]) -> None:
        new = set(names) - self.topics
        if new:
            self.topics |= new
            self._need_update = True

    def request_update(self) -> None:
        """Mark the view stale: the next `maybe_refresh` fetches (after a leader or connection error)."""
        self._need_update = True

    @property
    def stale(self) -> bool:
        return self._need_update or time.monotonic() - self._updated > self.max_age

    # -- fetching -------------------------------------------------------------------------------

    def _connection(self) -> BrokerConnection:
        if self._conn is not None:
            return self._conn
        candidates = [addr for _, addr in sorted(self.view.brokers.items())] + self.bootstrap
        errors = []
        for host, port in dict.fromkeys(candidates):
            try:
                self._conn = self.open(host, port, timeout=self.timeout, connect_timeout=self.connect_timeout)
                return self._conn
            except KafkaConnectionError as exc:
                errors.append(str(exc))
        raise KafkaConnectionError("could not reach any bootstrap server: " + "; ".join(dict.fromkeys(errors)))

    def open(self, host: str, port: int, *, timeout: float, connect_timeout: float | None = None) -> BrokerConnection:
        """A new connection to `host:port` with this client's id and security."""
        return BrokerConnection(host, port, client_id=self.client_id, timeout=timeout, connect_timeout=connect_timeout,
                                security=self.security)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def refresh(self, topics: Iterable[str] | None = None) -> ClusterView:
        """One Metadata request for the wanted topics (all if subscribed by pattern); raises on failure."""
        with self._lock:
            if self.closed:
                raise KafkaError("client is closed")
            names = None if self.all_topics else sorted(self.topics | set(topics or ()))
            try:
                conn = self._connection()
                response = request_for(conn, METADATA, lambda s: s.make(
                    "MetadataRequest",
                    topics=None if names is None else [s.make("MetadataRequestTopic", name=n) for n in names],
                    allow_auto_topic_creation=self.allow_auto_create,
                ))
            except (KafkaConnectionError, AuthenticationError, OSError):
                self._drop_connection()
                raise
            self.absorb(response)
            self._need_update = any(
                t.error in _TRANSIENT_TOPIC_ERRORS or any(p.leader < 0 for p in t.partitions.values())
                for name, t in self.view.topics.items() if name in self.topics
            )
            return self.view

    def maybe_refresh(self) -> ClusterView:
        """Refresh if marked stale or older than metadata.max.age.ms; errors leave the old view."""
        if self.stale:
            try:
                self.refresh()
            except (KafkaConnectionError, OSError) as exc:
                log.debug("metadata refresh failed: %s", exc)
                self._updated = time.monotonic() - self.max_age + self.backoff  # retry after the backoff
        return self.view

    def absorb(self, response: Any) -> ClusterView:
        """Take a Metadata response (ours, or one another part of the client asked for) as the latest view."""
        self.view = self._parse(response)
        self._updated = time.monotonic()
        return self.view

    @staticmethod
    def _parse(response: Any) -> ClusterView:
        brokers = {int(b.node_id): (b.host, int(b.port)) for b in response.brokers}
        topics = {}
        for topic in response.topics:
            if topic.name is None:
                continue
            partitions = {
                int(p.partition_index): PartitionInfo(
                    topic.name, int(p.partition_index), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
                    tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes), p.error_code,
                )
                for p in topic.partitions
            }
            topic_id = getattr(topic, "topic_id", None)
            topics[topic.name] = TopicInfo(topic.name, topic_id, bool(getattr(topic, "is_internal", False)),
                                           partitions, topic.error_code)
        return ClusterView(brokers, topics, int(getattr(response, "controller_id", -1)),
                           getattr(response, "cluster_id", None),
                           {int(b.node_id): getattr(b, "rack", None) for b in response.brokers})

    def wait_for_topic(self, topic: str, deadline: float) -> TopicInfo:
        """Metadata for `topic` with its partitions, refreshing until `deadline` (max.block.ms)."""
        self.add_topics([topic])
        info = self.view.topics.get(topic)
        if info is not None and info.error == ErrorCode.none and info.partitions:
            return info
        last: Exception | None = None
        while True:
            try:
                view = self.refresh()
                info = view.topics.get(topic)
                if info is not None and info.error == ErrorCode.none and info.partitions:
                    return info
                if info is not None and info.error not in _TRANSIENT_TOPIC_ERRORS | {ErrorCode.none}:
                    raise BrokerResponseError(info.error, f"metadata for topic {topic}")
                last = BrokerResponseError(info.error if info else ErrorCode.unknown_topic_or_partition)
            except (KafkaConnectionError, OSError) as exc:
                last = exc
            if time.monotonic() + self.backoff > deadline:
                raise KafkaTimeoutError(f"topic {topic} not present in metadata within the time limit ({last})")
            time.sleep(self.backoff)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._drop_connection()


class NodeConnections:
    """A client's connections to the brokers by node id, all registered with one selector (key data: the node).

    The producer's sender and the consumer's fetcher each hold one. A node that cannot be reached is
    left alone for a backoff that doubles with each failed attempt up to `backoff_max`, and starts
    again at `backoff` when an open connection is lost (Java's reconnect.backoff.ms / .max.ms).
    """

    def __init__(self, metadata: Metadata, client_id: str, *, timeout: float, backoff: float,
                 backoff_max: float | None = None, check: Callable[[BrokerConnection], Any] | None = None,
                 connect_timeout: float | None = None) -> None:
        self.metadata = metadata
        self.client_id = client_id
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.backoff = backoff
        self.backoff_max = max(backoff, backoff_max or backoff)
        self.check = check  # run on each new connection; UnsupportedVersionError or a connection error fails it
        self.selector = selectors.DefaultSelector()
        self.conns: dict[int, BrokerConnection] = {}
        self._blackout: dict[int, tuple[float, float]] = {}  # node -> (until, current backoff)

    def get(self, node: int, now: float) -> BrokerConnection | None:
        """The node's connection, opened now if needed; None while it is backing off, not in the metadata or
        unreachable. A refused login raises its AuthenticationError (the node backs off as after any failure)."""
        conn = self.conns.get(node)
        if conn is not None:
            return conn
        if self._blackout.get(node, (0.0, 0.0))[0] > now:
            return None
        try:
            return self.connect(node)
        except KafkaConnectionError:
            return None

    def last_attempt_failed(self, node: int) -> bool:
        """Whether the latest connection attempt to `node` failed (no connection has succeeded since)."""
        return node not in self.conns and node in self._blackout

    def connect(self, node: int) -> BrokerConnection:
        """The node's connection, opened now if needed whatever its backoff; raises KafkaConnectionError or
        AuthenticationError (the node then backs off) for callers that report failures, such as the admin client."""
        conn = self.conns.get(node)
        if conn is not None:
            return conn
        address = self.metadata.view.brokers.get(node)
        if address is None:
            self.metadata.request_update()
            raise KafkaConnectionError(f"broker {node} is not in the metadata")
        backoff = self._blackout.get(node, (0.0, 0.0))[1]
        try:
            conn = self.metadata.open(*address, timeout=self.timeout, connect_timeout=self.connect_timeout)
        except AuthenticationError as exc:
            self._failed(node, backoff, exc)
            raise
        except (KafkaConnectionError, OSError) as exc:
            self._failed(node, backoff, exc)
            raise KafkaConnectionError(str(exc)) from exc
        try:
            if self.check is not None:
                self.check(conn)
        except (KafkaConnectionError, OSError, UnsupportedVersionError) as exc:
            conn.close()
            self._failed(node, backoff, exc)
            raise KafkaConnectionError(f"{address[0]}:{address[1]}: {exc}") from exc
        self._blackout.pop(node, None)
        self.conns[node] = conn
        self.selector.register(conn, selectors.EVENT_READ, node)
        return conn

    def _failed(self, node: int, backoff: float, exc: Exception) -> None:
        backoff = min(self.backoff_max, backoff * 2 if backoff else self.backoff)
        self._blackout[node] = (time.monotonic() + backoff, backoff)
        self.metadata.request_update()
        log.debug("cannot connect to node %s: %s", node, exc)

    def drop(self, node: int, now: float) -> None:
        """Close a broken or silent connection; the node is retried after `backoff`."""
        conn = self.conns.pop(node, None)
        if conn is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            conn.close()
        self._blackout[node] = (now + self.backoff, self.backoff)
        self.metadata.request_update()

    def select(self, timeout: float) -> list[tuple[selectors.SelectorKey, int]]:
        """The selector's ready keys, and those of connections whose TLS layer already holds decrypted bytes: their
        sockets may not be readable although a response is waiting (it came in one TLS record with the last)."""
        buffered = [self.selector.get_key(conn) for conn in self.conns.values() if conn.buffered]
        events = self.selector.select(0 if buffered else timeout)
        ready = {key.fd for key, _ in events}
        return events + [(key, selectors.EVENT_READ) for key in buffered if key.fd not in ready]

    def next_retry(self, now: float) -> float | None:
        """Seconds until the first node in backoff may be tried again (None if none is)."""
        waits = [until - now for until, _ in self._blackout.values() if until > now]
        return min(waits, default=None)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.close()
        self.conns.clear()
        self.selector.close()
