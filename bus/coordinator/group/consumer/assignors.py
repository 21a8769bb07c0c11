"""Server-side assignors: `uniform` (balanced and sticky, Kafka's default) and `range`.

Both are pure functions from (members' subscriptions, partitions per topic, current target) to a
new target assignment, so they are unit-tested without a broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

Assignment = dict[uuid.UUID, set[int]]  # topic id -> partitions


def _subscribers(subscriptions: Mapping[str, set[uuid.UUID]], topic_id: uuid.UUID) -> list[str]:
    return sorted(m for m, topics in subscriptions.items() if topic_id in topics)


def range_assign(
    subscriptions: Mapping[str, set[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Per topic, consecutive ranges of partitions to the subscribed members in member-id order."""
    result: dict[str, Assignment] = {m: {} for m in subscriptions}
    for topic_id, count in partitions.items():
        members = _subscribers(subscriptions, topic_id)
        if not members:
            continue
        quota, extra = divmod(count, len(members))
        start = 0
        for i, member in enumerate(members):
            size = quota + (1 if i < extra else 0)
            if size:
                result[member][topic_id] = set(range(start, start + size))
            start += size
    return result


def uniform_assign(
    subscriptions: Mapping[str, set[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Balance the partition count across members while keeping every partition where it already is
    when that does not unbalance the group (stickiness means fewer revocations per rebalance)."""
    result: dict[str, Assignment] = {m: {} for m in subscriptions}
    load = dict.fromkeys(subscriptions, 0)
    unassigned: list[tuple[uuid.UUID, int]] = []
    eligible: dict[tuple[uuid.UUID, int], list[str]] = {}
    for topic_id in sorted(partitions, key=str):
        members = _subscribers(subscriptions, topic_id)
        for p in range(partitions[topic_id]):
            if members:
                eligible[(topic_id, p)] = members
                unassigned.append((topic_id, p))
    total = len(unassigned)
    if not subscriptions or not total:
        return result
    ceiling = -(-total // len(subscriptions))
    remaining: list[tuple[uuid.UUID, int]] = []
    for tp in unassigned:
        owner = next((m for m in eligible[tp] if tp[1] in current.get(m, {}).get(tp[0], ())), None)
        if owner is not None and load[owner] < ceiling:
            result[owner].setdefault(tp[0], set()).add(tp[1])
            load[owner] += 1
        else:
            remaining.append(tp)
    for tp in remaining:
        owner = min(eligible[tp], key=lambda m: (load[m], m))
        result[owner].setdefault(tp[0], set()).add(tp[1])
        load[owner] += 1
    _rebalance(result, load, eligible)
    return result


def _rebalance(result: dict[str, Assignment], load: dict[str, int],
               eligible: Mapping[tuple[uuid.UUID, int], list[str]]) -> None:
    """Move partitions from the most to the least loaded eligible member until counts differ by <= 1."""
    moved = True
    while moved:
        moved = False
        for member in sorted(load, key=lambda m: -load[m]):
            for topic_id, parts in list(result[member].items()):
                for p in sorted(parts):
                    target = min(eligible[(topic_id, p)], key=lambda m: (load[m], m))
                    if load[member] - load[target] > 1:
                        parts.discard(p)
                        result[target].setdefault(topic_id, set()).add(p)
                        load[member] -= 1
                        load[target] += 1
                        moved = True
                if not parts:
                    del result[member][topic_id]


ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}
