"""`bus producer-perf-test` and `bus consumer-perf-test`: Kafka's summary lines, against a broker process."""

from __future__ import annotations

import re

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique

PRODUCER_SUMMARY = re.compile(
    r"^(?P<n>\d+) records sent, (?P<rate>\d+\.\d{6}) records/sec \((?P<mb>\d+\.\d{2}) MB/sec\), "
    r"\d+\.\d{2} ms avg latency, \d+\.\d{2} ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, "
    r"\d+ ms 99\.9th\.$")
CONSUMER_HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
                   "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}:\d{3}"


@pytest.fixture
def topic(shared_broker: BrokerProcess) -> str:
    name = unique("tools-perf")
    admin = ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=10)
    return name


def test_produce_then_consume(shared_broker: BrokerProcess, topic: str) -> None:
    produced = ok(bus("producer-perf-test", "--topic", topic, "--num-records", "20000", "--record-size", "100",
                      "--throughput", "-1", "--producer-props", f"bootstrap.servers={shared_broker.bootstrap}",
                      "acks=all", "linger.ms=5"))
    summary = produced.strip().splitlines()[-1]
    match = PRODUCER_SUMMARY.match(summary)
    assert match, summary
    assert match["n"] == "20000" and float(match["rate"]) > 0

    consumed = ok(bus("consumer-perf-test", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                      "--messages", "20000", "--timeout", "10000"))
    header, values = consumed.strip().splitlines()
    assert header == CONSUMER_HEADER
    cells = values.split(", ")
    assert len(cells) == 10 and re.fullmatch(DATE, cells[0]) and re.fullmatch(DATE, cells[1])
    assert cells[4] == "20000"
    assert abs(float(cells[2]) - 20000 * 100 / (1024 * 1024)) < 0.001  # data.consumed.in.MB: values only
    assert all(re.fullmatch(r"\d+\.\d{4}", cells[i]) for i in (2, 3, 5, 8, 9))


def test_throttled_with_warmup(shared_broker: BrokerProcess, topic: str) -> None:
    out = ok(bus("producer-perf-test", "--topic", topic, "--num-records", "600", "--payload-monotonic",
                 "--throughput", "400", "--warmup-records", "100", "--bootstrap-server", shared_broker.bootstrap))
    lines = out.strip().splitlines()
    assert lines[0] == "Warmup first 100 records. Steady state results will print after the complete test summary."
    assert PRODUCER_SUMMARY.match(lines[-2])
    assert lines[-1].startswith("500 steady state records sent, ")
    rate = float(lines[-2].split(" records/sec")[0].split(", ")[1])
    assert rate < 600  # throttled to ~400/s (1.5 s), far below the unthrottled rate


def test_consumer_perf_times_out_with_a_warning(shared_broker: BrokerProcess, topic: str) -> None:
    out = ok(bus("consumer-perf-test", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                 "--messages", "10", "--timeout", "1500", "--hide-header"))
    lines = out.strip().splitlines()
    assert lines[0].startswith("WARNING: Exiting before consuming the expected number of messages: timeout (1500 ms)")
    assert lines[1].split(", ")[4] == "0"


@pytest.mark.parametrize("argv, message", [
    (["--topic", "t", "--num-records", "10", "--record-size", "10", "--throughput", "-1"],
     "Either --producer-props or --producer.config must be specified."),
    (["--topic", "t", "--num-records", "0", "--record-size", "10", "--throughput", "-1", "--producer-props",
      "bootstrap.servers=127.0.0.1:1"], "--num-records should be greater than zero"),
    (["--topic", "t", "--num-records", "10", "--throughput", "-1", "--producer-props", "a=b"],
     "one of the arguments --record-size --payload-file --payload-monotonic is required"),
    (["--topic", "t", "--num-records", "10", "--record-size", "10", "--throughput", "-1", "--producer-props",
      "bootstrap.servers"], "Invalid property: bootstrap.servers"),
])
def test_producer_perf_bad_flags(argv: list[str], message: str) -> None:
    result = bus("producer-perf-test", *argv)
    assert result.returncode == 1 and message in result.stderr


def test_help() -> None:
    for tool in ("producer-perf-test", "consumer-perf-test", "console-producer", "console-consumer", "configs",
                 "consumer-groups", "topics"):
        result = bus(tool, "--help")
        assert result.returncode == 0 and "usage: bus " + tool in result.stdout
