"""Client-side partition assignors of the classic group protocol: range, roundrobin, cooperative-sticky.

The group leader runs the assignor the whole group agreed on (by name, in JoinGroup), so each must
compute exactly what the Java assignor of that name computes, or a mixed group (our consumer next to
a Java or librdkafka one) would disagree about who reads what. Subscriptions and assignments travel
as Kafka's ConsumerProtocol bytes: a version (int16) and the struct of that version, decoded here at
the version the sender wrote and tolerant of newer versions' trailing fields.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from kio.serial import entity_reader, entity_writer

from bus.client.subscription import TopicPartition

_SUBSCRIPTION_MAX = 3
_ASSIGNMENT_MAX = 3
EAGER = "eager"
COOPERATIVE = "cooperative"


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


class AbstractAssignor:
    """`assign(partitions_per_topic, subscriptions) -> {member_id: Assignment}`, run by the group leader."""

    name = ""
    protocols: tuple[str, ...] = (EAGER,)

    def metadata(self, topics: Iterable[str], owned: Iterable[TopicPartition], generation: int,
                 rack: str | None) -> bytes:
        return encode_subscription(Subscription(tuple(sorted(topics)), None, tuple(sorted(owned)), generation,
                                                rack or None))

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        raise NotImplementedError


def _member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Java's MemberInfo order: members with a group.instance.id first, by it; then by member id."""
    return sorted(subscriptions, key=lambda m: (subscriptions[m].group_instance_id is None,
                                                subscriptions[m].group_instance_id or "", m))


