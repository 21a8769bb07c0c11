"""Small pieces several handlers share: the advertised endpoint and topic lookups."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from kio.schema.errors import ErrorCode

from bus.config.broker import BROKER_CONFIGS, BrokerConfig, Listener
from bus.config.topic import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, TOPIC_CONFIGS, resolve_topic_config
from bus.controller.controller import ControllerError
from bus.security.acls import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from bus.broker.context import RequestContext

NULL_TOPIC_ID = uuid.UUID(int=0)
OPERATIONS_NOT_REQUESTED = -(2**31)  # an `authorized_operations` field the request did not ask for (Kafka's default)
# A response with more entries than this is built (where the handler can) and encoded in a worker thread.
# The encoder and builders are pure Python, so the thread still takes the GIL, but hands it back to the loop
# every `sys.getswitchinterval()` (5 ms) instead of holding the loop for the whole work (~30 us per
# partition of Metadata). Below it, the thread hop costs more than it saves.
LARGE_RESPONSE_ITEMS = 200


def advertised_endpoint(ctx: RequestContext) -> Listener:
    """The address of this broker on the listener the request arrived on (Kafka answers per listener)."""
    config = ctx.config
    candidates = [a for a in config.advertised if a.name == ctx.listener] or config.advertised_client_listeners
    endpoint = candidates[0]
    if endpoint.port == 0:  # bound to an ephemeral port: advertise what the OS gave us
        _host, port = ctx.services.bound_address(endpoint.name) or (endpoint.host, 0)
        return Listener(endpoint.name, endpoint.host, port)
    return endpoint


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    node_id: int
    host: str
    port: int
    rack: str | None


def live_brokers(ctx: RequestContext) -> list[BrokerEndpoint]:
    """The brokers Metadata and DescribeCluster list: this one, and on a node of a quorum every registered broker
    that is not fenced, each at its endpoint on the listener the request came in on."""
    endpoint = advertised_endpoint(ctx)
    brokers = [BrokerEndpoint(ctx.node_id, endpoint.host, endpoint.port, None)]
    if ctx.services.raft is not None:
        for broker_id, registration in sorted(ctx.metadata.brokers.items()):
            address = registration.endpoint(ctx.listener)
            if broker_id != ctx.node_id and address is not None and not registration.fenced:
                brokers.append(BrokerEndpoint(broker_id, address[0], address[1], registration.rack))
    return brokers


def controller_id(ctx: RequestContext) -> int:
    """The controller clients should send controller requests to (Metadata, DescribeCluster): on a node of a quorum
    the raft leader while this node reaches it, else this node, which forwards such requests to the active
    controller and waits out an election (KIP-590).

    Kafka's KRaft brokers always name a random alive broker. Naming the leader keeps a client's admin requests on
    one node, not on whichever broker answered it last (kafka-python keeps that id: a pause of that broker stalled
    its requests), and shows an operator which node leads. But a client must never be sent to a leader this node
    knows is gone, nor be told -1: librdkafka keeps the controller id of its latest Metadata, does not ask again
    while that node refuses connections or after a -1, and a CreateTopics waited 30 s for a controller just
    killed. A leader that is no broker (a controller-only node) is not reachable by clients either."""
    raft = ctx.services.raft
    if raft is None:
        return ctx.node_id
    leader = raft.reachable_leader()
    if leader == ctx.node_id:
        return leader
    registration = ctx.metadata.brokers.get(leader) if leader is not None else None
    return leader if leader is not None and registration is not None and not registration.fenced else ctx.node_id


def cluster_authorized_operations(ctx: RequestContext, requested: bool) -> int:
    """The `cluster_authorized_operations` of Metadata (v8-v10) and DescribeCluster: what the principal may do on the
    cluster when asked, 0 without DESCRIBE on it (Kafka's answer)."""
    if not requested:
        return OPERATIONS_NOT_REQUESTED
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)


def topic_name_for(ctx: RequestContext, name: str | None, topic_id: uuid.UUID | None) -> str | None:
    """Requests name topics by name (old versions) or by id (new ones); resolve either."""
    if topic_id is not None and topic_id != NULL_TOPIC_ID:
        topic = ctx.metadata.topics_by_id.get(topic_id)
        return topic.name if topic else None
    return name


# -- admin APIs ---------------------------------------------------------------------------------

T = TypeVar("T")

# ConfigResource types (DescribeConfigs / AlterConfigs / IncrementalAlterConfigs `resource_type`).
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_CLIENT_METRICS = 16
RESOURCE_GROUP = 32
RESOURCE_NAMES = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS", 32: "GROUP"}


def config_resource_refusal(ctx: RequestContext, operation: AclOperation, resource_type: int,
                            resource_name: str) -> ErrorCode | None:
    """The error a config resource gets when the principal may not do `operation` (DESCRIBE_CONFIGS, ALTER_CONFIGS)
    on it, or None (Kafka's ConfigHelper and ControllerApis.authorizeAlterResource): a topic needs it on the topic,
    a group on the group, broker-wide resources on the cluster. Other types are refused later as unsupported."""
    if resource_type == RESOURCE_TOPIC:
        allowed = ctx.authorize(operation, ResourceType.TOPIC, resource_name)
        code = ErrorCode.topic_authorization_failed
    elif resource_type == RESOURCE_GROUP:
        allowed = ctx.authorize(operation, ResourceType.GROUP, resource_name)
        code = ErrorCode.group_authorization_failed
    elif resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER, RESOURCE_CLIENT_METRICS):
        allowed = ctx.authorize_cluster(operation)
        code = ErrorCode.cluster_authorization_failed
    else:
        return None
    return None if allowed else code


