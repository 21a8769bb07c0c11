"""How the controller places replicas and elects partition leaders: pure functions over `PartitionState`.

Placement is Kafka's rack-unaware assignment (`assignReplicasToBrokersRackUnaware`): partition p's first replica
is broker (start + p) mod n, its followers follow at a shift that grows by one every n partitions, so leaders and
followers spread evenly over the brokers; the controller draws `start` at random per topic, which spreads the
leaders of many small topics too.

Leader and ISR changes follow Kafka's `PartitionChangeBuilder` (ONLINE and UNCLEAN elections):
- the current leader stays while it is in the target ISR and usable (registered, unfenced, not shutting down);
- otherwise the first replica in assignment order that is in the target ISR and usable leads;
- failing that, with unclean election the first usable replica leads with ISR = [it] (it may lack acknowledged
  records: that is what unclean means); without it the partition has no leader (-1);
- the ISR never becomes empty: when every member goes, it keeps the last one, so that replica, which holds every
  acknowledged record, can be elected back cleanly when it returns (KRaft does the same).
A new state bumps `partition_epoch` on every change and `leader_epoch` whenever the leader changes (to -1 too);
no change gives None, so the controller commits nothing.

Reassignment (AlterPartitionReassignments) follows Kafka's KRaft controller: starting one makes the replicas the
target followed by the current replicas it drops, with `adding_replicas` / `removing_replicas` naming the difference;
every later change checks whether every target replica is in the ISR, and then completes it (the removed replicas
leave the replicas and the ISR, and the leader moves when it was one of them). A replica leaving the assignment
bumps the leader epoch even under the same leader, so its fetches are fenced. Cancelling reverts to the replicas
before the move (`reverted`).

A PREFERRED election (ElectLeaders, automatic rebalance) hands the leadership to the partition's preferred replica,
the first of its assignment, when that replica is in the ISR and usable; `imbalance` measures, per broker, how
many of the partitions it is the preferred replica of are led elsewhere (Kafka's auto leader rebalance).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from bus.controller.image import PartitionState

NO_LEADER = -1


def place_replicas(brokers: Sequence[int], partitions: int, factor: int, start_index: int,
                   first_partition: int = 0) -> dict[int, list[int]]:
    """Replicas for partitions `first_partition`.. (`partitions` of them) over `brokers` (sorted, at least
    `factor`), starting at `start_index`, as Kafka's rack-unaware assignment with a fixed start index."""
    count = len(brokers)
    if factor > count:
        raise ValueError(f"replication factor {factor} exceeds the {count} brokers")
    shift = start_index
    assignment: dict[int, list[int]] = {}
    for partition in range(first_partition, first_partition + partitions):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        replicas = [brokers[first]]
        replicas += [brokers[(first + 1 + (shift + j) % (count - 1)) % count] for j in range(factor - 1)]
        assignment[partition] = replicas
    return assignment


def change(state: PartitionState, usable: Collection[int], unclean: bool,
           target_isr: Sequence[int] | None = None, *, target: Assignment | None = None) -> PartitionState | None:
    """The partition after moving its ISR to `target_isr` (default: unchanged) and its replica assignment to
    `target` (default: unchanged), completing a reassignment the ISR allows, and electing a leader if the current
    one no longer qualifies; None when nothing changes (Kafka's PartitionChangeBuilder.build)."""
    isr = list(state.isr if target_isr is None else target_isr)
    if target is None:
        target = Assignment(list(state.replicas), list(state.adding_replicas), list(state.removing_replicas))
    target, isr = _complete_reassignment(target, isr)
    leader = _elect(state.leader, target.replicas, isr, usable)
    if leader == NO_LEADER and unclean:
        leader = next((r for r in target.replicas if r in usable), NO_LEADER)
        if leader != NO_LEADER:
            isr = [leader]
    if not isr:  # the last member still a replica stays (or, reverting a move, the first replica)
        isr = [r for r in state.isr if r in target.replicas][-1:] or target.replicas[:1]
    if (leader == state.leader and isr == state.isr and target.replicas == state.replicas
            and target.adding == state.adding_replicas and target.removing == state.removing_replicas):
        return None
    # A replica leaving the assignment must see a new leader epoch, even under the same leader (Kafka's
    # triggerLeaderEpochBumpForReplicaReassignmentIfNeeded): its fetches are fenced from then on.
    dropped = not set(state.replicas) <= set(target.replicas)
    return PartitionState(
        partition=state.partition,
        replicas=target.replicas,
        isr=isr,
        leader=leader,
        leader_epoch=state.leader_epoch + (leader != state.leader or dropped),
        partition_epoch=state.partition_epoch + 1,
        adding_replicas=target.adding,
        removing_replicas=target.removing,
    )


