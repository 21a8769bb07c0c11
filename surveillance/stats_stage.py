"""The live statistics: captures -> windowed results on ``surveillance.stats``, in two sub-stages.

Captures are keyed by checkpoint, but a district or the city spans every capture partition, so (as Kafka
Streams does before a keyed aggregation) the statistics repartition first:

- stage A, here (group ``surveillance-stats``): reads ``capture.vehicle`` and ``capture.face``; for each
  valid capture and each active statistic of its kind whose filter it passes, publishes one slim event
  keyed ``<stat id>|<group>`` on the internal topic ``surveillance.stat-events``
  (:mod:`surveillance.stats_events`). A capture's offset is committed only once its events are
  acknowledged. Statistics come from the compacted ``control.stats`` (read whole at start, then tailed);
  each command applied, stopped or rejected gets a reply on ``surveillance.replies`` from this stage.
  Every ``MARK_INTERVAL_S`` it also sends every partition of the topic a progress mark per capture
  partition it owns (the newest capture time it has published; the wall clock once it has read the
  partition to its end): stage B's stream time, carried through the repartition like Flink's watermarks.
- stage B (:mod:`surveillance.stats_windows_stage`, group ``surveillance-stats-windows``): folds the
  events into tumbling event-time windows and publishes partial and final results.

A statistic groups by lane (``<checkpoint id>/lane-<n>``), checkpoint, district or the city; a filter to a
checkpoint or lane is checked against the deployment map (both stages judge with the same map, so a command
one rejects the other drops too).

Every grouping takes this path, checkpoint too (one code path; a checkpoint's events are no more than
the statistic's own captures). Each sub-stage scales on its own: any number of processes running
``--stages stats`` share both groups' partitions and every result stays whole.

A capture time more than a minute ahead of this host's clock would close every open window at once;
such a record is set aside and counted (``future``), as is a malformed one, and a statistic command that
cannot be read is rejected with a reply (:mod:`surveillance.skipped`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from functools import partial

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from contracts.records import Kind, epoch_ms
from contracts.records import Status as RecordStatus
from contracts.surveillance import ACCEPTED, REJECTED, REMOVED, WINDOW_S_RANGE

from .geo import Geo
from .rewind import EAGER
from .settings import Settings
from .skipped import FUTURE_TOLERANCE_MS, read_capture, skip, where
from .stats_events import Progress, Router, read_command
from .stats_windows_stage import REWIND_SLACK_MS, run_windows
from .streams import (
    BATCHED,
    CommandLog,
    Output,
    Replies,
    Stage,
    ensure_topics,
    make_consumer,
    make_producer,
    repartition_topic,
    run_stage,
    run_together,
)
from .watch_stage import load_geo

log = logging.getLogger(__name__)
GROUP, STAGE = "surveillance-stats", "stats"
MARK_INTERVAL_S = 0.5
"""How often stage A marks its progress: a window's final goes out at most this much after it could."""


