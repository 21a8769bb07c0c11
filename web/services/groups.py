"""Consumer groups: state, members, committed offsets and lag per partition; the admin's offset reset.

Lag is ``log end offset - committed offset`` per partition, as ``kafka-consumer-groups.sh`` shows it
(a partition with no committed offset has no lag figure, not an invented one). The end offsets of
every group's partitions come from one ListOffsets call, so the groups page costs one DescribeGroups,
one OffsetFetch per group (concurrently) and one ListOffsets, whatever the number of partitions.

Offset reset follows ``kafka-consumer-groups.sh --reset-offsets``: refused while the group has
members (the broker would refuse the commit too: a running consumer would overwrite it at once);
``datetime`` picks the first offset at or after the time (the end when there is none); an explicit
offset is clamped into the partition's [earliest, latest] range.

The group calls (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit) go through the bus package's own admin
client (``Backends.group_admin``): librdkafka's can abort the console when a broker returns while its group requests
that timed out are still pending (confluentinc/librdkafka#4605). The end offsets are one librdkafka ListOffsets.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec

from bus.client.admin.groups import ConsumerGroupDescription
from bus.protocol.topic_partition import TopicPartition as BusTopicPartition

from ..backends import Backends
from . import bus
from .errors import Conflict, Invalid, NotFound
from .kafka_calls import call

INACTIVE = ("Empty", "Dead")
_STATES = {"PreparingRebalance": "preparing_rebalancing", "CompletingRebalance": "completing_rebalancing"}
"""Kafka's group states as the console has always named them (librdkafka's enum names, lower-cased)."""


def _state(description: ConsumerGroupDescription) -> str:
    return _STATES.get(description.state, description.state.lower())


def _group_ids(backends: Backends) -> list[str]:
    admin = backends.group_admin()
    return sorted(g.group_id for g in call(admin.list_consumer_groups))


def _committed(backends: Backends, group_ids: list[str]) -> dict[str, dict[tuple[str, int], int]]:
    """group -> (topic, partition) -> committed offset, for partitions with a commit (one OffsetFetch each)."""
    admin = backends.group_admin()
    out: dict[str, dict[tuple[str, int], int]] = {}
    for group_id in group_ids:
        committed = call(functools.partial(admin.list_consumer_group_offsets, group_id), group_id)
        out[group_id] = {(tp.topic, tp.partition): om.offset for tp, om in committed.items()}
    return out


def _describe(backends: Backends, group_ids: list[str]) -> dict[str, ConsumerGroupDescription]:
    if not group_ids:
        return {}
    admin = backends.group_admin()
    return call(lambda: admin.describe_consumer_groups(group_ids), ",".join(group_ids))


def _lags(backends: Backends, committed: dict[str, dict[tuple[str, int], int]],
          assigned: dict[str, set[tuple[str, int]]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per group, each partition's committed offset, end offset and lag (one ListOffsets for all groups).

    ``assigned`` adds partitions a member owns but has not committed yet (shown, with no lag figure).
    """
    shown = {g: set(offsets) | (assigned or {}).get(g, set()) for g, offsets in committed.items()}
    wanted = sorted(set().union(*shown.values())) if shown else []
    ends = bus.offsets(backends, [TopicPartition(t, p) for t, p in wanted], OffsetSpec.latest())
    out: dict[str, list[dict[str, Any]]] = {}
    for group_id, tps in shown.items():
        rows = []
        for tp in sorted(tps):
            end, offset = ends.get(tp), committed[group_id].get(tp)
            lag = max(end - offset, 0) if end is not None and end >= 0 and offset is not None else None
            rows.append({"topic": tp[0], "partition": tp[1], "committed": offset, "end_offset": end, "lag": lag})
        out[group_id] = rows
    return out


def total(rows: list[dict[str, Any]]) -> int:
    return sum(r["lag"] for r in rows if r["lag"] is not None)


def groups(backends: Backends) -> list[dict[str, Any]]:
    """Every consumer group with its state, member count and total lag."""
    ids = _group_ids(backends)
    described = _describe(backends, ids)
    lags = _lags(backends, _committed(backends, ids))
    return [{"group_id": g, "state": _state(described[g]), "members": len(described[g].members),
             "protocol": described[g].partition_assignor or None, "partitions": len(lags[g]),
             "total_lag": total(lags[g])} for g in ids]


def lag_by_group(backends: Backends) -> dict[str, list[tuple[str, int, int | None]]]:
    """What the lag sampler records: every group's (topic, partition, lag) per committed partition."""
    return {group: [(r["topic"], r["partition"], r["lag"]) for r in rows]
            for group, rows in _lags(backends, _committed(backends, _group_ids(backends))).items()}


