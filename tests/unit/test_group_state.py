"""The classic group state machine (no timers, no I/O): transitions, votes, static members, expiry."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from bus.coordinator.group.classic.group import ClassicGroup, GroupState, IllegalTransition, subscribed_topics
from bus.coordinator.group.classic.member import JoinResult, Member
from bus.coordinator.group.records import OffsetValue
from bus.protocol.topic_partition import TopicPartition


def subscription(*topics: str) -> bytes:
    body = struct.pack(">hi", 1, len(topics))
    for topic in topics:
        body += struct.pack(">h", len(topic)) + topic.encode()
    return body + struct.pack(">ii", -1, 0)  # null user data, no owned partitions (v1)


def member(member_id: str, *protocols: str, instance: str | None = None, topics: tuple[str, ...] = ("t",)) -> Member:
    return Member(member_id, instance, "client", "/127.0.0.1", 1000, 6000, "consumer",
                  tuple((p, subscription(*topics)) for p in protocols))


def test_valid_and_invalid_transitions() -> None:
    group = ClassicGroup("g")
    with pytest.raises(IllegalTransition):
        group.transition_to(GroupState.STABLE)
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.transition_to(GroupState.COMPLETING_REBALANCE)
    group.transition_to(GroupState.STABLE)
    with pytest.raises(IllegalTransition):
        group.transition_to(GroupState.EMPTY)
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.transition_to(GroupState.EMPTY)
    group.transition_to(GroupState.DEAD)
    with pytest.raises(IllegalTransition):
        group.transition_to(GroupState.PREPARING_REBALANCE)


def test_protocol_vote_picks_most_preferred_common_protocol() -> None:
    group = ClassicGroup("g")
    group.add(member("a", "roundrobin", "range"))
    group.add(member("b", "range", "roundrobin"))
    group.add(member("c", "range", "sticky"))
    # only "range" is supported by all three
    assert group.select_protocol() == "range"
    group.remove("c")
    # a votes roundrobin, b votes range: tie; either is a legal Kafka choice, but it must be a common one
    assert group.select_protocol() in {"roundrobin", "range"}


def test_supports_protocols_requires_a_common_protocol_once_not_empty() -> None:
    group = ClassicGroup("g")
    assert not group.supports_protocols("", ["range"])  # empty protocol type refused
    assert group.supports_protocols("consumer", ["range"])
    group.add(member("a", "range"))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    assert group.supports_protocols("consumer", ["roundrobin", "range"])
    assert not group.supports_protocols("consumer", ["roundrobin"])
    assert not group.supports_protocols("connect", ["range"])


def test_leader_moves_when_leader_leaves() -> None:
    group = ClassicGroup("g")
    group.add(member("a", "range"))
    group.add(member("b", "range"))
    assert group.leader_id == "a"
    group.remove("a")
    assert group.leader_id == "b"
    group.remove("b")
    assert group.leader_id is None


def test_replace_static_member_fences_the_old_id() -> None:
    group = ClassicGroup("g")
    answers: list[JoinResult] = []
    group.add(member("old", "range", instance="i1"), answers.append)
    new = group.replace_static_member("i1", "old", "new")
    assert answers and answers[0].error == ErrorCode.fenced_instance_id and answers[0].member_id == "old"
    assert group.static_member_id("i1") == "new" and group.leader_id == "new" and new.member_id == "new"
    assert group.validate_member("old", "i1") == ErrorCode.fenced_instance_id
    assert group.validate_member("new", "i1") is None
    assert group.validate_member("new", "other") == ErrorCode.unknown_member_id


def test_init_next_generation_computes_subscription() -> None:
    group = ClassicGroup("g")
    group.add(member("a", "range", topics=("t1", "t2")))
    group.add(member("b", "range", topics=("t3",)))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.init_next_generation()
    assert group.generation_id == 1 and group.protocol_name == "range"
    assert group.is_(GroupState.COMPLETING_REBALANCE)
    assert group.subscribed == {"t1", "t2", "t3"}
    assert group.is_subscribed_to("t1") and not group.is_subscribed_to("other")


def test_subscribed_topics_rejects_garbage() -> None:
    assert subscribed_topics(subscription("a", "b")) == {"a", "b"}
    with pytest.raises(ValueError):
        subscribed_topics(b"\x00\x00\x00\x00\x00\x05\x00\x01")


def test_offset_commit_validation() -> None:
    group = ClassicGroup("g")
    assert group.validate_offset_commit("", None, -1) is None  # simple / admin commit on an Empty group
    group.add(member("a", "range"))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.init_next_generation()
    assert group.validate_offset_commit("", None, -1) == ErrorCode.unknown_member_id
    assert group.validate_offset_commit("a", None, 1) == ErrorCode.rebalance_in_progress
    group.transition_to(GroupState.STABLE)
    assert group.validate_offset_commit("a", None, 1) is None
    assert group.validate_offset_commit("a", None, 0) == ErrorCode.illegal_generation
    assert group.validate_offset_commit("zz", None, 1) == ErrorCode.unknown_member_id


def test_offset_expiry_semantics() -> None:
    clock = [1_000]
    group = ClassicGroup("g", clock=lambda: clock[0])
    offsets: dict[TopicPartition, OffsetValue] = {}
    offsets[TopicPartition("t", 0)] = OffsetValue(1, "", commit_timestamp=0)
    # standalone group (no protocol type): by commit time
    assert group.expired_offsets(offsets, now=99, retention_ms=100) == []
    assert group.expired_offsets(offsets, now=100, retention_ms=100) == [("t", 0)]
    # a consumer group that went Empty at t=1000: from then on, whatever the commit time
    group.add(member("a", "range"))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.remove("a")
    group.init_next_generation()
    assert group.is_(GroupState.EMPTY) and group.state_timestamp == 1_000
    assert group.expired_offsets(offsets, now=1_099, retention_ms=100) == []
    assert group.expired_offsets(offsets, now=1_100, retention_ms=100) == [("t", 0)]
    # an explicit (v1) expire timestamp wins
    offsets[TopicPartition("t", 1)] = OffsetValue(1, "", commit_timestamp=0, expire_timestamp=5_000)
    assert ("t", 1) not in group.expired_offsets(offsets, now=4_999, retention_ms=1)


def test_stable_consumer_group_keeps_offsets_of_subscribed_topics() -> None:
    group = ClassicGroup("g")
    group.add(member("a", "range", topics=("t",)))
    group.transition_to(GroupState.PREPARING_REBALANCE)
    group.init_next_generation()
    group.transition_to(GroupState.STABLE)
    offsets = {TopicPartition("t", 0): OffsetValue(1, "", commit_timestamp=0)}
    offsets[TopicPartition("old", 0)] = OffsetValue(1, "", commit_timestamp=0)
    assert group.expired_offsets(offsets, now=10**9, retention_ms=1) == [("old", 0)]
