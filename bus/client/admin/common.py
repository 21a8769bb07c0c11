"""What every module of the admin client shares: the errors, the client as its calls see it, and a few helpers.

`AdminError` and its family carry Kafka's error names, so `except AdminError` (or `KafkaError`) covers every call;
`Retry` is the signal a call raises for a retriable answer. `AdminCalls` is the client as its per-concern mixins use
it (`client.py` provides it): one request to one broker (`_send`), the brokers and where to send a request
(`_any_node`, `_controller`, `_leaders`), and the retry loop bounded by `default.api.timeout.ms` (`_call`). The
helpers here are those that more than one concern needs: a partition list as requests carry it, the error codes
that mean "ask another broker", and `BrokerInfo`, a broker as the calls name it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from bus.client.errors import KafkaError, KafkaTimeoutError
from bus.protocol.topic_partition import TopicPartition

if TYPE_CHECKING:
    from bus.client.cluster import Metadata
    from bus.client.connection import BrokerConnection

T = TypeVar("T")
K = TypeVar("K")


# Where a request must go again: another controller, another partition leader.
CONTROLLER_ERRORS = frozenset({ErrorCode.not_controller})
LEADER_ERRORS = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
                           ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch,
                           ErrorCode.replica_not_available, ErrorCode.offset_not_available})


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    def __str__(self) -> str:
        return f"{self.host}:{self.port} (id: {self.node_id} rack: {self.rack})"


class AdminCalls(Protocol):
    """The admin client as its mixins use it."""

    _metadata: Metadata

    @property
    def _brokers(self) -> dict[int, BrokerInfo]:
        """The live brokers, by node id, as the metadata knows them."""
        ...

    def _call(self, attempt: Callable[[], T], what: str) -> T:
        """Run `attempt` until it succeeds, retrying what `Retry` signals until the API deadline."""
        ...

    def _send(self, node_id: int, api_key: int, build: Callable[[Any], Any]) -> Any:
        """One request (built at the best common version) to one broker."""
        ...

    def _conn(self, node_id: int) -> BrokerConnection:
        """The connection to one broker (Retry if the metadata does not know it)."""
        ...

    def _drop(self, node_id: int) -> None:
        """Close a broken connection to one broker."""
        ...

    def _any_node(self) -> int:
        """A broker to send a cluster-wide request to."""
        ...

    def _controller(self) -> int:
        """The controller the metadata names (any broker if it names none that is live)."""
        ...

    def _leaders(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Each partition's leader, from fresh metadata."""
        ...

    def _refresh_brokers(self) -> None:
        """Learn the brokers from any reachable one."""
        ...

    def _timeout_ms(self, timeout_ms: int | None) -> int:
        """A request's timeout: the one given, else `request.timeout.ms`."""
        ...


# Kafka's default messages (org.apache.kafka.common.protocol.Errors) for the codes an admin meets most.
_DEFAULT_MESSAGES = {
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
    ErrorCode.topic_already_exists: "Topic with this name already exists.",
    ErrorCode.invalid_partitions: "Number of partitions is below 1.",
    ErrorCode.invalid_replication_factor: "Replication factor is below 1 or larger than the number of available "
                                          "brokers.",
    ErrorCode.invalid_replica_assignment: "Replica assignment is invalid.",
    ErrorCode.invalid_config: "Configuration is invalid.",
    ErrorCode.invalid_topic_exception: "The request attempted to perform an operation on an invalid topic.",
    ErrorCode.group_id_not_found: "The group id does not exist.",
    ErrorCode.non_empty_group: "The group is not empty.",
    ErrorCode.invalid_group_id: "The configured groupId is invalid.",
    ErrorCode.group_subscribed_to_topic: "Deleting offsets of a topic is forbidden while the consumer group is "
                                         "actively subscribed to it.",
    ErrorCode.unknown_member_id: "The coordinator is not aware of this member.",
    ErrorCode.illegal_generation: "Specified group generation id is not valid.",
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.not_controller: "This is not the correct controller for this cluster.",
    ErrorCode.request_timed_out: "The request timed out.",
    ErrorCode.policy_violation: "Request parameters do not satisfy the configured policy.",
    ErrorCode.topic_deletion_disabled: "Topic deletion is disabled.",
    ErrorCode.offset_out_of_range: "The requested offset is not within the range of offsets maintained by the "
                                   "server.",
    ErrorCode.unsupported_version: "The version of API is not supported.",
    ErrorCode.resource_not_found: "A request illegally referred to a resource that does not exist.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.leader_not_available: "There is no leader for this topic-partition as we are in the middle of a "
                                    "leadership election.",
    ErrorCode.not_leader_or_follower: "For requests intended only for the leader, this error indicates that the "
                                      "broker is not the current leader.",
}


