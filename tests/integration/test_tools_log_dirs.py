"""`bus log-dirs --describe` against a broker process: Kafka's three outputs, sizes checked against the disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique


@pytest.fixture(scope="module")
def topics(shared_broker: BrokerProcess) -> tuple[str, str]:
    """Two topics: one of two partitions holding records, one empty."""
    full, empty = unique("tools-logdirs"), unique("tools-logdirs-empty")
    admin = ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})
    for future in admin.create_topics([NewTopic(full, 2, 1), NewTopic(empty, 1, 1)]).values():
        future.result(timeout=10)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    for i in range(20):
        producer.produce(full, value=b"v" * 100, partition=i % 2)
    assert producer.flush(10) == 0
    return full, empty


def log_dirs(broker: BrokerProcess, *args: str):  # type: ignore[no-untyped-def]
    return bus("log-dirs", "--bootstrap-server", broker.bootstrap, *args)


def on_disk(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.glob("*.log"))


def test_describe_prints_kafkas_json(shared_broker: BrokerProcess, topics: tuple[str, str]) -> None:
    full, empty = topics
    out = ok(log_dirs(shared_broker, "--describe", "--topic-list", f"{full},{empty}")).splitlines()
    assert out[:2] == ["Querying brokers for log directories information",
                       "Received log directory information from brokers 1"]
    assert len(out) == 3
    assert out[2].startswith('{"version":1,"brokers":[{"broker":1,"logDirs":[{"logDir":')
    report = json.loads(out[2])
    (broker,) = report["brokers"]
    (log_dir,) = broker["logDirs"]
    assert Path(log_dir["logDir"]) == shared_broker.data_dir.resolve()
    assert log_dir["error"] is None
    assert list(log_dir["partitions"][0]) == ["partition", "size", "offsetLag", "isFuture"]
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{full}-0", f"{full}-1", f"{empty}-0"}
    assert sizes == {name: on_disk(shared_broker.data_dir / name) for name in sizes}
    assert sizes[f"{full}-0"] > 1000 and sizes[f"{empty}-0"] == 0
    assert all(p["offsetLag"] == 0 and p["isFuture"] is False for p in log_dir["partitions"])


def test_all_topics_and_broker_list(shared_broker: BrokerProcess, topics: tuple[str, str]) -> None:
    report = json.loads(ok(log_dirs(shared_broker, "--describe", "--broker-list", "1")).splitlines()[2])
    names = {p["partition"] for p in report["brokers"][0]["logDirs"][0]["partitions"]}
    assert {f"{topics[0]}-0", f"{topics[1]}-0", "__consumer_offsets-0"} <= names


def test_bad_input_exits_1(shared_broker: BrokerProcess) -> None:
    result = log_dirs(shared_broker, "--describe", "--broker-list", "1,7")
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.strip() == "ERROR: The given brokers do not exist from --broker-list: 7. Current " \
                                    "existent brokers: 1"
    result = log_dirs(shared_broker, "--describe", "--broker-list", "one")
    assert result.returncode == 1 and result.stderr.startswith('Invalid --broker-list "one"')
    result = log_dirs(shared_broker)
    assert result.returncode == 1 and result.stderr.strip() == "Command must include exactly one action: --describe"
