"""DeleteRecords (21): advance partitions' log start offset (the "low watermark").

Records below the new start become unreadable at once; whole segments below it are removed by the
log. Only committed data can be deleted (the offset may not pass the high watermark), and only on
topics whose cleanup policy includes `delete`: on a compacted-only topic the deletion would remove
the latest value of keys that compaction promises to keep. Each topic needs DELETE (TOPIC_AUTHORIZATION_FAILED on
its partitions otherwise).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.broker.partition import Partition, PartitionError
from bus.security.acls import AclOperation, ResourceType

API_KEY = 21
MIN_VERSION = 0
MAX_VERSION = 2

HIGH_WATERMARK = -1  # the request's "delete everything committed so far"


def _delete_before(partition: Partition, requested: int) -> int:
    """Delete records below `requested` and return the partition's new low watermark."""
    high_watermark = partition.high_watermark
    offset = high_watermark if requested == HIGH_WATERMARK else requested
    if offset < 0 or offset > high_watermark:
        raise PartitionError(
            ErrorCode.offset_out_of_range,
            f"Cannot delete records of partition {partition.topic}-{partition.index} before offset {requested}: "
            f"it is not between 0 and the high watermark {high_watermark}",
        )
    if not partition.config.delete:
        raise PartitionError(
            ErrorCode.policy_violation,
            f"Records of partition {partition.topic}-{partition.index} can not be deleted due to the "
            "configured policy",
        )
    partition.log.delete_records_before(offset)
    return partition.log_start_offset


def handle(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.replicas
    deletable = ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in request.topics))
    topics = []
    for topic in request.topics:
        partitions = []
        for wanted in topic.partitions:
            try:
                if topic.name not in deletable:
                    raise PartitionError(ErrorCode.topic_authorization_failed)
                low_watermark = _delete_before(replicas.get(topic.name, wanted.partition_index), wanted.offset)
                code = ErrorCode.none
            except PartitionError as exc:
                low_watermark, code = -1, exc.code
            partitions.append(ctx.make("DeleteRecordsPartitionResult", partition_index=wanted.partition_index,
                                       low_watermark=low_watermark, error_code=code))
        topics.append(ctx.make("DeleteRecordsTopicResult", name=topic.name, partitions=partitions))
    return ctx.make("DeleteRecordsResponse", throttle_time=0, topics=topics)
