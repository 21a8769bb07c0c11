"""The KIP-848 consumer group coordinator: ConsumerGroupHeartbeat and ConsumerGroupDescribe.

Membership lives in memory, in the group namespace shared with classic groups (`group/namespace.py`, which also
answers for these groups to offsets and the admin APIs): after a broker restart members get UNKNOWN_MEMBER_ID on
their next heartbeat and rejoin with epoch 0, which the protocol is designed for; committed offsets are kept by
the offsets store shared with classic groups, so consumption resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from bus.coordinator.group.consumer.assignors import ASSIGNORS, Assignment
from bus.coordinator.group.consumer.group import ConsumerGroup, ConsumerMember, MemberState
from bus.coordinator.group.namespace import GroupNamespace
from bus.coordinator.interfaces import MetadataView
from bus.protocol.errors import KafkaApiError

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class HeartbeatError(KafkaApiError):
    """A heartbeat the coordinator refuses (fenced epoch, unknown member, bad request)."""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    rebalance_timeout_ms: int
    subscribed_topic_names: list[str] | None
    subscribed_topic_regex: str | None
    server_assignor: str | None
    owned: Assignment | None
    client_id: str
    client_host: str
    generates_member_id: bool  # v0: the server names new members; v1+: the client does


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Assignment | None


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    heartbeat_interval_ms: int = 5000
    session_timeout_ms: int = 45000
    assignors: tuple[str, ...] = ("uniform", "range")

    @classmethod
    def from_broker(cls, config: Any) -> ConsumerGroupConfig:
        return cls(int(config["group.consumer.heartbeat.interval.ms"]),
                   int(config["group.consumer.session.timeout.ms"]),
                   tuple(a.strip() for a in config["group.consumer.assignors"]))


class ConsumerGroupCoordinator:
    def __init__(self, config: ConsumerGroupConfig, metadata: MetadataView, namespace: GroupNamespace) -> None:
        """`namespace`: the groups of both protocols; a classic group with members owns its id."""
        self.metadata = metadata
        self.namespace = namespace
        self.heartbeat_interval_ms = config.heartbeat_interval_ms
        self.session_timeout_ms = config.session_timeout_ms
        self.assignors = list(config.assignors)
        self.groups = namespace.consumer
        self._timers: dict[tuple[str, str], asyncio.TimerHandle] = {}

    # -- topology --------------------------------------------------------------------------------

    def _topic_ids(self, member: ConsumerMember) -> set[uuid.UUID]:
        topics = self.metadata.topics
        ids = {topics[name].topic_id for name in member.subscribed_topics if name in topics}
        if member.subscribed_regex:
            pattern = re.compile(member.subscribed_regex)
            ids |= {t.topic_id for name, t in topics.items() if not t.internal and pattern.fullmatch(name)}
        return ids

    def _refresh_target(self, group: ConsumerGroup) -> None:
        subscriptions = {m.member_id: self._topic_ids(m) for m in group.members.values()}
        by_id = self.metadata.topics_by_id
        partitions = {tid: len(by_id[tid].partitions) for ids in subscriptions.values() for tid in ids if tid in by_id}
        if partitions != group.subscribed_partitions:
            group.subscribed_partitions = partitions
            group.group_epoch += 1
        if group.assignment_epoch < group.group_epoch:
            assign = ASSIGNORS.get(group.assignor, ASSIGNORS["uniform"])
            group.target = assign(subscriptions, partitions, group.target)
            group.assignment_epoch = group.group_epoch

    # -- heartbeat --------------------------------------------------------------------------------

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        if not req.group_id:
            raise HeartbeatError(ErrorCode.invalid_request, "GroupId can't be empty.")
        if self.namespace.is_active_classic_group(req.group_id):
            raise HeartbeatError(ErrorCode.group_id_not_found,
                                 f"Group {req.group_id} is not a consumer group.")
        if req.server_assignor is not None and req.server_assignor not in self.assignors:
            raise HeartbeatError(ErrorCode.unsupported_assignor,
                                 f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
                                 f"{', '.join(self.assignors)}.")
        group = self.groups.get(req.group_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(group, req)
        if req.member_epoch == 0:
            group = group or self.groups.setdefault(req.group_id, ConsumerGroup(req.group_id,
                                                                              assignor=self.assignors[0]))
            member = self._join(group, req)
        else:
            known = group.members.get(req.member_id) if group else None
            if known is None or group is None:
                raise HeartbeatError(ErrorCode.unknown_member_id,
                                     f"Member {req.member_id} is not a member of group {req.group_id}.")
            member = known
            if req.member_epoch not in (member.member_epoch, member.previous_epoch):
                raise HeartbeatError(ErrorCode.fenced_member_epoch,
                                     f"The consumer group member has a smaller member epoch ({req.member_epoch}) "
                                     f"than the one known by the group coordinator ({member.member_epoch}).")
            self._update_subscription(group, member, req)
        if (member.state is MemberState.UNREVOKED_PARTITIONS and member.revocation_deadline is not None
                and time.monotonic() > member.revocation_deadline):
            self._remove(group, member.member_id, "did not revoke its partitions within the rebalance timeout")
            raise HeartbeatError(ErrorCode.fenced_member_epoch, "The member was fenced for not revoking in time.")
        self._refresh_target(group)
        group.reconcile(member, req.owned)
        if member.state is MemberState.UNREVOKED_PARTITIONS and member.revocation_deadline is None:
            member.revocation_deadline = time.monotonic() + member.rebalance_timeout_ms / 1000
        self._arm_session(group, member)
        changed = member.assigned != member.last_sent or req.member_epoch == 0
        if changed:
            member.last_sent = {t: set(p) for t, p in member.assigned.items()}
        return HeartbeatResult(member.member_id, member.member_epoch, self.heartbeat_interval_ms,
                               member.assigned if changed else None)

    def _join(self, group: ConsumerGroup, req: HeartbeatRequest) -> ConsumerMember:
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise HeartbeatError(ErrorCode.invalid_request,
                                 "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
        if req.rebalance_timeout_ms < 0:
            raise HeartbeatError(ErrorCode.invalid_request, "RebalanceTimeoutMs must be provided in first request.")
        member_id = req.member_id
        if not member_id:
            if not req.generates_member_id:
                raise HeartbeatError(ErrorCode.invalid_request, "MemberId can't be empty.")
            member_id = str(uuid.uuid4())
        previous = None
        if req.instance_id is not None:
            previous = next((m for m in group.members.values() if m.instance_id == req.instance_id), None)
            if previous is not None and previous.member_id != member_id:
                # A static member came back under a new member id: it takes over the old one's place.
                self._cancel_session(group.group_id, previous.member_id)
                del group.members[previous.member_id]
                if previous.member_id in group.target:
                    group.target[member_id] = group.target.pop(previous.member_id)
        member = group.members.get(member_id)
        if member is None:
            member = ConsumerMember(member_id, req.instance_id, req.rack_id, req.client_id, req.client_host,
                                    req.rebalance_timeout_ms)
            if previous is not None:
                member.assigned = previous.assigned
                member.member_epoch = previous.member_epoch
            group.members[member_id] = member
            group.group_epoch += 1
        self._update_subscription(group, member, req)
        return member

    @staticmethod
    def _update_subscription(group: ConsumerGroup, member: ConsumerMember, req: HeartbeatRequest) -> None:
        changed = False
        if req.subscribed_topic_names is not None and sorted(req.subscribed_topic_names) != member.subscribed_topics:
            member.subscribed_topics = sorted(req.subscribed_topic_names)
            changed = True
        if req.subscribed_topic_regex is not None and req.subscribed_topic_regex != member.subscribed_regex:
            member.subscribed_regex = req.subscribed_topic_regex or None
            changed = True
        if req.server_assignor is not None and req.server_assignor != group.assignor:
            group.assignor = req.server_assignor
            changed = True
        if req.rebalance_timeout_ms >= 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if changed:
            group.group_epoch += 1

    def _leave(self, group: ConsumerGroup | None, req: HeartbeatRequest) -> HeartbeatResult:
        if group is not None:
            member = group.members.get(req.member_id)
            if member is None and req.instance_id is not None:
                member = next((m for m in group.members.values() if m.instance_id == req.instance_id), None)
            if member is not None:
                self._remove(group, member.member_id, "left the group")
        return HeartbeatResult(req.member_id, req.member_epoch, self.heartbeat_interval_ms, None)

    def _remove(self, group: ConsumerGroup, member_id: str, reason: str) -> None:
        if group.members.pop(member_id, None) is None:
            return
        log.info("consumer group %s: member %s %s", group.group_id, member_id, reason)
        self._cancel_session(group.group_id, member_id)
        group.target.pop(member_id, None)
        group.group_epoch += 1

    # -- sessions --------------------------------------------------------------------------------

    def _arm_session(self, group: ConsumerGroup, member: ConsumerMember) -> None:
        key = (group.group_id, member.member_id)
        self._cancel_session(*key)
        loop = asyncio.get_running_loop()
        self._timers[key] = loop.call_later(self.session_timeout_ms / 1000, self._expire, group, member.member_id)

    def _cancel_session(self, group_id: str, member_id: str) -> None:
        timer = self._timers.pop((group_id, member_id), None)
        if timer is not None:
            timer.cancel()

    def _expire(self, group: ConsumerGroup, member_id: str) -> None:
        self._timers.pop((group.group_id, member_id), None)
        self._remove(group, member_id, "expired after the session timeout")

    def stop(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    # -- ConsumerGroupDescribe --------------------------------------------------------------------

    def describe(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def topic_name(self, topic_id: uuid.UUID) -> str:
        topic = self.metadata.topics_by_id.get(topic_id)
        return topic.name if topic else ""


def owned_from_request(topic_partitions: Any) -> Assignment | None:
    if topic_partitions is None:
        return None
    return {tp.topic_id: set(tp.partitions) for tp in topic_partitions if tp.partitions}
