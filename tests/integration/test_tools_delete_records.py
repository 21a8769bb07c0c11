"""`bus delete-records` against a broker process: the log start moves, as librdkafka sees it.

After the tool deletes below an offset, confluent-kafka's low watermark is that offset and a confluent consumer
reading from the beginning gets the first remaining record first. Bad files and refused partitions exit 1 with one
clear line each, never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique

RECORDS = 10


@pytest.fixture(scope="module")
def admin(shared_broker: BrokerProcess) -> ConfluentAdmin:
    return ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})


@pytest.fixture
def topic(shared_broker: BrokerProcess, admin: ConfluentAdmin) -> str:
    """Two partitions of RECORDS records each, values `p<partition>-<i>`."""
    name = unique("tools-delrec")
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
    for partition in range(2):
        for i in range(RECORDS):
            producer.produce(name, value=f"p{partition}-{i}".encode(), partition=partition)
    assert producer.flush(10) == 0
    return name


@pytest.fixture
def consumer(shared_broker: BrokerProcess) -> Iterator[Consumer]:
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": unique("delrec"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    yield consumer
    consumer.close()


def offsets_file(tmp_path: Path, content: object) -> str:
    path = tmp_path / "offsets.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


def delete_records(broker: BrokerProcess, path: str):  # type: ignore[no-untyped-def]
    return bus("delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", path)


def test_deletes_below_the_offsets(shared_broker: BrokerProcess, topic: str, consumer: Consumer,
                                   tmp_path: Path) -> None:
    path = offsets_file(tmp_path, {"partitions": [{"topic": topic, "partition": 0, "offset": 4},
                                                  {"topic": topic, "partition": 1, "offset": -1}], "version": 1})
    out = ok(delete_records(shared_broker, path))
    assert out.splitlines() == ["Executing records delete operation", "Records delete operation completed:",
                                f"partition: {topic}-0\tlow_watermark: 4",
                                f"partition: {topic}-1\tlow_watermark: {RECORDS}"]  # -1: the high watermark
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, RECORDS)
    assert consumer.get_watermark_offsets(TopicPartition(topic, 1), timeout=10) == (RECORDS, RECORDS)

    consumer.assign([TopicPartition(topic, 0, -2)])  # OFFSET_BEGINNING
    first = None
    for _ in range(100):
        message = consumer.poll(0.2)
        if message is not None and message.error() is None:
            first = message
            break
    assert first is not None, "the consumer read nothing from the beginning"
    assert (first.offset(), first.value()) == (4, b"p0-4")


def test_refused_partitions_are_reported_and_exit_1(shared_broker: BrokerProcess, topic: str,
                                                    tmp_path: Path) -> None:
    path = offsets_file(tmp_path, {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": 2},
        {"topic": topic, "partition": 1, "offset": RECORDS + 5},
        {"topic": "no-such-topic", "partition": 0, "offset": 1}]})
    result = delete_records(shared_broker, path)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stdout.splitlines()[2:] == [
        f"partition: {topic}-0\tlow_watermark: 2",
        f"partition: {topic}-1\terror: The requested offset is not within the range of offsets maintained by the "
        "server. (OFFSET_OUT_OF_RANGE)",
        "partition: no-such-topic-0\terror: Topic 'no-such-topic' does not exist. (UNKNOWN_TOPIC_OR_PARTITION)"]


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "The input string is not a valid JSON"),
    ({"version": 2, "partitions": []}, "Not supported version field value 2"),
    ({"version": 1}, "Missing partitions field"),
    ({"partitions": [{"topic": "t", "partition": 0}]}, "Missing offset field in partition entry"),
    ({"partitions": [{"topic": "t", "partition": "0", "offset": 1}]}, "Invalid partition field in partition entry"),
    ({"partitions": [{"topic": "t", "partition": 0, "offset": 1}, {"topic": "t", "partition": 0, "offset": 2}]},
     "Offset json file contains duplicate topic partitions: t-0"),
])
def test_bad_files_exit_1_with_one_line(shared_broker: BrokerProcess, tmp_path: Path, content: object,
                                        message: str) -> None:
    result = delete_records(shared_broker, offsets_file(tmp_path, content))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(message) and len(result.stderr.strip().splitlines()) == 1


def test_missing_file_and_missing_flag(shared_broker: BrokerProcess, tmp_path: Path) -> None:
    result = delete_records(shared_broker, str(tmp_path / "absent.json"))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == f"Cannot read --offset-json-file {tmp_path / 'absent.json'}: No such file or " \
                                    "directory"
    result = bus("delete-records", "--bootstrap-server", shared_broker.bootstrap)
    assert result.returncode == 1 and "--offset-json-file" in result.stderr and "Traceback" not in result.stderr
