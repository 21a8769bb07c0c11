"""OffsetDelete (47): delete a group's committed offsets for partitions it no longer consumes (KIP-496).

A consumer group may not drop offsets of topics its members still subscribe to
(GROUP_SUBSCRIBED_TO_TOPIC); a non-consumer group must be Empty. Unknown partitions are refused first.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    topics = ctx.broker.controller.image.topics
    errors: dict[tuple[str, int], ErrorCode] = {}
    wanted: list[tuple[str, int]] = []
    order: list[tuple[str, int]] = []
    for topic in request.topics:
        known = topics.get(topic.name)
        for p in topic.partitions:
            tp = (topic.name, p.partition_index)
            order.append(tp)
            if known is None or p.partition_index not in known.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append(tp)
    group_error, results = ctx.broker.groups.delete_offsets(request.group_id, wanted)
    if group_error != ErrorCode.none:
        return ctx.make("OffsetDeleteResponse", error_code=group_error, throttle_time=0, topics=())
    errors.update(results)
    by_topic: dict[str, list[Any]] = {}
    for name, index in dict.fromkeys(order):
        by_topic.setdefault(name, []).append(
            ctx.make("OffsetDeleteResponsePartition", partition_index=index, error_code=errors[(name, index)])
        )
    return ctx.make("OffsetDeleteResponse", error_code=ErrorCode.none, throttle_time=0,
                    topics=[ctx.make("OffsetDeleteResponseTopic", name=n, partitions=ps) for n, ps in by_topic.items()])
