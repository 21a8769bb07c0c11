"""The `__consumer_offsets` topic: created at start-up, appended to before acks, replayed on load.

Kafka keeps group state in a compacted internal topic so that a restarted (or newly elected)
coordinator rebuilds it by reading the partitions from the start: the latest record per key wins and
a tombstone (null value) deletes. Appends go through the replica manager like any produce, so the
data is in the log (and survives kill -9) before a commit is acknowledged. The mechanics (create,
append one batch, replay) are the shared `InternalTopic`; this adds the group coordinator's view:
which partition a group lives on, and which errors a failed append turns into.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from bus.coordinator.interfaces import PartitionWriter, TopicCreator
from bus.coordinator.internal_topic import Entry, InternalTopic
from bus.coordinator.partitioning import partition_for
from bus.protocol.errors import KafkaApiError

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"


class StoreError(Exception):
    """An append that did not make it to the log; `code` is the partition's error (see `offset_error`)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class StoredRecord:
    partition: int
    offset: int
    key: bytes
    value: bytes | None


# Kafka's GroupMetadataManager turns append failures into errors group clients know how to handle;
# a record too large means a different thing for an offset commit than for a group's metadata.
_COMMON_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}
_TOO_LARGE = (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size)


def offset_error(code: ErrorCode) -> ErrorCode:
    """What an OffsetCommit answers when its append failed with `code`."""
    return ErrorCode.invalid_commit_offset_size if code in _TOO_LARGE else _COMMON_APPEND_ERRORS.get(code, code)


def group_error(code: ErrorCode) -> ErrorCode:
    """What a JoinGroup/SyncGroup answers when storing the group's metadata failed with `code`."""
    if code in _TOO_LARGE:
        return ErrorCode.unknown_server_error
    if code == ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    return _COMMON_APPEND_ERRORS.get(code, code)


class OffsetStore:
    def __init__(self, writer: PartitionWriter, topics: TopicCreator, *, num_partitions: int,
                 replication_factor: int, segment_bytes: int, commit_timeout_ms: int = 5000) -> None:
        self.topic = InternalTopic(writer, topics, OFFSETS_TOPIC, num_partitions, replication_factor,
                                   {"compression.type": "producer", "segment.bytes": str(segment_bytes)},
                                   write_timeout_ms=commit_timeout_ms)

    @property
    def num_partitions(self) -> int:
        """The partition count of the topic as it exists (Kafka reads it from metadata), else the config."""
        return self.topic.partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if absent: compacted, replicas min(configured, live brokers)."""
        self.topic.ensure()

    def is_local(self, partition: int) -> bool:
        return self.topic.is_local(partition)

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], *,
               producer_id: int = -1, producer_epoch: int = -1) -> int:
        """Append one batch of (key, value) records to a partition; raises StoreError on failure. Returns the
        offset after the batch, for `written` (-1 when there was nothing to append).

        With a producer id the batch is part of that producer's transaction (TxnOffsetCommit).
        """
        if not records:
            return -1
        try:
            return self.topic.append(partition, records, producer_id=producer_id, producer_epoch=producer_epoch)
        except KafkaApiError as exc:
            raise StoreError(exc.code, f"append to {OFFSETS_TOPIC}-{partition} failed: {exc.code.name}") from None
        except Exception as exc:  # the log itself failed (closed, disk): Kafka's KAFKA_STORAGE_ERROR
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, partition)
            raise StoreError(ErrorCode.kafka_storage_error, f"append to {OFFSETS_TOPIC}-{partition}: {exc}") from exc

    def written(self, partition: int, next_offset: int) -> Awaitable[None] | None:
        """None when the append ending at `next_offset` is committed (a single replica: at once), else an
        awaitable that raises StoreError (NOT_LEADER_OR_FOLLOWER, REQUEST_TIMED_OUT after
        `offsets.commit.timeout.ms`) if it is not."""
        pending = self.topic.written(partition, next_offset) if next_offset >= 0 else None
        return None if pending is None else self._replicated(pending, partition)

    @staticmethod
    async def _replicated(pending: Awaitable[None], partition: int) -> None:
        try:
            await pending
        except KafkaApiError as exc:
            raise StoreError(exc.code, f"append to {OFFSETS_TOPIC}-{partition}: {exc.code.name}") from None

    def read_partition(self, partition: int, open_transactions: dict[int, list[Entry]] | None = None
                       ) -> Iterator[StoredRecord]:
        """Every committed keyed record of one partition in the order it took effect; records of
        transactions still open are left in `open_transactions` (see `InternalTopic.replay`)."""
        for offset, key, value in self.topic.replay(partition, open_transactions):
            if key is not None:
                yield StoredRecord(partition, offset, key, value)
