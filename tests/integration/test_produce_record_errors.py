"""KIP-467: a batch refused for some of its records names them, and nothing of the batch is written.

Kafka's LogValidator refuses keyless records on a compacted topic (INVALID_RECORD) and timestamps
outside the topic's window or a client-set LogAppendTime (INVALID_TIMESTAMP) record by record; the
Produce response (v8+) lists each bad record's index in its batch (`record_errors`) and a summary
(`error_message`). librdkafka relies on it (its test 0011): exactly the listed records fail with the
broker's error, the rest of their batch with _INVALID_DIFFERENT_RECORD, other batches are delivered.
"""

from __future__ import annotations

import datetime
import time

import pytest
from confluent_kafka import KafkaError, Producer
from kio.schema.errors import ErrorCode

from bus.protocol import records as rb
from deploy.processes.broker import BrokerProcess
from testkit.clients import consume, create_topic, producer_config, stored_batches
from testkit.raw_kafka import RawKafka, produce_request

TOPIC_PARTITION_KEY_ERROR = "Compacted topic cannot accept message without key in topic partition {}-0"


def _batch(keys: list[bytes | None], *, timestamps: list[int] | None = None, **fields: object) -> bytes:
    now = int(time.time() * 1000)
    records = [rb.Record(offset=i, timestamp=(timestamps or [now] * len(keys))[i], key=key, value=f"v{i}".encode())
               for i, key in enumerate(keys)]
    return rb.build_batch(records, base_offset=0, **fields)  # type: ignore[arg-type]


def _produce_v7(raw: RawKafka, topic: str, records: bytes) -> object:
    from kio.schema.produce.v7.request import PartitionProduceData, ProduceRequest, TopicProduceData

    response = raw.request(ProduceRequest(
        transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
        topic_data=(TopicProduceData(name=topic, partition_data=(PartitionProduceData(index=0, records=records),)),),
    ))
    [topic_response] = response.responses
    [part] = topic_response.partition_responses
    return part


def _produce(raw: RawKafka, topic: str, records: bytes) -> object:
    """The partition answer of a v9 produce (flexible: v8's fields plus tagged fields)."""
    [topic_response] = raw.request(produce_request(topic, 0, records)).responses
    [part] = topic_response.partition_responses
    return part


def test_keyless_records_on_a_compacted_topic_are_named(shared_broker: BrokerProcess) -> None:
    topic = "kip467-compact"
    create_topic(shared_broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    with RawKafka(shared_broker.bootstrap) as raw:
        part = _produce(raw, topic, _batch([b"k0", None, b"k2", None, None, b"k5"]))
        assert part.error_code == ErrorCode.invalid_record
        assert part.base_offset == -1
        message = TOPIC_PARTITION_KEY_ERROR.format(topic)
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
            (1, message), (3, message), (4, message)]
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{message}')" for i in (1, 3, 4))
        assert part.error_message == (
            "One or more records have been rejected due to 3 record errors in total, and only showing the "
            f"first three errors at most: [{shown}]"
        )
        # v7 has neither field: the batch is still refused with INVALID_RECORD.
        old = _produce_v7(raw, topic, _batch([None]))
        assert old.error_code == ErrorCode.invalid_record
        assert not hasattr(old, "record_errors")
        assert _produce(raw, topic, _batch([b"a", b"b"])).error_code == ErrorCode.none
    # Nothing of the refused batches was written: the accepted one starts at offset 0.
    assert [[r.key for r in b.records] for b in stored_batches(shared_broker.data_dir, topic, 0)] == [[b"a", b"b"]]


