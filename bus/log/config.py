"""Per-topic log configuration, under Kafka's topic config names.

Values arrive as strings exactly as Kafka's topic configs hold them (CreateTopics, AlterConfigs, broker
`log.*` defaults already resolved by the caller), so parsing and range checks follow Kafka's ConfigDef:
a bad value is a ValueError naming the key, which the caller turns into INVALID_CONFIG.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
_INTEGER = re.compile(r"[+-]?[0-9]+")
# LegacyRecord.RECORD_OVERHEAD_V0: Kafka's floor for segment.bytes.
_MIN_SEGMENT_BYTES = 14
CLEANUP_POLICIES = frozenset({"delete", "compact"})
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1073741824
    segment_ms: int = 604800000
    segment_index_bytes: int = 10485760
    retention_ms: int = 604800000
    retention_bytes: int = -1
    cleanup_policy: frozenset[str] = frozenset({"delete"})
    max_message_bytes: int = 1048588
    message_timestamp_type: str = "CreateTime"
    message_timestamp_before_max_ms: int = _LONG_MAX
    message_timestamp_after_max_ms: int = _LONG_MAX
    index_interval_bytes: int = 4096
    flush_messages: int = _LONG_MAX
    flush_ms: int = _LONG_MAX
    delete_retention_ms: int = 86400000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = _LONG_MAX
    min_cleanable_dirty_ratio: float = 0.5
    # Parsed for completeness; segments are unlinked at once since reads hold the log lock (see log.py).
    file_delete_delay_ms: int = 60000

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LogConfig:
        """Build from Kafka topic config keys; keys this class does not model are ignored."""
        values: dict[str, Any] = {}
        for key, raw in props.items():
            spec = _KEYS.get(key)
            if spec is None:
                continue
            attr, parse = spec
            try:
                values[attr] = parse(str(raw).strip())
            except ValueError as exc:
                raise ValueError(f"Invalid value {raw!r} for configuration {key}: {exc}") from None
        config = cls(**values)
        if config.min_compaction_lag_ms > config.max_compaction_lag_ms:
            raise ValueError(
                f"min.compaction.lag.ms ({config.min_compaction_lag_ms}) must not exceed "
                f"max.compaction.lag.ms ({config.max_compaction_lag_ms})"
            )
        return config

    def to_properties(self) -> dict[str, str]:
        """Kafka-style string values, the inverse of from_properties (DescribeConfigs, tests)."""
        by_attr = {attr: key for key, (attr, _) in _KEYS.items()}
        out = {}
        for field in fields(self):
            value = getattr(self, field.name)
            out[by_attr[field.name]] = ",".join(sorted(value)) if isinstance(value, frozenset) else str(value)
        return out


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not _INTEGER.fullmatch(text):
            raise ValueError("not an integer")
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be in [{low}, {high}]")
        return value

    return parse


def _ratio(text: str) -> float:
    value = float(text)
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError("must be in [0, 1]")
    return value


def _policy(text: str) -> frozenset[str]:
    items = frozenset(item.strip() for item in text.split(",") if item.strip())
    unknown = items - CLEANUP_POLICIES
    if unknown:
        raise ValueError(f"unknown policy {', '.join(sorted(unknown))}; expected delete and/or compact")
    return items


def _timestamp_type(text: str) -> str:
    if text not in TIMESTAMP_TYPES:
        raise ValueError(f"expected one of {', '.join(TIMESTAMP_TYPES)}")
    return text


_KEYS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "segment.bytes": ("segment_bytes", _integer(_MIN_SEGMENT_BYTES, _INT_MAX)),
    "segment.ms": ("segment_ms", _integer(1, _LONG_MAX)),
    "segment.index.bytes": ("segment_index_bytes", _integer(4, _INT_MAX)),
    "retention.ms": ("retention_ms", _integer(-1, _LONG_MAX)),
    "retention.bytes": ("retention_bytes", _integer(_LONG_MIN, _LONG_MAX)),
    "cleanup.policy": ("cleanup_policy", _policy),
    "max.message.bytes": ("max_message_bytes", _integer(0, _INT_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _integer(0, _LONG_MAX)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _integer(0, _LONG_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _integer(0, _INT_MAX)),
    "flush.messages": ("flush_messages", _integer(1, _LONG_MAX)),
    "flush.ms": ("flush_ms", _integer(0, _LONG_MAX)),
    "delete.retention.ms": ("delete_retention_ms", _integer(0, _LONG_MAX)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _integer(0, _LONG_MAX)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _integer(1, _LONG_MAX)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "file.delete.delay.ms": ("file_delete_delay_ms", _integer(0, _LONG_MAX)),
}
