"""``/api/v1/bus/*``: brokers, topics, messages, consumer groups and their lag, and the admin commands."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

TOPIC_PATTERN = r"^[a-zA-Z0-9._-]{1,249}$"


def _not_dots(name: str) -> str:
    if name in (".", ".."):
        raise ValueError("a topic cannot be named '.' or '..'")
    return name


TopicName = Annotated[str, StringConstraints(pattern=TOPIC_PATTERN), AfterValidator(_not_dots)]
"""Kafka's legal topic names (``Topic.validate``): ASCII letters, digits, ``._-``, at most 249, not ``.``/``..``."""


class Broker(BaseModel):
    id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool


class Cluster(BaseModel):
    cluster_id: str | None
    controller_id: int | None
    brokers: list[Broker]


class Retention(BaseModel):
    retention_ms: int | None
    """-1: kept forever (by time)."""
    retention_bytes: int | None
    """-1: no size limit."""
    cleanup_policy: str | None


class TopicSummary(Retention):
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    under_replicated: int
    size_bytes: int
    """Bytes on disk of all partitions (the largest replica of each), from DescribeLogDirs."""


class PartitionInfo(BaseModel):
    partition: int
    leader: int
    replicas: list[int]
    isr: list[int]
    size_bytes: int
    start_offset: int
    end_offset: int


class ConfigValue(BaseModel):
    value: str | None
    """Null for sensitive values."""
    source: str
    default: bool


class TopicDetail(Retention):
    name: str
    internal: bool
    size_bytes: int
    partitions: list[PartitionInfo]
    configs: dict[str, ConfigValue]


class TopicCreate(BaseModel):
    name: TopicName
    partitions: int = Field(1, ge=1, le=10_000)
    replication_factor: int | None = Field(None, ge=1, le=32)
    """Replicas of each partition; left out, the brokers' ``default.replication.factor`` (Kafka's -1, KIP-464,
    what ``kafka-topics.sh --create`` sends without ``--replication-factor``), so a cluster gets its own default."""
    config: dict[str, str] = Field(default_factory=dict)
    """Topic configs, e.g. ``{"retention.ms": "86400000"}``."""


class Blob(BaseModel):
    """Bytes of a key, value or header: text when it is UTF-8, else base64."""

    encoding: Literal["utf-8", "base64"]
    data: str
    size: int
    truncated: bool


class Header(BaseModel):
    key: str
    value: Blob | None


class Message(BaseModel):
    partition: int
    offset: int
    timestamp: int | None
    """Milliseconds since the epoch."""
    key: Blob | None
    value: Blob | None
    headers: list[Header]
    undecodable: str | None = None
    """Why part of the record could not be read (a header name that is not UTF-8: no headers shown; a
    batch that does not decompress: nothing shown, and the partition is not read past it)."""


class GroupSummary(BaseModel):
    group_id: str
    state: str
    members: int
    protocol: str | None
    partitions: int
    total_lag: int


class PartitionAssignment(BaseModel):
    topic: str
    partition: int


class Member(BaseModel):
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: list[PartitionAssignment]


class PartitionLag(BaseModel):
    topic: str
    partition: int
    committed: int | None
    """Null: nothing committed yet."""
    end_offset: int | None
    lag: int | None
    member_id: str | None = None


class GroupDetail(BaseModel):
    group_id: str
    state: str
    protocol: str | None
    coordinator: int | None
    members: list[Member]
    partitions: list[PartitionLag]
    total_lag: int


class PartitionLagPoint(BaseModel):
    topic: str
    partition: int
    lag: int | None


class LagPoint(BaseModel):
    time_ms: int
    total: int
    partitions: list[PartitionLagPoint]


class LagHistory(BaseModel):
    group_id: str
    interval_s: float
    points: list[LagPoint]
    """Oldest first."""


class OffsetReset(BaseModel):
    """``kafka-consumer-groups --reset-offsets``: to earliest, latest, a time or an offset."""

    to: Literal["earliest", "latest", "datetime", "offset"]
    topic: TopicName | None = None
    """Default: every topic the group has committed offsets for."""
    partitions: list[int] | None = Field(None, min_length=1, max_length=10_000)
    datetime: AwareDatetime | None = Field(None, validate_default=True)
    """For ``to=datetime``: the first offset at or after this time (ISO-8601 with offset)."""
    offset: int | None = Field(None, ge=0, validate_default=True)
    """For ``to=offset``: clamped into each partition's [earliest, latest]."""

    @field_validator("datetime", "offset")
    @classmethod
    def _needed_by_target(cls, value: Any, info: ValidationInfo) -> Any:
        """A 422 that names the missing field (a model-level check would only name the body)."""
        if value is None and info.data.get("to") == info.field_name:
            raise ValueError(f"to={info.field_name} needs {info.field_name}")
        return value


class OffsetChange(BaseModel):
    topic: str
    partition: int
    previous: int | None
    offset: int
