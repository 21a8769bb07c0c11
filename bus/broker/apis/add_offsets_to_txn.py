"""AddOffsetsToTxn (25): include a group's `__consumer_offsets` partition in the transaction.

Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group
(GROUP_AUTHORIZATION_FAILED), whose offsets the transaction will commit.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import answer, fenced_code
from bus.broker.context import RequestContext
from bus.coordinator.partitioning import partition_for
from bus.security.acls import AclOperation, ResourceType

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4

OFFSETS_TOPIC = "__consumer_offsets"


def handle(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return ctx.make("AddOffsetsToTxnResponse", throttle_time=0,
                        error_code=ErrorCode.transactional_id_authorization_failed)
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return ctx.make("AddOffsetsToTxnResponse", throttle_time=0, error_code=ErrorCode.group_authorization_failed)
    topic = ctx.metadata.topics.get(OFFSETS_TOPIC)
    partitions = len(topic.partitions) if topic else int(ctx.config["offsets.topic.num.partitions"])
    target = (OFFSETS_TOPIC, partition_for(request.group_id, partitions))
    return answer(
        lambda: ctx.transactions.add_partitions(request.transactional_id, request.producer_id,
                                                request.producer_epoch, [target], fenced_code(ctx.api_version, 2)),
        lambda results, _code: ctx.make("AddOffsetsToTxnResponse", throttle_time=0, error_code=results[target]))
