"""Committed offsets of every group, classic or KIP-848 (Kafka's OffsetMetadataManager).

Kafka keeps offsets apart from group membership: a group id's offsets outlive its members, belong to
either kind of group, and are written (and tombstoned) in `__consumer_offsets` under their own keys.
The group coordinator validates who may commit (generation, member epoch) and then calls in here;
this module owns the offsets, the transactional ones still waiting for their marker, and the records
that change them. Every change is appended before it becomes visible.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from bus.coordinator.group import records as rec
from bus.coordinator.group.offset_store import StoreError, offset_error
from bus.protocol.topic_partition import TopicPartition

log = logging.getLogger(__name__)

Offsets = dict[TopicPartition, rec.OffsetValue]
Records = list[tuple[bytes, bytes | None]]
CommitResults = dict[TopicPartition, ErrorCode] | Awaitable[dict[TopicPartition, ErrorCode]]
"""A commit's per-partition results, or (the partition has followers) an awaitable of them."""


class OffsetLog(Protocol):
    """The part of `__consumer_offsets` offsets are written to (OffsetStore, or a fake in unit tests)."""

    def partition_for(self, group_id: str) -> int: ...

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int: ...

    def written(self, partition: int, next_offset: int) -> Awaitable[None] | None: ...


def tombstones(group_id: str, partitions: Iterable[TopicPartition]) -> Records:
    return [(rec.encode_offset_key(group_id, topic, partition), None) for topic, partition in partitions]


