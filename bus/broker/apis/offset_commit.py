"""OffsetCommit (8): store a group's consumed positions in `__consumer_offsets` before answering.

Partitions of unknown topics are refused with UNKNOWN_TOPIC_OR_PARTITION without reaching the
coordinator (Kafka checks its metadata cache first); the rest are validated against the group
(member, generation, rebalance state) and appended as one batch.

Needs READ on the group (GROUP_AUTHORIZATION_FAILED on every partition) and on each topic
(TOPIC_AUTHORIZATION_FAILED on its partitions, before they are looked up).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._groups import millis, partitions_by_topic, requested_partitions
from bus.broker.context import RequestContext
from bus.coordinator.group.records import OffsetValue
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclOperation, ResourceType

API_KEY = 8
MIN_VERSION = 2
MAX_VERSION = 9

DEFAULT_RETENTION_TIME = -1


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.error_response(request, ErrorCode.group_authorization_failed)
    groups = ctx.groups
    now = groups.clock()
    retention = getattr(request, "retention_time", None)  # v2-v4 only
    retention_ms = DEFAULT_RETENTION_TIME if retention is None else millis(retention)
    expire = None if retention_ms == DEFAULT_RETENTION_TIME else now + retention_ms
    found, errors = requested_partitions(ctx, request.topics, AclOperation.READ)
    offsets = {
        tp: OffsetValue(
            offset=p.committed_offset,
            metadata=p.committed_metadata or "",
            commit_timestamp=now,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            expire_timestamp=expire,
        )
        for tp, p in found
        if tp not in errors
    }
    if offsets:
        results = groups.commit_offsets(
            request.group_id, request.member_id, getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch, offsets, ctx.api_version,
        )
        if inspect.isawaitable(results):  # the partition has followers: answered once they have the commit
            return _later(ctx, found, errors, results)
        errors.update(results)
    return _response(ctx, found, errors)


async def _later(ctx: RequestContext, found: list[tuple[TopicPartition, Any]], errors: dict[TopicPartition, Any],
                 results: Awaitable[dict[TopicPartition, Any]]) -> Any:
    errors.update(await results)
    return _response(ctx, found, errors)


def _response(ctx: RequestContext, found: list[tuple[TopicPartition, Any]], errors: dict[TopicPartition, Any]) -> Any:
    by_topic = partitions_by_topic(ctx, [tp for tp, _ in found], errors, "OffsetCommitResponsePartition")
    responses = [ctx.make("OffsetCommitResponseTopic", name=name, partitions=parts) for name, parts in by_topic.items()]
    return ctx.make("OffsetCommitResponse", throttle_time=0, topics=responses)
