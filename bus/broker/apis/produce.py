"""Produce (0): validate batches (header + CRC, kept compressed) and append them to partition logs.

A large batch whose records must be decoded (compacted topic, topic compression.type) is prepared in a
worker thread, so inflating it does not hold up other clients; appends to a partition keep request order.

A batch refused for some of its records (KIP-467, v8+) names them: `record_errors` carries each bad
record's index in the batch and `error_message` the summary, so the client fails exactly those.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import topic_name_for
from bus.broker.context import RequestContext
from bus.broker.errors import CloseConnection
from bus.broker.log_validator import RecordError, RecordValidationError
from bus.broker.replica_manager import PartitionError
from bus.log.log import AppendResult

API_KEY = 0
MIN_VERSION = 3  # v0-v2 carry magic v0/v1 message sets, which Kafka 4 dropped too
MAX_VERSION = 12

log = logging.getLogger(__name__)


def _partition_response(ctx: RequestContext, index: int, code: ErrorCode, message: str | None = None,
                        **values: Any) -> Any:
    values.setdefault("base_offset", -1)
    values.setdefault("log_start_offset", -1)
    return ctx.make("PartitionProduceResponse", index=index, error_code=code, error_message=message,
                    log_append_time=-1, **values)


def _record_errors(ctx: RequestContext, errors: tuple[RecordError, ...]) -> list[Any]:
    """The v8+ `record_errors` entries; older versions have no such field and get none."""
    if not errors or not ctx.shapes.has("BatchIndexAndErrorMessage"):
        return []
    return [ctx.make("BatchIndexAndErrorMessage", batch_index=e.batch_index, batch_index_error_message=e.message)
            for e in errors]


def handle(ctx: RequestContext, request: Any) -> Any:
    """The ProduceResponse, or an awaitable of it when some partition's append had to wait
    (`Partition.append_in_order`: a large batch whose records are decoded in a worker thread)."""
    replicas = ctx.broker.replicas
    acks = request.acks
    topics = []
    waiting = False
    for topic_data in request.topic_data:
        name = topic_name_for(ctx, getattr(topic_data, "name", None), getattr(topic_data, "topic_id", None))
        partition_responses = [_produce_partition(ctx, replicas, name, acks, data)
                               for data in topic_data.partition_data]
        waiting = waiting or any(isinstance(r, asyncio.Future) for r in partition_responses)
        topics.append((name, getattr(topic_data, "topic_id", None), partition_responses))
    if waiting:
        return _respond_later(ctx, acks, topics)
    return _respond(ctx, acks, topics)


def _produce_partition(ctx: RequestContext, replicas: Any, name: str | None, acks: int, data: Any) -> Any:
    """One partition's PartitionProduceResponse, or a future of it."""
    if acks not in (-1, 0, 1):
        return _partition_response(ctx, data.index, ErrorCode.invalid_required_acks)
    partition = None
    try:
        if name is None:
            raise PartitionError(ErrorCode.unknown_topic_id)
        partition = replicas.get(name, data.index)
        if acks == -1 and partition.min_insync_replicas > 1:
            raise PartitionError(
                ErrorCode.not_enough_replicas,
                f"The size of the current ISR (1) is insufficient to satisfy the min.isr requirement "
                f"of {partition.min_insync_replicas} for partition {name}-{data.index}",
            )
        if data.records is None:
            raise PartitionError(ErrorCode.corrupt_message, "produce request carried null records")
        off_loop = partition.must_prepare_off_loop(data.records)
        if off_loop or partition.appending is not None:
            appending = partition.append_in_order(data.records, off_loop=off_loop)  # in line now, not when awaited
            return asyncio.ensure_future(_appended_later(ctx, partition, data.index, appending))
        result = partition.append(data.records)
    except (PartitionError, RecordValidationError) as exc:
        return _refused(ctx, data.index, exc, partition)
    return _appended(ctx, data.index, result)


async def _appended_later(ctx: RequestContext, partition: Any, index: int,
                          appending: Awaitable[AppendResult]) -> Any:
    try:
        result = await appending
    except (PartitionError, RecordValidationError) as exc:
        return _refused(ctx, index, exc, partition)
    return _appended(ctx, index, result)


def _appended(ctx: RequestContext, index: int, result: AppendResult) -> Any:
    return ctx.make("PartitionProduceResponse", index=index, error_code=ErrorCode.none, base_offset=result.base_offset,
                    log_append_time=result.log_append_time, log_start_offset=result.log_start_offset)


def _refused(ctx: RequestContext, index: int, exc: PartitionError | RecordValidationError, partition: Any) -> Any:
    if isinstance(exc, RecordValidationError):
        return _partition_response(ctx, index, exc.code, exc.message, log_start_offset=partition.log_start_offset,
                                   record_errors=_record_errors(ctx, exc.record_errors))
    return _partition_response(ctx, index, exc.code, exc.message)


async def _respond_later(ctx: RequestContext, acks: int, topics: list[tuple[str | None, Any, list[Any]]]) -> Any:
    for _name, _topic_id, partition_responses in topics:
        for i, response in enumerate(partition_responses):
            if isinstance(response, asyncio.Future):
                partition_responses[i] = await response
    return _respond(ctx, acks, topics)


def _respond(ctx: RequestContext, acks: int, topics: list[tuple[str | None, Any, list[Any]]]) -> Any:
    responses = [ctx.make("TopicProduceResponse", name=name or "", topic_id=topic_id,
                          partition_responses=partition_responses)
                 for name, topic_id, partition_responses in topics]
    if acks == 0:
        failed = [r for t in responses for r in t.partition_responses if r.error_code != ErrorCode.none]
        if failed:
            # No response carries the error, so Kafka closes the connection to make the client refresh
            # its metadata and notice (KafkaApis.handleProduceRequest).
            raise CloseConnection(f"acks=0 produce failed: {failed[0].error_code.name}")
        return None
    return ctx.make("ProduceResponse", responses=responses, throttle_time=0)
