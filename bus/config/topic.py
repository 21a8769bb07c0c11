"""Topic-level configs and their broker-level synonyms.

A topic config that is not set on the topic falls back to the broker's `log.*` key (Kafka's
"synonyms"), then to Kafka's default. DescribeConfigs reports that chain, and the log layer only
ever sees the resolved topic-level names.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bus.config.definitions import INT_MAX, LONG_MAX, ConfigDef, ConfigError, ConfigKey, ConfigType

_T = ConfigType
_CLEANUP = ("delete", "compact")
_TS_TYPES = ("CreateTime", "LogAppendTime")
_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIGS = ConfigDef(
    [
        ConfigKey("cleanup.policy", _T.LIST, "delete", "delete and/or compact old segments.", one_of=_CLEANUP),
        ConfigKey("compression.type", _T.STRING, "producer", "Final compression of the topic.",
                  one_of=_COMPRESSION),
        ConfigKey("delete.retention.ms", _T.LONG, "86400000", "How long tombstones are kept.", at_least=0),
        ConfigKey("file.delete.delay.ms", _T.LONG, "60000", "Delay before deleting a file.", at_least=0),
        ConfigKey("flush.messages", _T.LONG, str(LONG_MAX), "fsync after this many messages.", at_least=1),
        ConfigKey("flush.ms", _T.LONG, str(LONG_MAX), "fsync after this much time.", at_least=0),
        ConfigKey("follower.replication.throttled.replicas", _T.LIST, "",
                  "partition:broker replicas (or *) whose follower fetches are throttled."),
        ConfigKey("index.interval.bytes", _T.INT, "4096", "Bytes between offset index entries.", at_least=0),
        ConfigKey("leader.replication.throttled.replicas", _T.LIST, "",
                  "partition:broker replicas (or *) a leader throttles sending to."),
        ConfigKey("max.compaction.lag.ms", _T.LONG, str(LONG_MAX), "Longest a record stays uncompacted.",
                  at_least=1),
        ConfigKey("max.message.bytes", _T.INT, "1048588", "Largest record batch size allowed.", at_least=0),
        ConfigKey("message.timestamp.type", _T.STRING, "CreateTime", "CreateTime or LogAppendTime.",
                  one_of=_TS_TYPES),
        ConfigKey("message.timestamp.before.max.ms", _T.LONG, str(LONG_MAX),
                  "Largest allowed age of a record timestamp.", at_least=0),
        ConfigKey("message.timestamp.after.max.ms", _T.LONG, str(LONG_MAX),
                  "Largest allowed future skew of a record timestamp.", at_least=0),
        ConfigKey("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", "Dirty ratio that triggers compaction.",
                  at_least=0),
        ConfigKey("min.compaction.lag.ms", _T.LONG, "0", "Shortest a record stays uncompacted.", at_least=0),
        ConfigKey("min.insync.replicas", _T.INT, "1", "Replicas that must ack an acks=all write.", at_least=1),
        ConfigKey("preallocate", _T.BOOLEAN, "false", "Preallocate segment files."),
        ConfigKey("retention.bytes", _T.LONG, "-1", "Size retained per partition (-1: unlimited)."),
        ConfigKey("retention.ms", _T.LONG, "604800000", "Time retained (-1: unlimited).", at_least=-1),
        ConfigKey("segment.bytes", _T.INT, "1073741824", "Segment file size.", at_least=1024 * 14),
        ConfigKey("segment.index.bytes", _T.INT, "10485760", "Offset index size.", at_least=4),
        ConfigKey("segment.jitter.ms", _T.LONG, "0", "Random jitter on segment.ms.", at_least=0),
        ConfigKey("segment.ms", _T.LONG, "604800000", "Roll a segment after this long.", at_least=1),
        ConfigKey("unclean.leader.election.enable", _T.BOOLEAN, "false", "Allow out-of-sync leaders."),
    ]
)


@dataclass(frozen=True, slots=True)
class Synonym:
    """A broker key that supplies a topic key's value, with the factor converting its unit to ms."""

    broker_key: str
    factor: int = 1