class RangeAssignor(AbstractAssignor):
    """Per topic, consecutive ranges of partitions, the first members getting one extra (Java's RangeAssignor)."""

    name = "range"
    protocols = (EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        order = _member_order(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in order}
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        for topic in topics:
            count = partitions_per_topic.get(topic)
            if not count:
                continue
            members = [m for m in order if topic in subscriptions[m].topics]
            per, extra = divmod(count, len(members))
            start = 0
            for index, member in enumerate(members):
                length = per + (1 if index < extra else 0)
                out[member].extend(TopicPartition(topic, p) for p in range(start, start + length))
                start += length
        return {m: Assignment(tuple(tps)) for m, tps in out.items()}


class RoundRobinAssignor(AbstractAssignor):
    """All partitions in (topic, partition) order dealt to members in turn (Java's RoundRobinAssignor)."""

    name = "roundrobin"
    protocols = (EAGER,)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        order = _member_order(subscriptions)
        out: dict[str, list[TopicPartition]] = {m: [] for m in order}
        topics = sorted({t for s in subscriptions.values() for t in s.topics if partitions_per_topic.get(t)})
        cursor = 0
        for topic in topics:
            for partition in range(partitions_per_topic[topic]):
                for _ in range(len(order)):
                    member = order[cursor % len(order)]
                    cursor += 1
                    if topic in subscriptions[member].topics:
                        out[member].append(TopicPartition(topic, partition))
                        break
        return {m: Assignment(tuple(tps)) for m, tps in out.items()}


class CooperativeStickyAssignor(AbstractAssignor):
    """Balanced and sticky; partitions that change owner are held back one round (KIP-429).

    Stickiness: each member keeps what it owned (newest generation wins a dispute) up to its fair
    share; the rest goes to the least loaded eligible member, then partitions move from the most to
    the least loaded member until counts differ by at most one wherever eligibility allows. A partition
    that ends up with a new owner is left out of this round's assignment: its old owner revokes it
    and rejoins, and the follow-up rebalance hands it over, so no partition is ever owned twice.
    """

    name = "cooperative-sticky"
    protocols = (COOPERATIVE, EAGER)

    def assign(self, partitions_per_topic: Mapping[str, int],
               subscriptions: Mapping[str, Subscription]) -> dict[str, Assignment]:
        order = _member_order(subscriptions)
        all_partitions = [TopicPartition(t, p) for t in sorted(partitions_per_topic)
                          for p in range(partitions_per_topic[t])
                          if any(t in subscriptions[m].topics for m in order)]
        eligible = {tp: [m for m in order if tp.topic in subscriptions[m].topics] for tp in all_partitions}
        previous: dict[TopicPartition, tuple[int, str]] = {}
        for member in order:
            sub = subscriptions[member]
            for tp in sub.owned_partitions:
                if tp in eligible and member in eligible[tp]:
                    current = previous.get(tp)
                    if current is None or sub.generation_id > current[0]:
                        previous[tp] = (sub.generation_id, member)
        owned: dict[str, list[TopicPartition]] = {m: [] for m in order}
        for tp, (_, member) in sorted(previous.items()):
            owned[member].append(tp)
        # Fair share: nobody keeps more than the ceiling of an even split among members of its topics.
        total = len(all_partitions)
        ceiling = -(-total // len(order)) if order else 0
        assignment: dict[str, list[TopicPartition]] = {m: owned[m][:ceiling] for m in order}
        taken = {tp for tps in assignment.values() for tp in tps}
        for tp in all_partitions:
            if tp in taken or not eligible[tp]:
                continue
            member = min(eligible[tp], key=lambda m: (len(assignment[m]), order.index(m)))
            assignment[member].append(tp)
            taken.add(tp)
        self._balance(assignment, eligible, previous, order)
        # KIP-429: a partition moving between members goes to its new owner only next round.
        result = {}
        for member in order:
            keep = [tp for tp in assignment[member]
                    if tp not in previous or previous[tp][1] == member]
            result[member] = Assignment(tuple(sorted(keep)))
        return result

    @staticmethod
    def _balance(assignment: dict[str, list[TopicPartition]], eligible: dict[TopicPartition, list[str]],
                 previous: dict[TopicPartition, tuple[int, str]], order: list[str]) -> None:
        moved = True
        while moved:
            moved = False
            for heavy in sorted(order, key=lambda m: -len(assignment[m])):
                # Move a partition the heavy member did not own before if possible (least churn).
                candidates = sorted(assignment[heavy], key=lambda tp: (previous.get(tp, (0, ""))[1] == heavy, tp))
                for tp in candidates:
                    lighter = [m for m in eligible[tp] if len(assignment[m]) + 1 < len(assignment[heavy])]
                    if lighter:
                        target = min(lighter, key=lambda m: (len(assignment[m]), order.index(m)))
                        assignment[heavy].remove(tp)
                        assignment[target].append(tp)
                        moved = True
                        break
                if moved:
                    break


ASSIGNORS: dict[str, type[AbstractAssignor]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
# The Java class names people put in partition.assignment.strategy.
_JAVA_NAMES = {
    "org.apache.kafka.clients.consumer.RangeAssignor": "range",
    "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin",
    "org.apache.kafka.clients.consumer.CooperativeStickyAssignor": "cooperative-sticky",
}


def make_assignors(specs: Iterable[Any]) -> list[AbstractAssignor]:
    """Assignors from names ("range"), Java class names, classes or instances."""
    out = []
    for spec in specs:
        if isinstance(spec, AbstractAssignor):
            out.append(spec)
        elif isinstance(spec, type) and issubclass(spec, AbstractAssignor):
            out.append(spec())
        else:
            name = _JAVA_NAMES.get(str(spec), str(spec))
            if name not in ASSIGNORS:
                from bus.client.errors import ConfigError

                raise ConfigError(f"unknown partition.assignment.strategy {spec!r} "
                                  f"(one of {', '.join(ASSIGNORS)})")
            out.append(ASSIGNORS[name]())
    if not out:
        from bus.client.errors import ConfigError

        raise ConfigError("partition.assignment.strategy is empty")
    return out


def rebalance_protocol(assignors: list[AbstractAssignor]) -> str:
    """Cooperative only if every configured assignor supports it (Java's rule)."""
    return COOPERATIVE if all(COOPERATIVE in a.protocols for a in assignors) else EAGER
