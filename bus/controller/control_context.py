"""The core every control manager is given (`ControlContext`): the images, the metadata log to commit to, the brokers.

Every change is written to the metadata log (`MetadataRecordLog`) and applied to `image`, the image the brokers see,
only once the log reports it committed (the `QuorumController` facade applies it). With a quorum, a commit comes later
than the append, so the active controller validates against `working`: the committed image plus what it appended and
is still waiting for (Kafka's QuorumController keeps the same uncommitted state in its timeline structures, its
SnapshotRegistry, which it hands to every control manager). Without a quorum both are the same image.

The managers share this one object rather than the facade: they read `working`, `commit` their records and ask which
brokers are live or usable, and never see each other's state.
"""

from __future__ import annotations

import copy

from bus.controller.errors import not_controller
from bus.controller.image import MetadataImage
from bus.controller.metadata_log.record_log import MetadataRecord, MetadataRecordLog


class ControlContext:
    def __init__(self, metadata_log: MetadataRecordLog, node_id: int, local_broker: set[int]) -> None:
        """`local_broker`: this node's id when it is a broker too (a controller-only node never hosts a replica)."""
        self.log = metadata_log
        self.node_id = node_id
        self.local_broker = local_broker
        self.image = MetadataImage()
        self._pending: MetadataImage | None = None  # with a quorum, while active: `image` + uncommitted records

    @property
    def active(self) -> bool:
        return self.log.active

    @property
    def working(self) -> MetadataImage:
        """The image operations validate against: committed plus this controller's pending records."""
        return self._pending if self._pending is not None else self.image

    def set_active(self, active: bool) -> None:
        # Becoming active happens once every earlier leader's records are committed and applied: the working
        # image starts as a copy of the committed one. Losing it drops what was not committed.
        self._pending = copy.deepcopy(self.image) if active else None

    def commit(self, records: list[MetadataRecord]) -> None:
        self.log.append(records)  # NOT_CONTROLLER unless active; without a quorum, committed (applied) here
        if self._pending is not None:
            for record in records:
                self._pending.apply(record)

    def check_active(self) -> None:
        if not self.active:
            raise not_controller(f"node {self.node_id} is not the active controller")

    @property
    def live_brokers(self) -> list[int]:
        """This node (when it is a broker) and every registered broker that is not fenced."""
        return sorted({*self.local_broker, *(b for b, r in self.working.brokers.items() if not r.fenced)})

    def usable_brokers(self) -> set[int]:
        """Brokers that may lead a partition or join its ISR: this node and the registered, unfenced ones, unless
        shutting down."""
        brokers = self.working.brokers
        return {b for b in self.live_brokers if b not in brokers or not brokers[b].in_controlled_shutdown}
