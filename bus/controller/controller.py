"""The quorum controller: validates admin operations and commits metadata records (`QuorumController`).

Every change is written to the metadata log (`MetadataRecordLog`) and applied to `image`, the image the
brokers see, and announced to the broker side (`listeners`) only once the log reports it committed, the order
KRaft uses, so a crash never leaves the broker holding a topic the log does not know.

Operations run on the active controller only (`ControllerError` NOT_CONTROLLER elsewhere), one at a time
(handlers run on the event loop and append before they yield). With a quorum, a commit comes later than the
append, so the active controller validates against `working`: the committed image plus what it appended and
is still waiting for (`control_context`). Without a quorum both are the same image.

`QuorumController` is a facade, as Kafka's is: each concern is a control manager of its own, given the shared
`ControlContext` and, where it needs another manager, the one callable it needs, built in dependency order:

- `topic_control.TopicControlManager`: topics and their partitions (placement);
- `replication_control.ReplicationControlManager`: partition leadership, ISRs (AlterPartition), ElectLeaders and
  the automatic leader rebalance;
- `reassignment_control.ReassignmentControlManager`: partition reassignment (KIP-455);
- `cluster_control.ClusterControlManager`: broker registration, heartbeats, sessions, fencing, controlled shutdown;
- `config_control.ConfigurationControlManager`: topic and broker configs;
- `producer_id_control.ProducerIdControlManager`: producer id blocks;
- `acl_control.AclControlManager` and `scram_control.ScramControlManager`: ACLs and SCRAM credentials.

What stays here is the facade's own job: feeding the log's committed records and snapshots to the image and the
listeners, becoming active (and the activation steps), the cluster id with the bootstrap records.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence

from bus.controller.acl_control import AclControlManager
from bus.controller.cluster_control import ClusterControlManager
from bus.controller.config_control import ConfigurationControlManager
from bus.controller.control_context import ControlContext
from bus.controller.errors import ControllerError
from bus.controller.image import MetadataImage, PartitionState, TopicImage, difference
from bus.controller.metadata_log.record_log import MetadataRecord, MetadataRecordLog
from bus.controller.producer_id_control import ProducerIdControlManager
from bus.controller.reassignment_control import ReassignmentControlManager
from bus.controller.replication_control import ReplicationControlManager
from bus.controller.scram_control import ScramControlManager, ScramUpsertion
from bus.controller.topic_control import TopicControlManager, TopicSpec
from bus.security.acls import AclBinding, AclBindingFilter

log = logging.getLogger(__name__)


class QuorumController:
    def __init__(
        self,
        metadata_log: MetadataRecordLog,
        node_id: int,
        default_partitions: int,
        default_replication_factor: int,
        *,
        broker_session_timeout_ms: int = 9000,
        unclean_leader_election: bool = False,
        quorum_voters: int = 1,
        broker: bool = True,
        bootstrap_records: Sequence[MetadataRecord] = (),
    ) -> None:
        """`unclean_leader_election`: the broker's `unclean.leader.election.enable` (a topic's own config wins);
        `quorum_voters`: how many controllers vote, which caps the internal topics' replication factor in combined
        mode;
        `broker`: whether this node is a broker too (a controller-only node never hosts a replica);
        `bootstrap_records`: what `bus storage format` put in the metadata dir (SCRAM credentials), committed with
        the cluster id, once, at the start of the cluster's metadata log (Kafka's bootstrap metadata)."""
        self._context = ControlContext(metadata_log, node_id, {node_id} if broker else set())
        self._topics = TopicControlManager(self._context, default_partitions, default_replication_factor,
                                           quorum_voters)
        self._replication = ReplicationControlManager(self._context, unclean_leader_election)
        self._reassignment = ReassignmentControlManager(self._context, self._replication.unclean)
        self._cluster = ClusterControlManager(self._context, broker_session_timeout_ms, self._replication.leave,
                                              self._replication.elect_leaderless)
        self._configs = ConfigurationControlManager(self._context, self._topics.topic)
        self._producer_ids = ProducerIdControlManager(self._context)
        self._acls = AclControlManager(self._context)
        self._scram = ScramControlManager(self._context)
        self.listeners: list[Callable[[list[MetadataRecord]], None]] = []
        self.activation_listeners: list[Callable[[], object]] = []  # run (soon) after this node becomes active
        self._unfinished_activation: list[Callable[[], object]] = []  # refused steps, retried periodically
        self.bootstrap_records = list(bootstrap_records)
        metadata_log.open(self)

    # -- the shared state and settings, read where they live ------------------------------------------------------

    @property
    def log(self) -> MetadataRecordLog:
        return self._context.log

    @property
    def node_id(self) -> int:
        return self._context.node_id

    @property
    def local_broker(self) -> set[int]:
        return self._context.local_broker

    @property
    def image(self) -> MetadataImage:
        """The committed image, the one the brokers see."""
        return self._context.image

    @property
    def active(self) -> bool:
        return self._context.active

    @property
    def working(self) -> MetadataImage:
        """The image operations validate against: committed plus this controller's pending records."""
        return self._context.working

    @property
    def live_brokers(self) -> list[int]:
        """This node (when it is a broker) and every registered broker that is not fenced."""
        return self._context.live_brokers

    @property
    def default_partitions(self) -> int:
        return self._topics.default_partitions

    @property
    def default_replication_factor(self) -> int:
        return self._topics.default_replication_factor

    @property
    def quorum_voters(self) -> int:
        return self._topics.quorum_voters

    @property
    def unclean_leader_election(self) -> bool:
        return self._replication.unclean_leader_election

    @property
    def broker_session_timeout_s(self) -> float:
        return self._cluster.broker_session_timeout_s

    # -- the metadata log's state machine (`MetadataStateMachine`) and activation ----------------------------------

    def apply_committed(self, records: list[MetadataRecord]) -> None:
        for record in records:
            self.image.apply(record)
        for listener in self.listeners:
            listener(records)

    def load_snapshot(self, records: list[MetadataRecord]) -> None:
        """Replace the committed image wholesale (at start, or a snapshot from the leader). The broker side hears
        the difference (`image.difference`) through the same `listeners` as committed records: topics the snapshot
        no longer has are removed as deleted topics are, new and changed ones are brought in line."""
        loaded = MetadataImage()
        for record in records:
            loaded.apply(record)
        changes = difference(self.image, loaded)
        self.image.replace_with(loaded)
        for listener in self.listeners:
            listener(changes)

    def snapshot_image(self) -> MetadataImage:
        return self.image.copy()

    def set_active(self, active: bool) -> None:
        self._context.set_active(active)
        self._cluster.reset_sessions(active)
        self._unfinished_activation = list(self.activation_listeners) if active else []
        if active and self.activation_listeners:
            try:
                asyncio.get_running_loop().call_soon(self._activated)
            except RuntimeError:
                self._activated()

    def _activated(self) -> None:
        """Run the activation steps not done yet; one the controller refuses (an internal topic while too few
        brokers are up, as Kafka waits to create it) stays for the next call (`fence_expired_brokers`)."""
        for listener in list(self._unfinished_activation):
            if not self.active:
                return
            try:
                listener()
            except ControllerError as exc:
                log.info("controller activation step not done yet: %s", exc.message)
            else:
                self._unfinished_activation.remove(listener)

    def ensure_cluster_id(self, new_id: Callable[[], str]) -> str:
        if self.working.cluster_id is None:
            self._context.commit([{"type": "cluster", "cluster_id": new_id()}, *self.bootstrap_records])
        cluster_id = self.working.cluster_id
        assert cluster_id is not None
        return cluster_id

    def import_records(self, records: list[MetadataRecord]) -> None:
        """Commit records kept elsewhere before (a local metadata log moving into the quorum's), as one entry."""
        self._context.check_active()
        self._context.commit(records)

    # -- cluster membership (ClusterControlManager) ---------------------------------------------------------------

    def register_broker(self, broker_id: int, endpoints: list[tuple[str, str, int]], rack: str | None,
                        incarnation_id: str | None = None) -> None:
        self._cluster.register_broker(broker_id, endpoints, rack, incarnation_id)

    def broker_heartbeat(self, broker_id: int, want_shut_down: bool = False) -> bool:
        return self._cluster.broker_heartbeat(broker_id, want_shut_down)

    def fence_expired_brokers(self) -> None:
        """Fence every unfenced broker whose session expired (`ClusterControlManager.fence_expired_brokers`), and
        retry the activation steps not done yet (every node runs it periodically; only the active controller acts)."""
        self._cluster.fence_expired_brokers()
        if self._unfinished_activation:
            self._activated()

    # -- topics (TopicControlManager) -----------------------------------------------------------------------------

    def create_topic(self, spec: TopicSpec, *, validate_only: bool = False) -> TopicImage | None:
        return self._topics.create_topic(spec, validate_only=validate_only)

    def create_internal_topic(self, name: str, partitions: int, replication_factor: int,
                              configs: Mapping[str, str]) -> TopicImage:
        return self._topics.create_internal_topic(name, partitions, replication_factor, configs)

    def topic(self, name: str) -> TopicImage:
        return self._topics.topic(name)

    def delete_topic(self, name: str) -> uuid.UUID:
        return self._topics.delete_topic(name)

    def create_partitions(
        self, name: str, count: int, assignments: Sequence[Sequence[int]] | None, *, validate_only: bool = False
    ) -> None:
        self._topics.create_partitions(name, count, assignments, validate_only=validate_only)

    # -- partition leadership (ReplicationControlManager) and reassignment (ReassignmentControlManager) ------------

    def elect_leaders(self, election_type: int, wanted: Mapping[str, Iterable[int]] | None
                      ) -> dict[str, dict[int, ControllerError | None]]:
        return self._replication.elect_leaders(election_type, wanted)

    def balance_leaders(self, imbalance_percentage: int) -> int:
        return self._replication.balance_leaders(imbalance_percentage)

    def alter_partition(self, broker_id: int, topic_id: uuid.UUID, partition: int, leader_epoch: int,
                        partition_epoch: int, new_isr: list[int]) -> PartitionState:
        return self._replication.alter_partition(broker_id, topic_id, partition, leader_epoch, partition_epoch,
                                                 new_isr)

    def alter_partition_reassignments(self, wanted: Mapping[str, Mapping[int, Sequence[int] | None]],
                                      allow_replication_factor_change: bool = True
                                      ) -> dict[str, dict[int, ControllerError | None]]:
        return self._reassignment.alter_partition_reassignments(wanted, allow_replication_factor_change)

    def list_partition_reassignments(self, wanted: Mapping[str, Iterable[int]] | None
                                     ) -> dict[str, dict[int, PartitionState]]:
        return self._reassignment.list_partition_reassignments(wanted)

    # -- configs (ConfigurationControlManager) and producer ids (ProducerIdControlManager) -------------------------

    def alter_topic_configs(
        self, name: str, changes: Mapping[str, str | None], *, replace: bool, validate_only: bool = False
    ) -> None:
        self._configs.alter_topic_configs(name, changes, replace=replace, validate_only=validate_only)

    def alter_broker_configs(self, resource: str, changes: Mapping[str, str | None], *, replace: bool,
                             validate_only: bool = False) -> None:
        self._configs.alter_broker_configs(resource, changes, replace=replace, validate_only=validate_only)

    def allocate_producer_ids(self, count: int = 1000) -> range:
        return self._producer_ids.allocate_producer_ids(count)

    # -- ACLs (AclControlManager) and SCRAM credentials (ScramControlManager) --------------------------------------

    def create_acls(self, acls: Sequence[AclBinding]) -> list[ControllerError | None]:
        return self._acls.create_acls(acls)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[list[AclBinding] | ControllerError]:
        return self._acls.delete_acls(filters)

    def alter_user_scram_credentials(self, deletions: Sequence[tuple[str, int]],
                                     upsertions: Sequence[ScramUpsertion]) -> list[tuple[str, ControllerError | None]]:
        return self._scram.alter_user_scram_credentials(deletions, upsertions)
