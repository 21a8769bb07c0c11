"""The group coordinator (Kafka's GroupCoordinator service): the classic protocol, the committed offsets of every
group, and the `__consumer_offsets` partitions this node serves.

It is the classic protocol (`classic/`, join, sync, heartbeat, leave) plus the checks in front of offsets (kept
apart, by `OffsetMetadataManager`, as Kafka keeps them), and the admin requests across both kinds of group
(ListGroups, DescribeGroups, DeleteGroups), answered with the shared `GroupNamespace`; KIP-848 groups have their
own protocol (`consumer/`) over the same namespace.

Group metadata and offsets are written to `__consumer_offsets` before the answer; when the partition has
followers, the answer (and the in-memory change) waits until its high watermark covers the write. The
coordinator serves the groups of the partitions this node leads: it loads a partition when it becomes its
leader (`loader.py`) and drops its groups when it stops (`loads`, Kafka's onElection / onResignation).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from bus.coordinator.group import records as rec
from bus.coordinator.group.classic.group import ClassicGroup, GroupState, expired_by_commit_time, now_ms
from bus.coordinator.group.classic.protocol import ClassicGroupProtocol
from bus.coordinator.group.config import GroupConfig
from bus.coordinator.group.loader import ReplayedPartition, restore_group
from bus.coordinator.group.namespace import GroupListing, GroupNamespace
from bus.coordinator.group.offset_store import OFFSETS_TOPIC, StoreError, offset_error
from bus.coordinator.group.offsets import CommitResults, OffsetMetadataManager
from bus.coordinator.partition_loads import PartitionLoads
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)


class Store(Protocol):
    """What the coordinator needs of `__consumer_offsets` (OffsetStore, or a fake in unit tests)."""

    @property
    def num_partitions(self) -> int: ...

    def partition_for(self, group_id: str) -> int: ...

    def ensure_topic(self) -> None: ...

    def is_local(self, partition: int) -> bool: ...

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int: ...

    def written(self, partition: int, next_offset: int) -> Awaitable[None] | None: ...

    def read_partition(self, partition: int, open_transactions: dict[int, list[Any]] | None = None) -> Any: ...


class GroupCoordinator(ClassicGroupProtocol):
    def __init__(self, namespace: GroupNamespace, store: Store, config: GroupConfig, *,
                 clock: Callable[[], int] = now_ms) -> None:
        """`namespace`: the groups of both protocols, shared with the KIP-848 coordinator."""
        super().__init__(namespace, config, OffsetMetadataManager(store, config.offset_metadata_max_bytes),
                         clock=clock)
        self.store = store
        self.active = False
        self.loads = PartitionLoads(OFFSETS_TOPIC, self._load_partition, self._unload_partition)
        self._expiry_task: asyncio.Task[None] | None = None
        self.offsets.serves = lambda group_id: self.loads.error(self.store.partition_for(group_id)) is None

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create `__consumer_offsets` if needed and load every partition led here before serving; from then
        on partitions load and unload as leadership moves (`loads.on_leadership`)."""
        self.store.ensure_topic()
        self.active = True
        await self.loads.load_all(p for p in range(self.store.num_partitions) if self.store.is_local(p))
        self._expiry_task = asyncio.create_task(self._expire_forever())

    async def stop(self) -> None:
        self.active = False
        self.loads.close()
        if self._expiry_task:
            self._expiry_task.cancel()
        self._stop_timers()

    def _load_partition(self, partition: int) -> Iterator[None]:
        """Replay one `__consumer_offsets` partition (the latest record per key wins) and install its groups;
        yields every `loader.LOAD_CHUNK` records so an election's load does not hold up the loop."""
        replayed = ReplayedPartition(partition)
        yield from replayed.replay(self.store.read_partition(partition, replayed.open_transactions))
        self._unload_partition(partition)  # a reload (resigned and elected again) starts from the log alone
        for producer_id, group_id, tp, pending in replayed.pending_offsets():
            self.offsets.load_pending(producer_id, group_id, tp, pending)
        loaded = 0
        for group_id, value, group_offsets in replayed.groups(self.store.partition_for):
            self._adopt(restore_group(group_id, value, self.clock))
            self.offsets.load(group_id, group_offsets)
            loaded += 1
        if replayed.count:
            log.info("loaded %d groups from %d records of __consumer_offsets-%d", loaded, replayed.count, partition)

    def _unload_partition(self, partition: int) -> None:
        """This node no longer coordinates the partition's groups: members waiting on a join or sync are told
        NOT_COORDINATOR (they rediscover the coordinator), timers stop, groups and offsets are forgotten."""
        for group_id in [g for g in self.groups if self.store.partition_for(g) == partition]:
            self._abandon(self.groups[group_id])
        self.offsets.unload(g for g in self.offsets.group_ids() if self.store.partition_for(g) == partition)

    # -- shared checks ---------------------------------------------------------------------------

    def group_status_error(self, group_id: str | None, *, allow_empty: bool = False) -> ErrorCode | None:
        """Kafka's validateGroupStatus: the id is valid and this broker coordinates it, loaded."""
        if group_id is None or (not allow_empty and not group_id):
            return ErrorCode.invalid_group_id
        if not self.active:
            return ErrorCode.coordinator_not_available
        return self.loads.error(self.store.partition_for(group_id))

    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """FindCoordinator's answer for a group key: None if this broker is its coordinator."""
        if not self.active or self.loads.error(self.store.partition_for(group_id)) is not None:
            return ErrorCode.coordinator_not_available
        return None

    # -- offsets ---------------------------------------------------------------------------------

    def commit_offsets(self, group_id: str, member_id: str, instance_id: str | None, generation_id: int,
                       offsets: Mapping[TopicPartition, rec.OffsetValue],
                       api_version: int) -> CommitResults:
        def everywhere(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return dict.fromkeys(offsets, code)

        error = self.group_status_error(group_id, allow_empty=True)
        if error is not None:
            return everywhere(error)
        if self.namespace.is_consumer_group(group_id):
            # A KIP-848 member commits with its member epoch; its group validates it, we store.
            error = self.namespace.validate_member(group_id, member_id, generation_id)
            if error is not None:
                return everywhere(error)
            return self.offsets.commit(group_id, offsets)
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                # v9+ says so plainly; older versions keep the ILLEGAL_GENERATION clients expect.
                return everywhere(ErrorCode.group_id_not_found if api_version >= 9 else ErrorCode.illegal_generation)
            # A "simple" group: offsets stored for a consumer that assigns partitions itself.
            group = self.groups[group_id] = ClassicGroup(group_id, clock=self.clock)
        error = group.validate_offset_commit(member_id, instance_id, generation_id)
        if error is not None:
            return everywhere(error)
        if generation_id >= 0 and member_id in group.members:
            member = group.members[member_id]
            self._reschedule_heartbeat(group, member, member.session_timeout_ms)
        return self.offsets.commit(group_id, offsets)

    # -- transactional offsets (TxnOffsetCommit) ----------------------------------------------------

    def txn_commit_offsets(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                           instance_id: str | None, generation_id: int,
                           offsets: Mapping[TopicPartition, rec.OffsetValue]) -> CommitResults:
        """Write offsets as part of a transaction: appended now (transactional), visible at the commit marker."""
        error = self.group_status_error(group_id, allow_empty=True)
        group = self.groups.get(group_id)
        if error is None and generation_id >= 0 and group is not None:
            # KIP-447: a consumer-group-aware producer is fenced like a member committing its offsets.
            error = group.validate_offset_commit(member_id, instance_id, generation_id)
        if error is not None:
            return dict.fromkeys(offsets, error)
        return self.offsets.commit_transactional(group_id, producer_id, producer_epoch, offsets)

    def complete_transaction(self, producer_id: int, commit: bool) -> None:
        """The transaction coordinator wrote this producer's marker: its offsets become committed or vanish.

        A group id that only has offsets becomes an Empty (simple) group, as on replay.
        """
        for group_id in self.offsets.complete_transaction(producer_id, commit):
            if group_id not in self.groups and not self.namespace.is_consumer_group(group_id):
                self.groups[group_id] = ClassicGroup(group_id, clock=self.clock)

    def has_pending_offset(self, group_id: str, tp: TopicPartition) -> bool:
        return self.offsets.has_pending(group_id, tp)

    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartition] | None, member_id: str | None = None,
                      member_epoch: int = -1) -> tuple[ErrorCode, dict[TopicPartition, rec.OffsetValue | None]]:
        """Committed offsets (None where there is none); all of the group's when `partitions` is None.

        Offsets are answered regardless of group state: a group may use Kafka only to store offsets.
        Commits are written before they are acknowledged, so there is never a pending (unstable)
        offset here and `require_stable` needs no waiting.
        """
        error = self.group_status_error(group_id, allow_empty=True)
        if error is None and member_id and self.namespace.is_consumer_group(group_id):
            # OffsetFetch v9+ from a KIP-848 member carries its epoch
            error = self.namespace.validate_member(group_id, member_id, member_epoch)
        if error is not None:
            return error, {}
        return ErrorCode.none, self.offsets.fetch(group_id, partitions)

    def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartition]
                       ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        error = self.group_status_error(group_id, allow_empty=True)
        if error is not None:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.is_(GroupState.DEAD):
            return ErrorCode.group_id_not_found, {}
        if not group.is_(GroupState.EMPTY) and not group.is_consumer_group:
            return ErrorCode.non_empty_group, {}
        results = {tp: ErrorCode.group_subscribed_to_topic if group.is_subscribed_to(tp[0]) else ErrorCode.none
                   for tp in partitions}
        try:
            self.offsets.delete(group_id, [tp for tp, code in results.items() if code == ErrorCode.none])
        except StoreError as exc:
            return offset_error(exc.code), {}
        return ErrorCode.none, results

    # -- admin -----------------------------------------------------------------------------------

    def list_groups(self, states: set[str], types: set[str]) -> tuple[ErrorCode, list[GroupListing]]:
        """Classic and KIP-848 groups whose state and type match the filters (case-insensitively)."""
        if not self.active:
            return ErrorCode.coordinator_not_available, []
        error = ErrorCode.coordinator_load_in_progress if self.loads.loading else ErrorCode.none
        return error, self.namespace.list_groups(states, types)

    def describe_group(self, group_id: str) -> tuple[ErrorCode, ClassicGroup | None]:
        error = self.group_status_error(group_id, allow_empty=True)
        if error is not None:
            return error, None
        return ErrorCode.none, self.namespace.describable_classic_group(group_id)

    def delete_groups(self, group_ids: Sequence[str]) -> dict[str, ErrorCode]:
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            error = self.group_status_error(group_id, allow_empty=True)
            group = self.groups.get(group_id)
            if error is None and group_id in self.namespace.consumer:
                error = self.namespace.delete_consumer_group(group_id)  # NON_EMPTY_GROUP while it has members
                if error == ErrorCode.none:
                    error = self._delete_offsets_of(group_id)  # its committed offsets go too
                results[group_id] = error
                continue
            if error is None and (group is None or group.is_(GroupState.DEAD)):
                error = ErrorCode.group_id_not_found
            elif error is None and not group.is_(GroupState.EMPTY):  # type: ignore[union-attr]
                error = ErrorCode.non_empty_group
            if error is None:
                assert group is not None
                error = self._delete_group(group)
            results[group_id] = error
        return results

    def _delete_group(self, group: ClassicGroup) -> ErrorCode:
        """Tombstone the group and all its offsets, then forget it (Dead)."""
        error = self._delete_offsets_of(group.group_id, [(rec.encode_group_key(group.group_id), None)])
        if error == ErrorCode.none:
            self._forget(group)
            log.info("deleted group %s", group.group_id)
        return error

    def _delete_offsets_of(self, group_id: str, extra: list[tuple[bytes, bytes | None]] | None = None) -> ErrorCode:
        try:
            self.offsets.delete_group(group_id, extra or [])
        except StoreError as exc:
            return offset_error(exc.code)
        return ErrorCode.none

    # -- deleted topics --------------------------------------------------------------------------

    def on_metadata(self, records: Sequence[Mapping[str, Any]], live_topics: set[str]) -> None:
        """Controller publisher: when topics are deleted, their committed offsets go too (as in Kafka).

        A topic later re-created under the same name is a new topic and must not inherit old offsets.
        """
        if not self.active or not any(r.get("type") == "remove_topic" for r in records):
            return
        removed = self.offsets.remove_topics(live_topics)
        if removed:
            log.info("removed %d offsets of deleted topics", removed)

    # -- offset expiry ---------------------------------------------------------------------------

    async def _expire_forever(self) -> None:
        interval = self.config.offsets_retention_check_interval_ms / 1000.0
        while True:
            await asyncio.sleep(interval)
            try:
                self.expire_offsets()
            except Exception:
                log.exception("offset expiration pass failed")

    def expire_offsets(self) -> int:
        """Kafka's cleanupGroupMetadata: drop expired offsets; Empty groups left with none go Dead."""
        now = self.clock()
        retention = self.config.offsets_retention_ms
        removed = 0
        for group_id in sorted({*self.offsets.group_ids(), *self.groups}):
            if self.namespace.is_consumer_group(group_id):
                continue  # a live KIP-848 group still consumes what it committed
            group = self.groups.get(group_id)
            stored = self.offsets.of(group_id)
            expired = group.expired_offsets(stored, now, retention) if group else expired_by_commit_time(
                stored, now, retention)
            dies = group is not None and group.is_(GroupState.EMPTY) and len(stored) == len(expired)
            extra = [(rec.encode_group_key(group_id), None)] if dies and group and group.generation_id > 0 else []
            try:
                self.offsets.delete(group_id, expired, extra)
            except StoreError as exc:
                log.warning("could not expire offsets of group %s: %s", group_id, exc)
                continue
            removed += len(expired)
            if dies and group is not None:
                self._forget(group)
        if removed:
            log.info("removed %d expired offsets", removed)
        return removed