def error_name(code: int | ErrorCode) -> str:
    """Kafka's name for an error code, e.g. 36 -> TOPIC_ALREADY_EXISTS (UNKNOWN_SERVER_ERROR if unknown)."""
    try:
        name = ErrorCode(int(code)).name
    except ValueError:
        return f"UNKNOWN_ERROR_CODE_{int(code)}"
    return "INVALID_TOPIC_EXCEPTION" if name == "invalid_topic_exception" else name.upper()


class AdminError(KafkaError):
    """A Kafka error answered by the cluster (or a client-side deadline), with Kafka's error name.

    `name` is Kafka's name for the code (TOPIC_ALREADY_EXISTS), `code` the numeric code, `message`
    the broker's error message or Kafka's default text, and `errors` every per-resource failure of
    the call that raised it (a multi-resource call raises its first failure, carrying all of them).
    It is a `KafkaError` like every other client failure, so one `except KafkaError` covers the
    producer, the consumer and the admin alike.
    """

    code: int
    name: str
    message: str
    errors: dict[Any, AdminError]

    def __init__(self, code: int | ErrorCode, message: str | None = None) -> None:
        self.code = int(code)
        self.name = error_name(code)
        try:
            default = _DEFAULT_MESSAGES.get(ErrorCode(self.code))
        except ValueError:
            default = None
        self.message = message or default or self.name.replace("_", " ").capitalize() + "."
        self.errors = {}
        try:
            self.retriable = bool(ErrorCode(self.code).retriable)
        except ValueError:
            self.retriable = False
        super().__init__(f"{self.message} ({self.name})")

    @staticmethod
    def of(code: int | ErrorCode, message: str | None = None) -> AdminError:
        """The most specific subclass registered for `code` (AdminError otherwise)."""
        cls = _ERROR_CLASSES.get(int(code), AdminError)
        return cls(code, message)


class TopicAlreadyExistsError(AdminError):
    """TOPIC_ALREADY_EXISTS: `--if-not-exists` callers catch this one."""


class UnknownTopicOrPartitionError(AdminError):
    """UNKNOWN_TOPIC_OR_PARTITION: the topic (or partition) does not exist."""


class GroupIdNotFoundError(AdminError):
    """GROUP_ID_NOT_FOUND: no such consumer group."""


class NonEmptyGroupError(AdminError):
    """NON_EMPTY_GROUP: the group still has members (delete / reset refused)."""


class InvalidConfigError(AdminError):
    """INVALID_CONFIG: a config name or value the broker rejected."""


class AdminTimeoutError(AdminError, KafkaTimeoutError):
    """The call did not complete within `default.api.timeout.ms` (REQUEST_TIMED_OUT)."""


_ERROR_CLASSES: dict[int, type[AdminError]] = {
    int(ErrorCode.topic_already_exists): TopicAlreadyExistsError,
    int(ErrorCode.unknown_topic_or_partition): UnknownTopicOrPartitionError,
    int(ErrorCode.group_id_not_found): GroupIdNotFoundError,
    int(ErrorCode.non_empty_group): NonEmptyGroupError,
    int(ErrorCode.invalid_config): InvalidConfigError,
}


class Retry(Exception):
    """Internal: the attempt hit a retriable condition; refresh routing and try again."""

    def __init__(self, error: AdminError, refresh: bool = True) -> None:
        super().__init__(str(error))
        self.error = error
        self.refresh = refresh


def check_error(code: Any, message: str | None = None) -> None:
    if int(code) != 0:
        raise AdminError.of(code, message)


def first_error(results: Mapping[Any, AdminError | None]) -> AdminError | None:
    failed = {key: err for key, err in results.items() if err is not None}
    if not failed:
        return None
    first = next(iter(failed.values()))
    first.errors = failed
    return first


def finish(results: dict[K, AdminError | None], raise_on_error: bool) -> dict[K, AdminError | None]:
    """A multi-resource call's results, or its first failure raised (carrying all of them) if `raise_on_error`."""
    if raise_on_error:
        failure = first_error(results)
        if failure is not None:
            raise failure
    return results


def partition_indexes(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    """Topic -> partition indexes, in the order given: how most requests list partitions."""
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(int(tp.partition))
    return by_topic
