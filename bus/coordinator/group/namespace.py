"""One namespace for the groups of both protocols (Kafka's GroupMetadataManager keeps them in one map).

Kafka has one group namespace: a group id belongs either to a classic group (JoinGroup, SyncGroup, `classic/`)
or to a KIP-848 consumer group (ConsumerGroupHeartbeat, `consumer/`); offsets of both live in `__consumer_offsets`
alike. Each protocol asks about the other's groups: a KIP-848 heartbeat is refused for an active classic group, a
classic JoinGroup for a live consumer group; an offset commit or fetch is checked by whichever kind owns the id;
ListGroups, DescribeGroups and DeleteGroups span both. This holds both kinds keyed by group id and answers those
questions. The broker builds it first and hands it to both protocol implementations, so neither holds the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from bus.coordinator.group.classic.group import CONSUMER_PROTOCOL_TYPE, ClassicGroup, GroupState
from bus.coordinator.group.consumer.group import ConsumerGroup

GROUP_TYPE_CLASSIC = "classic"
GROUP_TYPE_CONSUMER = "consumer"


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str
    group_type: str


class GroupNamespace:
    def __init__(self) -> None:
        self.classic: dict[str, ClassicGroup] = {}
        self.consumer: dict[str, ConsumerGroup] = {}

    def is_active_classic_group(self, group_id: str) -> bool:
        """A classic group with members owns its id: KIP-848 heartbeats for it are refused (as in Kafka,
        which only converts an Empty classic group into a consumer group)."""
        group = self.classic.get(group_id)
        return group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD)

    def is_consumer_group(self, group_id: str) -> bool:
        """A KIP-848 group with members owns its id: classic members cannot join it, its members commit."""
        group = self.consumer.get(group_id)
        return group is not None and bool(group.members)

    def validate_member(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None:
        """OffsetCommit/OffsetFetch from a consumer-group member: None when valid (or not a consumer group)."""
        group = self.consumer.get(group_id)
        if group is None or (not member_id and member_epoch < 0):
            return None
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return None

    # -- admin across both types -----------------------------------------------------------------

    def list_groups(self, states: set[str], types: set[str]) -> list[GroupListing]:
        """Classic and KIP-848 groups whose state and type match the filters (case-insensitively)."""
        listings = [GroupListing(g.group_id, g.protocol_type or "", g.state.value, GROUP_TYPE_CLASSIC)
                    for g in self.classic.values() if not g.is_(GroupState.DEAD) and g.group_id not in self.consumer]
        listings += [GroupListing(group_id, CONSUMER_PROTOCOL_TYPE, g.state, GROUP_TYPE_CONSUMER)
                     for group_id, g in self.consumer.items()]
        states = {s.lower() for s in states}
        types = {t.lower() for t in types}
        return sorted((g for g in listings if (not states or g.state.lower() in states)
                       and (not types or g.group_type in types)), key=lambda g: g.group_id)

    def describable_classic_group(self, group_id: str) -> ClassicGroup | None:
        """The classic group DescribeGroups shows: None for a consumer group's id (Kafka describes it as Dead
        there), an unknown or a Dead group."""
        if group_id in self.consumer:
            return None
        group = self.classic.get(group_id)
        return group if group is not None and not group.is_(GroupState.DEAD) else None

    def delete_consumer_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for a KIP-848 group: NON_EMPTY_GROUP while it has members."""
        group = self.consumer.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        del self.consumer[group_id]
        return ErrorCode.none
