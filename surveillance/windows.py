"""Tumbling event-time windows for the live statistics (pure: no I/O, the stage feeds and drains it).

Time is the captures' own ``capture_time`` (event time), not when a record happens to be read, so a
replay after a restart computes the same windows. Stream time is a watermark: each capture partition
(``source``) has its newest capture time, and stream time is the oldest of those (Flink's per-partition
watermarks: a consumer catching up on a backlog reads one partition's batch ahead of another's, and the
global newest time would make the slower partition's records look late). A source that delivers nothing
holds stream time back: a partition waiting for a new owner after a crash keeps the windows open instead
of turning its backlog late. A window ``[start, end)`` closes when stream time reaches ``end`` plus the
allowed lateness, and then emits its final result per group once and forgets the window. A record whose
window has already closed is *late*: it is counted, never folded into a final that has gone out.

While a window is open, every group that received records gets a partial result at most once per
``partial_interval_s`` (so a busy checkpoint does not turn every capture into an output record).

The input is the statistics' repartition topic (:mod:`surveillance.stats_events`): which statistic and
group a capture counts for was decided upstream, and each capture partition's progress arrives as marks
between the events (as Flink forwards watermarks across a shuffle), so the windows of one repartition
partition depend on that partition's records alone and a replay closes them at the same records. Late
records are counted per statistic and group (the key of the events, so the count is whole on one
instance) and reported on that group's results.
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from contracts.records import CITY_TZ, format_time
from contracts.surveillance import StatCommand

from .stats_events import StatEvent, version


def iso(ms: int) -> str:
    """A window bound as the result record writes it (city time, milliseconds, offset)."""
    return format_time(datetime.fromtimestamp(ms / 1000, CITY_TZ))


@dataclass
class Cell:
    """The running aggregate of one group in one window."""

    count: int = 0
    speed_sum: float = 0.0
    speeds: int = 0
    plates: set[str] = field(default_factory=set)
    dirty: bool = False
    partial_at: float = float("-inf")

    def add(self, event: StatEvent) -> None:
        """Fold in one event (its plate and speed are set only where the statistic's measure needs them)."""
        self.count += 1
        self.dirty = True
        if event.plate is not None:
            self.plates.add(event.plate)
        if event.speed_kmh is not None:
            self.speed_sum += event.speed_kmh
            self.speeds += 1

    def value(self, measure: str) -> float | int | None:
        if measure == "distinct_plates":
            return len(self.plates)
        if measure == "avg_speed":
            return round(self.speed_sum / self.speeds, 2) if self.speeds else None
        return self.count


@dataclass(frozen=True)
class Result:
    """One ``surveillance.stats`` record (key: the stat id)."""

    stat_id: str
    window_start_ms: int
    window_end_ms: int
    group: str
    value: float | int | None
    count: int
    final: bool
    late_records: int

    def to_json(self) -> dict[str, Any]:
        return {"stat_id": self.stat_id, "window_start": iso(self.window_start_ms),
                "window_end": iso(self.window_end_ms), "group": self.group, "value": self.value,
                "count": self.count, "final": self.final, "late_records": self.late_records}


class StatWindows:
    """The open windows of one statistic."""

    def __init__(self, command: StatCommand, lateness_ms: int) -> None:
        self.command = command
        self.version = version(command)
        self.lateness_ms = lateness_ms
        self.window_ms = command.window_s * 1000
        self.open: dict[int, dict[str, Cell]] = {}
        self.late: dict[str, int] = {}
        """group -> records found late."""

    def add(self, event: StatEvent, stream_ms: int) -> bool:
        """Fold in one event; False when it is late (its window has closed)."""
        event_ms = event.capture_ms
        start = event_ms - event_ms % self.window_ms
        if start + self.window_ms + self.lateness_ms <= stream_ms:
            self.late[event.group] = self.late.get(event.group, 0) + 1
            return False
        cells = self.open.setdefault(start, {})
        cell = cells.get(event.group)
        if cell is None:
            cell = cells[event.group] = Cell()
        cell.add(event)
        return True

    def _result(self, start: int, group: str, cell: Cell, final: bool) -> Result:
        return Result(self.command.stat_id, start, start + self.window_ms, group, cell.value(self.command.measure),
                      cell.count, final, self.late.get(group, 0))

    def partials(self, now_s: float, interval_s: float) -> list[Result]:
        """Partial results of the groups that changed, each at most once per ``interval_s``."""
        out = []
        for start, cells in sorted(self.open.items()):
            for group, cell in sorted(cells.items()):
                if cell.dirty and now_s - cell.partial_at >= interval_s:
                    cell.dirty, cell.partial_at = False, now_s
                    out.append(self._result(start, group, cell, final=False))
        return out

    def close(self, stream_ms: int) -> list[Result]:
        """Final results of every window that stream time has moved past (plus lateness); forgets them."""
        out: list[Result] = []
        for start in sorted(s for s in self.open if s + self.window_ms + self.lateness_ms <= stream_ms):
            cells = self.open.pop(start)
            out.extend(self._result(start, group, cell, final=True) for group, cell in sorted(cells.items()))
        return out


class Windows:
    """Every active statistic's windows over one input, and the stream time they share."""

    def __init__(self, lateness_s: float, partial_interval_s: float, sources: Iterable[Hashable] = ()) -> None:
        self.lateness_ms = round(lateness_s * 1000)
        self.partial_interval_s = partial_interval_s
        self.stats: dict[str, StatWindows] = {}
        self.sources: dict[Hashable, int] = dict.fromkeys(sources, 0)
        """source -> its newest capture ms; the sources given hold stream time until they deliver."""
        self.stream_ms = 0

    def apply(self, stat_id: str, command: StatCommand | None) -> None:
        """Start (or restart with a new definition) or, for None, stop a statistic: its open windows go."""
        current = self.stats.get(stat_id)
        if command is None:
            self.stats.pop(stat_id, None)
        elif current is None or current.command != command:
            self.stats[stat_id] = StatWindows(command, self.lateness_ms)

    def knows(self, event: StatEvent) -> bool:
        """Whether the event's statistic is active here with the definition the event was routed for."""
        windows = self.stats.get(event.stat_id)
        return windows is not None and windows.version == event.version

    def add(self, event: StatEvent, source: Hashable = None) -> bool:
        """Fold one event of a statistic it :meth:`knows` (captured in ``source``); False when it is late."""
        on_time = self.stats[event.stat_id].add(event, self.stream_ms)
        self.progress(source, event.capture_ms)
        return on_time

    def progress(self, source: Hashable, capture_ms: int) -> None:
        """``source`` has delivered captures up to ``capture_ms`` (an event, or a progress mark)."""
        self.sources[source] = max(self.sources.get(source, capture_ms), capture_ms)
        self.stream_ms = max(self.stream_ms, min(self.sources.values()))

    def longest_window_ms(self) -> int:
        return max((w.window_ms for w in self.stats.values()), default=0)

    def partials(self, now_s: float) -> list[Result]:
        return [r for w in self.stats.values() for r in w.partials(now_s, self.partial_interval_s)]

    def close(self) -> list[Result]:
        return [r for w in self.stats.values() for r in w.close(self.stream_ms)]
