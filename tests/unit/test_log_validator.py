"""LogValidator's rules on produced batches: which records are named, with Kafka's codes and messages."""

from __future__ import annotations

import struct

import crc32c
import pytest
from kio.schema.errors import ErrorCode

from bus.log.config import LogConfig
from bus.log.log_validator import RecordError, RecordValidationError, validate_batches
from bus.protocol import records as rb

NOW = 1_700_000_000_000


def _validate(keys: list[bytes | None], config: LogConfig, *, timestamps: list[int] | None = None,
              from_client: bool = True, **fields: object) -> None:
    stamps = timestamps or [NOW] * len(keys)
    records = [rb.Record(offset=i, timestamp=stamps[i], key=k, value=b"v") for i, k in enumerate(keys)]
    payload = rb.build_batch(records, base_offset=0, **fields)  # type: ignore[arg-type]
    validate_batches(payload, rb.scan_batches(payload), config, "t-0", from_client=from_client, now_ms=NOW)


def test_every_keyless_record_is_named_and_the_summary_shows_three() -> None:
    with pytest.raises(RecordValidationError) as caught:
        _validate([None, b"k", None, None, None], LogConfig.from_properties({"cleanup.policy": "compact,delete"}))
    error = caught.value
    assert error.code == ErrorCode.invalid_record
    assert [e.batch_index for e in error.record_errors] == [0, 2, 3, 4]
    assert error.message == (
        "One or more records have been rejected due to 4 record errors in total, and only showing the first three "
        "errors at most: [" + ", ".join(str(RecordError(i, "Compacted topic cannot accept message without key in "
                                                           "topic partition t-0")) for i in (0, 2, 3)) + "]"
    )


def test_the_timestamp_window_includes_its_bounds() -> None:
    config = LogConfig.from_properties({"message.timestamp.before.max.ms": "1000",
                                        "message.timestamp.after.max.ms": "10"})
    _validate([b"a", b"b"], config, timestamps=[NOW - 1000, NOW + 10])
    with pytest.raises(RecordValidationError) as caught:
        _validate([b"a", b"b", b"c"], config, timestamps=[NOW - 1001, NOW, NOW + 11])
    assert caught.value.code == ErrorCode.invalid_timestamp
    assert [(e.batch_index, e.message) for e in caught.value.record_errors] == [
        (0, f"Timestamp {NOW - 1001} of message with offset 0 is out of range. "
            f"The timestamp should be within [{NOW - 1000}, {NOW + 10}]"),
        (2, f"Timestamp {NOW + 11} of message with offset 2 is out of range. "
            f"The timestamp should be within [{NOW - 1000}, {NOW + 10}]"),
    ]


def test_a_key_error_and_a_timestamp_error_make_the_answer_invalid_timestamp() -> None:
    config = LogConfig.from_properties({"cleanup.policy": "compact", "message.timestamp.before.max.ms": "0"})
    with pytest.raises(RecordValidationError) as caught:
        _validate([None, b"k"], config, timestamps=[NOW, NOW - 1])
    assert caught.value.code == ErrorCode.invalid_timestamp
    assert [e.batch_index for e in caught.value.record_errors] == [0, 1]


def test_coordinator_writes_skip_the_client_batch_rules() -> None:
    """A TxnOffsetCommit record carries the producer id without a sequence (Kafka's AppendOrigin.COORDINATOR)."""
    fields = {"producer_id": 5, "producer_epoch": 0, "base_sequence": -1}
    _validate([b"k"], LogConfig(), from_client=False, **fields)
    with pytest.raises(RecordValidationError, match="Invalid sequence number -1 in record batch with producerId 5"):
        _validate([b"k"], LogConfig(), **fields)


def test_records_are_decoded_only_when_a_record_rule_applies() -> None:
    """A delete-policy CreateTime topic with open timestamp bounds has no record-level rule, so produce
    stays header-only: records that do not even parse (behind a valid CRC) are not looked at."""
    records = [rb.Record(offset=i, timestamp=NOW, key=b"k", value=b"v") for i in range(2)]
    payload = bytearray(rb.build_batch(records, base_offset=0))
    payload[rb.BATCH_OVERHEAD] = 0x7F  # first record's length varint now overruns the batch
    struct.pack_into(">I", payload, rb.CRC_OFFSET, crc32c.crc32c(payload[rb.ATTRIBUTES_OFFSET:]))
    batches = rb.scan_batches(payload)
    validate_batches(payload, batches, LogConfig(), "t-0", now_ms=NOW)
    with pytest.raises(rb.CorruptRecordError):
        validate_batches(payload, batches, LogConfig(cleanup_policy=frozenset({"compact"})), "t-0", now_ms=NOW)
