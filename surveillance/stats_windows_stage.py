"""Statistics stage B (group ``surveillance-stats-windows``): repartition events -> windowed results.

Stage A (:mod:`surveillance.stats_stage`) publishes one event per capture and statistic keyed by statistic
and group, so every event of a group reaches one partition here and one instance folds it: a district's or
the city's result is whole with any number of instances. The events go into the tumbling windows
(:mod:`surveillance.windows`); the finals an event's arrival closes are that event's outputs, so its
offset is committed only once they are acknowledged. Partial results, and finals closed by the clock
while the input is idle, come from the loop's tick.

Open windows hold events from before the committed offsets, so on every assignment each partition
rewinds (:mod:`surveillance.rewind`) by the longest window plus the allowed lateness before its last
committed event: windows open at a crash are rebuilt whole, and events below the committed offset emit
nothing (their finals went out before), so a restarted stage emits each final with the same value. Events
a stage A replay published twice are dropped (:class:`surveillance.stats_events.Dedup`).

This stage follows ``control.stats`` itself (silently: stage A answers the commands) to know each
statistic's window, measure and definition; an event routed for a definition it has not read yet makes it
read the control topic up to its end first, and an event of a statistic stopped or redefined since is
dropped (counted).

The clock closes windows only when this stage has read its partitions to their end *and* stage A has
repartitioned every capture appended before that moment (its committed offsets): a capture partition
waiting for a new owner after a kill -9 holds the windows open instead of turning its backlog late.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from contracts.records import encode

from . import metrics
from .bus import CommandLog, Output, Stage, make_consumer, make_producer, run_stage
from .rewind import EAGER, Rewind
from .settings import Settings
from .stats_events import Dedup, StatEvent, parse_event, read_command
from .windows import Result, Windows

log = logging.getLogger(__name__)
GROUP, STAGE = "surveillance-stats-windows", "stats-windows"
IDLE_S = 2.0
"""No event for this long and everything upstream repartitioned: the wall clock moves stream time on."""
REWIND_SLACK_MS = 60_000
"""Added to the rewind (capture clocks behind the bus clock, the pipeline's own delay)."""
UPSTREAM_SNAPSHOTS = 64


class Upstream:
    """How far stage A has got: the latest moment before which every capture appended has its events
    published (stage A commits a capture only once its events are acknowledged)."""

    def __init__(self, settings: Settings, group: str) -> None:
        self.topics = settings.topics.captures
        self._consumer = Consumer({"bootstrap.servers": settings.bootstrap, "group.id": group,
                                   "client.id": f"{STAGE}-upstream@{settings.instance}",
                                   "enable.auto.commit": False, "log_level": 3})
        """Reads ``group``'s committed offsets; never subscribes, so never joins the group."""
        self._snapshots: list[tuple[int, dict[tuple[str, int], int]]] = []
        """(wall clock ms, the capture partitions' end offsets then), oldest first."""

    def settled_ms(self, timeout: float = 5.0) -> int | None:
        """The newest moment (of the ones this was asked at) whose end offsets stage A has committed."""
        now_ms = round(time.time() * 1000)
        partitions = [TopicPartition(topic, p) for topic in self.topics
                      for p in self._consumer.list_topics(topic, timeout=timeout).topics[topic].partitions]
        ends, done = {}, {}
        for tp in partitions:
            low, high = self._consumer.get_watermark_offsets(tp, timeout=timeout)
            ends[(tp.topic, tp.partition)], done[(tp.topic, tp.partition)] = high, low
        for tp in self._consumer.committed(partitions, timeout=timeout):
            done[(tp.topic, tp.partition)] = max(tp.offset, done[(tp.topic, tp.partition)])
        self._snapshots = [*self._snapshots, (now_ms, ends)][-UPSTREAM_SNAPSHOTS:]
        for n in range(len(self._snapshots) - 1, -1, -1):
            at, wanted = self._snapshots[n]
            if all(done.get(key, 0) >= end for key, end in wanted.items()):
                del self._snapshots[:n + 1]
                return at
        return None

    def close(self) -> None:
        self._consumer.close()


class WindowedStats:
    """Stage B's work: events in, partial and final results out; the statistics' definitions on the side."""

    def __init__(self, settings: Settings, rewind: Rewind | None = None, upstream: Upstream | None = None,
                 refresh: Callable[[], object] | None = None) -> None:
        self.settings = settings
        self.rewind = rewind
        self.upstream = upstream
        self.refresh = refresh
        """Reads ``control.stats`` up to its end now (applying what it reads)."""
        self.windows = Windows(settings.allowed_lateness_s, settings.partial_interval_s, IDLE_S)
        self.dedup = Dedup()
        self.stale: set[tuple[str, str]] = set()
        """(stat id, version) of events found stopped or redefined even after a refresh."""
        self.last_input = time.monotonic()

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """A ``control.stats`` record: start, redefine (fresh windows) or stop (open windows dropped)."""
        stat_id, command, _reason = read_command(key, value)
        self.windows.apply(stat_id, command)

    def back_ms(self) -> int:
        """How far before the last committed event a rewound partition starts."""
        return self.windows.longest_window_ms() + self.windows.lateness_ms + REWIND_SLACK_MS

    def assigned(self, partitions: list[TopicPartition]) -> None:
        if self.rewind is not None:
            self.rewind.on_assign(partitions)
        self.windows.expect(((p.topic, p.partition) for p in partitions), time.monotonic())

    def reset(self, _partitions: list[TopicPartition] | None = None) -> None:
        self.windows.reset()
        self.dedup.reset()

    def output(self, result: Result) -> Output:
        return Output(self.settings.topics.surveillance_stats, result.stat_id.encode(), encode(result.to_json()))

    def known(self, event: StatEvent) -> bool:
        """Whether the event's definition is the active one, reading the newest commands once if need be."""
        if self.windows.knows(event):
            return True
        if (event.stat_id, event.version) in self.stale:
            return False
        if self.refresh is not None:
            self.refresh()
            if self.windows.knows(event):
                return True
        self.stale.add((event.stat_id, event.version))
        return False

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        now_s = time.monotonic()
        out: list[list[Output]] = []
        for message in messages:
            replaying = self.rewind is not None and self.rewind.replaying(message)
            source = (message.topic(), message.partition())
            try:
                event = parse_event(message.value())
            except (ValueError, KeyError, TypeError) as exc:
                log.info("%s[%s]@%s: not an event (%s)", *source, message.offset(), exc)
                metrics.SKIPPED.labels(STAGE, "malformed").inc()
                out.append([])
                continue
            if self.dedup.duplicate(source, event):
                metrics.SKIPPED.labels(STAGE, "duplicate").inc()
                out.append([])
                continue
            if not self.known(event):
                metrics.SKIPPED.labels(STAGE, "stopped statistic").inc()
                out.append([])
                continue
            if not self.windows.add(event, source, now_s) and not replaying:
                metrics.LATE.labels(event.stat_id).inc()
            finals = self.windows.close()
            out.append([] if replaying else [self.output(r) for r in finals])
        if messages:
            self.last_input = time.monotonic()
        return out

    def tick(self) -> list[Output]:
        """Partial results; finals by the wall clock once the input is idle. Nothing while rebuilding."""
        if self.rewind is not None and self.rewind.rebuilding:
            return []
        now = time.monotonic()
        results = self.windows.partials(now)
        if now - self.last_input >= IDLE_S:
            self.last_input = now  # look again in IDLE_S: the end offsets are round trips to the broker
            settled = self.settled_ms()
            if settled is not None and self.caught_up():   # in this order: stage A's acks, then our reads
                self.windows.advance(settled)
                results += self.windows.close()
        return [self.output(r) for r in results]

    def settled_ms(self) -> int | None:
        if self.upstream is None:
            return round(time.time() * 1000)
        try:
            return self.upstream.settled_ms()
        except KafkaException as exc:
            log.info("%s: stage A's progress unknown (%s)", STAGE, exc)
            return None

    def caught_up(self) -> bool:
        """Every assigned partition read to its end: the events still to come are the ones not published yet.
        (Quiet for a moment is not enough: a restarted stage waits for its first fetch with a backlog behind it.)"""
        consumer = self.rewind.consumer if self.rewind is not None else None
        if consumer is None:
            return True
        try:
            positions = consumer.position(consumer.assignment())
            unknown = [tp for tp in positions if tp.offset < 0]   # nothing read yet: the committed offset
            at = {(tp.topic, tp.partition): tp.offset for tp in positions}
            if unknown:
                at.update({(tp.topic, tp.partition): tp.offset for tp in consumer.committed(unknown, timeout=5)})
            for tp in positions:
                low, high = consumer.get_watermark_offsets(tp, timeout=5)
                if max(at[(tp.topic, tp.partition)], low) < high:
                    return False
        except KafkaException as exc:
            log.info("%s: end offsets unknown (%s)", STAGE, exc)
            return False
        return True


def run_windows(settings: Settings, upstream_group: str, stop: threading.Event,
                ready: threading.Event | None = None) -> None:
    """Stage B; ``upstream_group`` is stage A's group (its committed offsets tell how far it has got)."""
    commands = CommandLog(settings, settings.topics.control_stats, f"{STAGE}-commands")
    live = WindowedStats(settings, upstream=Upstream(settings, upstream_group))
    live.refresh = lambda: commands.poll_to_end(live.apply)
    rewind = live.rewind = Rewind(settings, STAGE, live.back_ms)
    stage = Stage(STAGE, GROUP, [settings.topics.stat_events], live.handle, commands=((commands, live.apply),),
                  tick=live.tick, on_assign=live.assigned, on_revoke=live.reset)
    consumer = rewind.attach(make_consumer(settings, GROUP, STAGE, **EAGER))
    try:
        run_stage(settings, stage, consumer, make_producer(settings, STAGE), stop, ready)
    finally:
        rewind.close()
        if live.upstream is not None:
            live.upstream.close()
