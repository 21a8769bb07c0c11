"""The bus source against a real broker, driven as Spark drives it (no JVM needed).

Spark calls initialOffset / latestOffset / partitions on the driver's reader and `read` on a
pickled copy in each task; these tests do the same, so offset ranges, retention-deleted offsets
(failOnDataLoss both ways) and partitions that appear later are checked in a second or two.
"""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterator

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from deploy.processes.broker import BrokerProcess
from spark_jobs import offsets as off
from spark_jobs.kafka_source import BusKafkaStreamReader, SourceOptions, close_cached_consumers

_names = itertools.count()


@pytest.fixture
def topic() -> str:
    return f"src-{next(_names)}"


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def wait(client: AdminClient, futures: dict) -> None:
    """Wait for every admin future (the client must outlive them, hence the argument)."""
    for future in futures.values():
        future.result(15)


def create(broker: BrokerProcess, name: str, partitions: int) -> None:
    client = admin(broker)
    wait(client, client.create_topics([NewTopic(name, partitions)]))


def produce(broker: BrokerProcess, name: str, per_partition: int, partitions: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    for p in range(partitions):
        for i in range(start, start + per_partition):
            producer.produce(name, f"v{p}-{i}".encode(), f"k{i}".encode(), partition=p,
                             headers=[("h", b"x")], timestamp=1_700_000_000_000 + i)
    assert producer.flush(15) == 0


def reader(broker: BrokerProcess, **options: str) -> BusKafkaStreamReader:
    return BusKafkaStreamReader(SourceOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, **options}))


def run_batch(driver: BusKafkaStreamReader, start: dict, end: dict) -> list[dict]:
    """Plan on the driver, read each partition in a pickled copy (as a task would)."""
    rows: list[dict] = []
    for partition in driver.partitions(start, end):
        task = pickle.loads(pickle.dumps(driver))
        for batch in task.read(pickle.loads(pickle.dumps(partition))):
            assert isinstance(batch, pa.RecordBatch)
            rows.extend(batch.to_pylist())
    return rows


@pytest.fixture
def driver_readers() -> Iterator[list[BusKafkaStreamReader]]:
    made: list[BusKafkaStreamReader] = []
    yield made
    for r in made:
        r.stop()
    close_cached_consumers()


def test_offset_ranges_are_read_exactly(shared_broker: BrokerProcess, topic: str, driver_readers: list) -> None:
    create(shared_broker, topic, 2)
    produce(shared_broker, topic, 30, 2)
    driver = reader(shared_broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="20",
                    includeHeaders="true")
    driver_readers.append(driver)
    assert driver.getDefaultReadLimit() == ReadMaxRows(20)
    start = driver.initialOffset()
    assert start == {topic: {"0": 0, "1": 0}}
    end = driver.latestOffset(start, ReadMaxRows(20))
    assert end == {topic: {"0": 10, "1": 10}}
    rows = run_batch(driver, start, end)
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(p, o) for p in (0, 1) for o in range(10)]
    first = next(r for r in rows if r["partition"] == 1 and r["offset"] == 3)
    assert first["key"] == b"k3" and first["value"] == b"v1-3" and first["topic"] == topic
    assert first["timestampType"] == 0 and first["timestamp"].timestamp() == pytest.approx(1_700_000_000.003)
    assert first["headers"] == [{"key": "h", "value": b"x"}]
    rest = driver.latestOffset(end, ReadAllAvailable())
    assert rest == {topic: {"0": 30, "1": 30}}
    assert len(run_batch(driver, end, rest)) == 40
    assert driver.latestOffset(rest, ReadMaxRows(20)) == rest  # nothing new: the same offset
    assert driver.reportLatestOffset() == rest


def test_available_now_stops_at_what_was_there(shared_broker: BrokerProcess, topic: str, driver_readers: list) -> None:
    create(shared_broker, topic, 1)
    produce(shared_broker, topic, 10, 1)
    driver = reader(shared_broker, subscribe=topic, startingOffsets="earliest")
    driver_readers.append(driver)
    start = driver.initialOffset()
    driver.prepareForTriggerAvailableNow()
    produce(shared_broker, topic, 10, 1, start=10)
    assert driver.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 10}}


def test_starting_latest_and_json(shared_broker: BrokerProcess, topic: str, driver_readers: list) -> None:
    create(shared_broker, topic, 2)
    produce(shared_broker, topic, 5, 2)
    latest = reader(shared_broker, subscribe=topic)  # Spark's default: latest
    exact = reader(shared_broker, assign=f'{{"{topic}": [1]}}', startingOffsets=f'{{"{topic}": {{"1": 3}}}}')
    driver_readers += [latest, exact]
    assert latest.initialOffset() == {topic: {"0": 5, "1": 5}}
    start = exact.initialOffset()
    assert start == {topic: {"1": 3}}
    rows = run_batch(exact, start, exact.latestOffset(start, ReadAllAvailable()))
    assert [(r["partition"], r["offset"]) for r in rows] == [(1, 3), (1, 4)]


def delete_before(broker: BrokerProcess, name: str, partition: int, offset: int) -> None:
    client = admin(broker)
    wait(client, client.delete_records([TopicPartition(name, partition, offset)]))


