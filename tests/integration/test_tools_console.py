"""`bus console-producer` and `bus console-consumer` against a broker process.

Records written by the console producer are read back with confluent-kafka (keys, headers, null
markers, compression), and records written by confluent-kafka are printed by the console consumer
in Kafka's DefaultMessageFormatter layout.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from contracts.processes import spawn
from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique


def new_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    name = unique("tools-console")
    admin = ConfluentAdmin({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(timeout=10)
    return name


def read_all(broker: BrokerProcess, topic: str, count: int, partition: int = 0) -> list:  # type: ignore[type-arg]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "judge", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + 15
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out.append(msg)
    finally:
        consumer.close()
    return out


def test_console_producer_keys_headers_and_nulls(shared_broker: BrokerProcess) -> None:
    topic = new_topic(shared_broker)
    lines = "h1:v1,h2:NULL\tk1\tvalue one\nNULL\tk2\tvalue two\nnone:x\tNULL\tNULL\n"
    ok(bus("console-producer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           "--property", "parse.key=true", "--property", "parse.headers=true", "--property", "null.marker=NULL",
           "--compression-codec", "--sync", input=lines))
    got = read_all(shared_broker, topic, 3)
    assert [(m.key(), m.value()) for m in got] == [(b"k1", b"value one"), (b"k2", b"value two"), (None, None)]
    assert got[0].headers() == [("h1", b"v1"), ("h2", None)]
    assert not got[1].headers()
    assert got[2].headers() == [("none", b"x")]


def test_console_producer_separator_and_errors(shared_broker: BrokerProcess) -> None:
    topic = new_topic(shared_broker)
    ok(bus("console-producer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           "--property", "parse.key=true", "key.separator=:", "--producer-property", "acks=1",
           input="a:1\nb:2:3\n"))
    assert [(m.key(), m.value()) for m in read_all(shared_broker, topic, 2)] == [(b"a", b"1"), (b"b", b"2:3")]

    missing = bus("console-producer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                  "--property", "parse.key=true", input="no separator here\n")
    assert missing.returncode == 1
    assert "No key separator found on line number 1: 'no separator here'" in missing.stderr
    bad_codec = bus("console-producer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                    "--compression-codec", "brotli", input="")
    assert bad_codec.returncode == 1 and "Unknown compression codec" in bad_codec.stderr


def test_console_consumer_prints_like_kafka(shared_broker: BrokerProcess) -> None:
    topic = new_topic(shared_broker, partitions=2)
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap})
    producer.produce(topic, key=b"k0", value=b"v0", partition=1, timestamp=1_700_000_000_000,
                     headers=[("h", b"x"), ("n", None)])
    producer.produce(topic, value=b"v1", partition=1, timestamp=1_700_000_000_001)
    producer.produce(topic, key=b"k2", value=None, partition=1, timestamp=1_700_000_000_002)
    assert producer.flush(10) == 0

    result = bus("console-consumer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                 "--from-beginning", "--max-messages", "3", "--property", "print.key=true", "--property",
                 "print.timestamp=true", "--property", "print.partition=true", "--property", "print.offset=true",
                 "--property", "print.headers=true")
    assert ok(result).splitlines() == [
        "CreateTime:1700000000000\tPartition:1\tOffset:0\th:x,n:null\tk0\tv0",
        "CreateTime:1700000000001\tPartition:1\tOffset:1\tNO_HEADERS\tnull\tv1",
        "CreateTime:1700000000002\tPartition:1\tOffset:2\tNO_HEADERS\tk2\tnull",
    ]
    assert "Processed a total of 3 messages" in result.stderr

    plain = ok(bus("console-consumer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                   "--partition", "1", "--offset", "1", "--max-messages", "2", "--property", "print.key=true",
                   "--property", "key.separator=|", "--property", "null.literal=<none>"))
    assert plain.splitlines() == ["<none>|v1", "k2|<none>"]


def test_console_consumer_group_and_timeout(shared_broker: BrokerProcess) -> None:
    topic = new_topic(shared_broker)
    ok(bus("console-producer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           input="".join(f"line {i}\n" for i in range(5))))
    group = unique("tools-console-group")
    first = bus("console-consumer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                "--group", group, "--from-beginning", "--max-messages", "3",
                "--consumer-property", "auto.commit.interval.ms=100")
    assert ok(first).splitlines() == ["line 0", "line 1", "line 2"]
    # The group committed its position on close: the next run continues where it stopped, then times out.
    started = time.monotonic()
    rest = bus("console-consumer", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
               "--group", group, "--timeout-ms", "2000")
    assert ok(rest).splitlines() == ["line 3", "line 4"]
    assert "Processed a total of 2 messages" in rest.stderr
    assert time.monotonic() - started < 30
    described = ok(bus("consumer-groups", "--bootstrap-server", shared_broker.bootstrap, "--describe",
                       "--group", group))
    assert " 5 " in described and "LAG" in described


def test_console_consumer_stops_on_sigterm(shared_broker: BrokerProcess) -> None:
    """SIGTERM (what `kill` and service managers send) ends the consumer cleanly: it leaves, counts, exits 0."""
    from bus.client.admin import AdminClient

    topic = new_topic(shared_broker)
    group = unique("tools-console-term")
    proc = spawn([sys.executable, "-m", "bus", "console-consumer", "--bootstrap-server", shared_broker.bootstrap,
                  "--topic", topic, "--group", group], subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with AdminClient(bootstrap_servers=shared_broker.bootstrap) as admin:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                if admin.describe_consumer_groups([group])[group].state == "Stable":
                    break
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
            err = proc.communicate(timeout=20)[1].decode()
            assert admin.describe_consumer_groups([group])[group].state == "Empty"  # it left the group
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0, err
    assert "Processed a total of 0 messages" in err


@pytest.mark.parametrize("argv, message", [
    (["--max-messages", "1"], "Exactly one of --include/--topic"),
    (["--topic", "t", "--offset", "5"], "partition is required"),
    (["--topic", "t", "--partition", "0", "--offset", "soon"], "offset value 'soon' is incorrect"),
    (["--topic", "t", "--partition", "0", "--group", "g"], "cannot be specified together"),
])
def test_console_consumer_bad_flags(shared_broker: BrokerProcess, argv: list[str], message: str) -> None:
    result = bus("console-consumer", "--bootstrap-server", shared_broker.bootstrap, *argv)
    assert result.returncode == 1 and message in result.stderr


def test_unreachable_server_fails_fast() -> None:
    from contracts.ports import free_port

    started = time.monotonic()
    for tool in (["console-producer", "--topic", "t"], ["console-consumer", "--topic", "t"]):
        result = bus(*tool, "--bootstrap-server", f"127.0.0.1:{free_port()}", input="x\n", timeout=30)
        assert result.returncode == 1 and "could not reach any bootstrap server" in result.stderr
    assert time.monotonic() - started < 15
