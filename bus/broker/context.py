"""What a request handler gets besides the request: who asked, at which version, and its collaborators.

Handlers see the broker's parts through `BrokerServices`, built once by `Broker` (as Kafka hands
KafkaApis its collaborators explicitly): the coordinators, the replica manager, the controller for
admin requests, a metadata view and a producer-id source. Nothing reaches back into "the broker".

Who asked is the request's principal ("User:alice"; "User:ANONYMOUS" on a PLAINTEXT connection, as in Kafka) and
client host. A handler asks `ctx.authorize` (one resource) or `ctx.authorized` (the names of a list it may act on)
before it acts, as Kafka's KafkaApis asks its AuthHelper; both go to the one authorizer (`services.authorizer`), and
with none configured (`authorizer.class.name` empty) everything is allowed. No handler reads ACLs itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from bus.broker.kafka_metrics import TopicMetrics
from bus.protocol.error_response import error_response
from bus.protocol.messages import Shapes, response_class
from bus.security.acls import (
    ANONYMOUS,
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    ResourceType,
    operations_bit_field,
)

if TYPE_CHECKING:
    from bus.broker.replica_manager import ReplicaManager
    from bus.config.broker import BrokerConfig
    from bus.controller.controller import QuorumController
    from bus.controller.controller_channel import ControllerChannel
    from bus.coordinator.group.consumer.coordinator import ConsumerGroupCoordinator
    from bus.coordinator.group.coordinator import GroupCoordinator
    from bus.coordinator.interfaces import MetadataView, ProducerIdSource
    from bus.coordinator.transaction.coordinator import TransactionCoordinator
    from bus.network.interfaces import RequestHandler
    from bus.raft.driver import RaftDriver
    from bus.security.authenticator import SaslAuthenticator
    from bus.security.authorizer import StandardAuthorizer


@dataclass(frozen=True, slots=True)
class BrokerServices:
    config: BrokerConfig
    metadata: MetadataView
    controller: QuorumController  # admin requests: topic creation, deletion, config changes
    replicas: ReplicaManager
    groups: GroupCoordinator
    consumer_groups: ConsumerGroupCoordinator
    transactions: TransactionCoordinator
    producer_ids: ProducerIdSource
    bound_address: Callable[[str], tuple[str, int] | None]  # listener name -> the address it bound
    raft: RaftDriver | None = None  # the KRaft quorum, on a node with the controller role and voters configured
    controller_channel: ControllerChannel | None = None  # to the active controller, on a node of a quorum
    authorizer: StandardAuthorizer | None = None  # None: `authorizer.class.name` empty, every request allowed
    envelope_apis: RequestHandler | None = None  # the controller listener's: the client APIs an Envelope runs on
    topic_metrics: TopicMetrics = field(default_factory=TopicMetrics)  # BrokerTopicMetrics: Produce and Fetch add

    @property
    def node_id(self) -> int:
        return self.metadata.node_id


@dataclass(slots=True)
class RequestContext:
    services: BrokerServices
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    listener: str
    peer: str
    shapes: Shapes
    principal: str = ANONYMOUS
    client_host: str = ""  # the client's address, which ACL hosts match
    sasl: SaslAuthenticator | None = None  # the connection's SASL exchange, on a SASL listener
    enveloped: bool = False  # another node forwarded it in an Envelope (KIP-590): it is not forwarded again

    def make(self, class_name: str, **values: Any) -> Any:
        """Build a response dataclass of this request's version (see `bus.protocol.messages`)."""
        return self.shapes.make(class_name, **values)

    def error_response(self, request: Any, code: ErrorCode, message: str | None = None) -> Any:
        """This request's response with `code` in every error field (Kafka's `getErrorResponse`)."""
        return error_response(self.shapes, response_class(self.api_key, self.api_version), request, code, message)

    # -- authorization ------------------------------------------------------------------------------------------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  log_if_denied: bool = True) -> bool:
        """Whether this request's principal may do `operation` on resource `name` (Kafka's AuthHelper.authorize).
        `log_if_denied=False` where a denial only narrows what is answered (a listing) rather than refuses it."""
        authorizer = self.services.authorizer
        return authorizer is None or authorizer.authorize(self, operation, resource_type, name,
                                                          log_if_denied=log_if_denied)

    def authorize_cluster(self, operation: AclOperation, *, log_if_denied: bool = True) -> bool:
        """`authorize` on the cluster resource (kafka-cluster)."""
        return self.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME, log_if_denied=log_if_denied)

    def authorized(self, operation: AclOperation, resource_type: ResourceType, names: Iterable[str], *,
                   log_if_denied: bool = True) -> set[str]:
        """The names among `names` this request's principal may do `operation` on, each checked once (Kafka's
        AuthHelper.filterByAuthorized): a Metadata, Produce or Fetch of many topics asks once."""
        authorizer = self.services.authorizer
        if authorizer is None:
            return set(names)
        return authorizer.authorized(self, operation, resource_type, names, log_if_denied=log_if_denied)

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        """The bit field of the operations this principal may do on `name` (the `authorized_operations` fields)."""
        authorizer = self.services.authorizer
        if authorizer is None:
            return operations_bit_field(SUPPORTED_OPERATIONS[resource_type])
        return authorizer.authorized_operations(self, resource_type, name)

    def authorize_by_resource_type(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether this principal may do `operation` on some resource of `resource_type` (Kafka's
        AuthHelper.authorizeByResourceType)."""
        authorizer = self.services.authorizer
        return authorizer is None or authorizer.authorize_by_resource_type(self, operation, resource_type)

    @property
    def config(self) -> BrokerConfig:
        return self.services.config

    @property
    def metadata(self) -> MetadataView:
        return self.services.metadata

    @property
    def node_id(self) -> int:
        return self.services.metadata.node_id

    @property
    def authorizer(self) -> StandardAuthorizer | None:
        """The authorizer, for the ACL APIs (SECURITY_DISABLED without one; DescribeAcls lists its ACLs)."""
        return self.services.authorizer

    @property
    def controller(self) -> QuorumController:
        return self.services.controller

    @property
    def replicas(self) -> ReplicaManager:
        return self.services.replicas

    @property
    def groups(self) -> GroupCoordinator:
        return self.services.groups

    @property
    def consumer_groups(self) -> ConsumerGroupCoordinator:
        return self.services.consumer_groups

    @property
    def transactions(self) -> TransactionCoordinator:
        return self.services.transactions

    @property
    def producer_ids(self) -> ProducerIdSource:
        return self.services.producer_ids

    @property
    def broker(self) -> BrokerServices:
        """Deprecated spelling of `services`, kept until fetch/produce move to `ctx.replicas`/`ctx.config`."""
        return self.services
