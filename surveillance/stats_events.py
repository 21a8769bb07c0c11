"""The statistics' repartition records: what stage A publishes per capture and statistic, and how stage B reads them.

A district or the city spans every capture partition, so (as Kafka Streams repartitions before a keyed
aggregation) stage A turns each capture into one slim *event* per active statistic it counts for, keyed
``<stat id>|<group>`` on the internal topic ``surveillance.stat-events``: every event of one statistic's
group then reaches one partition, hence one stage B instance, whatever the number of instances.

An event carries only what the windows need (capture time, the plate for distinct plates, the speed for
the average), the statistic's definition ``version`` (stage B folds an event only into the definition
it was routed for: a statistic redefined or stopped meanwhile drops it) and its *source*: the capture's
topic, partition, offset and the event's index among that capture's events. Stage A commits a capture
only after its events are acknowledged, so a kill -9 makes the next owner of a capture partition publish
again the events between the last commit and the crash. :class:`Dedup` drops those copies: one stage A
instance at a time owns a capture partition and its idempotent producer keeps order per partition, so in
one event partition the sources of a capture partition only ever increase, except for such a replay.

Between the events, stage A sends each partition of the topic a :class:`Progress` mark per capture
partition it owns: the newest capture time it has published events for (the wall clock once it has read
the partition to its end). Stage B's stream time is the oldest of those marks (:mod:`surveillance.windows`),
so a window closes only when every capture partition has moved past it, and it closes at the same record
when a restarted stage B re-reads the partition.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from contracts.records import Kind, epoch_ms, is_plate
from contracts.surveillance import CommandError, StatCommand, lane_group, parse_stat

from .skipped import UNREADABLE, refusal

log = logging.getLogger(__name__)
Source = tuple[str, int, int, int]
"""Capture topic, partition, offset, and the index of the event among that capture's events."""


