"""The admin client: topics, partitions, configs, consumer groups and their offsets, records deletion, ACLs and
SCRAM credentials.

It mirrors the Java `Admin` API (snake_case names, Java config keys) but is blocking: each call sends
its requests, waits, and returns plain data or raises an `AdminError` that carries Kafka's error
name (`TOPIC_ALREADY_EXISTS`, `GROUP_ID_NOT_FOUND`, ...). Requests go where Kafka's admin sends them:
topic creation, deletion and partition growth to the controller the metadata names, broker
configs to that broker, offsets look-ups and record deletion to each partition's leader, and group
requests to the group's coordinator found with FindCoordinator. Retriable answers (NOT_CONTROLLER,
NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, LEADER_NOT_AVAILABLE, ...) refresh the routing and
retry until `default.api.timeout.ms`; an unreachable cluster fails within
`socket.connection.setup.timeout.ms`, not after a long hang, so the command-line tools stay snappy.

Every request is built with `request_for`, at the highest version both sides speak, so the same code
talks to our broker and to Apache Kafka. The ACL calls (`admin_acls.py`), the SCRAM credential calls
(`admin_scram.py`) and the operator tools' calls (`admin_tools.py`: log dirs, transactions, producers,
features) live in mixins of their own; the errors every call raises are in `admin_common.py`. The client
connects with the security its config asks for (`security.protocol`, `sasl.*`, `ssl.*`, as the producer and
consumer); a refused login raises `AuthenticationError` from the constructor or the call, at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar, NamedTuple, TypeVar

from kio.schema.errors import ErrorCode

from bus.client.admin_acls import ANY_ACL, AclAdmin
from bus.client.admin_common import (
    AdminError,
    AdminTimeoutError,
    GroupIdNotFoundError,
    InvalidConfigError,
    NonEmptyGroupError,
    Retry,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    check_error,
    error_name,
    finish,
    first_error,
)
from bus.client.admin_scram import (
    ScramAdmin,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from bus.client.admin_tools import ToolsAdmin
from bus.client.cluster import Metadata, NodeConnections
from bus.client.connection import BrokerConnection, KafkaConnectionError, UnsupportedVersionError, request_for
from bus.client.security import client_security
from bus.protocol.consumer_protocol import assigned_partitions
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclBinding, AclBindingFilter, AclOperation, PatternType, PermissionType, ResourceType

__all__ = [
    "ANY_ACL",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AdminClient",
    "AdminError",
    "AlterConfigOp",
    "BrokerInfo",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSynonym",
    "ConsumerGroupDescription",
    "ElectionType",
    "GroupIdNotFoundError",
    "GroupListing",
    "GroupPartitionLag",
    "InvalidConfigError",
    "KafkaConnectionError",
    "ListOffsetsResultInfo",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "NonEmptyGroupError",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "PartitionReassignment",
    "PatternType",
    "PermissionType",
    "QuorumInfo",
    "QuorumReplicaState",
    "ResourceType",
    "ScramCredentialInfo",
    "TopicAlreadyExistsError",
    "TopicDescription",
    "TopicPartition",
    "UnknownTopicOrPartitionError",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
]

T = TypeVar("T")

# API keys used here.
LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 2, 3, 8, 9, 10
DESCRIBE_GROUPS, LIST_GROUPS, CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS = 15, 16, 19, 20, 21
DESCRIBE_CONFIGS, ALTER_CONFIGS, CREATE_PARTITIONS, DELETE_GROUPS = 32, 33, 37, 42
INCREMENTAL_ALTER_CONFIGS, OFFSET_DELETE, DESCRIBE_CLUSTER, CONSUMER_GROUP_DESCRIBE = 44, 47, 60, 69
DESCRIBE_QUORUM, ELECT_LEADERS, ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 55, 43, 45, 46
METADATA_TOPIC = "__cluster_metadata"  # the KRaft quorum's one partition

_COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_CONTROLLER_ERRORS = frozenset({ErrorCode.not_controller})
_LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                            ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch,
                            ErrorCode.replica_not_available, ErrorCode.offset_not_available})
_RETRY_LATER = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.rebalance_in_progress,
                          ErrorCode.request_timed_out, ErrorCode.throttling_quota_exceeded})
_GROUP_RETRY_CODES = frozenset(int(e) for e in (*_COORDINATOR_ERRORS, ErrorCode.coordinator_load_in_progress))


def _partition_indexes(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Topic -> partition indexes, in the order given: how most requests list partitions."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(int(tp.partition))
    return by_topic


def _wanted(partitions: Iterable[TopicPartition] | None) -> list[TopicPartition] | None:
    """The partitions asked for, deduplicated and sorted, or None for all of them."""
    return None if partitions is None else sorted({TopicPartition(tp.topic, int(tp.partition)) for tp in partitions})


# -- data -------------------------------------------------------------------------------------------


class OffsetSpec:
    """ListOffsets targets: the special timestamps Kafka's protocol uses, or any epoch-ms timestamp."""

    EARLIEST = -2
    LATEST = -1
    MAX_TIMESTAMP = -3

    @staticmethod
    def for_timestamp(ms: int) -> int:
        return int(ms)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (id: {self.node_id} rack: {self.rack})"


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerInfo]


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumReplicaState:
    """One replica of the metadata quorum as its leader sees it (Kafka's QuorumInfo.ReplicaState)."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int | None  # wall-clock ms, None if unknown
    last_caught_up_timestamp: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class QuorumInfo:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplicaState]
    observers: list[QuorumReplicaState]


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int | None  # None when the partition has no leader (offline)
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = dataclasses.field(default_factory=list)
    leader_epoch: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    topic_id: str | None  # None when the broker does not report ids (or reports the zero UUID)
    is_internal: bool
    partitions: list[PartitionInfo]

    @property
    def replication_factor(self) -> int:
        return len(self.partitions[0].replicas) if self.partitions else 0


@dataclasses.dataclass(slots=True)
class NewTopic:
    """A topic to create; -1 partitions / replication factor take the broker's defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: Mapping[int, list[int]] | None = None
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(slots=True)
class NewPartitions:
    """Grow a topic to `total_count` partitions, optionally placing the new ones (one list per new partition)."""

    total_count: int
    assignments: list[list[int]] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A partition being moved (Java's PartitionReassignment): its replicas now (the target, then those it
    removes), and the replicas being added and removed."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class ElectionType(enum.IntEnum):
    """Kafka's ElectionType: the preferred replica, or any live replica for a partition without a leader."""

    PREFERRED = 0
    UNCLEAN = 1


