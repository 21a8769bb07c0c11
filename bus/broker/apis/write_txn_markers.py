"""WriteTxnMarkers (27): a transaction coordinator on another node has its commit/abort markers written into the
partitions this node leads (Kafka's TransactionMarkerChannelManager sends them to each partition's leader).

As in Kafka, a marker is appended with acks=-1: a partition's answer waits until its high watermark covers the
marker (REQUEST_TIMED_OUT after `request.timeout.ms`), so a marker the coordinator saw acknowledged survives
this leader's death. A marker written into `__consumer_offsets` completes the producer's transactional offsets
in this node's group coordinator (Kafka's onTransactionCompleted).

Only brokers send it: it needs ALTER or CLUSTER_ACTION on the cluster (CLUSTER_AUTHORIZATION_FAILED on every
partition otherwise).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.coordinator.group.offset_store import OFFSETS_TOPIC
from bus.protocol.errors import KafkaApiError
from bus.security.acls import AclOperation

API_KEY = 27
MIN_VERSION = 1  # kio has no v0 schema; Kafka 4 dropped v0 too (KIP-896)
MAX_VERSION = 1

Outcome = ErrorCode | Awaitable[ErrorCode]
Outcomes = list[list[tuple[str, list[tuple[int, Outcome]]]]]  # per marker, per topic, per partition


def handle(ctx: RequestContext, request: Any) -> Any:
    if not (ctx.authorize_cluster(AclOperation.ALTER, log_if_denied=False)
            or ctx.authorize_cluster(AclOperation.CLUSTER_ACTION)):
        refused = _each(request, lambda _marker, _topic, _index: ErrorCode.cluster_authorization_failed)
        return _response(ctx, request, refused)  # type: ignore[arg-type]
    outcomes = _each(request, lambda marker, topic, index: _write(ctx, marker, topic, index))
    if not any(inspect.isawaitable(code) for marker in outcomes for _name, parts in marker for _i, code in parts):
        return _response(ctx, request, outcomes)  # type: ignore[arg-type]
    return _later(ctx, request, outcomes)


def _each(request: Any, outcome: Callable[[Any, str, int], Outcome]) -> Outcomes:
    """`outcome(marker, topic, partition)` of every partition of every marker, in the request's shape."""
    return [[(topic.name, [(index, outcome(marker, topic.name, index)) for index in topic.partition_indexes])
             for topic in marker.topics] for marker in request.markers]


def _write(ctx: RequestContext, marker: Any, topic: str, index: int) -> Outcome:
    try:
        partition = ctx.replicas.get(topic, index)
        offset = partition.append_marker(marker.producer_id, marker.producer_epoch, marker.transaction_result,
                                         marker.coordinator_epoch)
    except KafkaApiError as exc:
        return exc.code
    replicated = partition.committed(offset + 1)
    if replicated is None:
        _completed(ctx, topic, marker)
        return ErrorCode.none
    return _replicated(ctx, topic, marker, replicated)


async def _replicated(ctx: RequestContext, topic: str, marker: Any, replicated: asyncio.Future[None]) -> ErrorCode:
    try:
        async with asyncio.timeout(int(ctx.config["request.timeout.ms"]) / 1000):
            await replicated
    except TimeoutError:
        return ErrorCode.request_timed_out
    except KafkaApiError as exc:
        return exc.code
    _completed(ctx, topic, marker)
    return ErrorCode.none


def _completed(ctx: RequestContext, topic: str, marker: Any) -> None:
    if topic == OFFSETS_TOPIC:
        ctx.groups.complete_transaction(marker.producer_id, marker.transaction_result)


async def _later(ctx: RequestContext, request: Any, outcomes: list[list[tuple[str, list[tuple[int, Outcome]]]]]
                 ) -> Any:
    """Every partition's answer once all of them are replicated (they wait side by side)."""
    waiting = [code for marker in outcomes for _name, parts in marker for _index, code in parts
               if inspect.isawaitable(code)]
    codes = iter(await asyncio.gather(*waiting))
    settled = [[(name, [(index, next(codes) if inspect.isawaitable(code) else code) for index, code in parts])
                for name, parts in marker] for marker in outcomes]
    return _response(ctx, request, settled)


def _response(ctx: RequestContext, request: Any, outcomes: list[list[tuple[str, list[tuple[int, ErrorCode]]]]]
              ) -> Any:
    return ctx.make("WriteTxnMarkersResponse", markers=[
        ctx.make("WritableTxnMarkerResult", producer_id=marker.producer_id, topics=[
            ctx.make("WritableTxnMarkerTopicResult", name=name, partitions=[
                ctx.make("WritableTxnMarkerPartitionResult", partition_index=index, error_code=code)
                for index, code in parts])
            for name, parts in topics])
        for marker, topics in zip(request.markers, outcomes, strict=True)])
