"""The broker's /metrics under Kafka's names (as the Prometheus JMX exporter and kafka-exporter name them), judged
against what librdkafka clients did: records and bytes produced and fetched per topic, requests per Kafka request
name with their time percentiles, partition and leader counts, the active controller, and a consumer group's lag
that follows its commits."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.cluster import ClusterProcess, until

TOPIC = "plates"
RECORDS = 10
VALUE = b"x" * 100


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    process = BrokerProcess(tmp_path_factory.mktemp("metrics"), {"bus.metrics.listener": f"127.0.0.1:{port}"})
    process.start()
    try:
        yield process, port
    finally:
        process.stop()


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the one series `name` with (at least) `labels`, None if absent."""
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}(?:\{{(.*)\}})? (\S+)", line)
        if match and all(f'{key}="{value}"' in (match.group(1) or "") for key, value in labels.items()):
            return float(match.group(2))
    return None


def test_kafka_named_metrics_follow_what_clients_did(broker: tuple[BrokerProcess, int]) -> None:
    process, port = broker
    conf = {"bootstrap.servers": process.bootstrap}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = Producer({**conf, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(TOPIC, VALUE, key=str(i).encode())
        producer.flush(10)  # one request each: RequestsPerSec counts them
    consumer = Consumer({**conf, "group.id": "ingest", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(message)
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 4)], asynchronous=False)

    text = scrape(port)
    assert sample(text, "kafka_server_brokertopicmetrics_messagesin_total", topic=TOPIC) == RECORDS
    assert sample(text, "kafka_server_brokertopicmetrics_bytesin_total", topic=TOPIC) >= RECORDS * len(VALUE)
    assert sample(text, "kafka_server_brokertopicmetrics_bytesout_total", topic=TOPIC) >= 4 * len(VALUE)
    assert sample(text, "kafka_network_requestmetrics_requests_total", request="Produce") >= RECORDS
    assert sample(text, "kafka_network_requestmetrics_requests_total", request="Fetch") >= 1
    p99 = sample(text, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.99")
    p50 = sample(text, "kafka_network_requestmetrics_totaltimems", request="Produce", quantile="0.5")
    assert p99 is not None and p50 is not None and 0 < p50 <= p99 < 30_000
    assert sample(text, "kafka_server_replicamanager_partitioncount") >= 1 + 1  # plates and __consumer_offsets
    assert sample(text, "kafka_server_replicamanager_leadercount") == sample(
        text, "kafka_server_replicamanager_partitioncount")  # one broker leads all it hosts
    assert sample(text, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample(text, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample(text, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    idle = sample(text, "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent")
    assert idle is not None and 0 <= idle <= 1
    assert sample(text, "kafka_consumergroup_lag", consumergroup="ingest", topic=TOPIC, partition="0") == RECORDS - 4
    assert "# TYPE bus_request_handler_errors_total counter" in text  # a count, not a gauge

    consumer.commit(offsets=[TopicPartition(TOPIC, 0, RECORDS)], asynchronous=False)
    assert sample(scrape(port), "kafka_consumergroup_lag", consumergroup="ingest", topic=TOPIC, partition="0") == 0
    consumer.close()


@pytest.mark.slow
def test_a_dead_follower_shows_as_under_replicated_on_the_leader_and_one_node_is_the_active_controller(
        tmp_path: Path) -> None:
    cluster = ClusterProcess(tmp_path, 3)
    ports = {node_id: free_port() for node_id in (1, 2, 3)}
    for node_id, port in ports.items():
        cluster[node_id].overrides["bus.metrics.listener"] = f"127.0.0.1:{port}"
    cluster.start()
    try:
        cluster.wait_for_brokers()
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("hits", 1, 3)])["hits"].result(30)
        # the broker answering may apply the new topic a moment after the controller committed it
        partition = until(lambda: admin.list_topics("hits", timeout=10).topics["hits"].partitions.get(0), 30,
                          "the new topic's partition in the metadata")
        leader = partition.leader
        assert sum(sample(scrape(port), "kafka_controller_kafkacontroller_activecontrollercount") or 0
                   for port in ports.values()) == 1
        follower = next(node_id for node_id in ports if node_id != leader)
        cluster[follower].kill()
        until(lambda: True if (sample(scrape(ports[leader]), "kafka_server_replicamanager_underreplicatedpartitions")
                               or 0) >= 1 else None, 60, "an under-replicated partition on the leader")
        assert (sample(scrape(ports[leader]), "kafka_server_replicamanager_isrshrinks_total") or 0) >= 1
    finally:
        cluster.stop()