def version(command: StatCommand) -> str:
    """A short digest of a statistic's definition (the same in every process)."""
    canonical = json.dumps(command.to_json(), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def read_command(key: bytes | None, value: bytes | None,
                 lanes: Mapping[str, int] | None = None) -> tuple[str, StatCommand | None, str | None]:
    """A ``control.stats`` record as (stat id, the statistic or None when it stops, the rejection reason).

    The latest record of a key is the statistic (as compaction will leave it), so a rejected one stops the
    statistic it replaces. Whatever the value holds this returns: a record that cannot be read is one more
    rejection, and so is a ``requested_at`` that is not a time (the contract checks only that it is a string,
    and :class:`Router` counts from it). ``lanes`` (checkpoint id -> lane count, from the deployment map the
    stage loaded) rejects a filter to a checkpoint or lane that does not exist; both stages pass the same map,
    so they agree on which statistics are active."""
    stat_id = key.decode("utf-8", "replace") if key is not None else ""
    try:
        command = parse_stat(key, value, lanes)
        if command is not None and command.requested_at:
            _requested_ms(command.requested_at)
    except UNREADABLE as exc:
        return stat_id, None, refusal(exc)
    return (stat_id, None, None) if command is None else (command.stat_id, command, None)


def _requested_ms(requested_at: str) -> int:
    """When a statistic starts counting; CommandError (a rejection, not a crash) when it is not a time."""
    try:
        return epoch_ms(requested_at)
    except ValueError as exc:
        raise CommandError("requested_at", f"not an ISO-8601 time with offset: {exc}") from None


@dataclass(frozen=True)
class StatEvent:
    """One capture counted by one statistic in one group."""

    stat_id: str
    version: str
    group: str
    capture_ms: int
    plate: str | None
    speed_kmh: float | None
    source: Source

    @property
    def capture_partition(self) -> tuple[str, int]:
        return self.source[0], self.source[1]

    @property
    def key(self) -> bytes:
        return f"{self.stat_id}|{self.group}".encode()

    def encode(self) -> bytes:
        return json.dumps({"stat_id": self.stat_id, "version": self.version, "group": self.group,
                           "capture_ms": self.capture_ms, "plate": self.plate, "speed_kmh": self.speed_kmh,
                           "source": list(self.source)}, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Progress:
    """Stage A has published the events of ``source``'s captures up to ``capture_ms`` (see the docstring)."""

    source: tuple[str, int]
    capture_ms: int

    def encode(self) -> bytes:
        return json.dumps({"progress": list(self.source), "capture_ms": self.capture_ms},
                          ensure_ascii=False, separators=(",", ":")).encode()


def parse_record(raw: bytes | None) -> StatEvent | Progress:
    """A record of the repartition topic; ValueError/KeyError/TypeError for anything else."""
    data = json.loads(raw) if raw is not None else None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if "progress" in data:
        topic, partition = data["progress"]
        if not isinstance(topic, str) or not _integers(partition, data["capture_ms"]):
            raise ValueError("progress must be [topic, partition] and capture_ms an integer")
        return Progress((topic, partition), data["capture_ms"])
    texts = [data["stat_id"], data["version"], data["group"]]
    if not all(isinstance(t, str) and t for t in texts):
        raise ValueError("stat_id, version and group must be non-empty strings")
    topic, partition, offset, index = data["source"]
    if not isinstance(topic, str) or not _integers(data["capture_ms"], partition, offset, index):
        raise ValueError("capture_ms and source must be integers (source: topic, partition, offset, index)")
    plate, speed = data["plate"], data["speed_kmh"]
    if plate is not None and not isinstance(plate, str):
        raise ValueError("plate must be a string or null")
    if speed is not None and not _finite(speed):
        raise ValueError("speed_kmh must be a finite number or null")
    return StatEvent(data["stat_id"], data["version"], data["group"], data["capture_ms"], plate, speed,
                     (topic, partition, offset, index))


def _integers(*values: Any) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _finite(value: Any) -> bool:
    """A number an average can take: Python's JSON reads ``Infinity`` and ``NaN``, and an integer too large
    for a float would raise OverflowError in the sum."""
    try:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:
        return False


class Router:
    """Stage A's state: the active statistics, and which of them (in which group) count a capture."""

    def __init__(self, group_of: Callable[[str], str]) -> None:
        self.group_of = group_of
        """checkpoint id -> district."""
        self.stats: dict[str, tuple[StatCommand, str, int | None]] = {}
        """stat id -> (the statistic, its version, counted from this capture time on)."""

    def apply(self, stat_id: str, command: StatCommand | None) -> None:
        if command is None:
            self.stats.pop(stat_id, None)
        else:
            since = _requested_ms(command.requested_at) if command.requested_at else None
            self.stats[stat_id] = (command, version(command), since)

    def group(self, command: StatCommand, record: Mapping[str, Any]) -> str:
        """The group a valid capture counts in. A lane is keyed with its checkpoint (:func:`lane_group`): lane 1
        of one checkpoint is not lane 1 of another. The record's lane is counted as the device wrote it (the
        schema makes it an integer), even one the map does not list: it is a valid capture of that road."""
        by, checkpoint_id = command.group_by, record["checkpoint_id"]
        if by == "lane":
            return lane_group(checkpoint_id, record["lane"])
        return checkpoint_id if by == "checkpoint" else self.group_of(checkpoint_id) if by == "district" else "city"

    def route(self, kind: Kind, record: Mapping[str, Any], capture_ms: int, topic: str, partition: int,
              offset: int) -> list[StatEvent]:
        """The events of one valid capture: one per statistic of its kind whose filter it passes.

        A statistic counts the captures taken at or after its ``requested_at`` (when the command has one):
        a replay that starts earlier than the command then counts exactly what the live run counted."""
        plate = record.get("plate_number")
        speed = record.get("speed_kmh")
        plate = plate if isinstance(plate, str) and is_plate(plate) else None   # not UNRECOGNIZED
        speed = speed if isinstance(speed, int | float) and not isinstance(speed, bool) else None
        events: list[StatEvent] = []
        for stat_id, (command, digest, since) in sorted(self.stats.items()):
            if command.kind is not kind or (since is not None and capture_ms < since) or not command.matches(record):
                continue
            events.append(StatEvent(stat_id, digest, self.group(command, record), capture_ms,
                                    plate if command.measure == "distinct_plates" else None,
                                    speed if command.measure == "avg_speed" else None,
                                    (topic, partition, offset, len(events))))
        return events


class Dedup:
    """Drops the events a stage A replay published again into one partition (see the module docstring)."""

    def __init__(self) -> None:
        self.newest: dict[tuple[str, int], tuple[int, int]] = {}
        """capture partition -> the newest (offset, index) seen."""

    def duplicate(self, event: StatEvent) -> bool:
        """Whether ``event`` was read before (in the partition this filter belongs to)."""
        topic, capture_partition, offset, index = event.source
        newest = self.newest.get((topic, capture_partition))
        if newest is not None and (offset, index) <= newest:
            return True
        self.newest[(topic, capture_partition)] = (offset, index)
        return False
