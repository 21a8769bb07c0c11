"""Partition sizes on disk, by Kafka's DescribeLogDirs (API 35), sent to every broker.

confluent-kafka's AdminClient does not expose DescribeLogDirs, so this speaks it with the bus
package's own wire client (``bus.client.connection``): a standard request at the highest version
both sides serve, which a real Kafka broker answers the same way. One connection per broker is
kept and reopened after a failure; requests are serialised per broker (a connection carries one
request at a time). Connections log in as the console (its settings in Kafka's keys, ``ConsoleSettings.bus_java``),
secured as those say; a trust store that cannot be read answers as the bus being unavailable, as librdkafka's
clients do. DescribeLogDirs needs DESCRIBE on the cluster: a broker refusing it is :class:`Forbidden` (a 403
naming it), never sizes of 0 bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from bus.client.connection import BrokerConnection, KafkaConnectionError, UnsupportedVersionError, request_for
from bus.client.errors import AuthenticationError, ConfigError
from bus.client.security import ClientSecurity, client_security

from ..backends import BUS, BackendUnavailable
from .errors import Forbidden

DESCRIBE_LOG_DIRS = 35

Sizes = dict[tuple[str, int], int]
"""(topic, partition) -> bytes of its log (the largest replica's, futures excluded)."""


class LogDirs:
    def __init__(self, bus: Mapping[str, str], client_id: str = "console", timeout_s: float = 3.0) -> None:
        """``bus``: the console's bus client settings in Kafka's keys (only their security settings are used: the
        brokers are the ones the cluster's metadata names)."""
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._bus = bus
        self._security: ClientSecurity | None = None
        self._lock = threading.Lock()
        self._conns: dict[tuple[str, int], BrokerConnection] = {}

    def sizes(self, brokers: Iterable[tuple[str, int]], partitions: Mapping[str, Iterable[int]] | None = None) -> Sizes:
        """Sizes of the given partitions (topic -> partition ids; None: every partition) on the given brokers.

        Kafka answers only the partitions named, so a topic is asked for with all its partition ids.
        """
        wanted = None if partitions is None else {t: sorted(ps) for t, ps in partitions.items()}
        found: Sizes = {}
        for address in brokers:
            for key, size in self._describe(address, wanted).items():
                found[key] = max(size, found.get(key, 0))
        return found

    def _describe(self, address: tuple[str, int],
                  topics: Mapping[str, list[int]] | None) -> Mapping[tuple[str, int], int]:
        def build(shapes: Any) -> Any:
            asked = None if topics is None else [
                shapes.make("DescribableLogDirTopic", topic=t, partitions=ps) for t, ps in topics.items()]
            return shapes.make("DescribeLogDirsRequest", topics=asked)

        if topics is not None and not topics:
            return {}
        with self._lock:
            try:
                conn = self._conns.get(address)
                if conn is None:
                    if self._security is None:
                        self._security = client_security(self._bus)
                    conn = self._conns[address] = BrokerConnection(*address, client_id=self.client_id,
                                                                   timeout=self.timeout_s, security=self._security)
                response = request_for(conn, DESCRIBE_LOG_DIRS, build)
            except (KafkaConnectionError, AuthenticationError, ConfigError, OSError) as exc:
                self._drop(address)
                raise BackendUnavailable(BUS, f"DescribeLogDirs to {address[0]}:{address[1]}: {exc}") from None
            except UnsupportedVersionError as exc:
                raise BackendUnavailable(BUS, str(exc)) from None
        error = int(getattr(response, "error_code", 0))  # v3 and later: the whole request's error
        if error:
            name = ErrorCode(error).name.upper()
            if error == ErrorCode.cluster_authorization_failed:
                raise Forbidden("describe the cluster's log dirs (partition sizes)", name)
            raise BackendUnavailable(BUS, f"DescribeLogDirs to {address[0]}:{address[1]}: {name}")
        sizes: dict[tuple[str, int], int] = {}
        for result in response.results:
            if int(result.error_code) != 0:
                continue  # an offline directory: its partitions are reported by no one, not as 0 bytes
            for topic in result.topics:
                for partition in topic.partitions:
                    if not partition.is_future_key:
                        key = (str(topic.name), int(partition.partition_index))
                        sizes[key] = max(int(partition.partition_size), sizes.get(key, 0))
        return sizes

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        with self._lock:
            for address in list(self._conns):
                self._drop(address)