# Ordered as Kafka reports them: the most specific broker key first.
TOPIC_SYNONYMS: dict[str, tuple[Synonym, ...]] = {
    "cleanup.policy": (Synonym("log.cleanup.policy"),),
    "compression.type": (Synonym("compression.type"),),
    "delete.retention.ms": (Synonym("log.cleaner.delete.retention.ms"),),
    "file.delete.delay.ms": (Synonym("log.segment.delete.delay.ms"),),
    "flush.messages": (Synonym("log.flush.interval.messages"),),
    "flush.ms": (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms")),
    "follower.replication.throttled.replicas": (),
    "index.interval.bytes": (Synonym("log.index.interval.bytes"),),
    "leader.replication.throttled.replicas": (),
    "max.compaction.lag.ms": (Synonym("log.cleaner.max.compaction.lag.ms"),),
    "max.message.bytes": (Synonym("message.max.bytes"),),
    "message.timestamp.type": (Synonym("log.message.timestamp.type"),),
    "message.timestamp.before.max.ms": (Synonym("log.message.timestamp.before.max.ms"),),
    "message.timestamp.after.max.ms": (Synonym("log.message.timestamp.after.max.ms"),),
    "min.cleanable.dirty.ratio": (Synonym("log.cleaner.min.cleanable.ratio"),),
    "min.compaction.lag.ms": (Synonym("log.cleaner.min.compaction.lag.ms"),),
    "min.insync.replicas": (Synonym("min.insync.replicas"),),
    "preallocate": (Synonym("log.preallocate"),),
    "retention.bytes": (Synonym("log.retention.bytes"),),
    "retention.ms": (
        Synonym("log.retention.ms"),
        Synonym("log.retention.minutes", 60_000),
        Synonym("log.retention.hours", 3_600_000),
    ),
    "segment.bytes": (Synonym("log.segment.bytes"),),
    "segment.index.bytes": (Synonym("log.index.size.max.bytes"),),
    "segment.jitter.ms": (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", 3_600_000)),
    "segment.ms": (Synonym("log.roll.ms"), Synonym("log.roll.hours", 3_600_000)),
    "unclean.leader.election.enable": (Synonym("unclean.leader.election.enable"),),
}

assert set(TOPIC_SYNONYMS) == set(TOPIC_CONFIGS.keys)


def _scaled(value: str, factor: int) -> str:
    return value if factor == 1 else str(int(value) * factor)


@dataclass(frozen=True, slots=True)
class ResolvedConfig:
    """One topic config's effective value and where it came from (DescribeConfigs `config_source`)."""

    name: str
    value: str
    source: int
    synonyms: tuple[tuple[str, str, int], ...]


# DescribeConfigs config_source codes.
SOURCE_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


def resolve_topic_config(name: str, topic: Mapping[str, str], broker_static: Mapping[str, str]) -> ResolvedConfig:
    """Effective value of topic config `name` given the topic overrides and the broker's static file."""
    chain: list[tuple[str, str, int]] = []
    if name in topic:
        chain.append((name, topic[name], SOURCE_TOPIC))
    for synonym in TOPIC_SYNONYMS[name]:
        if synonym.broker_key in broker_static:
            value = _scaled(broker_static[synonym.broker_key], synonym.factor)
            chain.append((synonym.broker_key, value, SOURCE_STATIC_BROKER))
    default = TOPIC_CONFIGS[name].default
    if default is not None:
        chain.append((name, default, SOURCE_DEFAULT))
    first = chain[0]
    return ResolvedConfig(name=name, value=first[1], source=first[2], synonyms=tuple(chain))


def effective_topic_configs(topic: Mapping[str, str], broker_static: Mapping[str, str]) -> dict[str, str]:
    """Every topic config resolved to a string value, ready for `LogConfig.from_properties`."""
    return {name: resolve_topic_config(name, topic, broker_static).value for name in TOPIC_CONFIGS.keys}


THROTTLED_REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
_THROTTLED_REPLICA = re.compile(r"([0-9]+:[0-9]+)?")


def throttled_partitions(name: str, value: str, broker_id: int) -> frozenset[int] | None:
    """The partitions a throttled-replicas list throttles on broker `broker_id`, None for all of them ("*").

    Kafka's ThrottledReplicaListValidator and QuotaConfigHandler.parseThrottledPartitions: the value is the literal
    "*" or `partition:broker` items; a broker throttles the partitions listed with its own id."""
    items = [item.strip() for item in value.split(",")]
    if "".join(items) == "*":
        return None
    if not all(_THROTTLED_REPLICA.fullmatch(item) for item in items):
        raise ConfigError(f"Invalid value {value} for configuration {name}: {name} must be the literal '*' or a list "
                          "of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")
    pairs = (item.split(":") for item in items if item)
    return frozenset(int(partition) for partition, broker in pairs if int(broker) == broker_id)


def validate_topic_configs(configs: Mapping[str, str | None]) -> None:
    """Reject unknown keys and bad values the way CreateTopics / AlterConfigs do."""
    for name, value in configs.items():
        if name not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {name}")
        if value is None:
            continue
        TOPIC_CONFIGS[name].parse(value)
        if name in THROTTLED_REPLICAS_KEYS:
            throttled_partitions(name, value, -1)


__all__ = [
    "INT_MAX",
    "THROTTLED_REPLICAS_KEYS",
    "TOPIC_CONFIGS",
    "TOPIC_SYNONYMS",
    "ConfigError",
    "ResolvedConfig",
    "effective_topic_configs",
    "resolve_topic_config",
    "throttled_partitions",
    "validate_topic_configs",
]