class StatsRepartition:
    """Stage A's work: captures in, one event per statistic that counts each out, progress marks."""

    def __init__(self, settings: Settings, geo: Geo, replies: Replies | None = None,
                 event_partitions: int = 1) -> None:
        self.topics = settings.topics
        self.replies = replies
        self.router = Router(geo.district)
        self.lanes = map_lanes(geo)
        """checkpoint id -> its lane count: a filter to a checkpoint or lane the map lacks is rejected."""
        self.event_partitions = event_partitions
        self.consumer: Consumer | None = None
        """The stage's consumer: how far each owned capture partition has been read."""
        self.newest: dict[tuple[str, int], int] = {}
        """Owned capture partition -> the newest capture time published (-1: none since assigned)."""
        self.marked: dict[tuple[str, int], int] = {}
        self.next_mark = 0.0

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """The whole new assignment (eager protocol): what was read before belongs to other owners now."""
        self.newest = dict.fromkeys(((tp.topic, tp.partition) for tp in partitions), -1)
        self.marked = {}

    def revoked(self, _partitions: list[TopicPartition]) -> None:
        self.newest, self.marked = {}, {}

    def _reply(self, stat_id: str, status: str, reason: str = "") -> None:
        if self.replies is not None:
            self.replies.send(stat_id, "stat", status, reason)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """A ``control.stats`` record: start, redefine, stop, or reject with the reason. The latest record of a
        key is the statistic (as compaction will leave it), so a rejected one stops the statistic it replaces."""
        stat_id, command, reason = read_command(key, value, self.lanes)
        self.router.apply(stat_id, command)
        if reason is not None:
            self._reply(stat_id or "?", REJECTED, reason)
        else:
            self._reply(stat_id, REMOVED if command is None else ACCEPTED)

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        now_ms = time.time() * 1000
        out: list[list[Output]] = []
        for message in messages:
            topic = message.topic() or ""
            kind = self.topics.kind_of(topic) or Kind.VEHICLE
            checked = read_capture(kind, message.value())
            if checked.status is RecordStatus.INVALID or checked.record is None:
                skip(STAGE, "malformed", where(message), checked.reason)
                out.append([])
                continue
            capture_ms = epoch_ms(checked.record["capture_time"])
            if capture_ms > now_ms + FUTURE_TOLERANCE_MS:
                skip(STAGE, "future", where(message), checked.record["capture_time"])
                out.append([])
                continue
            partition = message.partition() or 0
            events = self.router.route(kind, checked.record, capture_ms, topic, partition, message.offset() or 0)
            out.append([Output(self.topics.stat_events, e.key, e.encode()) for e in events])
            self.newest[(topic, partition)] = max(self.newest.get((topic, partition), -1), capture_ms)
        return out

    def tick(self) -> list[Output]:
        """Progress marks, each capture partition's only when it moved, to every partition of the topic
        (after the events they cover: one producer keeps the order per partition)."""
        now = time.monotonic()
        if now < self.next_mark:
            return []
        self.next_mark = now + MARK_INTERVAL_S
        wall_ms = round(time.time() * 1000)
        out: list[Output] = []
        for source, newest in self.newest.items():
            mark = max(newest, wall_ms) if self.read_to_end(source) else newest
            if mark < 0 or mark <= self.marked.get(source, -1):
                continue
            self.marked[source] = mark
            value = Progress(source, mark).encode()
            out += [Output(self.topics.stat_events, None, value, p) for p in range(self.event_partitions)]
        return out

    def read_to_end(self, source: tuple[str, int]) -> bool:
        """Whether every capture appended to ``source`` so far has been read (and its events published).

        The end offset comes from the broker itself (a fetch's cached one may be stale, e.g. while the broker
        is unreachable, and the wall clock mark would then overtake the records still to come)."""
        if self.consumer is None:
            return False
        tp = TopicPartition(*source)
        try:
            [at] = self.consumer.position([tp])
            position = at.offset
            if position < 0:   # nothing read since assigned: it starts at the committed offset
                [at] = self.consumer.committed([tp], timeout=5)
                position = at.offset
            low, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high >= 0 and max(position, low) < high:
                return False   # behind, known without asking
            low, high = self.consumer.get_watermark_offsets(tp, timeout=5)
        except KafkaException as exc:
            log.info("%s: how far %s[%d] is read is unknown (%s)", STAGE, *source, exc)
            return False
        return max(position, low) >= high


def map_lanes(geo: Geo) -> dict[str, int]:
    """Each checkpoint's lane count on the deployment map (empty without a map: then only a filter's shape is
    checked, as a service without its map still counts). Both stages build it from the map loaded at start."""
    return {checkpoint_id: checkpoint.lanes for checkpoint_id, checkpoint in geo.checkpoints.items()}


def events_retention_s(settings: Settings) -> float:
    """The events a restarted stage B re-reads reach back the longest window a command may ask for plus the
    lateness (and slack): the topic keeps them that long, and no longer."""
    return WINDOW_S_RANGE[1] + settings.allowed_lateness_s + 2 * REWIND_SLACK_MS / 1000


def run_repartition(settings: Settings, stop: threading.Event, ready: threading.Event | None = None,
                    geo: Geo | None = None) -> None:
    producer = make_producer(settings, STAGE)
    topic = settings.topics.stat_events
    partitions = len(producer.list_topics(topic, timeout=30).topics[topic].partitions)
    stage_a = StatsRepartition(settings, geo or load_geo(settings), Replies(settings, producer), partitions)
    commands = CommandLog(settings, settings.topics.control_stats, f"{STAGE}-commands")
    stage = Stage(STAGE, GROUP, settings.topics.captures, stage_a.handle, commands=((commands, stage_a.apply),),
                  tick=stage_a.tick, on_assign=stage_a.assigned, on_revoke=stage_a.revoked)
    stage_a.consumer = make_consumer(settings, GROUP, STAGE, **EAGER, **BATCHED)
    run_stage(settings, stage, stage_a.consumer, producer, stop, ready)


def run_stats(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Both statistics sub-stages, each in its own thread; ``ready`` once both have subscribed."""
    topics = settings.topics
    ensure_topics(settings, repartition_topic(settings, topics.stat_events, topics.captures,
                                              events_retention_s(settings)))
    geo = load_geo(settings)   # one map for both sub-stages: they must agree on which statistics are valid
    run_together(STAGE, [partial(run_repartition, settings, geo=geo),
                         partial(run_windows, settings, lanes=map_lanes(geo))], stop, ready)
