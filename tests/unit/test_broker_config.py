import pytest

from bus.config.broker import load_broker_config
from bus.config.definitions import ConfigError
from bus.config.properties import parse_properties
from bus.config.topic import SOURCE_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_TOPIC, resolve_topic_config
from tests.unit.test_properties import KRAFT_SERVER_PROPERTIES


def test_defaults_run_a_single_combined_node():
    config = load_broker_config({})
    assert config.node_id == 1
    assert [lst.name for lst in config.client_listeners] == ["PLAINTEXT"]
    assert config.values["process.roles"] == ["broker", "controller"]


def test_kafka_kraft_file_is_accepted():
    config = load_broker_config(parse_properties(KRAFT_SERVER_PROPERTIES))
    assert config.advertised_client_listeners[0].address == "localhost:9092"
    assert str(config.log_dirs[0]) == "/tmp/kraft-combined-logs"
    assert config.unknown == ()


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"num.partitions": "zero"}, "num.partitions"),
        ({"num.partitions": "0"}, "at least 1"),
        ({"listeners": "PLAINTEXT//nohost"}, "NAME://host:port"),
        ({"listeners": "CONTROLLER://:9093"}, "non-controller listener"),
        ({"log.cleanup.policy": "shred"}, "log.cleanup.policy"),
        ({"listeners": "PLAINTEXT://:9092,CONTROLLER://:9093", "controller.listener.names": "OTHER"},
         "controller.listener.names"),
        ({"controller.quorum.voters": "bad"}, "controller.quorum.voters"),
        ({"auto.create.topics.enable": "maybe"}, "auto.create.topics.enable"),
    ],
)
def test_bad_values_are_refused_with_the_key_named(props, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_broker_config(props)


def test_unknown_keys_are_reported_not_fatal():
    assert load_broker_config({"some.plugin.key": "1"}).unknown == ("some.plugin.key",)


def test_topic_config_synonyms_follow_kafka_precedence():
    broker = {"log.retention.hours": "1"}
    resolved = resolve_topic_config("retention.ms", {}, broker)
    assert resolved.value == "3600000" and resolved.source == SOURCE_STATIC_BROKER
    resolved = resolve_topic_config("retention.ms", {"retention.ms": "5"}, broker)
    assert resolved.value == "5" and resolved.source == SOURCE_TOPIC
    assert [s[0] for s in resolved.synonyms] == ["retention.ms", "log.retention.hours", "retention.ms"]
    assert resolve_topic_config("segment.bytes", {}, {}).source == SOURCE_DEFAULT
    assert resolve_topic_config("retention.ms", {}, {"log.retention.ms": "7", "log.retention.hours": "1"}).value == "7"
