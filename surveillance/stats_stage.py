"""The live statistics stage (group ``surveillance-stats``): captures -> windowed results on ``surveillance.stats``.

Statistics come from the compacted ``control.stats`` (read whole at start, then tailed); each command
applied, stopped or rejected gets a reply on ``surveillance.replies``. Every capture is folded into the
tumbling windows of each active statistic of its kind (:mod:`surveillance.windows`); the finals a record's
arrival closes are that record's outputs, so its offset is committed only once they are acknowledged.
Partial results, and finals closed by the clock while the input is idle (read to its end), come from the
loop's tick.

Open windows hold records from before the committed offsets, so on every assignment each partition
rewinds (:mod:`surveillance.rewind`) by the longest window plus the allowed lateness before its last
committed record: windows open at a crash are rebuilt whole, and records below the committed offset
emit nothing (their finals went out before), so a restarted stage emits each final with the same value.

A capture time more than a minute ahead of this host's clock would close every open window at once;
such a record is skipped and counted (``future``), as is a malformed one.

Scaling: a checkpoint's captures share one partition, so ``group_by = checkpoint`` results are whole with
any number of instances. A district or the city spans partitions: with several instances each would
publish its own share under the same key, so the stats stage runs in one process
(``python -m surveillance --stages stats``) until a second-level merge (partial aggregates re-keyed by
statistic and group, as the cloned-plate stage re-keys sightings by plate) is added.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from confluent_kafka import KafkaException, Message, TopicPartition

from contracts.records import Kind, encode, epoch_ms, parse
from contracts.records import Status as RecordStatus
from contracts.surveillance import ACCEPTED, REJECTED, REMOVED, CommandError, parse_stat

from . import metrics
from .bus import CommandLog, Output, Replies, Stage, make_consumer, make_producer, run_stage
from .geo import Geo
from .rewind import EAGER, Rewind
from .settings import Settings
from .watch_stage import load_geo
from .windows import Result, Windows

log = logging.getLogger(__name__)
GROUP, STAGE = "surveillance-stats", "stats"
FUTURE_TOLERANCE_MS = 60_000
IDLE_S = 2.0
"""No capture for this long and every partition read to its end: the wall clock moves stream time on."""
REWIND_SLACK_MS = 60_000
"""Added to the rewind (capture clocks behind the bus clock, the pipeline's own delay)."""


class LiveStats:
    def __init__(self, settings: Settings, geo: Geo, replies: Replies | None = None,
                 rewind: Rewind | None = None) -> None:
        self.settings = settings
        self.replies = replies
        self.rewind = rewind
        self.windows = Windows(settings.allowed_lateness_s, settings.partial_interval_s, geo.district, IDLE_S)
        self.last_input = time.monotonic()

    def _reply(self, stat_id: str, status: str, reason: str = "") -> None:
        if self.replies is not None:
            self.replies.send(stat_id, "stat", status, reason)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """A ``control.stats`` record: start, redefine, stop, or reject with the reason. The latest record of a
        key is the statistic (as compaction will leave it), so a rejected one stops the statistic it replaces."""
        stat_id = key.decode("utf-8", "replace") if key is not None else ""
        try:
            command = parse_stat(key, value)
        except CommandError as exc:
            log.info("statistic %r rejected: %s", stat_id, exc)
            self.windows.apply(stat_id, None)
            self._reply(stat_id or "?", REJECTED, str(exc))
            return
        if command is None:
            self.windows.apply(stat_id, None)
            self._reply(stat_id, REMOVED)
        else:
            self.windows.apply(command.stat_id, command)
            self._reply(command.stat_id, ACCEPTED)

    def back_ms(self) -> int:
        """How far before the last committed record a rewound partition starts."""
        return self.windows.longest_window_ms() + self.windows.lateness_ms + REWIND_SLACK_MS

    def assigned(self, partitions: list[TopicPartition]) -> None:
        if self.rewind is not None:
            self.rewind.on_assign(partitions)
        self.windows.expect(((p.topic, p.partition) for p in partitions), time.monotonic())

    def reset(self, _partitions: list[TopicPartition] | None = None) -> None:
        self.windows.reset()

    def output(self, result: Result) -> Output:
        return Output(self.settings.topics.surveillance_stats, result.stat_id.encode(), encode(result.to_json()))

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        now_ms, now_s = time.time() * 1000, time.monotonic()
        out: list[list[Output]] = []
        for message in messages:
            replaying = self.rewind is not None and self.rewind.replaying(message)
            kind = self.settings.topics.kind_of(message.topic() or "") or Kind.VEHICLE
            checked = parse(kind, message.value())
            if checked.status is RecordStatus.INVALID or checked.record is None:
                metrics.SKIPPED.labels(STAGE, "malformed").inc()
                out.append([])
                continue
            event_ms = epoch_ms(checked.record["capture_time"])
            if event_ms > now_ms + FUTURE_TOLERANCE_MS:
                metrics.SKIPPED.labels(STAGE, "future").inc()
                out.append([])
                continue
            source = (message.topic(), message.partition())
            for stat_id in self.windows.add(kind, checked.record, event_ms, source, now_s):
                if not replaying:
                    metrics.LATE.labels(stat_id).inc()
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
            self.last_input = now  # look again in IDLE_S: the end offsets are a round trip to the broker
            if self.caught_up():
                self.windows.advance(round(time.time() * 1000))
                results += self.windows.close()
        return [self.output(r) for r in results]

    def caught_up(self) -> bool:
        """Every assigned partition read to its end: the records still to come are the ones not captured yet.
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
            log.info("stats: end offsets unknown (%s)", exc)
            return False
        return True


def run_stats(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    producer = make_producer(settings, STAGE)
    live = LiveStats(settings, load_geo(settings), Replies(settings, producer))
    rewind = live.rewind = Rewind(settings, STAGE, live.back_ms)
    commands = CommandLog(settings, settings.topics.control_stats, f"{STAGE}-commands")
    stage = Stage(STAGE, GROUP, settings.topics.captures, live.handle, commands=((commands, live.apply),),
                  tick=live.tick, on_assign=live.assigned, on_revoke=live.reset)
    consumer = rewind.attach(make_consumer(settings, GROUP, STAGE, **EAGER))
    try:
        run_stage(settings, stage, consumer, producer, stop, ready)
    finally:
        rewind.close()
