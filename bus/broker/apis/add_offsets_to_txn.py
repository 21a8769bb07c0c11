"""AddOffsetsToTxn (25): include a group's `__consumer_offsets` partition in the transaction."""

from __future__ import annotations

from typing import Any

from bus.broker.apis._txn import answer, fenced_code
from bus.broker.context import RequestContext
from bus.coordinator.partitioning import partition_for

API_KEY = 25
MIN_VERSION = 0
MAX_VERSION = 4

OFFSETS_TOPIC = "__consumer_offsets"


def handle(ctx: RequestContext, request: Any) -> Any:
    topic = ctx.metadata.topics.get(OFFSETS_TOPIC)
    partitions = len(topic.partitions) if topic else int(ctx.config["offsets.topic.num.partitions"])
    target = (OFFSETS_TOPIC, partition_for(request.group_id, partitions))
    return answer(
        lambda: ctx.transactions.add_partitions(request.transactional_id, request.producer_id,
                                                request.producer_epoch, [target], fenced_code(ctx.api_version, 2)),
        lambda results, _code: ctx.make("AddOffsetsToTxnResponse", throttle_time=0, error_code=results[target]))
