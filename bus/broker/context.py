"""What a request handler gets besides the request: who asked, at which version, and its collaborators.

Handlers see the broker's parts through `BrokerServices`, built once by `Broker` (as Kafka hands
KafkaApis its collaborators explicitly): the coordinators, the replica manager, the controller for
admin requests, a metadata view and a producer-id source. Nothing reaches back into "the broker".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bus.protocol.messages import Shapes

if TYPE_CHECKING:
    from bus.broker.controller_channel import ControllerChannel
    from bus.broker.replica_manager import ReplicaManager
    from bus.config.broker import BrokerConfig
    from bus.controller.controller import QuorumController
    from bus.coordinator.consumer_group.coordinator import ConsumerGroupCoordinator
    from bus.coordinator.group.coordinator import GroupCoordinator
    from bus.coordinator.interfaces import MetadataView, ProducerIdSource
    from bus.coordinator.transaction.coordinator import TransactionCoordinator
    from bus.raft.driver import RaftDriver


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

    def make(self, class_name: str, **values: Any) -> Any:
        """Build a response dataclass of this request's version (see `bus.protocol.messages`)."""
        return self.shapes.make(class_name, **values)

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
