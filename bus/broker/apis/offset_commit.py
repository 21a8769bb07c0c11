"""OffsetCommit (8): store a group's consumed positions in `__consumer_offsets` before answering.

Partitions of unknown topics are refused with UNKNOWN_TOPIC_OR_PARTITION without reaching the
coordinator (Kafka checks its metadata cache first); the rest are validated against the group
(member, generation, rebalance state) and appended as one batch.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._groups import millis
from bus.broker.context import RequestContext
from bus.coordinator.group.records import OffsetValue

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9

DEFAULT_RETENTION_TIME = -1


def handle(ctx: RequestContext, request: Any) -> Any:
    groups = ctx.broker.groups
    topics = ctx.broker.controller.image.topics
    now = groups.clock()
    retention = getattr(request, "retention_time", None)  # v2-v4 only
    retention_ms = DEFAULT_RETENTION_TIME if retention is None else millis(retention)
    expire = None if retention_ms == DEFAULT_RETENTION_TIME else now + retention_ms
    errors: dict[tuple[str, int], ErrorCode] = {}
    offsets: dict[tuple[str, int], OffsetValue] = {}
    order: list[tuple[str, int]] = []
    for topic in request.topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            order.append(tp)
            if known is None or p.partition_index not in known.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            offsets[tp] = OffsetValue(
                offset=p.committed_offset,
                metadata=p.committed_metadata or "",
                commit_timestamp=now,
                leader_epoch=getattr(p, "committed_leader_epoch", -1),
                expire_timestamp=expire,
            )
    if offsets:
        errors.update(groups.commit_offsets(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch, offsets, ctx.api_version,
        ))
    by_topic: dict[str, list[Any]] = {}
    for name, index in order:
        by_topic.setdefault(name, []).append(
            ctx.make("OffsetCommitResponsePartition", partition_index=index, error_code=errors[(name, index)])
        )
    responses = [ctx.make("OffsetCommitResponseTopic", name=name, partitions=parts) for name, parts in by_topic.items()]
    return ctx.make("OffsetCommitResponse", throttle_time=0, topics=responses)
