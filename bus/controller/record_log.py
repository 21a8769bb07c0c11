"""What the controller writes its metadata records through (`MetadataRecordLog`), whichever log it is.

Two logs implement it: `MetadataLog`, a node's own file when it runs no quorum (written = committed), and
`RaftMetadataLog`, the KRaft quorum's replicated log (committed once a majority of voters has it). The
controller never applies a record to the image the brokers see before the log reports it committed, so the
same code serves both; `Broker` decides which one a node uses (`bus.raft.broker_quorum.metadata_log`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

MetadataRecord = dict[str, Any]


class MetadataRecordLog(Protocol):
    written: int
    """Appends so far: KafkaApis compares it before and after a handler to know the request must await `sync`."""

    @property
    def active(self) -> bool:
        """Whether this node may append now (the active controller: always, without a quorum)."""
        ...

    def open(self, on_committed: Callable[[list[MetadataRecord]], None],
             on_active: Callable[[bool], None]) -> None:
        """Start delivering: committed records in log order to `on_committed` (what is stored first), and
        changes of `active` to `on_active`."""
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
