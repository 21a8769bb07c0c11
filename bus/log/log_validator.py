"""What a produced batch must satisfy beyond being well-formed, as Kafka's LogValidator checks it.

`records.scan_batches` already proved the bytes are batches (lengths, CRC, codec). A well-formed batch
can still be one the partition must refuse: a control batch or an unsequenced producer batch from a
client, a keyless record on a compacted topic, a timestamp outside the topic's
`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms` window. For the record-level
cases Kafka (KIP-467) answers with the index of every bad record inside its batch (`record_errors`)
and a summary (`error_message`), so a client fails exactly those records instead of the whole
batch: librdkafka then fails the others with `_INVALID_DIFFERENT_RECORD` and lets records of other
batches through. Checks, order and messages follow LogValidator's validateBatch, validateRecord and
processRecordErrors; the whole batch is refused and nothing of it is written.

Records are decoded only when a record-level rule applies (a compacted topic, a finite timestamp
window, a batch claiming LogAppendTime), so the common produce path stays header-only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from bus.log.config import LogConfig
from bus.protocol import records as rb
from bus.protocol.errors import KafkaApiError

_LONG_MAX = 2**63 - 1
_SHOWN_ERRORS = 3  # processRecordErrors quotes at most the first three record errors


@dataclass(frozen=True, slots=True)
class RecordError:
    """One refused record: its index inside the batch and why (ProduceResponse.RecordError)."""

    batch_index: int
    message: str

    def __str__(self) -> str:
        # Java's RecordError.toString, which Kafka's summary message embeds.
        return f"RecordError(batchIndex={self.batch_index}, message='{self.message}')"


class RecordValidationError(KafkaApiError):
    """A refused batch; `record_errors` names the offending records when the fault is theirs."""

    def __init__(self, code: ErrorCode, message: str, record_errors: tuple[RecordError, ...] = ()) -> None:
        super().__init__(code, message)
        self.record_errors = record_errors


def validate_batches(payload: bytes | bytearray, batches: list[rb.BatchInfo], config: LogConfig,
                     topic_partition: object, *, from_client: bool = True, now_ms: int | None = None) -> None:
    """Raise RecordValidationError for the first batch the partition must refuse.

    `topic_partition` names the partition in the messages (a "topic-index" string, or anything whose str() is one:
    the partition itself, so the hot path formats nothing until a batch is refused). `from_client`: Kafka's
    AppendOrigin.CLIENT; a coordinator's own writes skip the batch-level client rules (transactional offset commits
    carry a producer id without a sequence).
    """
    check_range = not config.log_append_time and (
        config.message_timestamp_before_max_ms < _LONG_MAX or config.message_timestamp_after_max_ms < _LONG_MAX
    )
    compact = config.compact
    for batch in batches:
        attributes = batch.attributes
        if from_client and (attributes & rb.CONTROL_FLAG or batch.producer_id >= 0):  # else it passes at once
            _validate_client_batch(batch, str(topic_partition))
        if compact or check_range or attributes & rb.TIMESTAMP_TYPE_FLAG:  # LogAppendTime claimed
            now = int(time.time() * 1000) if now_ms is None else now_ms
            _raise_record_errors(_record_errors(payload, batch, config, str(topic_partition), now, check_range))


def _validate_client_batch(batch: rb.BatchInfo, topic_partition: str) -> None:
    if batch.is_control:
        message = f"Clients are not allowed to write control records in topic partition {topic_partition}"
        raise RecordValidationError(ErrorCode.invalid_record, message)
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise RecordValidationError(
            ErrorCode.invalid_record,
            f"Invalid sequence number {batch.base_sequence} in record batch with producerId {batch.producer_id} "
            f"in topic partition {topic_partition}",
        )


def _record_errors(payload: bytes | bytearray, batch: rb.BatchInfo, config: LogConfig, topic_partition: str,
                   now: int, check_range: bool) -> list[tuple[ErrorCode, RecordError]]:
    """validateRecord for every record of the batch: the key rule first, then the timestamp rule."""
    errors = []
    for index, record in enumerate(rb.iter_records(payload, batch)):
        if config.compact and record.key is None:
            errors.append((ErrorCode.invalid_record, RecordError(
                index, f"Compacted topic cannot accept message without key in topic partition {topic_partition}")))
        elif not config.log_append_time and record.timestamp != rb.NO_TIMESTAMP:
            if check_range and _out_of_range(record.timestamp, now, config):
                low = now - config.message_timestamp_before_max_ms
                high = now + config.message_timestamp_after_max_ms
                errors.append((ErrorCode.invalid_timestamp, RecordError(
                    index, f"Timestamp {record.timestamp} of message with offset {record.offset} is out of range. "
                           f"The timestamp should be within [{low}, {high}]")))
        elif batch.timestamp_type == rb.LOG_APPEND_TIME:
            errors.append((ErrorCode.invalid_timestamp, RecordError(
                index, f"Invalid timestamp type in message {_describe(record)}. Producer should not set timestamp "
                       "type to LogAppendTime.")))
    return errors


def _out_of_range(timestamp: int, now: int, config: LogConfig) -> bool:
    diff = now - timestamp
    return diff > config.message_timestamp_before_max_ms or -diff > config.message_timestamp_after_max_ms


def _describe(record: rb.Record) -> str:
    """Java's DefaultRecord.toString, quoted in Kafka's message."""
    key = len(record.key) if record.key is not None else 0
    value = len(record.value) if record.value is not None else 0
    return f"DefaultRecord(offset={record.offset}, timestamp={record.timestamp}, key={key} bytes, value={value} bytes)"


def _raise_record_errors(errors: list[tuple[ErrorCode, RecordError]]) -> None:
    """processRecordErrors: one timestamp error makes the whole answer INVALID_TIMESTAMP."""
    if not errors:
        return
    record_errors = tuple(error for _, error in errors)
    if any(code == ErrorCode.invalid_timestamp for code, _ in errors):
        raise RecordValidationError(ErrorCode.invalid_timestamp,
                                    "One or more records have been rejected due to invalid timestamp", record_errors)
    shown = ", ".join(str(error) for error in record_errors[:_SHOWN_ERRORS])
    raise RecordValidationError(
        ErrorCode.invalid_record,
        f"One or more records have been rejected due to {len(record_errors)} record errors in total, and only "
        f"showing the first three errors at most: [{shown}]",
        record_errors,
    )
