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

A PREFERRED election (ElectLeaders, automatic rebalance) hands the leadership to the partition's preferred replica,
the first of its assignment, when that replica is in the ISR and usable; `imbalance` measures, per broker, how
many of the partitions it is the preferred replica of are led elsewhere (Kafka's auto leader rebalance).
"""

from __future__ import annotations

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
           target_isr: Sequence[int] | None = None) -> PartitionState | None:
    """The partition after moving its ISR to `target_isr` (default: unchanged) and electing a leader if the
    current one no longer qualifies; None when nothing changes."""
    isr = list(state.isr if target_isr is None else target_isr)
    leader = _elect(state, isr, usable)
    if leader == NO_LEADER and unclean:
        leader = next((r for r in state.replicas if r in usable), NO_LEADER)
        if leader != NO_LEADER:
            isr = [leader]
    if not isr:
        isr = [state.isr[-1]] if state.isr else []
    if leader == state.leader and isr == state.isr:
        return None
    return _changed(state, leader, isr)


def preferred(state: PartitionState, usable: Collection[int]) -> PartitionState | None:
    """The partition led by its preferred replica (Kafka's PREFERRED election); None when that replica already
    leads, or is out of the ISR or not usable (it may lack acknowledged records, or cannot serve)."""
    first = state.replicas[0]
    if state.leader == first or first not in state.isr or first not in usable:
        return None
    return _changed(state, first, list(state.isr))


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


def _changed(state: PartitionState, leader: int, isr: list[int]) -> PartitionState:
    return PartitionState(
        partition=state.partition,
        replicas=list(state.replicas),
        isr=isr,
        leader=leader,
        leader_epoch=state.leader_epoch + (leader != state.leader),
        partition_epoch=state.partition_epoch + 1,
    )


def without_brokers(state: PartitionState, gone: Collection[int], usable: Collection[int],
                    unclean: bool) -> PartitionState | None:
    """The partition once the brokers `gone` (fenced or shutting down) leave its ISR and its leadership."""
    available = [b for b in usable if b not in gone]
    return change(state, available, unclean, [r for r in state.isr if r not in gone])


def _elect(state: PartitionState, isr: Sequence[int], usable: Collection[int]) -> int:
    if state.leader in isr and state.leader in usable:
        return state.leader
    return next((r for r in state.replicas if r in isr and r in usable), NO_LEADER)