class ConfigResourceType(enum.IntEnum):
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    GROUP = 32


class ConfigResource(NamedTuple):
    type: ConfigResourceType
    name: str


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (Kafka's ConfigEntry.ConfigSource, by wire id)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def of(cls, value: int) -> ConfigSource:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: list[ConfigSynonym] = dataclasses.field(default_factory=list)
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


@dataclasses.dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One IncrementalAlterConfigs operation: SET / DELETE / APPEND / SUBTRACT a config."""

    name: str
    value: str | None = None
    op: int = 0

    SET: ClassVar[int] = 0
    DELETE: ClassVar[int] = 1
    APPEND: ClassVar[int] = 2
    SUBTRACT: ClassVar[int] = 3

    @classmethod
    def set(cls, name: str, value: str) -> AlterConfigOp:
        return cls(name, value, cls.SET)

    @classmethod
    def delete(cls, name: str) -> AlterConfigOp:
        return cls(name, None, cls.DELETE)


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None when the broker is too old to report it (ListGroups < v4)
    type: str | None  # "classic" / "consumer"; None before ListGroups v5


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]
    target_assignment: list[TopicPartition] | None = None  # KIP-848 members only
    member_epoch: int | None = None  # KIP-848 members only


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    is_simple: bool  # no protocol type: a group that only ever committed offsets
    members: list[MemberDescription]
    partition_assignor: str
    type: str  # "classic" or "consumer"
    state: str  # Stable, Empty, PreparingRebalance, CompletingRebalance, Assigning, Reconciling, Dead
    coordinator: BrokerInfo
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPartitionLag:
    committed: int
    log_end: int | None  # None when the topic no longer exists
    lag: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class ListOffsetsResultInfo:
    offset: int  # -1 when no record matches the timestamp
    timestamp: int
    leader_epoch: int | None



def _timestamp(replica: Any, name: str) -> int | None:
    """A DescribeQuorum replica timestamp (v1+; -1 or absent: unknown)."""
    value = int(getattr(replica, name, -1))
    return None if value < 0 else value


# -- the client ---------------------------------------------------------------------------------------


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


class AdminClient(AclAdmin, ScramAdmin, ToolsAdmin):
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

    def _send(self, node_id: int, api_key: int, build: Callable[[Any], Any]) -> Any:
        """One request to one broker; a broken connection is closed and reported as retriable."""
        conn = self._conn(node_id)
        try:
            return request_for(conn, api_key, build)
        except KafkaConnectionError:
            self._drop(node_id)
            raise

    def _metadata_request(self, shapes: Any, topics: Iterable[str] | None) -> Any:
        wanted = None if topics is None else [shapes.make("MetadataRequestTopic", name=t) for t in topics]
        if wanted is None and shapes.version == 0:
            wanted = []  # v0: an empty list means every topic
        return shapes.make("MetadataRequest", topics=wanted, allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False)

    def _absorb_metadata(self, response: Any) -> None:
        self._metadata.absorb(response)

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

    # -- cluster ----------------------------------------------------------------------------------------

    def describe_cluster(self) -> ClusterDescription:
        """Cluster id, controller and live brokers (DescribeCluster, or Metadata on older brokers)."""

        def attempt() -> ClusterDescription:
            node = self._any_node()
            try:
                response = self._send(node, DESCRIBE_CLUSTER, lambda s: s.make(
                    "DescribeClusterRequest", include_cluster_authorized_operations=False, endpoint_type=1))
            except UnsupportedVersionError:
                self._refresh_brokers()
                view = self._metadata.view
                return ClusterDescription(view.cluster_id, view.controller_id, sorted(
                    self._brokers.values(), key=lambda b: b.node_id))
            check_error(response.error_code, getattr(response, "error_message", None))
            brokers = [BrokerInfo(int(b.broker_id), b.host, int(b.port), b.rack) for b in response.brokers]
            return ClusterDescription(response.cluster_id, int(response.controller_id),
                                      sorted(brokers, key=lambda b: b.node_id))

        return self._call(attempt, "describe cluster")

    def describe_metadata_quorum(self) -> QuorumInfo:
        """The KRaft quorum's leader, epoch, high watermark and replicas (DescribeQuorum, as Kafka's
        Admin.describeMetadataQuorum); retried while the quorum has no leader."""

        def build(s: Any) -> Any:
            partition = s.make("PartitionData", partition_index=0)
            return s.make("DescribeQuorumRequest", topics=(s.make("TopicData", topic_name=METADATA_TOPIC,
                                                                   partitions=(partition,)),))

        def replicas(states: Any) -> list[QuorumReplicaState]:
            return [QuorumReplicaState(int(r.replica_id), int(r.log_end_offset), _timestamp(r, "last_fetch_timestamp"),
                                       _timestamp(r, "last_caught_up_timestamp")) for r in states]

        def attempt() -> QuorumInfo:
            response = self._send(self._any_node(), DESCRIBE_QUORUM, build)
            check_error(response.error_code, getattr(response, "error_message", None))
            partition = response.topics[0].partitions[0]
            if partition.error_code in _LEADER_ERRORS:
                raise Retry(AdminError.of(partition.error_code), refresh=False)
            check_error(partition.error_code, getattr(partition, "error_message", None))
            return QuorumInfo(int(partition.leader_id), int(partition.leader_epoch), int(partition.high_watermark),
                              replicas(partition.current_voters), replicas(partition.observers))

        return self._call(attempt, "describe metadata quorum")

    # -- topics -----------------------------------------------------------------------------------------

    def _topic_metadata(self, topics: Iterable[str] | None) -> Any:
        wanted = None if topics is None else list(topics)

        def attempt() -> Any:
            response = self._send(self._any_node(), METADATA, lambda s: self._metadata_request(s, wanted))
            self._absorb_metadata(response)
            return response

        return self._call(attempt, "metadata")

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted; internal topics (__consumer_offsets, ...) only when asked for."""
        response = self._topic_metadata(None)
        return sorted(t.name for t in response.topics
                      if t.name is not None and int(t.error_code) == 0 and (include_internal or not t.is_internal))

    def describe_topics(self, names: Iterable[str]) -> dict[str, TopicDescription]:
        """Partitions, leaders, replicas and ISR of each topic; raises UnknownTopicOrPartitionError.

        A topic still being created answers LEADER_NOT_AVAILABLE for a moment; that is retried.
        """
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}

        def attempt() -> dict[str, TopicDescription]:
            response = self._send(self._any_node(), METADATA, lambda s: self._metadata_request(s, wanted))
            self._absorb_metadata(response)
            out: dict[str, TopicDescription] = {}
            errors: dict[str, AdminError | None] = {}
            for topic in response.topics:
                code = int(topic.error_code)
                if code == int(ErrorCode.leader_not_available):
                    raise Retry(AdminError(code, f"Topic '{topic.name}' has no leader yet"), refresh=False)
                if code == int(ErrorCode.unknown_topic_or_partition):
                    errors[topic.name] = UnknownTopicOrPartitionError(code, f"Topic '{topic.name}' does not exist.")
                    continue
                if code:
                    errors[topic.name] = AdminError.of(code, f"Topic '{topic.name}': {error_name(code)}")
                    continue
                out[topic.name] = _topic_description(topic)
            failure = first_error(errors)
            if failure is not None:
                raise failure
            return {name: out[name] for name in wanted if name in out}

        return self._call(attempt, "describe topics")

    def partitions_for(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of the given topics, sorted."""
        described = self.describe_topics(topics)
        return sorted(TopicPartition(name, p.partition) for name, d in described.items() for p in d.partitions)

    def create_topics(self, new_topics: Iterable[NewTopic], *, validate_only: bool = False,
                      timeout_ms: int | None = None, raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Create topics on the controller; returns name -> None (created) or the error.

        With `raise_on_error` (the default) the first failure is raised instead, carrying all of
        them in `.errors`. Only NOT_CONTROLLER is retried, and only for the topics it hit: a retried
        success would otherwise come back as TOPIC_ALREADY_EXISTS.
        """
        pending = {t.name: t for t in new_topics}
        timeout = self._timeout_ms(timeout_ms)

        def build(shapes: Any) -> Any:
            topics = []
            for t in pending.values():
                assignment = [shapes.make("CreatableReplicaAssignment", partition_index=p, broker_ids=list(ids))
                              for p, ids in sorted((t.replica_assignment or {}).items())]
                configs = [shapes.make("CreatableTopicConfig", name=k, value=v) for k, v in t.configs.items()]
                topics.append(shapes.make(
                    "CreatableTopic", name=t.name,
                    num_partitions=-1 if assignment else t.num_partitions,
                    replication_factor=-1 if assignment else t.replication_factor,
                    assignments=assignment, configs=configs))
            return shapes.make("CreateTopicsRequest", topics=topics, timeout=timeout, validate_only=validate_only)

        results = self._per_topic_controller_call(CREATE_TOPICS, build, pending, "topics", "create topics")
        return finish(results, raise_on_error)

    def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None,
                      raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Delete topics by name; name -> None or the error (UNKNOWN_TOPIC_OR_PARTITION, ...)."""
        pending = dict.fromkeys(names)
        timeout = self._timeout_ms(timeout_ms)

        def build(shapes: Any) -> Any:
            return shapes.make("DeleteTopicsRequest", topic_names=list(pending),
                               topics=[shapes.make("DeleteTopicState", name=n) for n in pending], timeout=timeout)

        def message(r: Any) -> str | None:
            text = getattr(r, "error_message", None)
            if int(r.error_code) == int(ErrorCode.unknown_topic_or_partition) and not text:
                return f"Topic '{r.name}' does not exist."
            return text

        results = self._per_topic_controller_call(DELETE_TOPICS, build, pending, "responses", "delete topics",
                                                  message)
        return finish(results, raise_on_error)

    def create_partitions(self, new_partitions: Mapping[str, NewPartitions], *, validate_only: bool = False,
                          timeout_ms: int | None = None,
                          raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Grow topics' partition counts (never shrink: INVALID_PARTITIONS)."""
        pending = dict(new_partitions)
        timeout = self._timeout_ms(timeout_ms)

        def build(shapes: Any) -> Any:
            topics = [shapes.make("CreatePartitionsTopic", name=name, count=np.total_count,
                                  assignments=None if np.assignments is None else [
                                      shapes.make("CreatePartitionsAssignment", broker_ids=list(ids))
                                      for ids in np.assignments])
                      for name, np in pending.items()]
            return shapes.make("CreatePartitionsRequest", topics=topics, timeout=timeout, validate_only=validate_only)

        results = self._per_topic_controller_call(CREATE_PARTITIONS, build, pending, "results", "create partitions")
        return finish(results, raise_on_error)

    def elect_leaders(self, election_type: ElectionType, partitions: Iterable[TopicPartition] | None = None, *,
                      timeout_ms: int | None = None) -> dict[TopicPartition, AdminError | None]:
        """Elect leaders (ElectLeaders, Java's Admin.electLeaders): partition -> None (elected) or its error,
        ELECTION_NOT_NEEDED when a valid leader is already in place. `partitions` None asks for every partition, and
        then the controller reports only those it tried to elect. NOT_CONTROLLER is retried."""
        wanted = _wanted(partitions)
        timeout = self._timeout_ms(timeout_ms)

        def build(s: Any) -> Any:
            topics = None
            if wanted is not None:
                topics = [s.make("TopicPartitions", topic=t, partitions=ps)
                          for t, ps in _partition_indexes(wanted).items()]
            return s.make("ElectLeadersRequest", election_type=int(election_type), topic_partitions=topics,
                          timeout=timeout)

        def attempt() -> dict[TopicPartition, AdminError | None]:
            versions = range(1, 3) if election_type == ElectionType.UNCLEAN else None  # v0 elects preferred only
            node = self._controller()
            try:
                response = request_for(self._conn(node), ELECT_LEADERS, build, versions)
            except KafkaConnectionError:
                self._drop(node)
                raise
            top = int(getattr(response, "error_code", 0))
            results = {TopicPartition(r.topic, int(p.partition_id)): (
                AdminError.of(p.error_code, p.error_message) if int(p.error_code) else None)
                for r in response.replica_election_results for p in r.partition_result}
            if top in _CONTROLLER_ERRORS or any(e is not None and e.code in _CONTROLLER_ERRORS
                                                for e in results.values()):
                raise Retry(AdminError(ErrorCode.not_controller))
            check_error(top)
            return results

        return self._call(attempt, "elect leaders")

    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Iterable[int] | None], *,
                                      allow_replication_factor_change: bool = True,
                                      timeout_ms: int | None = None) -> dict[TopicPartition, AdminError | None]:
        """Move partitions to new replicas, or cancel a move with None (AlterPartitionReassignments, Java's
        Admin.alterPartitionReassignments): partition -> None (started) or its error. The moves complete later
        (`list_partition_reassignments` shows them until then). `allow_replication_factor_change` False refuses a
        target of another size (KIP-860, v1). NOT_CONTROLLER is retried."""
        wanted = {TopicPartition(tp.topic, int(tp.partition)): None if r is None else [int(b) for b in r]
                  for tp, r in reassignments.items()}
        timeout = self._timeout_ms(timeout_ms)

        def build(s: Any) -> Any:
            by_topic: dict[str, list[Any]] = {}
            for tp, replicas in wanted.items():
                by_topic.setdefault(tp.topic, []).append(
                    s.make("ReassignablePartition", partition_index=tp.partition, replicas=replicas))
            return s.make("AlterPartitionReassignmentsRequest", timeout=timeout,
                          allow_replication_factor_change=allow_replication_factor_change, topics=[
                s.make("ReassignableTopic", name=name, partitions=ps) for name, ps in by_topic.items()])

        def attempt() -> dict[TopicPartition, AdminError | None]:
            node = self._controller()
            versions = None if allow_replication_factor_change else range(1, 2)  # v0 always allows it
            try:
                response = request_for(self._conn(node), ALTER_PARTITION_REASSIGNMENTS, build, versions)
            except KafkaConnectionError:
                self._drop(node)
                raise
            results = {TopicPartition(t.name, int(p.partition_index)): (
                AdminError.of(p.error_code, p.error_message) if int(p.error_code) else None)
                for t in response.responses for p in t.partitions}
            top = int(response.error_code)
            if top in _CONTROLLER_ERRORS or any(e is not None and e.code in _CONTROLLER_ERRORS
                                                for e in results.values()):
                raise Retry(AdminError(ErrorCode.not_controller))
            check_error(top, response.error_message)
            return results

        return self._call(attempt, "alter partition reassignments")

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None, *,
                                     timeout_ms: int | None = None) -> dict[TopicPartition, PartitionReassignment]:
        """The moves under way among `partitions` (None: all), Java's Admin.listPartitionReassignments;
        partitions that do not exist or are not moving are left out. NOT_CONTROLLER is retried."""
        wanted = _wanted(partitions)
        timeout = self._timeout_ms(timeout_ms)

        def build(s: Any) -> Any:
            topics = None
            if wanted is not None:
                topics = [s.make("ListPartitionReassignmentsTopics", name=t, partition_indexes=ps)
                          for t, ps in _partition_indexes(wanted).items()]
            return s.make("ListPartitionReassignmentsRequest", timeout=timeout, topics=topics)

        def attempt() -> dict[TopicPartition, PartitionReassignment]:
            response = self._send(self._controller(), LIST_PARTITION_REASSIGNMENTS, build)
            top = int(response.error_code)
            if top in _CONTROLLER_ERRORS:
                raise Retry(AdminError(top))
            check_error(top, response.error_message)
            return {TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
                [int(r) for r in p.replicas], [int(r) for r in p.adding_replicas],
                [int(r) for r in p.removing_replicas]) for t in response.topics for p in t.partitions}

        return self._call(attempt, "list partition reassignments")

    def _timeout_ms(self, timeout_ms: int | None) -> int:
        return int(self.request_timeout * 1000 if timeout_ms is None else timeout_ms)

    def _per_topic_controller_call(self, api_key: int, build: Callable[[Any], Any], pending: dict[str, Any],
                                   results_field: str, what: str,
                                   message: Callable[[Any], str | None] = lambda r: getattr(r, "error_message", None),
                                   ) -> dict[str, AdminError | None]:
        """A per-topic request to the controller: topic name -> None or the error.

        `build` asks for the topics still in `pending`; a topic leaves it once answered, so
        NOT_CONTROLLER is retried only for the topics it hit (a retried success would otherwise come
        back as e.g. TOPIC_ALREADY_EXISTS).
        """
        results: dict[str, AdminError | None] = {}

        def attempt() -> None:
            response = self._send(self._controller(), api_key, build)
            retry: AdminError | None = None
            for r in getattr(response, results_field):
                code = int(r.error_code)
                if code in _CONTROLLER_ERRORS:
                    retry = AdminError(code)
                    continue
                pending.pop(r.name, None)
                results[r.name] = AdminError.of(code, message(r)) if code else None
            if retry is not None and pending:
                raise Retry(retry)

        self._call(attempt, what)
        return results

    # -- configs ----------------------------------------------------------------------------------------

    def _by_config_node(self, resources: Iterable[ConfigResource]) -> dict[int, list[ConfigResource]]:
        """Config resources grouped by the node that must answer for them (see `_config_node`)."""
        by_node: dict[int, list[ConfigResource]] = {}
        for resource in resources:
            by_node.setdefault(self._config_node(resource), []).append(resource)
        return by_node

    def _config_node(self, resource: ConfigResource) -> int:
        """Broker resources go to that broker (its own view); everything else to any broker."""
        if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and resource.name:
            try:
                node = int(resource.name)
            except ValueError:
                raise AdminError(ErrorCode.invalid_request,
                                 f"broker id must be an integer, got '{resource.name}'") from None
            if node not in self._brokers:
                self._refresh_brokers()
            if node not in self._brokers:
                raise AdminError(ErrorCode.broker_not_available, f"Broker {node} is not part of the cluster.")
            return node
        return self._any_node()

    def describe_configs(self, resources: Iterable[ConfigResource], *, include_synonyms: bool = False,
                         include_documentation: bool = False) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource with its value, source and (optionally) synonyms."""
        wanted = [ConfigResource(ConfigResourceType(r.type), r.name) for r in resources]
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}

        def attempt() -> None:
            by_node = self._by_config_node(r for r in wanted if r not in out)
            errors: dict[ConfigResource, AdminError | None] = {}
            for node, batch in by_node.items():
                def describe(s: Any, batch: list[ConfigResource] = batch) -> Any:
                    return s.make(
                        "DescribeConfigsRequest",
                        resources=[s.make("DescribeConfigsResource", resource_type=int(r.type),
                                          resource_name=r.name, configuration_keys=None) for r in batch],
                        include_synonyms=include_synonyms, include_documentation=include_documentation)

                response = self._send(node, DESCRIBE_CONFIGS, describe)
                for result in response.results:
                    key = ConfigResource(ConfigResourceType(int(result.resource_type)), result.resource_name)
                    code = int(result.error_code)
                    if code:
                        errors[key] = AdminError.of(code, result.error_message)
                        continue
                    out[key] = {c.name: _config_entry(c) for c in result.configs}
            failure = first_error(errors)
            if failure is not None:
                raise failure

        self._call(attempt, "describe configs")
        return {r: out[r] for r in wanted if r in out}

    def incremental_alter_configs(self, changes: Mapping[ConfigResource, Iterable[AlterConfigOp]], *,
                                  validate_only: bool = False,
                                  raise_on_error: bool = True) -> dict[ConfigResource, AdminError | None]:
        """SET / DELETE / APPEND / SUBTRACT individual configs, leaving the others alone."""
        plan = {ConfigResource(ConfigResourceType(r.type), r.name): list(ops) for r, ops in changes.items()}
        results: dict[ConfigResource, AdminError | None] = {}

        def attempt() -> None:
            by_node = self._by_config_node(r for r in plan if r not in results)
            for node, batch in by_node.items():
                def alter(s: Any, batch: list[ConfigResource] = batch) -> Any:
                    return s.make(
                        "IncrementalAlterConfigsRequest", validate_only=validate_only,
                        resources=[s.make("AlterConfigsResource", resource_type=int(r.type), resource_name=r.name,
                                          configs=[s.make("AlterableConfig", name=op.name, config_operation=op.op,
                                                          value=op.value) for op in plan[r]])
                                   for r in batch])

                response = self._send(node, INCREMENTAL_ALTER_CONFIGS, alter)
                for result in response.responses:
                    key = ConfigResource(ConfigResourceType(int(result.resource_type)), result.resource_name)
                    code = int(result.error_code)
                    results[key] = AdminError.of(code, result.error_message) if code else None

        self._call(attempt, "alter configs")
        return finish(results, raise_on_error)

    def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False,
                      raise_on_error: bool = True) -> dict[ConfigResource, AdminError | None]:
        """Legacy AlterConfigs: replace a resource's whole dynamic config set with `configs`."""
        plan = {ConfigResource(ConfigResourceType(r.type), r.name): dict(c) for r, c in configs.items()}
        results: dict[ConfigResource, AdminError | None] = {}

        def attempt() -> None:
            by_node = self._by_config_node(plan)
            for node, batch in by_node.items():
                def replace(s: Any, batch: list[ConfigResource] = batch) -> Any:
                    return s.make(
                        "AlterConfigsRequest", validate_only=validate_only,
                        resources=[s.make("AlterConfigsResource", resource_type=int(r.type), resource_name=r.name,
                                          configs=[s.make("AlterableConfig", name=k, value=v)
                                                   for k, v in plan[r].items()])
                                   for r in batch])

                response = self._send(node, ALTER_CONFIGS, replace)
                for result in response.responses:
                    key = ConfigResource(ConfigResourceType(int(result.resource_type)), result.resource_name)
                    code = int(result.error_code)
                    results[key] = AdminError.of(code, result.error_message) if code else None

        self._call(attempt, "alter configs")
        return finish(results, raise_on_error)

    # -- offsets and records ------------------------------------------------------------------------------

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

    def list_offsets(self, specs: Mapping[TopicPartition, int], *,
                     isolation_level: str = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets by spec per partition: OffsetSpec.EARLIEST / LATEST / MAX_TIMESTAMP or a timestamp (ms).

        For a timestamp the answer is the first offset whose timestamp is at or after it, or offset -1
        when there is none (Kafka's UNKNOWN_OFFSET); read_committed stops LATEST at the LSO.
        """
        level = 1 if isolation_level.replace("-", "_") == "read_committed" else 0
        wanted = {TopicPartition(tp.topic, int(tp.partition)): int(spec) for tp, spec in specs.items()}

        def build(by_topic: dict[str, list[TopicPartition]], s: Any) -> Any:
            return s.make("ListOffsetsRequest", replica_id=-1, isolation_level=level, timeout=self._timeout_ms(None),
                          topics=[s.make("ListOffsetsTopic", name=topic, partitions=[
                              s.make("ListOffsetsPartition", partition_index=tp.partition, current_leader_epoch=-1,
                                     timestamp=wanted[tp]) for tp in tps])
                              for topic, tps in by_topic.items()])

        def result(p: Any) -> ListOffsetsResultInfo:
            offset = int(p.offset) if hasattr(p, "offset") else int((p.old_style_offsets or [-1])[0])
            epoch = int(getattr(p, "leader_epoch", -1))
            return ListOffsetsResultInfo(offset, int(getattr(p, "timestamp", -1)), None if epoch < 0 else epoch)

        return self._per_leader_call(wanted, LIST_OFFSETS, build, result, "list offsets")

    def delete_records(self, before: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """Delete records below the given offsets (-1: the high watermark); returns the new low watermarks."""
        wanted = {TopicPartition(tp.topic, int(tp.partition)): int(offset) for tp, offset in before.items()}

        def build(by_topic: dict[str, list[TopicPartition]], s: Any) -> Any:
            return s.make("DeleteRecordsRequest", timeout=self._timeout_ms(None),
                          topics=[s.make("DeleteRecordsTopic", name=topic, partitions=[
                              s.make("DeleteRecordsPartition", partition_index=tp.partition, offset=wanted[tp])
                              for tp in tps]) for topic, tps in by_topic.items()])

        return self._per_leader_call(wanted, DELETE_RECORDS, build, lambda p: int(p.low_watermark), "delete records")

    def _per_leader_call(self, partitions: Iterable[TopicPartition], api_key: int,
                         build: Callable[[dict[str, list[TopicPartition]], Any], Any], result: Callable[[Any], T],
                         what: str) -> dict[TopicPartition, T]:
        """One request per partition leader (its partitions grouped by topic): partition -> `result(answer)`.

        Leader errors (a moved or unknown leader) are retried for the partitions they hit only; any
        other error is raised.
        """
        wanted = list(partitions)
        out: dict[TopicPartition, T] = {}
        leader_errors = {int(e) for e in _LEADER_ERRORS}

        def attempt() -> None:
            todo = [tp for tp in wanted if tp not in out]
            if not todo:
                return
            by_node: dict[int, list[TopicPartition]] = {}
            for tp, node in self._leaders(todo).items():
                by_node.setdefault(node, []).append(tp)
            retry: AdminError | None = None
            for node, batch in by_node.items():
                by_topic: dict[str, list[TopicPartition]] = {}
                for tp in batch:
                    by_topic.setdefault(tp.topic, []).append(tp)
                response = self._send(node, api_key, functools.partial(build, by_topic))
                for topic in response.topics:
                    for p in topic.partitions:
                        tp = TopicPartition(topic.name, int(p.partition_index))
                        code = int(p.error_code)
                        if code in leader_errors:
                            retry = AdminError(code)
                            continue
                        if code:
                            raise AdminError.of(code, f"{tp}: {error_name(code)}")
                        out[tp] = result(p)
            if retry is not None:
                raise Retry(retry)

        self._call(attempt, what)
        return {tp: out[tp] for tp in wanted}

    # -- consumer groups ------------------------------------------------------------------------------

    def _coordinator(self, group_id: str) -> int:
        """The group's coordinator (FindCoordinator, cached until it answers NOT_COORDINATOR)."""
        cached = self._coordinators.get(group_id)
        if cached is not None and cached in self._brokers:
            return cached
        response = self._send(self._any_node(), FIND_COORDINATOR, lambda s: s.make(
            "FindCoordinatorRequest", key=group_id, key_type=0, coordinator_keys=[group_id]))
        found = response.coordinators[0] if getattr(response, "coordinators", None) else response
        code = int(found.error_code)
        if code in {int(e) for e in (*_COORDINATOR_ERRORS, *_RETRY_LATER)}:
            raise Retry(AdminError(code, getattr(found, "error_message", None)))
        check_error(code, getattr(found, "error_message", None))
        node = int(found.node_id)
        if node not in self._metadata.view.brokers:
            raise Retry(AdminError(ErrorCode.coordinator_not_available, f"coordinator {node} is not in the metadata"))
        self._coordinators[group_id] = node
        return node

    def _group_error(self, group_id: str, code: int, message: str | None = None) -> None:
        """Raise for a group-level error code: coordinator moves and loads are retried."""
        if code in {int(e) for e in _COORDINATOR_ERRORS}:
            self._coordinators.pop(group_id, None)
            raise Retry(AdminError(code, message))
        if code == int(ErrorCode.coordinator_load_in_progress):
            raise Retry(AdminError(code, message), refresh=False)
        if code == int(ErrorCode.group_id_not_found):
            raise GroupIdNotFoundError(code, message or f"Group {group_id} not found.")
        check_error(code, message)

    def list_consumer_groups(self, states: Iterable[str] | None = None,
                             types: Iterable[str] | None = None) -> list[GroupListing]:
        """Consumer groups (classic and KIP-848) of every broker, optionally filtered by state and type."""
        states = [s for s in (states or ()) if s]
        types = [t.lower() for t in (types or ()) if t]

        def attempt() -> list[GroupListing]:
            self._refresh_brokers()
            found: dict[str, GroupListing] = {}
            for node in sorted(self._brokers):
                response = self._send(node, LIST_GROUPS, lambda s: s.make(
                    "ListGroupsRequest", states_filter=list(states), types_filter=list(types)))
                code = int(response.error_code)
                if code in {int(e) for e in (*_COORDINATOR_ERRORS, *_RETRY_LATER)}:
                    raise Retry(AdminError(code), refresh=False)
                check_error(code)
                for g in response.groups:
                    listing = GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None) or None,
                                           getattr(g, "group_type", None) or None)
                    if listing.protocol_type not in ("consumer", ""):
                        continue  # connect / streams groups are not consumer groups
                    found[listing.group_id] = listing
            listed = sorted(found.values(), key=lambda g: g.group_id)
            wanted_states = {s.lower() for s in states}
            return [g for g in listed if (not wanted_states or (g.state or "").lower() in wanted_states)
                    and (not types or (g.type or "classic") in types)]

        return self._call(attempt, "list consumer groups")

    def describe_consumer_groups(self, group_ids: Iterable[str]) -> dict[str, ConsumerGroupDescription]:
        """State, members and assignments of each group (KIP-848 groups through ConsumerGroupDescribe).

        As the Java admin does, a group is first asked for as a KIP-848 group; GROUP_ID_NOT_FOUND there
        (a classic group, or none at all) falls back to DescribeGroups, which reports a group that does
        not exist as state "Dead" with no members (newer brokers answer GROUP_ID_NOT_FOUND, raised).
        """
        out: dict[str, ConsumerGroupDescription] = {}
        for group_id in dict.fromkeys(group_ids):
            out[group_id] = self._call(functools.partial(self._describe_group, group_id), f"describe group {group_id}")
        return out

    def _describe_group(self, group_id: str) -> ConsumerGroupDescription:
        node = self._coordinator(group_id)
        coordinator = self._brokers[node]
        conn = self._conn(node)
        if CONSUMER_GROUP_DESCRIBE in conn.api_versions:
            response = self._send(node, CONSUMER_GROUP_DESCRIBE, lambda s: s.make(
                "ConsumerGroupDescribeRequest", group_ids=[group_id], include_authorized_operations=False))
            g = response.groups[0]
            code = int(g.error_code)
            if code != int(ErrorCode.group_id_not_found):
                self._group_error(group_id, code, g.error_message)
                members = [MemberDescription(
                    member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id, host=m.client_host,
                    assignment=_kip848_partitions(m.assignment),
                    target_assignment=_kip848_partitions(m.target_assignment),
                    member_epoch=int(m.member_epoch)) for m in g.members]
                return ConsumerGroupDescription(
                    group_id=group_id, is_simple=False, members=members, partition_assignor=g.assignor_name,
                    type="consumer", state=g.group_state, coordinator=coordinator, group_epoch=int(g.group_epoch),
                    target_assignment_epoch=int(g.assignment_epoch))
        response = self._send(node, DESCRIBE_GROUPS, lambda s: s.make(
            "DescribeGroupsRequest", groups=[group_id], include_authorized_operations=False))
        g = response.groups[0]
        self._group_error(group_id, int(g.error_code), getattr(g, "error_message", None))
        consumer = g.protocol_type == "consumer"
        members = [MemberDescription(
            member_id=m.member_id, group_instance_id=getattr(m, "group_instance_id", None), client_id=m.client_id,
            host=m.client_host, assignment=assigned_partitions(m.member_assignment) if consumer else [])
            for m in g.members]
        return ConsumerGroupDescription(
            group_id=group_id, is_simple=g.protocol_type == "", members=members, partition_assignor=g.protocol_data,
            type="classic", state=g.group_state, coordinator=coordinator)

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None, *,
                                    require_stable: bool = False) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them, or for `partitions`); partitions without one are left out."""
        wanted = None if partitions is None else sorted(set(partitions))

        def build(shapes: Any) -> Any:
            topics = None
            if wanted is not None:
                batched = shapes.has("OffsetFetchRequestTopics")  # v8+ names the class in the plural
                cls = "OffsetFetchRequestTopics" if batched else "OffsetFetchRequestTopic"
                topics = [shapes.make(cls, name=t, partition_indexes=parts)
                          for t, parts in _partition_indexes(wanted).items()]
            if shapes.has("OffsetFetchRequestGroup"):
                return shapes.make("OffsetFetchRequest", require_stable=require_stable, groups=[
                    shapes.make("OffsetFetchRequestGroup", group_id=group_id, member_id=None, member_epoch=-1,
                                topics=topics)])
            return shapes.make("OffsetFetchRequest", group_id=group_id, topics=topics, require_stable=require_stable)

        def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            node = self._coordinator(group_id)
            response = self._send(node, OFFSET_FETCH, build)
            if getattr(response, "groups", None):
                group = response.groups[0]
                code, topics = int(group.error_code), group.topics
            else:
                code, topics = int(getattr(response, "error_code", 0)), response.topics
            self._group_error(group_id, code)
            out: dict[TopicPartition, OffsetAndMetadata] = {}
            for topic in topics:
                for p in topic.partitions:
                    perr = int(p.error_code)
                    if perr == int(ErrorCode.unstable_offset_commit):
                        raise Retry(AdminError(perr), refresh=False)
                    if perr == int(ErrorCode.unknown_topic_or_partition) or int(p.committed_offset) < 0:
                        continue
                    check_error(perr)
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    out[TopicPartition(topic.name, int(p.partition_index))] = OffsetAndMetadata(
                        int(p.committed_offset), p.metadata or "", None if epoch < 0 else epoch)
            return dict(sorted(out.items()))

        return self._call(attempt, "list consumer group offsets")

    def list_consumer_group_lag(self, group_id: str) -> dict[TopicPartition, GroupPartitionLag]:
        """Committed offset, log end offset and lag of every partition the group has committed.

        What `consumer-groups --describe` shows and what lag monitoring wants; partitions of deleted
        topics report no log end and no lag.
        """
        committed = self.list_consumer_group_offsets(group_id)
        existing = set(self.list_topics(include_internal=True))
        live = [tp for tp in committed if tp.topic in existing]
        ends = {tp: info.offset for tp, info in self.list_offsets({tp: OffsetSpec.LATEST for tp in live}).items()}
        out: dict[TopicPartition, GroupPartitionLag] = {}
        for tp, om in committed.items():
            end = ends.get(tp)
            out[tp] = GroupPartitionLag(om.offset, end, None if end is None else max(end - om.offset, 0))
        return out

    def alter_consumer_group_offsets(self, group_id: str,
                                     offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit offsets for a group as an outsider (generation -1): Kafka only allows it while the group is empty."""
        plan = {TopicPartition(tp.topic, int(tp.partition)):
                o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o)) for tp, o in offsets.items()}
        if not plan:
            return

        def build(shapes: Any) -> Any:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
            for tp, om in sorted(plan.items()):
                by_topic.setdefault(tp.topic, []).append((tp.partition, om))
            return shapes.make(
                "OffsetCommitRequest", group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None,
                topics=[shapes.make("OffsetCommitRequestTopic", name=topic, partitions=[
                    shapes.make("OffsetCommitRequestPartition", partition_index=p, committed_offset=om.offset,
                                committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                                committed_metadata=om.metadata)
                    for p, om in parts]) for topic, parts in by_topic.items()])

        def attempt() -> None:
            node = self._coordinator(group_id)
            response = self._send(node, OFFSET_COMMIT, build)
            errors: dict[TopicPartition, AdminError | None] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    if code:
                        if code in _GROUP_RETRY_CODES:
                            self._group_error(group_id, code)  # raises Retry
                        message = None
                        if code in (int(ErrorCode.unknown_member_id), int(ErrorCode.illegal_generation)):
                            # Kafka's answer to an outsider's commit into a live group; say what it means.
                            message = (f"Commit cannot be completed since the group '{group_id}' has active "
                                       "members; stop its consumers first.")
                        errors[TopicPartition(topic.name, int(p.partition_index))] = AdminError.of(code, message)
            failure = first_error(errors)
            if failure is not None:
                raise failure

        self._call(attempt, "alter consumer group offsets")

    def delete_consumer_group_offsets(self, group_id: str,
                                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, AdminError | None]:
        """Forget the group's committed offsets of some partitions (OffsetDelete); per-partition results."""
        wanted = sorted(set(partitions))

        def attempt() -> dict[TopicPartition, AdminError | None]:
            node = self._coordinator(group_id)
            by_topic = _partition_indexes(wanted)
            response = self._send(node, OFFSET_DELETE, lambda s: s.make(
                "OffsetDeleteRequest", group_id=group_id, topics=[
                    s.make("OffsetDeleteRequestTopic", name=t, partitions=[
                        s.make("OffsetDeleteRequestPartition", partition_index=p) for p in parts])
                    for t, parts in by_topic.items()]))
            self._group_error(group_id, int(response.error_code))
            results: dict[TopicPartition, AdminError | None] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    results[TopicPartition(topic.name, int(p.partition_index))] = AdminError.of(code) if code else None
            return results

        return self._call(attempt, "delete consumer group offsets")

    def delete_consumer_groups(self, group_ids: Iterable[str], *,
                               raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Delete empty groups and their offsets; group -> None or the error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        results: dict[str, AdminError | None] = {}
        for group_id in dict.fromkeys(group_ids):

            def attempt(group_id: str = group_id) -> AdminError | None:
                node = self._coordinator(group_id)
                response = self._send(node, DELETE_GROUPS, lambda s: s.make(
                    "DeleteGroupsRequest", groups_names=[group_id]))
                code = int(response.results[0].error_code)
                try:
                    self._group_error(group_id, code)  # coordinator moves raise Retry, not AdminError
                except AdminError as exc:
                    return exc
                return None

            results[group_id] = self._call(attempt, f"delete group {group_id}")
        return finish(results, raise_on_error)


# -- response decoding helpers ------------------------------------------------------------------------


def _topic_description(topic: Any) -> TopicDescription:
    topic_id = getattr(topic, "topic_id", None)
    partitions = []
    for p in sorted(topic.partitions, key=lambda p: int(p.partition_index)):
        leader = int(p.leader_id)
        partitions.append(PartitionInfo(
            partition=int(p.partition_index), leader=None if leader < 0 else leader,
            replicas=[int(r) for r in p.replica_nodes], isr=[int(r) for r in p.isr_nodes],
            offline_replicas=[int(r) for r in getattr(p, "offline_replicas", ())],
            leader_epoch=int(getattr(p, "leader_epoch", -1))))
    return TopicDescription(
        name=topic.name, topic_id=None if topic_id is None or topic_id.int == 0 else _kafka_uuid(topic_id),
        is_internal=bool(getattr(topic, "is_internal", False)), partitions=partitions)


def _kafka_uuid(value: Any) -> str:
    """A topic id as Kafka prints it: URL-safe base64 of the 16 bytes, unpadded."""
    import base64

    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _config_entry(c: Any) -> ConfigEntry:
    synonyms = [ConfigSynonym(s.name, s.value, ConfigSource.of(int(s.source))) for s in getattr(c, "synonyms", ())]
    source = int(getattr(c, "config_source", -1))
    if source < 0:  # DescribeConfigs v0 had is_default instead of a source
        source = ConfigSource.DEFAULT_CONFIG if getattr(c, "is_default", False) else ConfigSource.UNKNOWN
    return ConfigEntry(name=c.name, value=c.value, source=ConfigSource.of(source), is_read_only=bool(c.read_only),
                       is_sensitive=bool(c.is_sensitive), synonyms=synonyms,
                       documentation=getattr(c, "documentation", None))


def _kip848_partitions(assignment: Any) -> list[TopicPartition]:
    if assignment is None:
        return []
    return sorted(TopicPartition(t.topic_name, int(p)) for t in assignment.topic_partitions for p in t.partitions)
