"""Small pieces the group-coordination handlers share (JoinGroup, SyncGroup, Heartbeat, ...)."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from bus.broker.context import RequestContext
from bus.protocol.topic_partition import TopicPartition
from bus.security.acls import AclOperation, ResourceType

T = TypeVar("T")
_MS = datetime.timedelta(milliseconds=1)


def millis(value: datetime.timedelta | int) -> int:
    """kio hands timeouts over as timedeltas; the coordinator works in whole milliseconds."""
    return value // _MS if isinstance(value, datetime.timedelta) else int(value)


def client_host(ctx: RequestContext) -> str:
    """Kafka reports a member's host as Java's InetAddress.toString() does: "/127.0.0.1"."""
    return "/" + ctx.client_host


def respond_with(future: asyncio.Future[T], build: Callable[[T], Any]) -> Any:
    """The response now if the coordinator answered at once, else an awaitable of it (a parked join/sync)."""
    if future.done():
        return build(future.result())

    async def later() -> Any:
        return build(await future)

    return later()


def requested_partitions(ctx: RequestContext, topics: Any,
                         operation: AclOperation) -> tuple[list[tuple[TopicPartition, Any]], dict]:
    """The (topic, partition) pairs of an offsets request, in request order, with their request entries;
    the second value holds the errors of those not to act on: TOPIC_AUTHORIZATION_FAILED for a topic the principal
    may not do `operation` on, else UNKNOWN_TOPIC_OR_PARTITION for one the cluster does not have."""
    image = ctx.metadata.topics
    allowed = ctx.authorized(operation, ResourceType.TOPIC, (topic.name for topic in topics))
    found: list[tuple[TopicPartition, Any]] = []
    refused: dict[TopicPartition, ErrorCode] = {}
    for topic in topics:
        known = image.get(topic.name)
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            found.append((tp, p))
            if topic.name not in allowed:
                refused[tp] = ErrorCode.topic_authorization_failed
            elif known is None or p.partition_index not in known.partitions:
                refused[tp] = ErrorCode.unknown_topic_or_partition
    return found, refused


def partitions_by_topic(ctx: RequestContext, order: Any, errors: dict[TopicPartition, ErrorCode],
                        partition_cls: str) -> dict[str, list[Any]]:
    """Per-partition error entries grouped by topic, in request order (duplicates answered once)."""
    by_topic: dict[str, list[Any]] = {}
    for name, index in dict.fromkeys(order):
        by_topic.setdefault(name, []).append(
            ctx.make(partition_cls, partition_index=index, error_code=errors[TopicPartition(name, index)]))
    return by_topic
