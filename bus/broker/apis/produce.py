"""Produce (0): validate batches (header + CRC, kept compressed) and append them to partition logs.

A large batch whose records must be decoded (compacted topic, topic compression.type) is prepared in a
worker thread, so inflating it does not hold up other clients; appends to a partition keep request order.

A batch refused for some of its records (KIP-467, v8+) names them: `record_errors` carries each bad
record's index in the batch and `error_message` the summary, so the client fails exactly those.

Authorization (Kafka's handleProduceRequest): transactional batches need WRITE on the request's transactional id,
else the whole request is refused TRANSACTIONAL_ID_AUTHORIZATION_FAILED; each topic needs WRITE, else its
partitions are answered TOPIC_AUTHORIZATION_FAILED and not appended.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import topic_name_for
from bus.broker.context import RequestContext
from bus.broker.partition import OFF_LOOP_PREPARE_BYTES, Partition, PartitionError
from bus.log.log import AppendResult
from bus.log.log_validator import RecordError, RecordValidationError
from bus.network.errors import CloseConnection
from bus.protocol.error_response import ERROR_MESSAGES
from bus.protocol.produce_codec import (
    PartitionData,
    PartitionProduced,
    ProduceAnswer,
    ProduceRequest,
    RecordErrorOut,
    TopicProduced,
    error_answer,
)
from bus.protocol.records import ATTRIBUTES_OFFSET, TRANSACTIONAL_FLAG
from bus.security.acls import AclOperation, ResourceType

API_KEY = 0
MIN_VERSION = 3  # v0-v2 carry magic v0/v1 message sets, which Kafka 4 dropped too
MAX_VERSION = 12

log = logging.getLogger(__name__)


def _record_errors(errors: tuple[RecordError, ...]) -> tuple[RecordErrorOut, ...]:
    """The v8+ `record_errors` entries (the encoder drops them for older versions)."""
    return tuple(RecordErrorOut(e.batch_index, e.message) for e in errors)


def _transactional(request: ProduceRequest) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of some partition is transactional."""
    return any(data.records is not None and len(data.records) > ATTRIBUTES_OFFSET + 1
               and data.records[ATTRIBUTES_OFFSET + 1] & TRANSACTIONAL_FLAG
               for topic in request.topic_data for data in topic.partition_data)


def _refused_transactions(ctx: RequestContext, request: ProduceRequest) -> bool:
    """Transactional batches without WRITE on the request's transactional id, or without one. Only with an
    authorizer: without one they stay accepted as they were (Kafka refuses those without a transactional id then
    too), and the hot path does not look at the batches."""
    if ctx.authorizer is None or not _transactional(request):
        return False
    transactional_id = request.transactional_id
    return transactional_id is None or not ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                         transactional_id)


def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceAnswer | Awaitable[ProduceAnswer | None] | None:
    """The ProduceResponse, or an awaitable of it when some partition's append had to wait
    (`Partition.append_in_order`: a large batch whose records are decoded in a worker thread)."""
    services = ctx.services
    if services.authorizer is not None and _refused_transactions(ctx, request):
        code = ErrorCode.transactional_id_authorization_failed
        if request.acks == 0:  # no response carries it: Kafka closes the connection
            raise CloseConnection(f"acks=0 produce refused: {code.name}")
        return error_answer(request, code.value, ERROR_MESSAGES[code])
    replicas = services.replicas
    acks = request.acks
    timeout = max(request.timeout_ms, 0) / 1000.0
    topic_data = request.topic_data
    if services.authorizer is None and len(topic_data) == 1 and len(topic_data[0].partition_data) == 1:
        # The common request (a producer's batch for one partition), without the general loop's bookkeeping.
        # Produce names topics by name up to v12: `topic_name_for` is the name itself.
        name = topic_data[0].name
        answer = _produce_partition(ctx, replicas, name, acks, timeout, topic_data[0].partition_data[0])
        if type(answer) is PartitionProduced:
            if acks == 0:
                if answer.error_code:
                    raise CloseConnection(f"acks=0 produce failed: {ErrorCode(answer.error_code).name}")
                return None
            return ProduceAnswer([TopicProduced(name, [answer])])
        return _respond_later(ctx, acks, [(name, [answer])])
    writable = ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, (t.name for t in topic_data))
    topics: Answers = []
    waiting = False
    for topic_data_ in topic_data:
        name_ = topic_name_for(ctx, topic_data_.name, None)
        if topic_data_.name not in writable:
            topics.append((name_, [PartitionProduced(data.index, ErrorCode.topic_authorization_failed.value)
                                   for data in topic_data_.partition_data]))
            continue
        partition_responses = [_produce_partition(ctx, replicas, name_, acks, timeout, data)
                               for data in topic_data_.partition_data]
        waiting = waiting or any(isinstance(r, asyncio.Future) for r in partition_responses)
        topics.append((name_, partition_responses))
    if waiting:
        return _respond_later(ctx, acks, topics)
    return _respond(ctx, acks, topics)


