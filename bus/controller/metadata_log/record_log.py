"""What the controller writes its metadata records through (`MetadataRecordLog`), whichever log it is.

Two logs implement it: `MetadataLog`, a node's own file when it runs no quorum (written = committed), and
`RaftMetadataLog`, the KRaft quorum's replicated log (committed once a majority of voters has it). The
controller never applies a record to the image the brokers see before the log reports it committed, so the
same code serves both; `Broker` decides which one a node uses (`bus.broker.broker_quorum.metadata_log`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from bus.controller.image import MetadataImage, MetadataRecord


class MetadataStateMachine(Protocol):
    """What a metadata log feeds (the controller): committed records, changes of `active`, and snapshots."""

    def apply_committed(self, records: list[MetadataRecord]) -> None:
        """Apply the records of one committed entry, in log order."""
        ...

    def set_active(self, active: bool) -> None:
        """This node became (or stopped being) the active controller."""
        ...

    def load_snapshot(self, records: list[MetadataRecord]) -> None:
        """Replace the whole committed image with the one these records (a snapshot's) recreate."""
        ...

    def snapshot_image(self) -> MetadataImage:
        """A copy of the committed image that later commits leave unchanged (what a snapshot is made of)."""
        ...


class MetadataRecordLog(Protocol):
    written: int
    """Appends so far: KafkaApis compares it before and after a handler to know the request must await `sync`."""

    @property
    def active(self) -> bool:
        """Whether this node may append now (the active controller: always, without a quorum)."""
        ...

    def open(self, machine: MetadataStateMachine) -> None:
        """Start delivering to `machine`: what is stored first (its latest snapshot, then the committed records
        after it), then what commits later, and changes of `active`."""
        ...

    def append(self, records: Iterable[MetadataRecord]) -> None:
        """Append the records of one operation (committed together or not at all); raises ControllerError
        NOT_CONTROLLER when this node is not the active controller."""
        ...

    async def sync(self) -> None:
        """Return once everything appended so far is durable and committed; raise ControllerError
        NOT_CONTROLLER when it can no longer be (this node lost the leadership first)."""
        ...

    def close(self) -> None: ...
