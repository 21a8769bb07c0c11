"""The group coordinator's settings, read once from the broker config.

Both halves of the coordinator read them: the classic protocol its session limits, rebalance delays and group size,
the offsets side its retention and metadata limits; so they sit below both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class GroupConfig:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    initial_rebalance_delay_ms: int = 3000
    new_member_join_timeout_ms: int = 300000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600000
    offset_metadata_max_bytes: int = 4096
    max_group_size: int = 2**31 - 1

    @classmethod
    def from_broker(cls, config: Any) -> GroupConfig:
        return cls(
            min_session_timeout_ms=int(config["group.min.session.timeout.ms"]),
            max_session_timeout_ms=int(config["group.max.session.timeout.ms"]),
            initial_rebalance_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
            offsets_retention_ms=int(config["offsets.retention.minutes"]) * 60 * 1000,
            offsets_retention_check_interval_ms=int(config["offsets.retention.check.interval.ms"]),
            offset_metadata_max_bytes=int(config["offset.metadata.max.bytes"]),
            max_group_size=int(config["group.max.size"]),
        )