def _produce_partition(ctx: RequestContext, replicas: Any, name: str | None, acks: int, timeout: float,
                       data: PartitionData) -> PartitionProduced | asyncio.Future[PartitionProduced]:
    """One partition's answer, or a future of it."""
    if acks not in (-1, 0, 1):
        return PartitionProduced(data.index, ErrorCode.invalid_required_acks.value)
    partition = None
    records = data.records
    try:
        if name is None:
            raise PartitionError(ErrorCode.unknown_topic_id)
        partition = replicas.get(name, data.index)
        if acks == -1:
            _check_isr(partition, ErrorCode.not_enough_replicas)
        if records is None:
            raise PartitionError(ErrorCode.corrupt_message, "produce request carried null records")
        off_loop = len(records) > OFF_LOOP_PREPARE_BYTES and partition.must_prepare_off_loop(records)
        if off_loop or partition.appending is not None:
            appending = partition.append_in_order(records, off_loop=off_loop)  # in line now, not when awaited
            return asyncio.ensure_future(_appended_later(ctx, partition, data.index, appending, acks, timeout,
                                                         len(records)))
        result = partition.append(records)
        _count(ctx, partition, result, len(records))
        if acks == -1:
            replicated = partition.committed(result.last_offset + 1)
            if replicated is not None:
                return asyncio.ensure_future(_replicated(partition, data.index, result, replicated, timeout))
            _check_isr(partition, ErrorCode.not_enough_replicas_after_append)
    except (PartitionError, RecordValidationError) as exc:
        return _refused(data.index, exc, partition)
    return PartitionProduced(data.index, 0, result.base_offset, result.log_append_time, result.log_start_offset)


def _check_isr(partition: Partition, code: ErrorCode) -> None:
    """min.insync.replicas against the ISR (Kafka checks it before an acks=all append, and again once the high
    watermark covers it: NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank meanwhile)."""
    isr = max(len(partition.isr), 1)
    if isr < partition.min_insync_replicas:
        raise PartitionError(
            code,
            f"The size of the current ISR ({isr}) is insufficient to satisfy the min.isr requirement "
            f"of {partition.min_insync_replicas} for partition {partition.topic}-{partition.index}",
        )


async def _appended_later(ctx: RequestContext, partition: Partition, index: int, appending: Awaitable[AppendResult],
                          acks: int, timeout: float, size: int) -> PartitionProduced:
    try:
        result = await appending
        _count(ctx, partition, result, size)
        if acks == -1:
            replicated = partition.committed(result.last_offset + 1)
            if replicated is not None:
                return await _replicated(partition, index, result, replicated, timeout)
            _check_isr(partition, ErrorCode.not_enough_replicas_after_append)
    except (PartitionError, RecordValidationError) as exc:
        return _refused(index, exc, partition)
    return _appended(index, result)


async def _replicated(partition: Partition, index: int, result: AppendResult, replicated: asyncio.Future[None],
                      timeout: float) -> PartitionProduced:
    """An acks=all append's answer once the ISR has it (Kafka's DelayedProduce): REQUEST_TIMED_OUT after the
    request's timeout_ms (the record may still commit later, as in Kafka), NOT_LEADER_OR_FOLLOWER when this
    node stopped leading first."""
    try:
        async with asyncio.timeout(timeout):
            await replicated
        _check_isr(partition, ErrorCode.not_enough_replicas_after_append)
    except TimeoutError:
        return PartitionProduced(index, ErrorCode.request_timed_out.value,
                                 error_message="The ISR did not have the records within the request's timeout")
    except PartitionError as exc:
        return _refused(index, exc, partition)
    return _appended(index, result)


def _count(ctx: RequestContext, partition: Partition, result: AppendResult, size: int) -> None:
    """MessagesIn and BytesIn of the topic (Kafka's BrokerTopicMetrics), once the records are in the log."""
    ctx.services.topic_metrics.produced(partition.topic, result.last_offset - result.base_offset + 1, size)


def _appended(index: int, result: AppendResult) -> PartitionProduced:
    return PartitionProduced(index, 0, result.base_offset, result.log_append_time, result.log_start_offset)


def _refused(index: int, exc: PartitionError | RecordValidationError, partition: Partition | None) -> PartitionProduced:
    if isinstance(exc, RecordValidationError):
        return PartitionProduced(index, exc.code.value,
                                 log_start_offset=partition.log_start_offset if partition is not None else -1,
                                 error_message=exc.message, record_errors=_record_errors(exc.record_errors))
    return PartitionProduced(index, exc.code.value, error_message=exc.message)


Answers = list[tuple[str | None, list[Any]]]


async def _respond_later(ctx: RequestContext, acks: int, topics: Answers) -> ProduceAnswer | None:
    for _name, partition_responses in topics:
        for i, response in enumerate(partition_responses):
            if isinstance(response, asyncio.Future):
                partition_responses[i] = await response
    return _respond(ctx, acks, topics)


def _respond(ctx: RequestContext, acks: int, topics: Answers) -> ProduceAnswer | None:
    responses = [TopicProduced(name or "", partition_responses) for name, partition_responses in topics]
    if acks == 0:
        failed = [r for t in responses for r in t.partition_responses if r.error_code != 0]
        if failed:
            # No response carries the error, so Kafka closes the connection to make the client refresh
            # its metadata and notice (KafkaApis.handleProduceRequest).
            raise CloseConnection(f"acks=0 produce failed: {ErrorCode(failed[0].error_code).name}")
        return None
    return ProduceAnswer(responses)
