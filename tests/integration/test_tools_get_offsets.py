"""`bus get-offsets` against a broker process, each answer cross-checked with librdkafka's own look-ups.

`topic:partition:offset` lines must equal confluent-kafka's `get_watermark_offsets` (latest, earliest) and
`offsets_for_times` (a timestamp), so the tool cannot pass by agreeing with our admin client about a wrong answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique

BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="module")
def topic(shared_broker: BrokerProcess) -> str:
    """Three partitions holding 3, 5 and 0 records, record i of a partition stamped BASE_TS + 1000 * i."""
    name = unique("tools-offsets")
    admin = ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(name, 3, 1)])[name].result(timeout=10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 0})
    for partition, count in ((0, 3), (1, 5)):
        for i in range(count):
            producer.produce(name, value=f"v{i}".encode(), partition=partition, timestamp=BASE_TS + 1000 * i)
    assert producer.flush(10) == 0
    return name


@pytest.fixture(scope="module")
def judge(shared_broker: BrokerProcess) -> Iterator[Consumer]:
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": unique("judge")})
    yield consumer
    consumer.close()


def get_offsets(broker: BrokerProcess, *args: str):  # type: ignore[no-untyped-def]
    return bus("get-offsets", "--bootstrap-server", broker.bootstrap, *args)


def lines(out: str) -> dict[tuple[str, int], int]:
    parsed = {}
    for line in out.splitlines():
        topic, partition, offset = line.rsplit(":", 2)
        parsed[(topic, int(partition))] = int(offset)
    return parsed


def test_latest_and_earliest_equal_librdkafka_watermarks(shared_broker: BrokerProcess, topic: str,
                                                         judge: Consumer) -> None:
    marks = {p: judge.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(3)}
    latest = ok(get_offsets(shared_broker, "--topic", topic))
    assert latest.splitlines() == [f"{topic}:{p}:{marks[p][1]}" for p in range(3)]  # sorted, Kafka's layout
    assert [marks[p][1] for p in range(3)] == [3, 5, 0]
    assert lines(ok(get_offsets(shared_broker, "--topic", topic, "--time", "-1"))) == lines(latest)
    earliest = lines(ok(get_offsets(shared_broker, "--topic", topic, "--time", "earliest")))
    assert earliest == {(topic, p): marks[p][0] for p in range(3)}


def test_timestamp_equals_offsets_for_times(shared_broker: BrokerProcess, topic: str, judge: Consumer) -> None:
    when = BASE_TS + 1500  # between records 1 and 2
    found = judge.offsets_for_times([TopicPartition(topic, p, when) for p in range(3)], timeout=10)
    expected = {(topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}
    assert expected == {(topic, 0): 2, (topic, 1): 2}  # partition 2 has no record at or after it: left out
    assert lines(ok(get_offsets(shared_broker, "--topic", topic, "--time", str(when)))) == expected


def test_partitions_and_max_timestamp(shared_broker: BrokerProcess, topic: str) -> None:
    out = ok(get_offsets(shared_broker, "--topic", topic, "--partitions", "1", "--time", "max-timestamp"))
    assert out.splitlines() == [f"{topic}:1:4"]  # the record with the largest timestamp
    out = ok(get_offsets(shared_broker, "--topic-partitions", f"{topic}:0-2"))
    assert out.splitlines() == [f"{topic}:0:3", f"{topic}:1:5"]


def test_topic_is_a_regular_expression(shared_broker: BrokerProcess, topic: str) -> None:
    out = ok(get_offsets(shared_broker, "--topic", topic[:-3] + ".*"))
    assert lines(out) == {(topic, 0): 3, (topic, 1): 5, (topic, 2): 0}


@pytest.mark.parametrize(("args", "message"), [
    (("--topic", "no-such-topic"), "Could not match any topic-partitions with the specified filters"),
    (("--time", "yesterday"), "Malformed time argument yesterday."),
    (("--partitions", "x"), "Invalid --partitions 'x'"),
    (("--topic", "a", "--topic-partitions", "b"), "--topic-partitions cannot be used with --topic or --partitions"),
])
def test_bad_input_exits_1_with_one_line(shared_broker: BrokerProcess, topic: str, args: tuple[str, ...],
                                         message: str) -> None:
    result = get_offsets(shared_broker, *args)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.strip().startswith(message) and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_unreachable_server_and_bad_flag() -> None:
    result = bus("get-offsets", "--bootstrap-server", "127.0.0.1:1", "--topic", "t")
    assert result.returncode == 1 and "Traceback" not in result.stderr and result.stderr.strip()
    result = bus("get-offsets", "--bootstrap-server", "127.0.0.1:1", "--no-such-flag")
    assert result.returncode == 1 and "unrecognized arguments: --no-such-flag" in result.stderr
