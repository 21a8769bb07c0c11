"""OffsetDelete (47): delete a group's committed offsets for partitions it no longer consumes (KIP-496).

A consumer group may not drop offsets of topics its members still subscribe to
(GROUP_SUBSCRIBED_TO_TOPIC); a non-consumer group must be Empty. Unknown partitions are refused first.

Needs DELETE on the group (GROUP_AUTHORIZATION_FAILED) and READ on each topic (TOPIC_AUTHORIZATION_FAILED on its
partitions), as Kafka checks them.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._groups import partitions_by_topic, requested_partitions
from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 47
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.DELETE, ResourceType.GROUP, request.group_id):
        return ctx.make("OffsetDeleteResponse", error_code=ErrorCode.group_authorization_failed, throttle_time=0,
                        topics=())
    found, errors = requested_partitions(ctx, request.topics, AclOperation.READ)
    wanted = [tp for tp, _ in found if tp not in errors]
    group_error, results = ctx.groups.delete_offsets(request.group_id, wanted)
    if group_error != ErrorCode.none:
        return ctx.make("OffsetDeleteResponse", error_code=group_error, throttle_time=0, topics=())
    errors.update(results)
    by_topic = partitions_by_topic(ctx, [tp for tp, _ in found], errors, "OffsetDeleteResponsePartition")
    return ctx.make("OffsetDeleteResponse", error_code=ErrorCode.none, throttle_time=0,
                    topics=[ctx.make("OffsetDeleteResponseTopic", name=n, partitions=ps) for n, ps in by_topic.items()])
