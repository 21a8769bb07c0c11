"""DescribeTransactions (65): state, timeout, producer and partitions of each transactional id.

Each id needs DESCRIBE (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), and only the topics the principal may DESCRIBE are
listed among its partitions, as Kafka answers.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.security.acls import AclOperation, ResourceType

API_KEY = 65
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: RequestContext, request: Any) -> Any:
    described = []
    for txn_id in request.transactional_ids:
        if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            described.append(ctx.make("TransactionState", error_code=ErrorCode.transactional_id_authorization_failed,
                                      transactional_id=txn_id, transaction_state="", transaction_start_time=0,
                                      topics=()))
            continue
        md = ctx.transactions.txns.get(txn_id)
        if md is None:
            described.append(ctx.make("TransactionState", error_code=ErrorCode.transactional_id_not_found,
                                      transactional_id=txn_id, transaction_state="", producer_id=-1,
                                      producer_epoch=-1, transaction_start_time=-1, topics=()))
            continue
        by_topic: dict[str, list[int]] = {}
        describable = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, {topic for topic, _ in md.partitions})
        for topic, partition in sorted(md.partitions):
            if topic in describable:
                by_topic.setdefault(topic, []).append(partition)
        described.append(ctx.make(
            "TransactionState", error_code=ErrorCode.none, transactional_id=txn_id,
            transaction_state=md.state.label, transaction_timeout=md.timeout_ms,
            transaction_start_time=md.start_ms, producer_id=md.producer_id, producer_epoch=md.producer_epoch,
            topics=[ctx.make("TopicData", topic=t, partitions=p) for t, p in by_topic.items()],
        ))
    return ctx.make("DescribeTransactionsResponse", throttle_time=0, transaction_states=described)
