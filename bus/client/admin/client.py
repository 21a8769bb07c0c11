"""The admin client itself: its config, its connections, where each request goes, and the retry loop.

`AdminClient` mirrors the Java `Admin` API (snake_case names, Java config keys) but is blocking: each call sends
its requests, waits, and returns plain data or raises an `AdminError` that carries Kafka's error name. This module
holds what every call stands on, and the calls themselves come from one mixin per concern (`cluster.py`,
`quorum.py`, `topics.py`, `reassignment.py`, `configs.py`, `offsets.py`, `groups.py`, `transactions.py`, `acls.py`,
`scram.py`), each of which uses the client only through `common.AdminCalls`. Requests go to any broker, to the
controller the metadata names, or to a partition's leader (a group's or a transaction's coordinator is found by the
calls that need one). Retriable answers (NOT_CONTROLLER, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS,
LEADER_NOT_AVAILABLE, ...) refresh the routing and retry until `default.api.timeout.ms`; an unreachable cluster
fails within `socket.connection.setup.timeout.ms`, not after a long hang, so the command-line tools stay snappy.

Every request is built with `request_for`, at the highest version both sides speak, so the same code talks to our
broker and to Apache Kafka. The client connects with the security its config asks for (`security.protocol`,
`sasl.*`, `ssl.*`, as the producer and consumer); a refused login raises `AuthenticationError` from the constructor
or the call, at once.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from bus.client.admin.acls import AclAdmin
from bus.client.admin.cluster import ClusterAdmin
from bus.client.admin.common import AdminError, AdminTimeoutError, BrokerInfo, Retry, UnknownTopicOrPartitionError
from bus.client.admin.configs import ConfigAdmin
from bus.client.admin.groups import GroupAdmin
from bus.client.admin.offsets import OffsetAdmin
from bus.client.admin.quorum import QuorumAdmin
from bus.client.admin.reassignment import ReassignmentAdmin
from bus.client.admin.scram import ScramAdmin
from bus.client.admin.topics import TopicAdmin
from bus.client.admin.transactions import TransactionAdmin
from bus.client.cluster import Metadata, NodeConnections
from bus.client.connection import BrokerConnection, KafkaConnectionError, request_for
from bus.client.security import client_security
from bus.protocol.topic_partition import TopicPartition

T = TypeVar("T")


def _parse_bootstrap(value: str | Iterable[str]) -> list[tuple[str, int]]:
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"invalid bootstrap server '{item}': expected host:port")
        out.append((host.strip("[]") or "localhost", int(port)))
    if not out:
        raise ValueError("no bootstrap servers given (bootstrap.servers)")
    return out


class AdminClient(ClusterAdmin, QuorumAdmin, TopicAdmin, ReassignmentAdmin, ConfigAdmin, OffsetAdmin, GroupAdmin,
                  TransactionAdmin, AclAdmin, ScramAdmin):
    """A blocking Kafka admin client.

    Configure it with the Java client's keys, as a mapping or as keyword arguments with underscores:
    `AdminClient({"bootstrap.servers": "127.0.0.1:9092"})` or `AdminClient(bootstrap_servers=...)`.
    Known keys: `bootstrap.servers`, `client.id`, `request.timeout.ms` (one request, 30 s),
    `default.api.timeout.ms` (a whole call with its retries, 60 s),
    `socket.connection.setup.timeout.ms` (10 s), `retry.backoff.ms` (100 ms), and the security keys
    (`security.protocol`, `sasl.mechanism`, `sasl.jaas.config` or `sasl.username`/`sasl.password`, `ssl.*`).
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        conf: dict[str, Any] = dict(config or {})
        conf.update({key.replace("_", "."): value for key, value in kwargs.items()})
        if "bootstrap.servers" not in conf:
            raise ValueError("bootstrap.servers is required")
        bootstrap = _parse_bootstrap(conf["bootstrap.servers"])
        self.client_id = str(conf.get("client.id", "bus-admin"))
        self.request_timeout = int(conf.get("request.timeout.ms", 30_000)) / 1000
        self.api_timeout = int(conf.get("default.api.timeout.ms", 60_000)) / 1000
        self.connect_timeout = int(conf.get("socket.connection.setup.timeout.ms", 10_000)) / 1000
        self.retry_backoff = int(conf.get("retry.backoff.ms", 100)) / 1000
        self._lock = threading.RLock()
        # The producer's and consumer's connection layer: cluster metadata, and connections by node id.
        self._metadata = Metadata([f"{host}:{port}" for host, port in bootstrap], client_id=self.client_id,
                                  request_timeout_ms=int(self.request_timeout * 1000),
                                  retry_backoff_ms=int(self.retry_backoff * 1000),
                                  metadata_max_age_ms=int(conf.get("metadata.max.age.ms", 300_000)),
                                  allow_auto_create=False,
                                  connect_timeout_ms=int(self.connect_timeout * 1000),
                                  security=client_security(conf))
        self._nodes = NodeConnections(self._metadata, self.client_id, timeout=self.request_timeout,
                                      backoff=self.retry_backoff, connect_timeout=self.connect_timeout)
        self._coordinators: dict[str, int] = {}
        self._closed = False
        self._refresh_brokers()

    # -- lifecycle ------------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._nodes.close()
            self._metadata.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connections and routing ----------------------------------------------------------------------

    @property
    def _brokers(self) -> dict[int, BrokerInfo]:
        view = self._metadata.view
        return {node: BrokerInfo(node, host, port, view.racks.get(node)) for node, (host, port) in view.brokers.items()}

    def _conn(self, node_id: int) -> BrokerConnection:
        if node_id not in self._metadata.view.brokers:
            raise Retry(AdminError(ErrorCode.leader_not_available, f"broker {node_id} is not in the metadata"))
        return self._nodes.connect(node_id)

    def _drop(self, node_id: int) -> None:
        self._nodes.drop(node_id, time.monotonic())

    def _any_node(self) -> int:
        """A broker to send cluster-wide requests to: one already connected if possible, else one whose last
        connection attempt did not fail (a cluster's Metadata may still list a broker that just died)."""
        brokers = self._metadata.view.brokers
        for node_id in self._nodes.conns:
            if node_id in brokers:
                return node_id
        if not brokers:
            self._refresh_brokers()
        nodes = self._metadata.view.brokers
        return min((n for n in nodes if not self._nodes.last_attempt_failed(n)), default=min(nodes))

    def _controller(self) -> int:
        controller = self._metadata.view.controller_id
        return controller if controller in self._metadata.view.brokers else self._any_node()

    def _leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's leader, from fresh metadata; unknown topics/partitions raise."""
        partitions = list(partitions)
        described = self.describe_topics({tp.topic for tp in partitions})
        leaders: dict[TopicPartition, int] = {}
        for tp in partitions:
            info = next((p for p in described[tp.topic].partitions if p.partition == tp.partition), None)
            if info is None:
                raise UnknownTopicOrPartitionError(ErrorCode.unknown_topic_or_partition,
                                                   f"Partition {tp.partition} of topic '{tp.topic}' does not exist.")
            if info.leader is None:
                raise Retry(AdminError(ErrorCode.leader_not_available, f"{tp} has no leader"))
            leaders[tp] = info.leader
        return leaders

    def _send(self, node_id: int, api_key: int, build: Callable[[Any], Any]) -> Any:
        """One request to one broker; a broken connection is closed and reported as retriable."""
        conn = self._conn(node_id)
        try:
            return request_for(conn, api_key, build)
        except KafkaConnectionError:
            self._drop(node_id)
            raise

    def _refresh_brokers(self) -> None:
        """Learn the brokers and the controller from any reachable broker (bootstrap servers last)."""
        self._metadata.refresh()

    def _call(self, attempt: Callable[[], T], what: str) -> T:
        """Run `attempt` until it succeeds, retrying retriable conditions until the API deadline.

        Connection failures get two more tries (after a metadata refresh) and then surface, so a
        dead cluster is reported quickly instead of after `default.api.timeout.ms`.
        """
        if self._closed:
            raise RuntimeError("the admin client is closed")
        deadline = time.monotonic() + self.api_timeout
        connection_failures = 0
        with self._lock:
            while True:
                try:
                    return attempt()
                except Retry as retry:
                    if time.monotonic() + self.retry_backoff >= deadline:
                        raise AdminTimeoutError(ErrorCode.request_timed_out,
                                                f"{what} timed out after {self.api_timeout:g}s: "
                                                f"{retry.error.message} ({retry.error.name})") from None
                    time.sleep(self.retry_backoff)
                    if retry.refresh:
                        with contextlib.suppress(KafkaConnectionError):
                            self._refresh_brokers()
                except KafkaConnectionError:
                    connection_failures += 1
                    if connection_failures > 2 or time.monotonic() >= deadline:
                        raise
                    time.sleep(self.retry_backoff)
                    self._refresh_brokers()

    def _timeout_ms(self, timeout_ms: int | None) -> int:
        return int(self.request_timeout * 1000 if timeout_ms is None else timeout_ms)
