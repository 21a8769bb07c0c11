"""The tools' input grammars, which follow Kafka's so operators' scripts carry over unchanged."""

from __future__ import annotations

import datetime

import pytest

from bus.client.admin import ConfigEntry, ConfigSource, ConfigSynonym, PartitionInfo, TopicDescription, TopicPartition
from bus.tools._common import ToolError, parse_key_values
from bus.tools.configs_cmd import format_entry, parse_add_config, parse_delete_config
from bus.tools.consumer_groups_cmd import parse_datetime, parse_duration, parse_topic_partitions
from bus.tools.topics_cmd import (
    format_partition_line,
    format_topic_line,
    parse_replica_assignment,
    parse_topic_configs,
    select_topics,
)


def test_replica_assignment() -> None:
    assert parse_replica_assignment("1:2,2:3, 3 : 1") == {0: [1, 2], 1: [2, 3], 2: [3, 1]}
    with pytest.raises(ToolError, match="duplicate entries: 2"):
        parse_replica_assignment("1:2,2:2")
    with pytest.raises(ToolError, match="Partition 1 has different replication factor"):
        parse_replica_assignment("1:2,3")
    with pytest.raises(ToolError, match="integers"):
        parse_replica_assignment("a:b")


def test_topic_configs() -> None:
    assert parse_topic_configs(["retention.ms = 10", "cleanup.policy=compact"]) == {
        "retention.ms": "10", "cleanup.policy": "compact"}
    with pytest.raises(ToolError, match='format "key=val"'):
        parse_topic_configs(["a=b=c"])


def test_topic_selection_is_kafkas_include_list() -> None:
    names = ["__consumer_offsets", "orders", "orders-dlq", "payments"]
    assert select_topics(names, "orders", False) == ["orders"]  # whole-name match, not search
    assert select_topics(names, "orders.*", False) == ["orders", "orders-dlq"]
    assert select_topics(names, "orders,payments", False) == ["orders", "payments"]
    assert select_topics(names, "'orders'", False) == ["orders"]
    assert select_topics(names, None, True) == ["orders", "orders-dlq", "payments"]
    assert select_topics(names, "__.*", True) == []
    with pytest.raises(ToolError, match="regular expression"):
        select_topics(names, "(", False)


def test_describe_lines() -> None:
    desc = TopicDescription("t", "AbC", False, [PartitionInfo(0, 1, [1, 2], [1]), PartitionInfo(1, None, [2], [])])
    entry = ConfigEntry("retention.ms", "10", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert format_topic_line(desc, [entry]) == \
        "Topic: t\tTopicId: AbC\tPartitionCount: 2\tReplicationFactor: 2\tConfigs: retention.ms=10"
    assert format_partition_line("t", desc.partitions[1]) == \
        "\tTopic: t\tPartition: 1\tLeader: none\tReplicas: 2\tIsr: \tElr: N/A\tLastKnownElr: N/A"


def test_add_config_grammar() -> None:
    assert parse_add_config("a=1,b=[x,y],c=", None) == {"a": "1", "b": "x,y", "c": ""}
    with pytest.raises(ToolError, match="key=val"):
        parse_add_config("a", None)
    with pytest.raises(ToolError, match="Invalid character"):
        parse_add_config("a b=1", None)
    assert parse_delete_config(["a,b", " c "]) == ["a", "b", "c"]


def test_config_line_format() -> None:
    entry = ConfigEntry("retention.ms", "5", ConfigSource.DYNAMIC_TOPIC_CONFIG, synonyms=[
        ConfigSynonym("retention.ms", "5", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)])
    assert format_entry(entry) == ("  retention.ms=5 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5, "
                                   "DEFAULT_CONFIG:log.retention.hours=168}")
    secret = ConfigEntry("ssl.key.password", None, ConfigSource.STATIC_BROKER_CONFIG, is_sensitive=True)
    assert format_entry(secret) == "  ssl.key.password=null sensitive=true synonyms={}"


def test_durations_and_datetimes() -> None:
    assert parse_duration("PT1H30M") == datetime.timedelta(hours=1, minutes=30)
    assert parse_duration("P1DT2.5S") == datetime.timedelta(days=1, seconds=2.5)
    with pytest.raises(ToolError):
        parse_duration("1h")
    assert parse_datetime("2024-01-02T03:04:05.678Z") == 1704164645678
    assert parse_datetime("2024-01-02T04:04:05.678+01:00") == 1704164645678
    assert parse_datetime("2024-01-02T04:04:05.678+0100") == 1704164645678
    local = datetime.datetime(2024, 1, 2, 3, 4, 5).astimezone()
    assert parse_datetime("2024-01-02T03:04:05") == int(local.timestamp() * 1000)
    with pytest.raises(ToolError, match=r"YYYY-MM-DDTHH:mm:SS\.sss"):
        parse_datetime("yesterday")


def test_topic_partition_args_and_properties() -> None:
    assert parse_topic_partitions("t:0,2") == [TopicPartition("t", 0), TopicPartition("t", 2)]
    with pytest.raises(ToolError, match="Invalid partition"):
        parse_topic_partitions("t:x")
    assert parse_key_values(["acks=all", "linger.ms = 5"]) == {"acks": "all", "linger.ms": "5"}
    with pytest.raises(ToolError, match="expected key=value"):
        parse_key_values(["acks"])


def test_progress_display_renders_when_enabled(capsys: pytest.CaptureFixture[str]) -> None:
    """The rich bar is only shown on a terminal; forced on, it must run and clean up after itself."""
    from bus.tools._common import Progress

    with Progress("work", total=3, enabled=True) as bar:
        bar.advance()
        bar.update(3)
    with Progress("quiet", total=3) as quiet:  # stderr is not a terminal under pytest: a no-op
        quiet.advance()
    assert capsys.readouterr().out == ""
