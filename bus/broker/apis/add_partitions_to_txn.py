"""AddPartitionsToTxn (24): the partitions a transaction writes to (client versions, v0-v3).

Authorization (Kafka's handleAddPartitionsToTxnRequest): WRITE on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and on each topic; an internal topic is never writable
this way. When some topic is refused, nothing is added: its partitions answer TOPIC_AUTHORIZATION_FAILED, unknown
ones UNKNOWN_TOPIC_OR_PARTITION and the others OPERATION_NOT_ATTEMPTED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import answer, fenced_code
from bus.broker.context import RequestContext
from bus.coordinator.group.offset_store import OFFSETS_TOPIC
from bus.coordinator.transaction.coordinator import TOPIC as TRANSACTIONS_TOPIC
from bus.security.acls import AclOperation, ResourceType

API_KEY = 24
MIN_VERSION = 0
MAX_VERSION = 3

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTIONS_TOPIC})  # Kafka's Topic.isInternal


def _refusals(ctx: RequestContext, wanted: list[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode] | None:
    """Every partition's error when some topic may not be written, else None."""
    writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC,
                              (topic for topic, _ in wanted if topic not in INTERNAL_TOPICS))
    if all(topic in writable for topic, _ in wanted):
        return None
    topics = ctx.metadata.topics

    def error(topic: str, partition: int) -> ErrorCode:
        if topic not in writable:
            return ErrorCode.topic_authorization_failed
        known = topics.get(topic)
        if known is None or partition not in known.partitions:
            return ErrorCode.unknown_topic_or_partition
        return ErrorCode.operation_not_attempted

    return {tp: error(*tp) for tp in wanted}


def handle(ctx: RequestContext, request: Any) -> Any:
    transactional_id = request.v3_and_below_transactional_id
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return _response(ctx, dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed))
    refused = _refusals(ctx, wanted)
    if refused is not None:
        return _response(ctx, refused)
    return answer(
        lambda: ctx.transactions.add_partitions(
            transactional_id, request.v3_and_below_producer_id,
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
