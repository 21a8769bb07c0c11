"""The `__consumer_offsets` topic: created at start-up, appended to before acks, replayed on load.

Kafka keeps group state in a compacted internal topic so that a restarted (or newly elected)
coordinator rebuilds it by reading the partitions from the start: the latest record per key wins and
a tombstone (null value) deletes. Appends go through the replica manager like any produce, so the
data is in the log (and survives kill -9) before a commit is acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from bus.broker.replica_manager import PartitionError
from bus.controller.controller import ControllerError, TopicSpec
from bus.coordinator.group.records import partition_for
from bus.protocol.records import Record, build_batch, iter_records, scan_batches_prefix

if TYPE_CHECKING:
    from bus.broker.replica_manager import ReplicaManager
    from bus.controller.controller import QuorumController

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
_READ_CHUNK = 1 << 20


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
    def __init__(self, replicas: ReplicaManager, controller: QuorumController, *, num_partitions: int,
                 replication_factor: int, segment_bytes: int) -> None:
        self.replicas = replicas
        self.controller = controller
        self.configured_partitions = num_partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes

    @property
    def num_partitions(self) -> int:
        """The partition count of the topic as it exists (Kafka reads it from metadata), else the config."""
        topic = self.controller.image.topics.get(OFFSETS_TOPIC)
        return len(topic.partitions) if topic and topic.partitions else self.configured_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if absent: compacted, replicas min(configured, live brokers)."""
        if OFFSETS_TOPIC in self.controller.image.topics:
            return
        factor = max(1, min(self.replication_factor, len(self.controller.live_brokers)))
        configs = {
            "cleanup.policy": "compact",
            "compression.type": "producer",
            "segment.bytes": str(self.segment_bytes),
        }
        try:
            self.controller.create_topic(TopicSpec(OFFSETS_TOPIC, self.configured_partitions, factor, configs=configs))
        except ControllerError as exc:
            if exc.code != ErrorCode.topic_already_exists:
                raise
        log.info("created %s with %d partitions (replication factor %d)", OFFSETS_TOPIC,
                 self.configured_partitions, factor)

    def is_local(self, partition: int) -> bool:
        try:
            self.replicas.get(OFFSETS_TOPIC, partition)
        except PartitionError:
            return False
        return True

    def append(self, partition: int, records: Sequence[tuple[bytes, bytes | None]], now: int) -> None:
        """Append one batch of (key, value) records to a partition; raises StoreError on failure."""
        if not records:
            return
        batch = build_batch([Record(i, now, key, value) for i, (key, value) in enumerate(records)], base_offset=0)
        try:
            self.replicas.get(OFFSETS_TOPIC, partition).append(batch)
        except PartitionError as exc:
            raise StoreError(exc.code, f"append to {OFFSETS_TOPIC}-{partition} failed: {exc.code.name}") from None
        except Exception as exc:  # the log itself failed (closed, disk): Kafka's KAFKA_STORAGE_ERROR
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, partition)
            raise StoreError(ErrorCode.kafka_storage_error, f"append to {OFFSETS_TOPIC}-{partition}: {exc}") from exc

    def read_partition(self, partition: int) -> Iterator[StoredRecord]:
        """Every record of one partition in offset order (control batches skipped)."""
        part = self.replicas.get(OFFSETS_TOPIC, partition)
        offset, end = part.log_start_offset, part.high_watermark
        while offset < end:
            chunk = part.read(offset, _READ_CHUNK, max_offset=end, min_one_batch=True)
            batches, _size = scan_batches_prefix(chunk.data, verify_crc=False)
            if not batches:
                break
            for batch in batches:
                if batch.is_control:
                    continue
                for record in iter_records(chunk.data, batch):
                    if record.offset >= offset and record.key is not None:
                        yield StoredRecord(partition, record.offset, record.key, record.value)
            offset = batches[-1].next_offset