@dataclass(slots=True)
class Assignment:
    """A partition's replicas with the reassignment under way, if any (Kafka's PartitionReassignmentReplicas)."""

    replicas: list[int]
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)


def reassignment(state: PartitionState, target: Sequence[int]) -> Assignment:
    """Moving the partition to the replicas `target`: the target first, then the current replicas it drops (still
    replicas until the move completes); adding = target - current, removing = current - target, as Kafka's
    PartitionReassignmentReplicas. A move that replaces one under way also keeps as adding the replicas the
    earlier move was adding and the new one keeps (Kafka keeps the earlier adding list whole when the new one is
    empty): they may still be catching up, and a cancel must take them out again."""
    current = state.replicas
    removing = [r for r in current if r not in target]
    adding = [r for r in target if r not in current or r in state.adding_replicas]
    return Assignment([*target, *removing], adding, removing)


def reverted(state: PartitionState) -> tuple[Assignment, list[int]]:
    """The assignment and ISR a cancelled reassignment returns to (Kafka's PartitionReassignmentReplicas revert):
    the replicas being added leave, those being removed stay. The ISR is empty when only added replicas were in
    it: then only an unclean election can lead the partition."""
    adding = set(state.adding_replicas)
    return (Assignment([r for r in state.replicas if r not in adding]),
            [r for r in state.isr if r not in adding])


def _complete_reassignment(target: Assignment, isr: list[int]) -> tuple[Assignment, list[int]]:
    """The reassignment done once every replica it keeps is in the ISR (Kafka's completeReassignmentIfNeeded):
    the removed replicas leave the assignment and the ISR; otherwise unchanged."""
    if not target.adding and not target.removing:
        return target, isr
    kept = [r for r in target.replicas if r not in target.removing]
    kept_isr = [r for r in isr if r not in target.removing]
    if not kept_isr or not set(kept) <= set(kept_isr):
        return target, isr
    return Assignment(kept), kept_isr


def preferred(state: PartitionState, usable: Collection[int]) -> PartitionState | None:
    """The partition led by its preferred replica (Kafka's PREFERRED election); None when that replica already
    leads, or is out of the ISR or not usable (it may lack acknowledged records, or cannot serve)."""
    first = state.replicas[0]
    if state.leader == first or first not in state.isr or first not in usable:
        return None
    return dataclasses.replace(state, leader=first, leader_epoch=state.leader_epoch + 1,
                               partition_epoch=state.partition_epoch + 1)


@dataclass(slots=True)
class BrokerImbalance:
    """The partitions a broker is the preferred replica of: how many, and those another broker (or none) leads,
    each as (topic id, state)."""

    preferred: int = 0
    led_elsewhere: list[tuple[str, PartitionState]] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        """Kafka's leader imbalance ratio of the broker, compared against `leader.imbalance.per.broker.percentage`."""
        return len(self.led_elsewhere) / self.preferred if self.preferred else 0.0


def imbalance(partitions: Iterable[tuple[str, PartitionState]]) -> dict[int, BrokerImbalance]:
    """Per preferred replica, the partitions it prefers and those it does not lead (one pass, no copies)."""
    brokers: dict[int, BrokerImbalance] = {}
    for topic_id, state in partitions:
        first = state.replicas[0]
        entry = brokers.get(first)
        if entry is None:
            entry = brokers[first] = BrokerImbalance()
        entry.preferred += 1
        if state.leader != first:
            entry.led_elsewhere.append((topic_id, state))
    return brokers


def without_brokers(state: PartitionState, gone: Collection[int], usable: Collection[int],
                    unclean: bool) -> PartitionState | None:
    """The partition once the brokers `gone` (fenced or shutting down) leave its ISR and its leadership."""
    available = [b for b in usable if b not in gone]
    return change(state, available, unclean, [r for r in state.isr if r not in gone])


def _elect(leader: int, replicas: Sequence[int], isr: Sequence[int], usable: Collection[int]) -> int:
    if leader in isr and leader in usable and leader in replicas:
        return leader
    return next((r for r in replicas if r in isr and r in usable), NO_LEADER)
