"""The admin client's consumer group calls: list, describe and delete groups, and read, set and delete their offsets.

Java's `Admin.listConsumerGroups`, `describeConsumerGroups`, `deleteConsumerGroups`, `listConsumerGroupOffsets`,
`alterConsumerGroupOffsets` and `deleteConsumerGroupOffsets`, which kafka-consumer-groups is built on, plus the lag
that its `--describe` shows. ListGroups goes to every broker; every other request goes to the group's coordinator,
found with FindCoordinator and cached until it answers NOT_COORDINATOR. Classic and KIP-848 groups are both
described, as the Java admin describes them.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from bus.client.admin.common import (
    AdminCalls,
    AdminError,
    BrokerInfo,
    GroupIdNotFoundError,
    Retry,
    check_error,
    finish,
    first_error,
    partition_indexes,
)
from bus.client.admin.offsets import ListOffsetsResultInfo, OffsetSpec
from bus.protocol.consumer_protocol import assigned_partitions
from bus.protocol.topic_partition import TopicPartition

OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 10, 15, 16
DELETE_GROUPS, OFFSET_DELETE, CONSUMER_GROUP_DESCRIBE = 42, 47, 69

_COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
_RETRY_LATER = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.rebalance_in_progress,
                          ErrorCode.request_timed_out, ErrorCode.throttling_quota_exceeded})
_GROUP_RETRY_CODES = frozenset(int(e) for e in (*_COORDINATOR_ERRORS, ErrorCode.coordinator_load_in_progress))


class GroupCalls(AdminCalls, Protocol):
    """The admin client as these calls use it: the mixins' `AdminCalls`, plus the coordinators found so far, and
    the topic, offset and committed offset look-ups that lag is computed from."""

    _coordinators: dict[str, int]

    def list_topics(self, include_internal: bool = False) -> list[str]:
        """Topic names, sorted."""
        ...

    def list_offsets(self, specs: Mapping[TopicPartition, int], *,
                     isolation_level: str = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResultInfo]:
        """Offsets by spec per partition."""
        ...

    def list_consumer_group_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None = None, *,
                                    require_stable: bool = False) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str | None  # None when the broker is too old to report it (ListGroups < v4)
    type: str | None  # "classic" / "consumer"; None before ListGroups v5


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]
    target_assignment: list[TopicPartition] | None = None  # KIP-848 members only
    member_epoch: int | None = None  # KIP-848 members only


@dataclasses.dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    is_simple: bool  # no protocol type: a group that only ever committed offsets
    members: list[MemberDescription]
    partition_assignor: str
    type: str  # "classic" or "consumer"
    state: str  # Stable, Empty, PreparingRebalance, CompletingRebalance, Assigning, Reconciling, Dead
    coordinator: BrokerInfo
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPartitionLag:
    committed: int
    log_end: int | None  # None when the topic no longer exists
    lag: int | None


def _kip848_partitions(assignment: Any) -> list[TopicPartition]:
    if assignment is None:
        return []
    return sorted(TopicPartition(t.topic_name, int(p)) for t in assignment.topic_partitions for p in t.partitions)


def _coordinator(admin: GroupCalls, group_id: str) -> int:
    """The group's coordinator (FindCoordinator, cached until it answers NOT_COORDINATOR)."""
    cached = admin._coordinators.get(group_id)
    if cached is not None and cached in admin._brokers:
        return cached
    response = admin._send(admin._any_node(), FIND_COORDINATOR, lambda s: s.make(
        "FindCoordinatorRequest", key=group_id, key_type=0, coordinator_keys=[group_id]))
    found = response.coordinators[0] if getattr(response, "coordinators", None) else response
    code = int(found.error_code)
    if code in {int(e) for e in (*_COORDINATOR_ERRORS, *_RETRY_LATER)}:
        raise Retry(AdminError(code, getattr(found, "error_message", None)))
    check_error(code, getattr(found, "error_message", None))
    node = int(found.node_id)
    if node not in admin._metadata.view.brokers:
        raise Retry(AdminError(ErrorCode.coordinator_not_available, f"coordinator {node} is not in the metadata"))
    admin._coordinators[group_id] = node
    return node


