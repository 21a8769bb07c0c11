"""Client-side partition assignors of the classic group protocol: range, roundrobin, cooperative-sticky.

The group leader runs the assignor the whole group agreed on (by name, in JoinGroup), so each must
compute exactly what the Java assignor of that name computes, or a mixed group (our consumer next to
a Java or librdkafka one) would disagree about who reads what. Subscriptions and assignments travel
as Kafka's ConsumerProtocol bytes (`bus.protocol.consumer_protocol`, shared with the broker).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bus.protocol.consumer_protocol import Assignment, Subscription, encode_subscription
from bus.protocol.topic_partition import TopicPartition

EAGER = "eager"
COOPERATIVE = "cooperative"


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
