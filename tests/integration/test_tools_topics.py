"""`bus topics` against a broker process: Kafka's flags, output lines and exit codes.

Effects are cross-checked with confluent-kafka's AdminClient, so the tool cannot pass by agreeing
with our own admin client about something the broker never did.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ConfigResource

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique


@pytest.fixture(scope="module")
def judge(shared_broker: BrokerProcess) -> ConfluentAdmin:
    return ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})


def topics(broker: BrokerProcess, *args: str, **kwargs: object):  # type: ignore[no-untyped-def]
    return bus("topics", "--bootstrap-server", broker.bootstrap, *args, **kwargs)  # type: ignore[arg-type]


def partitions_of(judge: ConfluentAdmin, topic: str) -> int:
    return len(judge.list_topics(topic, timeout=10).topics[topic].partitions)


def test_create_describe_list_delete(shared_broker: BrokerProcess, judge: ConfluentAdmin) -> None:
    name = unique("tools-topic")
    out = ok(topics(shared_broker, "--create", "--topic", name, "--partitions", "3", "--replication-factor", "1",
                    "--config", "retention.ms=120000", "--config", "cleanup.policy=compact"))
    assert out.strip() == f"Created topic {name}."
    assert partitions_of(judge, name) == 3

    described = ok(topics(shared_broker, "--describe", "--topic", name)).splitlines()
    head = described[0].split("\t")
    assert head[0] == f"Topic: {name}"
    assert head[1].startswith("TopicId: ") and len(head[1]) > len("TopicId: ")
    assert head[2:4] == ["PartitionCount: 3", "ReplicationFactor: 1"]
    configs = dict(kv.split("=") for kv in head[4].removeprefix("Configs: ").split(","))
    assert configs == {"cleanup.policy": "compact", "retention.ms": "120000"}
    assert described[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1\tElr: N/A"
                             "\tLastKnownElr: N/A" for p in range(3)]

    listed = ok(topics(shared_broker, "--list")).splitlines()
    assert name in listed and "__consumer_offsets" in listed
    assert "__consumer_offsets" not in ok(topics(shared_broker, "--list", "--exclude-internal")).splitlines()

    assert ok(topics(shared_broker, "--delete", "--topic", name)) == ""
    deadline = time.monotonic() + 10
    while name in judge.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in judge.list_topics(timeout=10).topics


def test_create_twice_fails_unless_if_not_exists(shared_broker: BrokerProcess) -> None:
    name = unique("tools-dup")
    ok(topics(shared_broker, "--create", "--topic", name))
    again = topics(shared_broker, "--create", "--topic", name)
    assert again.returncode == 1
    assert "Error while executing topic command" in again.stderr and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert ok(topics(shared_broker, "--create", "--topic", name, "--if-not-exists")) == ""


def test_period_or_underscore_warns_like_kafka(shared_broker: BrokerProcess) -> None:
    name = unique("tools.dotted")
    out = ok(topics(shared_broker, "--create", "--topic", name))
    assert out.startswith("WARNING: Due to limitations in metric names, topics with a period ('.') or underscore")
    assert out.splitlines()[-1] == f"Created topic {name}."


def test_replica_assignment(shared_broker: BrokerProcess, judge: ConfluentAdmin) -> None:
    name = unique("tools-assign")
    ok(topics(shared_broker, "--create", "--topic", name, "--replica-assignment", "1,1,1,1"))
    assert partitions_of(judge, name) == 4
    bad = topics(shared_broker, "--create", "--topic", unique("tools-assign"), "--replica-assignment", "1:1")
    assert bad.returncode == 1 and "duplicate entries: 1" in bad.stderr
    unknown = topics(shared_broker, "--create", "--topic", unique("tools-assign"), "--replica-assignment", "7")
    assert unknown.returncode == 1 and "INVALID_REPLICA_ASSIGNMENT" in unknown.stderr
    both = topics(shared_broker, "--create", "--topic", name, "--replica-assignment", "1", "--partitions", "2")
    assert both.returncode == 1


def test_alter_partitions_and_configs(shared_broker: BrokerProcess, judge: ConfluentAdmin) -> None:
    name = unique("tools-alter")
    ok(topics(shared_broker, "--create", "--topic", name, "--partitions", "1", "--config", "retention.ms=60000"))
    assert ok(topics(shared_broker, "--alter", "--topic", name, "--partitions", "4")) == ""
    assert partitions_of(judge, name) == 4
    shrink = topics(shared_broker, "--alter", "--topic", name, "--partitions", "2")
    assert shrink.returncode == 1 and "INVALID_PARTITIONS" in shrink.stderr

    out = ok(topics(shared_broker, "--alter", "--topic", name, "--config", "segment.ms=3600000",
                    "--delete-config", "retention.ms"))
    assert out.strip() == f"Completed updating config for topic {name}."
    resource = ConfigResource("topic", name)
    entries = judge.describe_configs([resource])[resource].result(timeout=10)
    assert entries["segment.ms"].value == "3600000" and not entries["segment.ms"].is_default
    assert entries["retention.ms"].is_default


def test_regex_and_missing_topics(shared_broker: BrokerProcess) -> None:
    stem = unique("tools-rx")
    for suffix in ("a", "b"):
        ok(topics(shared_broker, "--create", "--topic", f"{stem}-{suffix}"))
    described = ok(topics(shared_broker, "--describe", "--topic", f"{stem}-.*"))
    assert [line.split("\t")[0] for line in described.splitlines() if line.startswith("Topic:")] == [
        f"Topic: {stem}-a", f"Topic: {stem}-b"]
    listed = ok(topics(shared_broker, "--list", "--topic", f"{stem}-a,{stem}-b")).splitlines()
    assert listed == [f"{stem}-a", f"{stem}-b"]

    missing = topics(shared_broker, "--describe", "--topic", f"{stem}-zzz")
    assert missing.returncode == 1 and f"Topic '{stem}-zzz' does not exist as expected" in missing.stderr
    assert ok(topics(shared_broker, "--describe", "--topic", f"{stem}-zzz", "--if-exists")) == ""
    assert ok(topics(shared_broker, "--delete", "--topic", f"{stem}-zzz", "--if-exists")) == ""

    ok(topics(shared_broker, "--delete", "--topic", f"{stem}-.*"))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ok(topics(shared_broker, "--list", "--topic", f"{stem}-.*")):
        time.sleep(0.1)
    assert ok(topics(shared_broker, "--list", "--topic", f"{stem}-.*")) == ""


def test_report_options(shared_broker: BrokerProcess) -> None:
    name = unique("tools-report")
    ok(topics(shared_broker, "--create", "--topic", name, "--partitions", "2", "--config", "min.insync.replicas=1"))
    # Single broker, replication factor 1: nothing is under-replicated or unavailable...
    assert ok(topics(shared_broker, "--describe", "--topic", name, "--under-replicated-partitions")) == ""
    assert ok(topics(shared_broker, "--describe", "--topic", name, "--unavailable-partitions")) == ""
    # ...and every partition has exactly min.insync.replicas in sync.
    at_min = ok(topics(shared_broker, "--describe", "--topic", name, "--at-min-isr-partitions")).splitlines()
    assert len(at_min) == 2 and all(line.startswith(f"\tTopic: {name}\tPartition: ") for line in at_min)
    overrides = ok(topics(shared_broker, "--describe", "--topic", name, "--topics-with-overrides")).splitlines()
    assert len(overrides) == 1 and overrides[0].startswith(f"Topic: {name}\t")
    plain = unique("tools-plain")
    ok(topics(shared_broker, "--create", "--topic", plain))
    assert ok(topics(shared_broker, "--describe", "--topic", plain, "--topics-with-overrides")) == ""


@pytest.mark.parametrize("argv, message", [
    (["--list", "--create", "--topic", "x"], "exactly one action"),
    (["--create"], "topic"),
    (["--describe", "--replication-factor", "2"], "replication-factor"),
    (["--alter", "--topic", "x"], "partitions"),
    (["--create", "--topic", "x", "--partitions", "0"], "The partitions must be greater than 0"),
    (["--create", "--topic", "x", "--config", "novalue"], 'format "key=val"'),
    (["--list", "--if-not-exists"], "if-not-exists"),
    (["--list", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
])
def test_bad_flags_exit_1(shared_broker: BrokerProcess, argv: list[str], message: str) -> None:
    result = topics(shared_broker, *argv)
    assert result.returncode == 1
    assert message in result.stderr


def test_help_and_unreachable_server() -> None:
    helped = bus("topics", "--help")
    assert helped.returncode == 0 and "--bootstrap-server" in helped.stdout and "--replica-assignment" in helped.stdout
    assert bus("topics", "--list").returncode == 1  # --bootstrap-server is required
    started = time.monotonic()
    dead = bus("topics", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--list", timeout=30)
    assert dead.returncode == 1
    assert "could not reach any bootstrap server" in dead.stderr
    assert time.monotonic() - started < 10
