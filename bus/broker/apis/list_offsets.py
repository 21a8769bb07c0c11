"""ListOffsets (2): earliest, latest, max-timestamp and by-timestamp offset lookups.

Each topic needs DESCRIBE (TOPIC_AUTHORIZATION_FAILED on its partitions otherwise), as Kafka checks it.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis.fetch import READ_COMMITTED
from bus.broker.context import RequestContext
from bus.broker.partition import Partition, PartitionError
from bus.security.acls import AclOperation, ResourceType

API_KEY = 2
MIN_VERSION = 1
MAX_VERSION = 8

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4


def _lookup(partition: Partition, timestamp: int, committed: bool, follower: bool) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) answering one partition's query; (-1, -1, -1) when no record qualifies.
    The epoch is the one that wrote the offset found (the current one for LATEST), as Kafka answers: a
    consumer validates its new position against it after a leader change (KIP-320). A follower (`replica_id`
    >= 0) is told the log end, which it compares with its own after OFFSET_OUT_OF_RANGE."""
    if follower:
        end = partition.log.log_end_offset
    else:
        end = partition.last_stable_offset if committed else partition.high_watermark
    if timestamp == LATEST:
        return -1, end, partition.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return -1, partition.log_start_offset, _epoch_of(partition, partition.log_start_offset)
    if timestamp == MAX_TIMESTAMP:
        if end == partition.log_start_offset:
            return -1, -1, -1
        max_ts, offset = partition.log.max_timestamp_and_offset()
        return (max_ts, offset, _epoch_of(partition, offset)) if offset < end else (-1, -1, -1)
    if timestamp < 0:
        raise PartitionError(ErrorCode.invalid_request, f"unsupported ListOffsets timestamp {timestamp}")
    found = partition.log.offset_for_timestamp(timestamp)  # (timestamp, offset), like max_timestamp_and_offset
    if found is None or found[1] >= end:
        return -1, -1, -1
    return found[0], found[1], _epoch_of(partition, found[1])


def _epoch_of(partition: Partition, offset: int) -> int:
    epoch = partition.log.epoch_for_offset(offset)
    return -1 if epoch is None else epoch


def handle(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.replicas
    committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    follower = request.replica_id >= 0
    describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                if topic.name not in describable:
                    raise PartitionError(ErrorCode.topic_authorization_failed)
                partition = replicas.get(topic.name, wanted.partition_index)
                partition.check_leader_epoch(getattr(wanted, "current_leader_epoch", -1))
                timestamp, offset, epoch = _lookup(partition, wanted.timestamp, committed, follower)
                partitions.append(ctx.make("ListOffsetsPartitionResponse", partition_index=wanted.partition_index,
                                           error_code=ErrorCode.none, timestamp=timestamp, offset=offset,
                                           leader_epoch=epoch))
            except PartitionError as exc:
                partitions.append(ctx.make("ListOffsetsPartitionResponse", partition_index=wanted.partition_index,
                                           error_code=exc.code, timestamp=-1, offset=-1, leader_epoch=-1))
        topics.append(ctx.make("ListOffsetsTopicResponse", name=topic.name, partitions=partitions))
    return ctx.make("ListOffsetsResponse", throttle_time=0, topics=topics)