def test_deleted_offsets_fail_the_read_when_fail_on_data_loss(
        shared_broker: BrokerProcess, topic: str, driver_readers: list) -> None:
    create(shared_broker, topic, 1)
    produce(shared_broker, topic, 50, 1)
    driver = reader(shared_broker, subscribe=topic, startingOffsets="earliest")
    driver_readers.append(driver)
    start = driver.initialOffset()
    end = driver.latestOffset(start, ReadAllAvailable())
    delete_before(shared_broker, topic, 0, 20)  # retention ran between planning and reading
    with pytest.raises(off.DataLossError, match=r"offsets 0\.\.19 were deleted.*failOnDataLoss"):
        run_batch(driver, start, end)


def test_deleted_offsets_are_skipped_without_fail_on_data_loss(
        shared_broker: BrokerProcess, topic: str, driver_readers: list) -> None:
    create(shared_broker, topic, 1)
    produce(shared_broker, topic, 50, 1)
    driver = reader(shared_broker, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false")
    driver_readers.append(driver)
    start = driver.initialOffset()
    end = driver.latestOffset(start, ReadAllAvailable())
    delete_before(shared_broker, topic, 0, 20)
    assert [r["offset"] for r in run_batch(driver, start, end)] == list(range(20, 50))
    delete_before(shared_broker, topic, 0, 50)  # everything gone: the range reads nothing
    assert run_batch(driver, start, end) == []


def test_deleted_topic_is_data_loss_on_the_driver(broker: BrokerProcess, topic: str, driver_readers: list) -> None:
    create(broker, topic, 1)
    produce(broker, topic, 5, 1)
    strict = reader(broker, subscribe=topic, startingOffsets="earliest")
    lenient = reader(broker, subscribe=topic, startingOffsets="earliest", failOnDataLoss="false")
    driver_readers += [strict, lenient]
    start = strict.initialOffset()
    client = admin(broker)
    wait(client, client.delete_topics([topic]))
    with pytest.raises(off.DataLossError, match="is gone"):
        strict.latestOffset(start, ReadAllAvailable())
    assert lenient.latestOffset(start, ReadAllAvailable()) == {}


def test_new_partitions_are_read_from_their_start(shared_broker: BrokerProcess, topic: str,
                                                  driver_readers: list) -> None:
    create(shared_broker, topic, 1)
    produce(shared_broker, topic, 5, 1)
    driver = reader(shared_broker, subscribe=topic, startingOffsets="latest")
    driver_readers.append(driver)
    start = driver.initialOffset()
    assert start == {topic: {"0": 5}}
    client = admin(shared_broker)
    wait(client, client.create_partitions([NewPartitions(topic, 3)]))
    produce(shared_broker, topic, 4, 3, start=100)
    end = driver.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 9, "1": 4, "2": 4}}
    rows = run_batch(driver, start, end)
    assert sorted((r["partition"], r["offset"]) for r in rows) == (
        [(0, o) for o in range(5, 9)] + [(p, o) for p in (1, 2) for o in range(4)])


def test_subscribe_pattern_finds_topics_created_later(shared_broker: BrokerProcess, topic: str,
                                                      driver_readers: list) -> None:
    create(shared_broker, f"{topic}.a", 1)
    driver = reader(shared_broker, subscribePattern=rf"{topic}\..*", startingOffsets="earliest")
    driver_readers.append(driver)
    start = driver.initialOffset()
    assert start == {f"{topic}.a": {"0": 0}}
    create(shared_broker, f"{topic}.b", 1)
    produce(shared_broker, f"{topic}.b", 3, 1)
    end = driver.latestOffset(start, ReadAllAvailable())
    assert end == {f"{topic}.a": {"0": 0}, f"{topic}.b": {"0": 3}}
    assert [r["value"] for r in run_batch(driver, start, end)] == [b"v0-0", b"v0-1", b"v0-2"]


def test_min_partitions_splits_a_range_into_tasks(shared_broker: BrokerProcess, topic: str,
                                                  driver_readers: list) -> None:
    create(shared_broker, topic, 1)
    produce(shared_broker, topic, 40, 1)
    driver = reader(shared_broker, subscribe=topic, startingOffsets="earliest", minPartitions="4")
    driver_readers.append(driver)
    start = driver.initialOffset()
    end = driver.latestOffset(start, ReadAllAvailable())
    assert len(driver.partitions(start, end)) == 4
    assert [r["offset"] for r in run_batch(driver, start, end)] == list(range(40))


def test_commit_reports_progress_to_a_group_when_asked(shared_broker: BrokerProcess, topic: str,
                                                       driver_readers: list) -> None:
    """Spark's checkpoint holds the truth; with kafka.group.id the processed offsets also go to the
    group, so lag monitoring sees the job like any consumer group."""
    create(shared_broker, topic, 2)
    produce(shared_broker, topic, 5, 2)
    group = f"{topic}-job"
    driver = reader(shared_broker, subscribe=topic, startingOffsets="earliest", **{"kafka.group.id": group})
    driver_readers.append(driver)
    end = driver.latestOffset(driver.initialOffset(), ReadAllAvailable())
    driver.commit(end)
    check = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group})
    try:
        committed = check.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=15)
    finally:
        check.close()
    assert [tp.offset for tp in committed] == [5, 5]
