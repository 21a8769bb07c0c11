"""AddPartitionsToTxn (24): the partitions a transaction writes to (client versions, v0-v3)."""

from __future__ import annotations

from typing import Any

from bus.broker.apis._txn import answer, fenced_code
from bus.broker.context import RequestContext

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    return answer(
        lambda: ctx.transactions.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted, fenced_code(ctx.api_version, 2)),
        lambda results, _code: _response(ctx, results))


def _response(ctx: RequestContext, results: dict[tuple[str, int], Any]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), code in results.items():
        by_topic.setdefault(topic, []).append(
            ctx.make("AddPartitionsToTxnPartitionResult", partition_index=partition, partition_error_code=code))
    return ctx.make(
        "AddPartitionsToTxnResponse",
        throttle_time=0,
        results_by_topic_v3_and_below=[
            ctx.make("AddPartitionsToTxnTopicResult", name=topic, results_by_partition=parts)
            for topic, parts in by_topic.items()
        ],
    )
