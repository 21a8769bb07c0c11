"""LogConfig parsing from Kafka topic config strings."""

from __future__ import annotations

import pytest

from bus.log.config import LogConfig


def test_defaults_match_kafka() -> None:
    config = LogConfig()
    assert (config.segment_bytes, config.retention_ms, config.max_message_bytes) == (1073741824, 604800000, 1048588)
    assert config.cleanup_policy == frozenset({"delete"}) and config.delete and not config.compact
    assert LogConfig.from_properties({}) == config


def test_parses_kafka_strings_and_ignores_other_keys() -> None:
    config = LogConfig.from_properties(
        {
            "segment.bytes": " 1048576 ",
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "cleanup.policy": "compact,delete",
            "message.timestamp.type": "LogAppendTime",
            "min.cleanable.dirty.ratio": "0.1",
            "min.insync.replicas": "2",  # not a log setting
            "compression.type": "producer",
        }
    )
    assert config.segment_bytes == 1048576 and config.retention_ms == -1
    assert config.cleanup_policy == frozenset({"compact", "delete"}) and config.compact and config.delete
    assert config.log_append_time and config.min_cleanable_dirty_ratio == 0.1
    assert LogConfig.from_properties({"cleanup.policy": ""}).cleanup_policy == frozenset()


def test_round_trip_through_properties() -> None:
    config = LogConfig(segment_ms=5, cleanup_policy=frozenset({"compact"}), min_cleanable_dirty_ratio=0.25)
    assert LogConfig.from_properties(config.to_properties()) == config
    assert config.to_properties()["cleanup.policy"] == "compact"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("segment.bytes", "13"),
        ("segment.bytes", "2147483648"),
        ("segment.bytes", "1e6"),
        ("segment.bytes", "1_000"),
        ("segment.ms", "0"),
        ("retention.ms", "-2"),
        ("cleanup.policy", "compact,forever"),
        ("message.timestamp.type", "logappendtime"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("min.cleanable.dirty.ratio", "nan"),
        ("flush.messages", "0"),
        ("max.compaction.lag.ms", "0"),
        ("index.interval.bytes", "abc"),
    ],
)
def test_bad_values_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        LogConfig.from_properties({key: value})


def test_compaction_lags_must_be_ordered() -> None:
    with pytest.raises(ValueError, match=r"min\.compaction\.lag\.ms"):
        LogConfig.from_properties({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})