def _group_error(admin: GroupCalls, group_id: str, code: int, message: str | None = None) -> None:
    """Raise for a group-level error code: coordinator moves and loads are retried."""
    if code in {int(e) for e in _COORDINATOR_ERRORS}:
        admin._coordinators.pop(group_id, None)
        raise Retry(AdminError(code, message))
    if code == int(ErrorCode.coordinator_load_in_progress):
        raise Retry(AdminError(code, message), refresh=False)
    if code == int(ErrorCode.group_id_not_found):
        raise GroupIdNotFoundError(code, message or f"Group {group_id} not found.")
    check_error(code, message)


def _describe_group(admin: GroupCalls, group_id: str) -> ConsumerGroupDescription:
    node = _coordinator(admin, group_id)
    coordinator = admin._brokers[node]
    conn = admin._conn(node)
    if CONSUMER_GROUP_DESCRIBE in conn.api_versions:
        response = admin._send(node, CONSUMER_GROUP_DESCRIBE, lambda s: s.make(
            "ConsumerGroupDescribeRequest", group_ids=[group_id], include_authorized_operations=False))
        g = response.groups[0]
        code = int(g.error_code)
        if code != int(ErrorCode.group_id_not_found):
            _group_error(admin, group_id, code, g.error_message)
            members = [MemberDescription(
                member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id, host=m.client_host,
                assignment=_kip848_partitions(m.assignment),
                target_assignment=_kip848_partitions(m.target_assignment),
                member_epoch=int(m.member_epoch)) for m in g.members]
            return ConsumerGroupDescription(
                group_id=group_id, is_simple=False, members=members, partition_assignor=g.assignor_name,
                type="consumer", state=g.group_state, coordinator=coordinator, group_epoch=int(g.group_epoch),
                target_assignment_epoch=int(g.assignment_epoch))
    response = admin._send(node, DESCRIBE_GROUPS, lambda s: s.make(
        "DescribeGroupsRequest", groups=[group_id], include_authorized_operations=False))
    g = response.groups[0]
    _group_error(admin, group_id, int(g.error_code), getattr(g, "error_message", None))
    consumer = g.protocol_type == "consumer"
    members = [MemberDescription(
        member_id=m.member_id, group_instance_id=getattr(m, "group_instance_id", None), client_id=m.client_id,
        host=m.client_host, assignment=assigned_partitions(m.member_assignment) if consumer else [])
        for m in g.members]
    return ConsumerGroupDescription(
        group_id=group_id, is_simple=g.protocol_type == "", members=members, partition_assignor=g.protocol_data,
        type="classic", state=g.group_state, coordinator=coordinator)


