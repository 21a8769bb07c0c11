"""Kafka's ConsumerProtocol: the bytes classic consumer groups put in JoinGroup metadata and SyncGroup assignments.

The broker passes them through opaquely but reads the subscribed topics (offset expiry, OffsetDelete),
the client's assignors write and read both, and the admin client shows members' assignments. One
codec for all of them: a version (int16) and the struct of that version, decoded at the version the
sender wrote and tolerant of newer versions' trailing fields.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from kio.serial import entity_reader, entity_writer

from bus.protocol.topic_partition import TopicPartition

_SUBSCRIPTION_MAX = 3
_ASSIGNMENT_MAX = 3


def _schema(kind: str, version: int, name: str) -> Any:
    return getattr(import_module(f"kio.schema.consumer_protocol_{kind}.v{version}.data"), name)


@dataclass(frozen=True)
class Subscription:
    """A member's JoinGroup metadata: topics, owned partitions (v1+), generation (v2+), rack (v3+)."""

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    group_instance_id: str | None = None  # from JoinGroup, not the bytes: orders members as Java does


@dataclass(frozen=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None


def _group(partitions: Iterable[TopicPartition]) -> list[Any]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        by_topic[tp.topic].append(tp.partition)
    return sorted(by_topic.items())


def encode_subscription(sub: Subscription, version: int = _SUBSCRIPTION_MAX) -> bytes:
    cls = _schema("subscription", version, "ConsumerProtocolSubscription")
    tp_cls = _schema("subscription", version, "TopicPartition") if version >= 1 else None
    values: dict[str, Any] = {"topics": tuple(sub.topics), "user_data": sub.user_data}
    if version >= 1:
        assert tp_cls is not None
        values["owned_partitions"] = tuple(tp_cls(topic=t, partitions=tuple(p)) for t, p in
                                           _group(sub.owned_partitions))
    if version >= 2:
        values["generation_id"] = sub.generation_id
    if version >= 3:
        values["rack_id"] = sub.rack_id
    out = io.BytesIO()
    out.write(version.to_bytes(2, "big", signed=True))
    entity_writer(cls)(out, cls(**values))
    return out.getvalue()


def decode_subscription(data: bytes) -> Subscription:
    version = min(int.from_bytes(data[:2], "big", signed=True), _SUBSCRIPTION_MAX)
    cls = _schema("subscription", version, "ConsumerProtocolSubscription")
    sub, _ = entity_reader(cls)(data, 2)
    owned = tuple(TopicPartition(tp.topic, int(p)) for tp in getattr(sub, "owned_partitions", ()) for p in
                  tp.partitions)
    return Subscription(tuple(sub.topics), sub.user_data, owned, int(getattr(sub, "generation_id", -1)),
                        getattr(sub, "rack_id", None))


def encode_assignment(assignment: Assignment, version: int = _ASSIGNMENT_MAX) -> bytes:
    cls = _schema("assignment", version, "ConsumerProtocolAssignment")
    tp_cls = _schema("assignment", version, "TopicPartition")
    out = io.BytesIO()
    out.write(version.to_bytes(2, "big", signed=True))
    entity_writer(cls)(out, cls(
        assigned_partitions=tuple(tp_cls(topic=t, partitions=tuple(p)) for t, p in _group(assignment.partitions)),
        user_data=assignment.user_data))
    return out.getvalue()


def decode_assignment(data: bytes) -> Assignment:
    if not data:
        return Assignment(())  # an empty SyncGroup assignment: nothing for this member
    version = min(int.from_bytes(data[:2], "big", signed=True), _ASSIGNMENT_MAX)
    cls = _schema("assignment", version, "ConsumerProtocolAssignment")
    assignment, _ = entity_reader(cls)(data, 2)
    return Assignment(tuple(TopicPartition(tp.topic, int(p)) for tp in assignment.assigned_partitions
                            for p in tp.partitions), assignment.user_data)


def subscribed_topics(data: bytes) -> set[str]:
    """The topics of a subscription; raises ValueError if `data` is not one (another protocol type's bytes)."""
    try:
        return set(decode_subscription(data).topics)
    except Exception as exc:  # kio raises assorted errors on short or garbled input
        raise ValueError(f"not a consumer protocol subscription: {exc!r}") from None


def assigned_partitions(data: bytes) -> list[TopicPartition]:
    """The partitions of an assignment, or none if `data` is unreadable (classic groups of other protocol
    types keep assignments in their own layout)."""
    try:
        return list(decode_assignment(data).partitions)
    except Exception:
        return []

