"""Fetch (1): whole batches from partition logs, with long polling ("delayed fetch" in Kafka).

A fetch that finds fewer than `min_bytes` waits until one of its partitions receives an append or
`max_wait` passes, then reads again. Sessions (KIP-227) are not created: the response's session id
0 tells clients to keep sending full fetches, which every client supports.
"""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import topic_name_for
from bus.broker.context import RequestContext
from bus.broker.replica_manager import Partition, PartitionError
from bus.log.errors import OffsetOutOfRangeError
from bus.protocol import records as rb

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 16

READ_COMMITTED = 1


def _check_epoch(partition: Partition, requested: int) -> None:
    if requested < 0 or requested == partition.leader_epoch:
        return
    if requested > partition.leader_epoch:
        raise PartitionError(ErrorCode.unknown_leader_epoch)
    raise PartitionError(ErrorCode.fenced_leader_epoch)


def _aborted_in(partition: Partition, start: int, stable: int, records: bytes) -> list[Any]:
    """The aborted transactions overlapping the records sent (Kafka bounds them by the fetched data,
    not the LSO, so a consumer far behind does not get every later abort in every response)."""
    if not records:
        return []
    txns = partition.aborted_transactions(start, stable)
    if txns:
        end = rb.scan_batches_prefix(records, verify_crc=False)[0][-1].next_offset
        txns = [t for t in txns if t.first_offset < end]
    return txns


def _read_all(ctx: RequestContext, request: Any) -> tuple[Any, int, list[Partition]]:
    replicas = ctx.broker.replicas
    committed = request.isolation_level == READ_COMMITTED
    budget = request.max_bytes
    total = 0
    found: list[Partition] = []
    responses = []
    for topic in request.topics:
        topic_id = getattr(topic, "topic_id", None)
        name = topic_name_for(ctx, getattr(topic, "topic", None), topic_id)
        partitions = []
        for wanted in topic.partitions:
            try:
                if name is None:
                    raise PartitionError(ErrorCode.unknown_topic_id)
                partition = replicas.get(name, wanted.partition)
            except PartitionError as exc:
                partitions.append(ctx.make("PartitionData", partition_index=wanted.partition, error_code=exc.code,
                                           high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                                           preferred_read_replica=-1, records=None))
                continue
            found.append(partition)
            high_watermark = partition.high_watermark
            stable = partition.last_stable_offset
            code = ErrorCode.none
            records = b""
            try:
                _check_epoch(partition, getattr(wanted, "current_leader_epoch", -1))
                limit = min(wanted.partition_max_bytes, budget)
                if limit > 0 or total == 0:
                    result = partition.read(
                        wanted.fetch_offset,
                        max(limit, 0),
                        max_offset=stable if committed else high_watermark,
                        min_one_batch=total == 0,
                    )
                    records = bytes(result.data)
            except OffsetOutOfRangeError:
                code = ErrorCode.offset_out_of_range
            except PartitionError as exc:
                code = exc.code
            aborted = None
            if committed:
                aborted = [ctx.make("AbortedTransaction", producer_id=t.producer_id, first_offset=t.first_offset)
                           for t in _aborted_in(partition, wanted.fetch_offset, stable, records)]
            total += len(records)
            budget -= len(records)
            partitions.append(
                ctx.make(
                    "PartitionData",
                    partition_index=wanted.partition,
                    error_code=code,
                    high_watermark=high_watermark,
                    last_stable_offset=stable,
                    log_start_offset=partition.log_start_offset,
                    aborted_transactions=aborted,
                    preferred_read_replica=-1,
                    records=records,
                )
            )
        responses.append(ctx.make("FetchableTopicResponse", topic=name or "", topic_id=topic_id,
                                  partitions=partitions))
    return responses, total, found


def _response(ctx: RequestContext, responses: list[Any], error: ErrorCode = ErrorCode.none) -> Any:
    return ctx.make("FetchResponse", throttle_time=0, error_code=error, session_id=0, responses=responses)


def handle(ctx: RequestContext, request: Any) -> Any:
    if getattr(request, "session_id", 0) != 0:
        return _response(ctx, [], ErrorCode.fetch_session_id_not_found)
    responses, total, partitions = _read_all(ctx, request)
    max_wait = request.max_wait.total_seconds()
    if total >= request.min_bytes or max_wait <= 0 or not partitions:
        return _response(ctx, responses)
    return _long_poll(ctx, request, partitions, time.monotonic() + max_wait)


async def _long_poll(ctx: RequestContext, request: Any, partitions: list[Partition], deadline: float) -> Any:
    replicas = ctx.broker.replicas
    while True:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await replicas.wait_for_data(partitions, remaining)
        responses, total, partitions = _read_all(ctx, request)
        if total >= request.min_bytes or time.monotonic() >= deadline or not partitions:
            return _response(ctx, responses)