class GroupAdmin:
    """The consumer group calls `AdminClient` inherits."""

    def list_consumer_groups(self: GroupCalls, states: Iterable[str] | None = None,
                             types: Iterable[str] | None = None) -> list[GroupListing]:
        """Consumer groups (classic and KIP-848) of every broker, optionally filtered by state and type."""
        states = [s for s in (states or ()) if s]
        types = [t.lower() for t in (types or ()) if t]

        def attempt() -> list[GroupListing]:
            self._refresh_brokers()
            found: dict[str, GroupListing] = {}
            for node in sorted(self._brokers):
                response = self._send(node, LIST_GROUPS, lambda s: s.make(
                    "ListGroupsRequest", states_filter=list(states), types_filter=list(types)))
                code = int(response.error_code)
                if code in {int(e) for e in (*_COORDINATOR_ERRORS, *_RETRY_LATER)}:
                    raise Retry(AdminError(code), refresh=False)
                check_error(code)
                for g in response.groups:
                    listing = GroupListing(g.group_id, g.protocol_type, getattr(g, "group_state", None) or None,
                                           getattr(g, "group_type", None) or None)
                    if listing.protocol_type not in ("consumer", ""):
                        continue  # connect / streams groups are not consumer groups
                    found[listing.group_id] = listing
            listed = sorted(found.values(), key=lambda g: g.group_id)
            wanted_states = {s.lower() for s in states}
            return [g for g in listed if (not wanted_states or (g.state or "").lower() in wanted_states)
                    and (not types or (g.type or "classic") in types)]

        return self._call(attempt, "list consumer groups")

    def describe_consumer_groups(self: GroupCalls, group_ids: Iterable[str]) -> dict[str, ConsumerGroupDescription]:
        """State, members and assignments of each group (KIP-848 groups through ConsumerGroupDescribe).

        As the Java admin does, a group is first asked for as a KIP-848 group; GROUP_ID_NOT_FOUND there
        (a classic group, or none at all) falls back to DescribeGroups, which reports a group that does
        not exist as state "Dead" with no members (newer brokers answer GROUP_ID_NOT_FOUND, raised).
        """
        out: dict[str, ConsumerGroupDescription] = {}
        for group_id in dict.fromkeys(group_ids):
            out[group_id] = self._call(functools.partial(_describe_group, self, group_id), f"describe group {group_id}")
        return out

    def list_consumer_group_offsets(self: GroupCalls, group_id: str,
                                    partitions: Iterable[TopicPartition] | None = None, *,
                                    require_stable: bool = False) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (all of them, or for `partitions`); partitions without one are left out."""
        wanted = None if partitions is None else sorted(set(partitions))

        def build(shapes: Any) -> Any:
            topics = None
            if wanted is not None:
                batched = shapes.has("OffsetFetchRequestTopics")  # v8+ names the class in the plural
                cls = "OffsetFetchRequestTopics" if batched else "OffsetFetchRequestTopic"
                topics = [shapes.make(cls, name=t, partition_indexes=parts)
                          for t, parts in partition_indexes(wanted).items()]
            if shapes.has("OffsetFetchRequestGroup"):
                return shapes.make("OffsetFetchRequest", require_stable=require_stable, groups=[
                    shapes.make("OffsetFetchRequestGroup", group_id=group_id, member_id=None, member_epoch=-1,
                                topics=topics)])
            return shapes.make("OffsetFetchRequest", group_id=group_id, topics=topics, require_stable=require_stable)

        def attempt() -> dict[TopicPartition, OffsetAndMetadata]:
            node = _coordinator(self, group_id)
            response = self._send(node, OFFSET_FETCH, build)
            if getattr(response, "groups", None):
                group = response.groups[0]
                code, topics = int(group.error_code), group.topics
            else:
                code, topics = int(getattr(response, "error_code", 0)), response.topics
            _group_error(self, group_id, code)
            out: dict[TopicPartition, OffsetAndMetadata] = {}
            for topic in topics:
                for p in topic.partitions:
                    perr = int(p.error_code)
                    if perr == int(ErrorCode.unstable_offset_commit):
                        raise Retry(AdminError(perr), refresh=False)
                    if perr == int(ErrorCode.unknown_topic_or_partition) or int(p.committed_offset) < 0:
                        continue
                    check_error(perr)
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    out[TopicPartition(topic.name, int(p.partition_index))] = OffsetAndMetadata(
                        int(p.committed_offset), p.metadata or "", None if epoch < 0 else epoch)
            return dict(sorted(out.items()))

        return self._call(attempt, "list consumer group offsets")

    def list_consumer_group_lag(self: GroupCalls, group_id: str) -> dict[TopicPartition, GroupPartitionLag]:
        """Committed offset, log end offset and lag of every partition the group has committed.

        What `consumer-groups --describe` shows and what lag monitoring wants; partitions of deleted
        topics report no log end and no lag.
        """
        committed = self.list_consumer_group_offsets(group_id)
        existing = set(self.list_topics(include_internal=True))
        live = [tp for tp in committed if tp.topic in existing]
        ends = {tp: info.offset for tp, info in self.list_offsets({tp: OffsetSpec.LATEST for tp in live}).items()}
        out: dict[TopicPartition, GroupPartitionLag] = {}
        for tp, om in committed.items():
            end = ends.get(tp)
            out[tp] = GroupPartitionLag(om.offset, end, None if end is None else max(end - om.offset, 0))
        return out

    def alter_consumer_group_offsets(self: GroupCalls, group_id: str,
                                     offsets: Mapping[TopicPartition, int | OffsetAndMetadata]) -> None:
        """Commit offsets for a group as an outsider (generation -1): Kafka only allows it while the group is empty."""
        plan = {TopicPartition(tp.topic, int(tp.partition)):
                o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o)) for tp, o in offsets.items()}
        if not plan:
            return

        def build(shapes: Any) -> Any:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = {}
            for tp, om in sorted(plan.items()):
                by_topic.setdefault(tp.topic, []).append((tp.partition, om))
            return shapes.make(
                "OffsetCommitRequest", group_id=group_id, generation_id_or_member_epoch=-1, member_id="",
                group_instance_id=None,
                topics=[shapes.make("OffsetCommitRequestTopic", name=topic, partitions=[
                    shapes.make("OffsetCommitRequestPartition", partition_index=p, committed_offset=om.offset,
                                committed_leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                                committed_metadata=om.metadata)
                    for p, om in parts]) for topic, parts in by_topic.items()])

        def attempt() -> None:
            node = _coordinator(self, group_id)
            response = self._send(node, OFFSET_COMMIT, build)
            errors: dict[TopicPartition, AdminError | None] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    if code:
                        if code in _GROUP_RETRY_CODES:
                            _group_error(self, group_id, code)  # raises Retry
                        message = None
                        if code in (int(ErrorCode.unknown_member_id), int(ErrorCode.illegal_generation)):
                            # Kafka's answer to an outsider's commit into a live group; say what it means.
                            message = (f"Commit cannot be completed since the group '{group_id}' has active "
                                       "members; stop its consumers first.")
                        errors[TopicPartition(topic.name, int(p.partition_index))] = AdminError.of(code, message)
            failure = first_error(errors)
            if failure is not None:
                raise failure

        self._call(attempt, "alter consumer group offsets")

    def delete_consumer_group_offsets(self: GroupCalls, group_id: str,
                                      partitions: Iterable[TopicPartition]) -> dict[TopicPartition, AdminError | None]:
        """Forget the group's committed offsets of some partitions (OffsetDelete); per-partition results."""
        wanted = sorted(set(partitions))

        def attempt() -> dict[TopicPartition, AdminError | None]:
            node = _coordinator(self, group_id)
            by_topic = partition_indexes(wanted)
            response = self._send(node, OFFSET_DELETE, lambda s: s.make(
                "OffsetDeleteRequest", group_id=group_id, topics=[
                    s.make("OffsetDeleteRequestTopic", name=t, partitions=[
                        s.make("OffsetDeleteRequestPartition", partition_index=p) for p in parts])
                    for t, parts in by_topic.items()]))
            _group_error(self, group_id, int(response.error_code))
            results: dict[TopicPartition, AdminError | None] = {}
            for topic in response.topics:
                for p in topic.partitions:
                    code = int(p.error_code)
                    results[TopicPartition(topic.name, int(p.partition_index))] = AdminError.of(code) if code else None
            return results

        return self._call(attempt, "delete consumer group offsets")

    def delete_consumer_groups(self: GroupCalls, group_ids: Iterable[str], *,
                               raise_on_error: bool = True) -> dict[str, AdminError | None]:
        """Delete empty groups and their offsets; group -> None or the error (NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND)."""
        results: dict[str, AdminError | None] = {}
        for group_id in dict.fromkeys(group_ids):

            def attempt(group_id: str = group_id) -> AdminError | None:
                node = _coordinator(self, group_id)
                response = self._send(node, DELETE_GROUPS, lambda s: s.make(
                    "DeleteGroupsRequest", groups_names=[group_id]))
                code = int(response.results[0].error_code)
                try:
                    _group_error(self, group_id, code)  # coordinator moves raise Retry, not AdminError
                except AdminError as exc:
                    return exc
                return None

            results[group_id] = self._call(attempt, f"delete group {group_id}")
        return finish(results, raise_on_error)