def test_a_compacted_topic_made_by_incremental_alter_configs_append(shared_broker: BrokerProcess) -> None:
    """librdkafka's 0011 turns an ordinary topic into `delete,compact` with an APPEND op, then produces."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic = "kip467-append-compact"
    create_topic(shared_broker.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(10)
    with RawKafka(shared_broker.bootstrap) as raw:
        part = _produce(raw, topic, _batch([None, b"k"]))
    assert part.error_code == ErrorCode.invalid_record
    assert [e.batch_index for e in part.record_errors] == [0]


def test_timestamps_outside_the_window_are_named(shared_broker: BrokerProcess) -> None:
    topic = "kip467-timestamps"
    create_topic(shared_broker.bootstrap, topic, config={
        "message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    day = 86_400_000
    with RawKafka(shared_broker.bootstrap) as raw:
        part = _produce(raw, topic, _batch([b"a", b"b", b"c"], timestamps=[now, now - day, now + day]))
        assert part.error_code == ErrorCode.invalid_timestamp
        assert part.error_message == "One or more records have been rejected due to invalid timestamp"
        assert [e.batch_index for e in part.record_errors] == [1, 2]
        first = part.record_errors[0].batch_index_error_message
        assert first.startswith(f"Timestamp {now - day} of message with offset 1 is out of range. "
                                "The timestamp should be within [")
        assert _produce(raw, topic, _batch([b"a"], timestamps=[now])).error_code == ErrorCode.none


def test_a_client_may_not_claim_log_append_time(shared_broker: BrokerProcess) -> None:
    topic = "kip467-log-append-time"
    create_topic(shared_broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    with RawKafka(shared_broker.bootstrap) as raw:
        part = _produce(raw, topic, _batch([b"a"], timestamp_type=rb.LOG_APPEND_TIME))
        assert part.error_code == ErrorCode.invalid_timestamp
        [error] = part.record_errors
        assert error.batch_index == 0
        assert error.batch_index_error_message.startswith("Invalid timestamp type in message DefaultRecord(offset=0, ")
        assert _produce(raw, topic, _batch([b"a"])).error_code == ErrorCode.none


@pytest.mark.parametrize(("fields", "message"), [
    ({"is_control": True}, "Clients are not allowed to write control records in topic partition {}-0"),
    ({"producer_id": 7, "producer_epoch": 0, "base_sequence": -1},
     "Invalid sequence number -1 in record batch with producerId 7 in topic partition {}-0"),
])
def test_batch_level_client_rules(shared_broker: BrokerProcess, fields: dict[str, object], message: str) -> None:
    topic = f"kip467-batch-{'control' if 'is_control' in fields else 'sequence'}"
    create_topic(shared_broker.bootstrap, topic)
    with RawKafka(shared_broker.bootstrap) as raw:
        part = _produce(raw, topic, _batch([b"k"], **fields))
    assert (part.error_code, part.error_message, part.record_errors) == (
        ErrorCode.invalid_record, message.format(topic), ())


def _deliveries(producer: Producer, produce: list[tuple[bytes | None, bytes]], topic: str, *,
                flush_each: bool) -> dict[bytes, int]:
    """Delivery-report error code (0 for success) of each value."""
    reports: dict[bytes, int] = {}

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        reports[msg.value()] = err.code() if err is not None else 0

    for key, value in produce:
        producer.produce(topic, key=key, value=value, partition=0, on_delivery=on_delivery)
        if flush_each:
            producer.flush(10)
    assert producer.flush(15) == 0
    return reports


def test_confluent_fails_exactly_the_keyless_records(shared_broker: BrokerProcess) -> None:
    """One message per batch: the keyless ones fail with INVALID_RECORD, every keyed one is delivered."""
    topic = "kip467-confluent-single"
    create_topic(shared_broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    messages = [(None if i % 3 == 0 else f"k{i}".encode(), f"m{i}".encode()) for i in range(9)]
    producer = Producer(producer_config(shared_broker.bootstrap, **{"linger.ms": 0}))
    reports = _deliveries(producer, messages, topic, flush_each=True)
    assert reports == {v: (KafkaError.INVALID_RECORD if k is None else 0) for k, v in messages}
    got = consume(shared_broker.bootstrap, topic, 0, count=6)
    assert [(m.key(), m.value()) for m in got] == [(k, v) for k, v in messages if k is not None]


def test_confluent_fails_the_rest_of_the_batch_as_a_different_record(shared_broker: BrokerProcess) -> None:
    """One batch: the keyless records get INVALID_RECORD, the others _INVALID_DIFFERENT_RECORD (not retried
    into duplicates), and a later batch of keyed records is delivered."""
    topic = "kip467-confluent-batch"
    create_topic(shared_broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    messages = [(None if i % 4 == 0 else f"k{i}".encode(), f"m{i}".encode()) for i in range(12)]
    producer = Producer(producer_config(shared_broker.bootstrap, **{"linger.ms": 200}))
    reports = _deliveries(producer, messages, topic, flush_each=False)
    assert reports == {v: (KafkaError.INVALID_RECORD if k is None else KafkaError._INVALID_DIFFERENT_RECORD)
                       for k, v in messages}
    later = _deliveries(producer, [(b"k", b"later")], topic, flush_each=False)
    assert later == {b"later": 0}
    assert [(m.offset(), m.value()) for m in consume(shared_broker.bootstrap, topic, 0, count=1)] == [(0, b"later")]
