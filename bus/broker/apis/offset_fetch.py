"""OffsetFetch (9): a group's committed offsets (-1 where nothing is committed).

v1 names partitions explicitly; v2+ may ask for all of the group's offsets (null topics) and carry a
top-level error; v8+ batch several groups. `require_stable` (v7+): a partition whose offset a
transaction has written but not yet committed answers UNSTABLE_OFFSET_COMMIT, which clients retry.

Each group needs DESCRIBE (GROUP_AUTHORIZATION_FAILED). A topic named without DESCRIBE on it has its partitions
answered TOPIC_AUTHORIZATION_FAILED; asked for all of them, only the offsets of describable topics are listed.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.coordinator.group.records import OffsetValue
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclOperation, ResourceType

API_KEY = 9
MIN_VERSION = 1
MAX_VERSION = 9

TOP_LEVEL_ERROR_VERSION = 2
BATCHED_VERSION = 8


def _fetch(ctx: RequestContext, group_id: str, topics: Any, member_id: str | None = None,
           member_epoch: int = -1, require_stable: bool = False) -> tuple[ErrorCode, list[Any]]:
    """(group error, topic responses) for one group, in the class names of the request's version."""
    batched = ctx.api_version >= BATCHED_VERSION
    topic_cls = "OffsetFetchResponseTopics" if batched else "OffsetFetchResponseTopic"
    partition_cls = "OffsetFetchResponsePartitions" if batched else "OffsetFetchResponsePartition"
    wanted = None if topics is None else [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    refused: list[TopicPartition] = []
    found: dict[TopicPartition, OffsetValue | None]
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error, found = ErrorCode.group_authorization_failed, {}
    elif wanted is None:
        error, found = ctx.groups.fetch_offsets(group_id, None, member_id, member_epoch)
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, {tp.topic for tp in found})
        found = {tp: value for tp, value in found.items() if tp.topic in describable}
    else:
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in topics))
        refused = [tp for tp in wanted if tp.topic not in describable]
        error, found = ctx.groups.fetch_offsets(group_id, [tp for tp in wanted if tp.topic in describable],
                                                member_id, member_epoch)
    if error != ErrorCode.none:
        if ctx.api_version >= TOP_LEVEL_ERROR_VERSION or wanted is None:
            return error, []
        found, refused = dict.fromkeys(wanted), []  # v1: the error goes on every partition
    by_topic: dict[str, list[Any]] = {}
    groups = ctx.groups
    for tp in refused:
        by_topic.setdefault(tp.topic, []).append(
            _partition(ctx, partition_cls, tp.partition, None, ErrorCode.topic_authorization_failed))
    for tp, value in found.items():
        name, index = tp
        code = error
        if require_stable and code == ErrorCode.none and groups.has_pending_offset(group_id, tp):
            code = ErrorCode.unstable_offset_commit
        by_topic.setdefault(name, []).append(_partition(ctx, partition_cls, index, value, code))
    return error, [ctx.make(topic_cls, name=name, partitions=parts) for name, parts in by_topic.items()]


def _partition(ctx: RequestContext, cls: str, index: int, value: OffsetValue | None, error: ErrorCode) -> Any:
    if value is None:
        return ctx.make(cls, partition_index=index, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                        error_code=error)
    return ctx.make(cls, partition_index=index, committed_offset=value.offset,
                    committed_leader_epoch=value.leader_epoch, metadata=value.metadata, error_code=error)


def handle(ctx: RequestContext, request: Any) -> Any:
    if ctx.api_version >= BATCHED_VERSION:
        groups = []
        for group in request.groups:
            error, topics = _fetch(ctx, group.group_id, group.topics, getattr(group, "member_id", None),
                                   getattr(group, "member_epoch", -1), request.require_stable)
            groups.append(ctx.make("OffsetFetchResponseGroup", group_id=group.group_id, topics=topics,
                                   error_code=error))
        return ctx.make("OffsetFetchResponse", throttle_time=0, groups=groups)
    error, topics = _fetch(ctx, request.group_id, request.topics,
                           require_stable=getattr(request, "require_stable", False))
    return ctx.make("OffsetFetchResponse", throttle_time=0, topics=topics, error_code=error)