def _exists(description: ConsumerGroupDescription, committed: dict[tuple[str, int], int]) -> bool:
    return description.state != "Dead" or bool(description.members) or bool(committed)


def group(backends: Backends, group_id: str) -> dict[str, Any]:
    """One group: members with their assignments, and each partition's committed offset, end and lag."""
    description = _describe(backends, [group_id])[group_id]
    committed = _committed(backends, [group_id])[group_id]
    if not _exists(description, committed):
        raise NotFound("group", group_id)
    owners = {(tp.topic, tp.partition): m.member_id for m in description.members for tp in m.assignment}
    partitions = _lags(backends, {group_id: committed}, {group_id: set(owners)})[group_id]
    for row in partitions:
        row["member_id"] = owners.get((row["topic"], row["partition"]))
    coordinator = description.coordinator
    return {
        "group_id": group_id, "state": _state(description), "protocol": description.partition_assignor or None,
        "coordinator": coordinator.node_id if coordinator is not None else None,
        "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                     "group_instance_id": m.group_instance_id,
                     "assignment": [{"topic": tp.topic, "partition": tp.partition}
                                    for tp in m.assignment]} for m in description.members],
        "partitions": partitions, "total_lag": total(partitions),
    }


@dataclass(frozen=True)
class ResetSpec:
    """Where to move a group's offsets: ``to`` is earliest | latest | datetime (``time_ms``) | offset (``offset``)."""

    to: str
    topic: str | None = None
    partitions: tuple[int, ...] | None = None
    time_ms: int | None = None
    offset: int | None = None


def _targets(backends: Backends, group_id: str, spec: ResetSpec,
             committed: dict[tuple[str, int], int]) -> list[TopicPartition]:
    """The partitions to reset: the named topic's (all, or those listed), else every committed one."""
    if spec.topic is None:
        if spec.partitions is not None:
            raise Invalid("partitions", "partitions need a topic")
        if not committed:
            raise Invalid("topic", f"group {group_id} has committed no offsets: name a topic")
        return [TopicPartition(t, p) for t, p in sorted(committed)]
    described = bus.metadata(backends).topics.get(spec.topic)
    if described is None:
        raise NotFound("topic", spec.topic)
    ids = sorted(described.partitions) if spec.partitions is None else sorted(set(spec.partitions))
    missing = [p for p in ids if p not in described.partitions]
    if missing:
        raise Invalid("partitions", f"{spec.topic} has no partition {missing[0]}")
    return [TopicPartition(spec.topic, p) for p in ids]


def _new_offsets(backends: Backends, spec: ResetSpec, tps: list[TopicPartition]) -> dict[tuple[str, int], int]:
    if spec.to == "earliest":
        return bus.offsets(backends, tps, OffsetSpec.earliest())
    latest = bus.offsets(backends, tps, OffsetSpec.latest())
    if spec.to == "latest":
        return latest
    if spec.to == "datetime":
        if spec.time_ms is None:
            raise Invalid("datetime", "to=datetime needs a datetime")
        found = bus.offsets(backends, tps, OffsetSpec.for_timestamp(spec.time_ms))
        return {tp: offset if offset >= 0 else latest[tp] for tp, offset in found.items()}
    if spec.to == "offset":
        if spec.offset is None:
            raise Invalid("offset", "to=offset needs an offset")
        earliest = bus.offsets(backends, tps, OffsetSpec.earliest())
        return {tp: min(max(spec.offset, earliest[tp]), latest[tp]) for tp in latest}
    raise Invalid("to", f"unknown reset target {spec.to!r}")


def reset_offsets(backends: Backends, group_id: str, spec: ResetSpec) -> list[dict[str, Any]]:
    """Commit new offsets for an inactive group; returns each partition's previous and new offset."""
    description = _describe(backends, [group_id])[group_id]
    committed = _committed(backends, [group_id])[group_id]
    if description.members or description.state not in INACTIVE:
        raise Conflict(f"group {group_id} has {len(description.members)} active member(s) (state "
                       f"{_state(description)}): stop its consumers before resetting offsets")
    if not _exists(description, committed) and spec.topic is None:
        raise NotFound("group", group_id)
    tps = _targets(backends, group_id, spec, committed)
    new = _new_offsets(backends, spec, tps)
    admin = backends.group_admin()
    plan = {BusTopicPartition(t, p): o for (t, p), o in new.items()}
    call(lambda: admin.alter_consumer_group_offsets(group_id, plan), group_id, f"reset the offsets of group {group_id}")
    return [{"topic": t, "partition": p, "previous": committed.get((t, p)), "offset": o}
            for (t, p), o in sorted(new.items())]
