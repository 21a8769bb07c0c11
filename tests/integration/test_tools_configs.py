"""`bus configs` against a broker process: describe and incremental alter of topic and broker configs."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient as ConfluentAdmin
from confluent_kafka.admin import ConfigResource, NewTopic

from deploy.processes.broker import BrokerProcess
from tests.integration._support_tools import bus, ok, unique


@pytest.fixture(scope="module")
def judge(shared_broker: BrokerProcess) -> ConfluentAdmin:
    return ConfluentAdmin({"bootstrap.servers": shared_broker.bootstrap})


@pytest.fixture
def topic(judge: ConfluentAdmin) -> str:
    name = unique("tools-cfg")
    judge.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    return name


def configs(broker: BrokerProcess, *args: str):  # type: ignore[no-untyped-def]
    return bus("configs", "--bootstrap-server", broker.bootstrap, *args)


def test_alter_then_describe_topic(shared_broker: BrokerProcess, judge: ConfluentAdmin, topic: str) -> None:
    assert ok(configs(shared_broker, "--entity-type", "topics", "--entity-name", topic, "--describe")) == \
        f"Dynamic configs for topic {topic} are:\n"
    out = ok(configs(shared_broker, "--entity-type", "topics", "--entity-name", topic, "--alter",
                     "--add-config", "retention.ms=90000,cleanup.policy=[compact,delete]"))
    assert out == f"Completed updating config for topic {topic}.\n"
    resource = ConfigResource("topic", topic)
    entries = judge.describe_configs([resource])[resource].result(timeout=10)
    assert entries["retention.ms"].value == "90000"
    assert entries["cleanup.policy"].value == "compact,delete"

    lines = ok(configs(shared_broker, "--topic", topic, "--describe")).splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert lines[1:] == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,"
        "delete, DEFAULT_CONFIG:cleanup.policy=delete}",
        "  retention.ms=90000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=90000, "
        "DEFAULT_CONFIG:retention.ms=604800000}",
    ]

    ok(configs(shared_broker, "--topic", topic, "--alter", "--delete-config", "retention.ms"))
    entries = judge.describe_configs([resource])[resource].result(timeout=10)
    assert entries["retention.ms"].is_default and entries["cleanup.policy"].value == "compact,delete"

    everything = ok(configs(shared_broker, "--topic", topic, "--describe", "--all")).splitlines()
    assert everything[0] == f"All configs for topic {topic} are:"
    assert any(line.startswith("  retention.ms=604800000 sensitive=false") for line in everything)


def test_rejected_changes_exit_1(shared_broker: BrokerProcess, topic: str) -> None:
    not_set = configs(shared_broker, "--topic", topic, "--alter", "--delete-config", "retention.ms")
    assert not_set.returncode == 1 and "Invalid config(s): retention.ms" in not_set.stderr
    unknown = configs(shared_broker, "--topic", topic, "--alter", "--add-config", "no.such.config=1")
    assert unknown.returncode == 1 and "INVALID_CONFIG" in unknown.stderr
    bad_value = configs(shared_broker, "--topic", topic, "--alter", "--add-config", "retention.ms=soon")
    assert bad_value.returncode == 1 and "INVALID_CONFIG" in bad_value.stderr
    malformed = configs(shared_broker, "--topic", topic, "--alter", "--add-config", "retention.ms")
    assert malformed.returncode == 1 and "key=val" in malformed.stderr


def test_missing_topic_is_reported_like_kafka(shared_broker: BrokerProcess) -> None:
    name = unique("tools-cfg-none")
    assert ok(configs(shared_broker, "--topic", name, "--describe")) == \
        f"The topic '{name}' doesn't exist and doesn't have dynamic config.\n"


def test_broker_configs(shared_broker: BrokerProcess) -> None:
    assert ok(configs(shared_broker, "--entity-type", "brokers", "--entity-name", "1", "--describe")) == \
        "Dynamic configs for broker 1 are:\n"
    everything = ok(configs(shared_broker, "--broker", "1", "--describe", "--all")).splitlines()
    assert everything[0] == "All configs for broker 1 are:"
    log_dirs = next(line for line in everything if line.startswith("  log.dirs="))
    assert "STATIC_BROKER_CONFIG:log.dirs=" in log_dirs
    listed = ok(configs(shared_broker, "--entity-type", "brokers", "--describe")).splitlines()
    assert listed == ["Dynamic configs for broker 1 are:", "Default configs for brokers in the cluster are:"]
    # Only the replication throttles are dynamic broker configs: the broker refuses others, the tool says so and
    # exits 1.
    refused = configs(shared_broker, "--broker", "1", "--alter", "--add-config", "log.retention.ms=1000")
    assert refused.returncode == 1 and "Error while executing config command" in refused.stderr
    assert "Cannot update these configs dynamically: [log.retention.ms]" in refused.stderr


@pytest.mark.parametrize("argv, message", [
    (["--describe", "--alter", "--topic", "t"], "exactly one action"),
    (["--describe"], "entity type"),
    (["--alter", "--entity-type", "topics"], "entity name"),
    (["--alter", "--topic", "t"], "--add-config"),
    (["--describe", "--entity-type", "clients"], "invalid choice"),
    (["--describe", "--broker", "one"], "valid integer broker id"),
])
def test_bad_flags_exit_1(shared_broker: BrokerProcess, argv: list[str], message: str) -> None:
    result = configs(shared_broker, *argv)
    assert result.returncode == 1
    assert message in result.stderr