class OffsetMetadataManager:
    def __init__(self, log_: OffsetLog, metadata_max_bytes: int) -> None:
        self.log = log_
        self.metadata_max_bytes = metadata_max_bytes
        self._offsets: dict[str, Offsets] = {}
        # TxnOffsetCommit offsets written but not yet committed: producer id -> group -> partition -> offset.
        self._pending: dict[int, dict[str, Offsets]] = {}
        # Whether this node still coordinates a group: a commit whose replication finishes after its partition
        # moved away must not leave offsets behind here (the coordinator sets it; its partitions come and go).
        self.serves: Callable[[str], bool] = lambda _group_id: True

    # -- reads -----------------------------------------------------------------------------------

    def of(self, group_id: str) -> Mapping[TopicPartition, rec.OffsetValue]:
        return self._offsets.get(group_id, {})

    def group_ids(self) -> list[str]:
        return list(self._offsets)

    def fetch(self, group_id: str, partitions: Sequence[TopicPartition] | None
              ) -> dict[TopicPartition, rec.OffsetValue | None]:
        """Committed offsets (None where there is none); all of the group's, sorted, when `partitions` is None."""
        stored = self.of(group_id)
        if partitions is None:
            return dict(sorted(stored.items()))
        return {tp: stored.get(tp) for tp in partitions}

    def has_pending(self, group_id: str, tp: TopicPartition) -> bool:
        """A transactional commit for this partition awaits its marker (OffsetFetch require_stable)."""
        return any(tp in groups.get(group_id, {}) for groups in self._pending.values())

    # -- loading ---------------------------------------------------------------------------------

    def load(self, group_id: str, offsets: Offsets) -> None:
        """Offsets replayed from the log (latest record per key already applied)."""
        if offsets:
            self._offsets.setdefault(group_id, {}).update(offsets)

    def load_pending(self, producer_id: int, group_id: str, tp: TopicPartition, value: rec.OffsetValue) -> None:
        """A transactional offset whose transaction was still open at the end of the log."""
        self._pending.setdefault(producer_id, {}).setdefault(group_id, {})[tp] = value

    # -- writes ----------------------------------------------------------------------------------

    def _split_oversized(self, offsets: Mapping[TopicPartition, rec.OffsetValue]
                         ) -> tuple[dict[TopicPartition, ErrorCode], Offsets]:
        """Per-partition results (metadata over offset.metadata.max.bytes refused) and the offsets to store."""
        results = {tp: ErrorCode.offset_metadata_too_large if len(v.metadata) > self.metadata_max_bytes
                   else ErrorCode.none for tp, v in offsets.items()}
        return results, {tp: v for tp, v in offsets.items() if results[tp] == ErrorCode.none}

    @staticmethod
    def _records(group_id: str, offsets: Mapping[TopicPartition, rec.OffsetValue]) -> Records:
        return [(rec.encode_offset_key(group_id, topic, partition), rec.encode_offset_value(v))
                for (topic, partition), v in offsets.items()]

    def append(self, group_id: str, records: Records) -> int:
        """Append records of this group's partition (offsets or, for the group coordinator, its metadata);
        returns the offset after them (-1 for none), for `written`."""
        return self.log.append(self.log.partition_for(group_id), records) if records else -1

    def written(self, group_id: str, next_offset: int) -> Awaitable[None] | None:
        """None once this group's append ending at `next_offset` is committed, else an awaitable of that
        (raising StoreError if it never is)."""
        return self.log.written(self.log.partition_for(group_id), next_offset)

    def unload(self, group_ids: Iterable[str]) -> None:
        """Forget these groups' offsets, committed and pending: their partition is coordinated elsewhere now."""
        gone = set(group_ids)
        for group_id in gone:
            self._offsets.pop(group_id, None)
        for producer_id, groups in list(self._pending.items()):
            for group_id in gone & groups.keys():
                del groups[group_id]
            if not groups:
                del self._pending[producer_id]

    def commit(self, group_id: str, offsets: Mapping[TopicPartition, rec.OffsetValue]) -> CommitResults:
        """Append the commit (oversized metadata refused per partition), then make it visible: at once for a
        single replica, else an awaitable of the results once the followers have it."""
        results, valid = self._split_oversized(offsets)
        ordered = {tp: results[tp] for tp in offsets}
        if not valid:
            return ordered
        try:
            pending = self.written(group_id, self.append(group_id, self._records(group_id, valid)))
        except StoreError as exc:
            return {**ordered, **dict.fromkeys(valid, offset_error(exc.code))}
        if pending is not None:  # followers still have to copy it: answer (and show it) once they have
            return self._when_written(pending, ordered, valid,
                                      lambda: self._offsets.setdefault(group_id, {}).update(valid), group_id)
        self._offsets.setdefault(group_id, {}).update(valid)
        return ordered

    async def _when_written(self, pending: Awaitable[None], results: dict[TopicPartition, ErrorCode],
                            valid: Offsets, apply: Callable[[], None], group_id: str
                            ) -> dict[TopicPartition, ErrorCode]:
        """The answer of a commit whose append waits for the high watermark; applied only once it is committed
        (and only while this node still coordinates the group)."""
        try:
            await pending
        except StoreError as exc:
            return {**results, **dict.fromkeys(valid, offset_error(exc.code))}
        if not self.serves(group_id):
            return {**results, **dict.fromkeys(valid, ErrorCode.not_coordinator)}
        apply()
        return results

    def commit_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                             offsets: Mapping[TopicPartition, rec.OffsetValue]) -> CommitResults:
        """Write offsets as part of a transaction: appended now, visible at the commit marker."""
        results, valid = self._split_oversized(offsets)
        if not valid:
            return results
        partition = self.log.partition_for(group_id)
        try:
            end = self.log.append(partition, self._records(group_id, valid), producer_id=producer_id,
                                  producer_epoch=producer_epoch)
            pending = self.log.written(partition, end)
        except StoreError as exc:
            return {**results, **dict.fromkeys(valid, offset_error(exc.code))}

        def apply() -> None:
            self._pending.setdefault(producer_id, {}).setdefault(group_id, {}).update(valid)

        if pending is not None:
            return self._when_written(pending, results, valid, apply, group_id)
        apply()
        return results

    def complete_transaction(self, producer_id: int, commit: bool) -> list[str]:
        """The producer's marker is written: its offsets become committed or vanish; returns the groups touched."""
        groups = self._pending.pop(producer_id, {})
        if commit:
            for group_id, offsets in groups.items():
                self._offsets.setdefault(group_id, {}).update(offsets)
        return list(groups) if commit else []

    def delete(self, group_id: str, partitions: Iterable[TopicPartition],
               extra: Sequence[tuple[bytes, bytes | None]] = ()) -> None:
        """Tombstone these offsets (plus `extra` records of the group, appended in the same batch), then
        drop them; raises StoreError, leaving everything as it was, if the append fails."""
        gone = [tp for tp in partitions if tp in self.of(group_id)]
        self.append(group_id, tombstones(group_id, gone) + list(extra))
        self._drop(group_id, gone)

    def delete_group(self, group_id: str, extra: Sequence[tuple[bytes, bytes | None]] = ()) -> None:
        """Every offset of the group (for DeleteGroups and expiry of a whole group)."""
        self.delete(group_id, list(self.of(group_id)), extra)

    def _drop(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        stored = self._offsets.get(group_id)
        if stored is None:
            return
        for tp in partitions:
            stored.pop(tp, None)
        if not stored:
            del self._offsets[group_id]

    def remove_topics(self, live_topics: set[str]) -> int:
        """Offsets of deleted topics go too (a topic re-created under the same name starts afresh)."""
        removed = 0
        for group_id in self.group_ids():
            gone = [tp for tp in self.of(group_id) if tp[0] not in live_topics]
            if not gone:
                continue
            try:
                self.delete(group_id, gone)
            except StoreError as exc:
                log.warning("could not remove offsets of deleted topics from group %s: %s", group_id, exc)
                continue
            removed += len(gone)
        return removed
