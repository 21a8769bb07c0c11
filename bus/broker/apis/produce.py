"""Produce (0): validate batches (header + CRC, kept compressed) and append them to partition logs.

A batch refused for some of its records (KIP-467, v8+) names them: `record_errors` carries each bad
record's index in the batch and `error_message` the summary, so the client fails exactly those.
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from bus.broker.apis._common import topic_name_for
from bus.broker.context import RequestContext
from bus.broker.errors import CloseConnection
from bus.broker.log_validator import RecordError, RecordValidationError
from bus.broker.replica_manager import PartitionError

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
    replicas = ctx.broker.replicas
    acks = request.acks
    responses = []
    for topic_data in request.topic_data:
        name = topic_name_for(ctx, getattr(topic_data, "name", None), getattr(topic_data, "topic_id", None))
        partition_responses = []
        for data in topic_data.partition_data:
            if acks not in (-1, 0, 1):
                partition_responses.append(_partition_response(ctx, data.index, ErrorCode.invalid_required_acks))
                continue
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
                result = partition.append(data.records)
            except PartitionError as exc:
                partition_responses.append(_partition_response(ctx, data.index, exc.code, exc.message))
                continue
            except RecordValidationError as exc:
                partition_responses.append(_partition_response(
                    ctx, data.index, exc.code, exc.message, log_start_offset=partition.log_start_offset,
                    record_errors=_record_errors(ctx, exc.record_errors)))
                continue
            partition_responses.append(
                ctx.make(
                    "PartitionProduceResponse",
                    index=data.index,
                    error_code=ErrorCode.none,
                    base_offset=result.base_offset,
                    log_append_time=result.log_append_time,
                    log_start_offset=result.log_start_offset,
                )
            )
        topic_id = getattr(topic_data, "topic_id", None)
        responses.append(ctx.make("TopicProduceResponse", name=name or "", topic_id=topic_id,
                                  partition_responses=partition_responses))
    if acks == 0:
        failed = [r for t in responses for r in t.partition_responses if r.error_code != ErrorCode.none]
        if failed:
            # No response carries the error, so Kafka closes the connection to make the client refresh
            # its metadata and notice (KafkaApis.handleProduceRequest).
            raise CloseConnection(f"acks=0 produce failed: {failed[0].error_code.name}")
        return None
    return ctx.make("ProduceResponse", responses=responses, throttle_time=0)