def flag_duplicates(items: Iterable[T], key: Callable[[T], Hashable]) -> Iterator[tuple[T, bool]]:
    """Yield `(item, repeated)`: unique items with False, and once per key named twice, its first item with True.

    Kafka refuses to guess which of two entries for the same topic (or config resource) was meant:
    a key named more than once in one request gets a single INVALID_REQUEST result and none of its
    entries is acted on.
    """
    listed = list(items)
    counts = Counter(key(item) for item in listed)
    reported: set[Hashable] = set()
    for item in listed:
        k = key(item)
        if counts[k] == 1:
            yield item, False
        elif k not in reported:
            reported.add(k)
            yield item, True


def unsupported_resource(resource_type: int) -> ControllerError:
    """The error for a config resource type we do not manage (BROKER_LOGGER, GROUP, ...)."""
    name = RESOURCE_NAMES.get(resource_type, str(resource_type))
    return ControllerError(ErrorCode.invalid_request, f"Unsupported resource type {name} for this request")


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs and CreateTopics (v5+) report it, independent of API version."""

    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    config_type: int
    documentation: str
    synonyms: tuple[tuple[str, str | None, int], ...]


def topic_config_entries(
    overrides: Mapping[str, str], broker_static: Mapping[str, str], keys: Iterable[str] | None = None
) -> list[ConfigEntry]:
    """Every topic config (or those in `keys` that exist) with its effective value and source chain.

    Values come from `resolve_topic_config`, the same resolution the log layer uses, so what an
    admin sees is what the partitions run with. A broker synonym is shown with its own value as
    configured (log.retention.hours=24, not the 86400000 ms it resolves to), as Kafka shows it.
    """
    wanted = TOPIC_CONFIGS.keys if keys is None else [k for k in keys if k in TOPIC_CONFIGS]
    entries = []
    for name in wanted:
        key = TOPIC_CONFIGS[name]
        resolved = resolve_topic_config(name, overrides, broker_static)
        entries.append(
            ConfigEntry(
                name=name,
                value=None if key.sensitive else resolved.value,
                source=resolved.source,
                read_only=key.read_only,
                sensitive=key.sensitive,
                config_type=int(key.type),
                documentation=key.doc,
                synonyms=tuple((n, broker_static.get(n, v) if n != name else v, src)
                               for n, v, src in resolved.synonyms),
            )
        )
    return entries


# DescribeConfigs config_source codes of dynamic broker configs (per broker, and the cluster-wide default).
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3


def dynamic_broker_chain(dynamic: Mapping[str, Mapping[str, str]], resource: str,
                         name: str) -> list[tuple[str, str, int]]:
    """The dynamic values of broker key `name` that apply to broker `resource` (an id, or "" for the cluster-wide
    default), most specific first: the broker's own, then the default (Kafka's DynamicBrokerConfig order)."""
    chain = []
    if resource and name in dynamic.get(resource, {}):
        chain.append((name, dynamic[resource][name], SOURCE_DYNAMIC_BROKER))
    if name in dynamic.get("", {}):
        chain.append((name, dynamic[""][name], SOURCE_DYNAMIC_DEFAULT_BROKER))
    return chain


def dynamic_broker_value(dynamic: Mapping[str, Mapping[str, str]], config: BrokerConfig, resource: str,
                         name: str) -> tuple[str | None, int]:
    """(value, source) of broker key `name` in effect on broker `resource`: dynamic, else static, else default."""
    chain = dynamic_broker_chain(dynamic, resource, name)
    if chain:
        return chain[0][1], chain[0][2]
    if name in config.static:
        return config.static[name], SOURCE_STATIC_BROKER
    return (BROKER_CONFIGS[name].default if name in BROKER_CONFIGS else None), SOURCE_DEFAULT


def alter_config_resources(
    ctx: RequestContext, resources: Sequence[Any], alter_topic: Callable[[str, Any], None],
    alter_broker: Callable[[str, Any], None],
) -> list[Any]:
    """The resource loop AlterConfigs and IncrementalAlterConfigs share; they differ only in `alter_topic` and
    `alter_broker`, which apply one topic or broker resource (name: a broker id, or "" for the cluster-wide
    default) or raise ControllerError. Only the dynamic broker keys (replication throttles) can change. Each resource
    needs ALTER_CONFIGS (`config_resource_refusal`).
    """
    responses = []
    for resource, repeated in flag_duplicates(resources, lambda r: (r.resource_type, r.resource_name)):
        code, message = ErrorCode.none, None
        try:
            if repeated:
                raise ControllerError(ErrorCode.invalid_request, "Duplicate resource.")
            refusal = config_resource_refusal(ctx, AclOperation.ALTER_CONFIGS, resource.resource_type,
                                              resource.resource_name)
            if refusal is not None:
                raise ControllerError(refusal)  # no message, as Kafka answers it
            if resource.resource_type == RESOURCE_TOPIC:
                if not resource.resource_name:
                    raise ControllerError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
                alter_topic(resource.resource_name, resource)
            elif resource.resource_type == RESOURCE_BROKER:
                alter_broker(resource.resource_name, resource)
            else:
                raise unsupported_resource(resource.resource_type)
        except ControllerError as exc:
            code, message = exc.code, exc.message
        responses.append(
            ctx.make(
                "AlterConfigsResourceResponse",
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return responses
