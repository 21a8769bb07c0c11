"""Statistics stage B (group ``surveillance-stats-windows``): repartition events -> windowed results.

Stage A (:mod:`surveillance.stats_stage`) publishes one event per capture and statistic keyed by statistic
and group, so every event of a group reaches one partition here and one instance folds it: a district's or
the city's result is whole with any number of instances. Each partition of the topic has its own windows
(:mod:`surveillance.windows`) whose stream time comes from that partition's records alone (the events and
stage A's progress marks for every capture partition), like a Kafka Streams task's state. The finals a
record's arrival closes are that record's outputs, so its offset is committed only once they are
acknowledged; partial results come from the loop's tick. A capture partition whose stage A owner died
sends no marks, so the windows stay open until its next owner has caught up: its backlog is not late.

Open windows hold records from before the committed offsets, so on every assignment each partition
rewinds (:mod:`surveillance.rewind`) by the longest window plus the allowed lateness before its last
committed record: windows open at a crash are rebuilt whole, and records below the committed offset emit
nothing (their finals went out before, closed by the same records), so a restarted stage emits each final
once with the same value. Events a stage A replay published twice are dropped
(:class:`surveillance.stats_events.Dedup`).

This stage follows ``control.stats`` itself (silently: stage A answers the commands) to know each
statistic's window and measure; an event routed for a definition it has not read yet makes it read the
control topic up to its end first, and an event of a statistic stopped or redefined since is dropped
(counted). A record that is not stage A's (malformed, from the future, naming a capture partition that
does not exist) is set aside and counted (:mod:`surveillance.skipped`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaException, Message, TopicPartition

from contracts.records import encode
from contracts.surveillance import StatCommand

from . import metrics
from .rewind import EAGER, Rewind
from .settings import Settings
from .skipped import FUTURE_TOLERANCE_MS, UNREADABLE, skip, where
from .stats_events import Dedup, Progress, StatEvent, parse_record, read_command
from .streams import BATCHED, CommandLog, Output, Stage, make_consumer, make_producer, run_stage
from .windows import Result, Windows

GROUP, STAGE = "surveillance-stats-windows", "stats-windows"
REWIND_SLACK_MS = 60_000
"""Added to the rewind (capture clocks behind the bus clock, the pipeline's own delay)."""
RELIST_S = 5.0
"""At most this often a record naming an unknown capture partition makes the stage list them again."""


@dataclass
class PartitionState:
    """What one partition of the repartition topic has built: its windows and its replay filter."""

    windows: Windows
    dedup: Dedup = field(default_factory=Dedup)


class WindowedStats:
    """Stage B's work: events and marks in, partial and final results out; the statistics on the side."""

    def __init__(self, settings: Settings, rewind: Rewind | None = None,
                 refresh: Callable[[], object] | None = None, lanes: Mapping[str, int] | None = None) -> None:
        self.settings = settings
        self.rewind = rewind
        self.refresh = refresh
        """Reads ``control.stats`` up to its end now (applying what it reads)."""
        self.lanes = lanes
        """checkpoint id -> lane count (the deployment map): the statistics stage A rejects are not kept here."""
        self.commands: dict[str, StatCommand] = {}
        self.partitions: dict[tuple[str, int], PartitionState] = {}
        self.capture_partitions: list[tuple[str, int]] = []
        """Every capture partition: each holds stream time back until its progress is known."""
        self.listed_at = float("-inf")
        """When :attr:`capture_partitions` was last asked of the bus (monotonic seconds)."""
        self.stale: set[tuple[str, str]] = set()
        """(stat id, version) of events found stopped or redefined even after a refresh."""

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """A ``control.stats`` record: start, redefine (fresh windows) or stop (open windows dropped)."""
        stat_id, command, _reason = read_command(key, value, self.lanes)
        if command is None:
            self.commands.pop(stat_id, None)
        else:
            self.commands[stat_id] = command
        for state in self.partitions.values():
            state.windows.apply(stat_id, command)

    def back_ms(self) -> int:
        """How far before the last committed record a rewound partition starts."""
        longest = max((c.window_s * 1000 for c in self.commands.values()), default=0)
        return longest + round(self.settings.allowed_lateness_s * 1000) + REWIND_SLACK_MS

    def state(self, partition: tuple[str, int]) -> PartitionState:
        state = self.partitions.get(partition)
        if state is None:
            windows = Windows(self.settings.allowed_lateness_s, self.settings.partial_interval_s,
                              self.capture_partitions)
            for stat_id, command in self.commands.items():
                windows.apply(stat_id, command)
            state = self.partitions[partition] = PartitionState(windows)
        return state

    def list_capture_partitions(self) -> None:
        """Read :attr:`capture_partitions` from the bus (the stage's consumer's metadata)."""
        consumer = self.rewind.consumer if self.rewind is not None else None
        if consumer is not None:
            self.listed_at = time.monotonic()
            metadata = consumer.list_topics(timeout=30).topics
            self.capture_partitions = [(t, p) for t in self.settings.topics.captures if t in metadata
                                       for p in metadata[t].partitions]

    def foreign(self, record: StatEvent | Progress, now_ms: float) -> str | None:
        """Why a well-formed record cannot be stage A's, or None. A capture time in the future would move stream
        time past every real record (every later one late); a capture partition that does not exist would hold
        it still for ever (no final again). The partitions are read again, at most every ``RELIST_S``, when a
        record names one not seen yet (a capture topic may have grown)."""
        if record.capture_ms > now_ms + FUTURE_TOLERANCE_MS:
            return "future"
        source = record.source if isinstance(record, Progress) else record.capture_partition
        if source not in self.capture_partitions and time.monotonic() - self.listed_at >= RELIST_S:
            with contextlib.suppress(KafkaException):  # the bus unreachable now: judged on the list as it is
                self.list_capture_partitions()
        return None if source in self.capture_partitions else "unknown source"

    def assigned(self, partitions: list[TopicPartition]) -> None:
        self.list_capture_partitions()
        if self.rewind is not None:
            self.rewind.on_assign(partitions)
        for tp in partitions:
            self.state((tp.topic, tp.partition))

    def reset(self, _partitions: list[TopicPartition] | None = None) -> None:
        """Forget everything (revoked: the next assignment rebuilds from the topic)."""
        self.partitions.clear()

    def output(self, result: Result) -> Output:
        return Output(self.settings.topics.surveillance_stats, result.stat_id.encode(), encode(result.to_json()))

    def known(self, windows: Windows, event: StatEvent) -> bool:
        """Whether the event's definition is the active one, reading the newest commands once if need be."""
        if windows.knows(event):
            return True
        if (event.stat_id, event.version) in self.stale:
            return False
        if self.refresh is not None:
            self.refresh()
            if windows.knows(event):
                return True
        self.stale.add((event.stat_id, event.version))
        return False

    def fold(self, state: PartitionState, record: StatEvent | Progress, replaying: bool) -> bool:
        """One record into its partition's windows; False when it is skipped."""
        if isinstance(record, Progress):
            state.windows.progress(record.source, record.capture_ms)
            return True
        if state.dedup.duplicate(record):
            metrics.SKIPPED.labels(STAGE, "duplicate").inc()
            return False
        if not self.known(state.windows, record):
            metrics.SKIPPED.labels(STAGE, "stopped statistic").inc()
            return False
        if not state.windows.add(record, record.capture_partition) and not replaying:
            metrics.LATE.labels(record.stat_id).inc()
        return True

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        out: list[list[Output]] = []
        now_ms = time.time() * 1000
        for message in messages:
            replaying = self.rewind is not None and self.rewind.replaying(message)
            partition = (message.topic() or "", message.partition() or 0)
            try:
                record = parse_record(message.value())
            except UNREADABLE as exc:
                skip(STAGE, "malformed", where(message), f"{type(exc).__name__}: {exc}")
                out.append([])
                continue
            reason = self.foreign(record, now_ms)
            if reason is not None:
                skip(STAGE, reason, where(message), str(record))
                out.append([])
                continue
            state = self.state(partition)
            if not self.fold(state, record, replaying):
                out.append([])
                continue
            finals = state.windows.close()
            out.append([] if replaying else [self.output(r) for r in finals])
        return out

    def tick(self) -> list[Output]:
        """Partial results (none while rebuilding: they would show half-rebuilt windows)."""
        if self.rewind is not None and self.rewind.rebuilding:
            return []
        now = time.monotonic()
        return [self.output(r) for state in self.partitions.values() for r in state.windows.partials(now)]


def run_windows(settings: Settings, stop: threading.Event, ready: threading.Event | None = None,
                lanes: Mapping[str, int] | None = None) -> None:
    commands = CommandLog(settings, settings.topics.control_stats, f"{STAGE}-commands")
    live = WindowedStats(settings, lanes=lanes)
    live.refresh = lambda: commands.poll_to_end(live.apply)
    rewind = live.rewind = Rewind(settings, STAGE, live.back_ms)
    stage = Stage(STAGE, GROUP, [settings.topics.stat_events], live.handle, commands=((commands, live.apply),),
                  tick=live.tick, on_assign=live.assigned, on_revoke=live.reset)
    consumer = rewind.attach(make_consumer(settings, GROUP, STAGE, **EAGER, **BATCHED))
    try:
        run_stage(settings, stage, consumer, make_producer(settings, STAGE), stop, ready)
    finally:
        rewind.close()
