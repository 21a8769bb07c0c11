"""WriteTxnMarkers (27), as a transaction coordinator on another node sends it: raw requests to a real broker,
judged by confluent-kafka's read_committed consumer.

A commit marker makes the open transaction's records visible, an abort marker hides them for good, and a
partition the broker does not have is answered per partition (the coordinator retries at its new leader).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer
from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)

from bus.protocol.records import Record, build_batch
from deploy.processes.broker import BrokerProcess
from testkit.clients import create_topic
from testkit.raw_kafka import RawKafka, produce_error

PRODUCER_ID = 4242


def transactional_batch(values: list[bytes]) -> bytes:
    records = [Record(offset=i, timestamp=int(time.time() * 1000), key=None, value=v, headers=())
               for i, v in enumerate(values)]
    return build_batch(records, base_offset=0, producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=0,
                       is_transactional=True)


def markers(topic: str, partitions: tuple[int, ...], commit: bool) -> Any:
    return WriteTxnMarkersRequest(markers=(WritableTxnMarker(
        producer_id=PRODUCER_ID, producer_epoch=0, transaction_result=commit, coordinator_epoch=0,
        topics=(WritableTxnMarkerTopic(name=topic, partition_indexes=partitions),)),))


def read_committed(bootstrap: str, topic: str, settle_s: float = 3.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + settle_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_from_a_remote_coordinator_ends_the_transaction(broker: BrokerProcess, commit: bool) -> None:
    topic = f"marked-{commit}"
    create_topic(broker.bootstrap, topic)
    with RawKafka(broker.bootstrap) as raw:
        assert produce_error(raw, topic, 0, transactional_batch([b"a", b"b"]))[0] == 0
        assert read_committed(broker.bootstrap, topic, 1.0) == []  # open: past the last stable offset
        response = raw.request(markers(topic, (0, 7), commit))
    [marker] = response.markers
    [answered] = marker.topics
    codes = {p.partition_index: p.error_code for p in answered.partitions}
    assert codes == {0: ErrorCode.none, 7: ErrorCode.unknown_topic_or_partition}
    assert read_committed(broker.bootstrap, topic) == ([b"a", b"b"] if commit else [])
