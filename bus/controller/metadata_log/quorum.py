"""`RaftMetadataLog`: the controller's metadata records in the KRaft quorum's replicated log.

One raft entry holds the records of one controller operation as a JSON array (the same JSON the local
`MetadataLog` writes one line per record): Kafka writes its own binary metadata records and keeps one operation's
records in one atomic batch; one entry per operation is that atomicity here, so a topic never commits without
its partitions. LeaderChange control entries carry no metadata and are skipped.

Snapshots hold the committed image as records (`image.snapshot_records`) in the same JSON array encoding. On open
the latest snapshot is loaded into the image first and the entries after it replayed; a snapshot installed from
the leader replaces the image; `SnapshotGenerator` writes this node's own (see there for when).

This node is the active controller while it leads the quorum and an entry of its own epoch (its LeaderChange) is
committed: only then has it applied everything the previous leaders committed, the point at which Kafka's
QuorumController becomes active. An append is answered (`sync`) only once it is committed in the
epoch it was appended in; losing the leadership first gives NOT_CONTROLLER, never a false success.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from bus.controller.errors import not_controller
from bus.controller.metadata_log.entry_codec import decode_entry, encode_entry
from bus.controller.metadata_log.record_log import MetadataRecord, MetadataStateMachine
from bus.controller.snapshot_generator import SnapshotGenerator, SnapshotPolicy
from bus.raft.driver import RaftDriver, RaftStoppedError
from bus.raft.node import NotLeaderError
from bus.raft.replicated_log import LogEntry, Snapshot
from bus.raft.roles import Role

log = logging.getLogger(__name__)

# How long an operation waits for its entry to commit before it answers NOT_CONTROLLER (Kafka's controller
# times out write operations the same way; the client retries, the operation may still have committed).
COMMIT_TIMEOUT_S = 30.0


class RaftMetadataLog:
    def __init__(self, driver: RaftDriver, commit_timeout_s: float = COMMIT_TIMEOUT_S,
                 close_log: Callable[[], None] | None = None, snapshot_policy: SnapshotPolicy | None = None) -> None:
        """`close_log`: closes the raft log's files (idempotent; the driver also closes them when it stops);
        `snapshot_policy`: when this node snapshots its image (Kafka's defaults if None)."""
        self.driver = driver
        self.snapshot_policy = snapshot_policy or SnapshotPolicy()
        self.snapshots: SnapshotGenerator | None = None
        self._close_log = close_log
        self.commit_timeout_s = commit_timeout_s
        self.written = 0
        self._last: tuple[int, int] | None = None  # (offset, epoch) of this node's last append
        self._leading: int | None = None  # the epoch this node leads, until one of its entries is committed
        self._active = False
        self._machine: MetadataStateMachine | None = None

    @property
    def active(self) -> bool:
        return self._active

    def open(self, machine: MetadataStateMachine) -> None:
        """Load the latest snapshot, follow the driver, then let it process its start (a lone voter leads and
        commits its log at once; otherwise the entries after the snapshot commit as the leader is heard)."""
        self._machine = machine
        self.snapshots = SnapshotGenerator(self.driver, machine.snapshot_image, self.snapshot_policy)
        snapshot = self.driver.latest_snapshot()
        if snapshot is not None:
            self._load(snapshot)
            log.info("node %d loaded its metadata snapshot %s", self.driver.node_id, snapshot.snapshot_id)
        self.driver.role_listeners.append(self._role_changed)
        self.driver.committed_listeners.append(self._committed)
        self.driver.snapshot_listeners.append(self._installed)
        self.driver.open()

    def _installed(self, snapshot: Snapshot) -> None:
        self._load(snapshot)
        log.info("node %d installed the leader's metadata snapshot %s", self.driver.node_id, snapshot.snapshot_id)

    def _load(self, snapshot: Snapshot) -> None:
        assert self._machine is not None and self.snapshots is not None
        self._machine.load_snapshot(decode_entry(snapshot.data))
        self.snapshots.loaded(snapshot.snapshot_id.offset)

    def _role_changed(self, role: Role, epoch: int, leader_id: int | None) -> None:
        if role is Role.LEADER:
            self._leading = epoch
        else:
            self._leading = None
            self._set_active(False)

    def _committed(self, entries: tuple[LogEntry, ...]) -> None:
        assert self._machine is not None and self.snapshots is not None
        for entry in entries:
            if isinstance(entry.record, bytes):
                self._machine.apply_committed(decode_entry(entry.record))
        if entries:
            self.snapshots.applied(entries[-1].offset + 1, sum(entry.size for entry in entries))
        if (self._leading is not None and entries and entries[-1].epoch == self._leading
                and self.driver.role is Role.LEADER and self.driver.epoch == self._leading):
            self._set_active(True)

    def _set_active(self, active: bool) -> None:
        if active == self._active:
            return
        self._active = active
        log.info("node %d %s the active controller (epoch %d)", self.driver.node_id,
                 "is now" if active else "is no longer", self.driver.epoch)
        assert self._machine is not None
        self._machine.set_active(active)

    def append(self, records: Iterable[MetadataRecord]) -> None:
        batch = list(records)
        if not batch:
            return
        if not self._active:
            raise not_controller(f"node {self.driver.node_id} is not the active controller")
        epoch = self.driver.epoch
        try:
            offset = self.driver.append([encode_entry(batch)])
        except (NotLeaderError, RaftStoppedError) as exc:
            raise not_controller(str(exc)) from None
        self._last = (offset, epoch)
        self.written += 1

    async def sync(self) -> None:
        if self._last is None:
            return
        offset, epoch = self._last
        try:
            if offset >= self.driver.high_watermark:
                if self.driver.role is not Role.LEADER or self.driver.epoch != epoch:
                    raise NotLeaderError(f"node {self.driver.node_id} left epoch {epoch} before offset {offset} "
                                         "was committed")
                await self.driver.wait_committed(offset, self.commit_timeout_s)
        except (NotLeaderError, RaftStoppedError, TimeoutError) as exc:
            raise not_controller(f"the metadata change was not committed: {exc or 'timed out'}") from None
        raft_log = self.driver.node.log
        if raft_log.start_offset() <= offset < raft_log.end_offset() and raft_log.epoch_of(offset) != epoch:
            raise not_controller(f"the metadata change at offset {offset} was replaced by another leader's")

    def close(self) -> None:
        if self.snapshots is not None:
            self.snapshots.close()
        if self._close_log is not None:
            self._close_log()
