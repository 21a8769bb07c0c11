"""TxnOffsetCommit (28): a transactional producer's consumed offsets (`send_offsets_to_transaction`).

The offsets are written to `__consumer_offsets` as part of the producer's transaction and become
the group's committed offsets only when the transaction commits: consume-transform-produce is then
exactly once.

Needs WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), READ on the group
(GROUP_AUTHORIZATION_FAILED on every partition) and READ on each topic (TOPIC_AUTHORIZATION_FAILED on its partitions,
the others still committed), as Kafka checks them.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._txn import fenced_code
from bus.broker.context import RequestContext
from bus.coordinator.group.records import OffsetValue
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclOperation, ResourceType

API_KEY = 28
MIN_VERSION = 0
MAX_VERSION = 4


def _transaction_error(ctx: RequestContext, request: Any) -> ErrorCode | None:
    """The producer must own the transactional id at this epoch, as the coordinator knows it. In a cluster the
    transaction coordinator may run on another node: then the log's producer-epoch checks are what fence."""
    if ctx.transactions.coordinator_error(request.transactional_id) is not None:
        return None
    md = ctx.transactions.txns.get(request.transactional_id)
    if md is None or md.producer_id != request.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if md.producer_epoch != request.producer_epoch:
        return fenced_code(ctx.api_version, 3)
    return None


def handle(ctx: RequestContext, request: Any) -> Any:
    wanted = {
        TopicPartition(topic.name, p.partition_index): OffsetValue(
            offset=p.committed_offset,
            metadata=p.committed_metadata or "",
            commit_timestamp=ctx.groups.clock(),
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
        )
        for topic in request.topics
        for p in topic.partitions
    }
    if not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return _response(ctx, dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed))
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return _response(ctx, dict.fromkeys(wanted, ErrorCode.group_authorization_failed))
    readable = ctx.authorized(AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.topics))
    refused = {tp: ErrorCode.topic_authorization_failed for tp in wanted if tp.topic not in readable}
    wanted = {tp: offset for tp, offset in wanted.items() if tp not in refused}
    error = _transaction_error(ctx, request)
    if error is not None:
        return _response(ctx, {**dict.fromkeys(wanted, error), **refused})
    results = ctx.groups.txn_commit_offsets(
        request.group_id, request.producer_id, request.producer_epoch, getattr(request, "member_id", ""),
        getattr(request, "group_instance_id", None), getattr(request, "generation_id", -1), wanted,
    ) if wanted else {}
    if inspect.isawaitable(results):  # the partition has followers: answered once they have the offsets
        return _later(ctx, results, refused)
    return _response(ctx, {**results, **refused})


async def _later(ctx: RequestContext, results: Awaitable[dict[TopicPartition, ErrorCode]],
                 refused: dict[TopicPartition, ErrorCode]) -> Any:
    return _response(ctx, {**await results, **refused})


def _response(ctx: RequestContext, results: dict[TopicPartition, ErrorCode]) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for (name, index), code in results.items():
        by_topic.setdefault(name, []).append(ctx.make("TxnOffsetCommitResponsePartition", partition_index=index,
                                                      error_code=code))
    return ctx.make("TxnOffsetCommitResponse", throttle_time=0, topics=[
        ctx.make("TxnOffsetCommitResponseTopic", name=name, partitions=parts) for name, parts in by_topic.items()
    ])
