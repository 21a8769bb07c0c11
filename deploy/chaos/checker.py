"""The checker of a chaos run: what the clients were told against what the bus holds and what consumers read.

Pure functions over the recorded history (sans-IO, unit-tested with made-up histories). The anomalies are those of
Jepsen's Kafka workload, for the guarantees the bus gives:

* **lost**: a record the producer was told is written (acks=all) is missing from the final log;
* **duplicated**: a record (its unique value) is in the log more than once, in any partition;
* **reordered**: within a partition, two acknowledged records of one idempotent producer are in the log in the
  other order than it sent them (its sequence numbers go backwards);
* **nonmonotonic**: a consumer read an offset at or below one it had read before in the same assignment (a
  rebalance, which restarts it from the committed offset, starts a new assignment);
* **skipped**: a consumer jumped over offsets of its partition that hold records (in the final log) it never read
  in that assignment, without the records being transaction markers or aborted;
* **aborted read**: a read_committed consumer read a record of a transaction that was aborted;
* **phantom read**: a consumer read a value no producer ever sent.

A record whose send ended in doubt (a timeout: it may or may not be written) is neither lost nor a phantom.
"""

from __future__ import annotations

import itertools
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Ack:
    """``producer`` was told ``value`` is at ``offset`` of ``partition``; ``seq`` is its send order."""

    partition: int
    offset: int
    value: bytes
    seq: int
    producer: str = "p"


@dataclass(frozen=True, slots=True)
class Read:
    """A consumer read ``value`` at ``offset`` of ``partition`` in its ``assignment``-th assignment."""

    consumer: str
    assignment: int
    partition: int
    offset: int
    value: bytes


@dataclass
class History:
    """Everything the clients saw. ``log`` is the final content of each partition, read after the faults healed, as
    (offset, value) in offset order with read_uncommitted (aborted records included, markers never); ``committed``
    the offsets a read_committed reader finds there (None: no transactions, every record counts)."""

    acks: list[Ack] = field(default_factory=list)
    sent: set[bytes] = field(default_factory=set)
    in_doubt: set[bytes] = field(default_factory=set)
    aborted: set[bytes] = field(default_factory=set)
    reads: list[Read] = field(default_factory=list)
    log: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    committed: dict[int, set[int]] | None = None

    def visible(self, partition: int) -> list[int]:
        """The offsets of ``partition`` a read_committed consumer must read, in order."""
        records = self.log.get(partition, [])
        if self.committed is None:
            return [offset for offset, value in records if value not in self.aborted]
        shown = self.committed.get(partition, set())
        return [offset for offset, _value in records if offset in shown]

    def aborted_in_log(self) -> set[bytes]:
        """What the producers were told was aborted, and what the log holds outside every committed transaction."""
        if self.committed is None:
            return set(self.aborted)
        hidden = {value for partition, records in self.log.items() for offset, value in records
                  if offset not in self.committed.get(partition, set())}
        return self.aborted | hidden


@dataclass
class Anomalies:
    lost: list[bytes] = field(default_factory=list)
    duplicated: list[bytes] = field(default_factory=list)
    reordered: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    nonmonotonic: list[Read] = field(default_factory=list)
    skipped: list[tuple[Read, int]] = field(default_factory=list)
    aborted_read: list[Read] = field(default_factory=list)
    phantom_read: list[Read] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in
                ("lost", "duplicated", "reordered", "nonmonotonic", "skipped", "aborted_read", "phantom_read")}

    @property
    def ok(self) -> bool:
        return not any(self.counts().values())


def check(history: History) -> Anomalies:
    found = Anomalies()
    stored = Counter(value for records in history.log.values() for _offset, value in records)
    found.duplicated = sorted(value for value, times in stored.items() if times > 1)
    found.lost = sorted({ack.value for ack in history.acks} - stored.keys())
    found.reordered = _reordered(history.acks, history.log)
    found.nonmonotonic, found.skipped = _consumer_order(history)
    aborted = history.aborted_in_log()
    found.aborted_read = [read for read in history.reads if read.value in aborted]
    found.phantom_read = [read for read in history.reads if read.value not in history.sent]
    return found


def _reordered(acks: Sequence[Ack], log: Mapping[int, list[tuple[int, bytes]]]) -> list[tuple[int, bytes, bytes]]:
    """Acknowledged records of one partition whose log positions do not follow their send order."""
    out = []
    by_partition: dict[tuple[str, int], list[Ack]] = defaultdict(list)
    for ack in acks:
        by_partition[ack.producer, ack.partition].append(ack)
    for (_producer, partition), acked in by_partition.items():
        position: dict[bytes, int] = {}
        for offset, value in log.get(partition, []):
            position.setdefault(value, offset)  # a duplicate is reported as such, its first copy placed
        placed = sorted((ack.seq, position[ack.value], ack.value) for ack in acked if ack.value in position)
        out += [(partition, before[2], after[2]) for before, after in itertools.pairwise(placed)
                if after[1] < before[1]]
    return out


def _consumer_order(history: History) -> tuple[list[Read], list[tuple[Read, int]]]:
    """Per consumer, assignment and partition: offsets must rise, and no visible record may be jumped over."""
    visible = {partition: history.visible(partition) for partition in history.log}
    last: dict[tuple[str, int, int], int] = {}
    nonmonotonic: list[Read] = []
    skipped: list[tuple[Read, int]] = []
    for read in history.reads:
        key = (read.consumer, read.assignment, read.partition)
        before = last.get(key)
        if before is not None and read.offset <= before:
            nonmonotonic.append(read)
            continue
        if before is not None:
            jumped = _count_between(visible.get(read.partition, []), before, read.offset)
            if jumped:
                skipped.append((read, jumped))
        last[key] = read.offset
    return nonmonotonic, skipped


def _count_between(sorted_offsets: list[int], low: int, high: int) -> int:
    """How many of ``sorted_offsets`` lie strictly between ``low`` and ``high``."""
    return max(0, bisect_left(sorted_offsets, high) - bisect_right(sorted_offsets, low))
