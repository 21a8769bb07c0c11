"""The live statistics: captures -> windowed results on ``surveillance.stats``, in two sub-stages.

Captures are keyed by checkpoint, but a district or the city spans every capture partition, so (as Kafka
Streams does before a keyed aggregation) the statistics repartition first:

- stage A, here (group ``surveillance-stats``): reads ``capture.vehicle`` and ``capture.face``; for each
  valid capture and each active statistic of its kind whose filter it passes, publishes one slim event
  keyed ``<stat id>|<group>`` on the internal topic ``surveillance.stat-events``
  (:mod:`surveillance.stats_events`). A capture's offset is committed only once its events are
  acknowledged. Statistics come from the compacted ``control.stats`` (read whole at start, then tailed);
  each command applied, stopped or rejected gets a reply on ``surveillance.replies`` from this stage.
- stage B (:mod:`surveillance.stats_windows_stage`, group ``surveillance-stats-windows``): folds the
  events into tumbling event-time windows and publishes partial and final results.

Every grouping takes this path, checkpoint too (one code path; a checkpoint's events are no more than
the statistic's own captures). Each sub-stage scales on its own: any number of processes running
``--stages stats`` share both groups' partitions and every result stays whole.

A capture time more than a minute ahead of this host's clock would close every open window at once;
such a record is skipped and counted (``future``), as is a malformed one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from functools import partial

from confluent_kafka import Message

from contracts.records import Kind, epoch_ms, parse
from contracts.records import Status as RecordStatus
from contracts.surveillance import ACCEPTED, REJECTED, REMOVED, WINDOW_S_RANGE

from . import metrics
from .bus import (
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
from .geo import Geo
from .settings import Settings
from .stats_events import Router, read_command
from .stats_windows_stage import REWIND_SLACK_MS, run_windows
from .watch_stage import load_geo

log = logging.getLogger(__name__)
GROUP, STAGE = "surveillance-stats", "stats"
FUTURE_TOLERANCE_MS = 60_000


class StatsRepartition:
    """Stage A's work: captures in, one event per statistic that counts each out."""

    def __init__(self, settings: Settings, geo: Geo, replies: Replies | None = None) -> None:
        self.topics = settings.topics
        self.replies = replies
        self.router = Router(geo.district)

    def _reply(self, stat_id: str, status: str, reason: str = "") -> None:
        if self.replies is not None:
            self.replies.send(stat_id, "stat", status, reason)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """A ``control.stats`` record: start, redefine, stop, or reject with the reason. The latest record of a
        key is the statistic (as compaction will leave it), so a rejected one stops the statistic it replaces."""
        stat_id, command, reason = read_command(key, value)
        self.router.apply(stat_id, command)
        if reason is not None:
            log.info("statistic %r rejected: %s", stat_id, reason)
            self._reply(stat_id or "?", REJECTED, reason)
        else:
            self._reply(stat_id, REMOVED if command is None else ACCEPTED)

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        now_ms = time.time() * 1000
        out: list[list[Output]] = []
        for message in messages:
            topic = message.topic() or ""
            kind = self.topics.kind_of(topic) or Kind.VEHICLE
            checked = parse(kind, message.value())
            if checked.status is RecordStatus.INVALID or checked.record is None:
                metrics.SKIPPED.labels(STAGE, "malformed").inc()
                out.append([])
                continue
            capture_ms = epoch_ms(checked.record["capture_time"])
            if capture_ms > now_ms + FUTURE_TOLERANCE_MS:
                metrics.SKIPPED.labels(STAGE, "future").inc()
                out.append([])
                continue
            events = self.router.route(kind, checked.record, capture_ms, topic, message.partition() or 0,
                                       message.offset() or 0)
            out.append([Output(self.topics.stat_events, e.key, e.encode()) for e in events])
        return out


def events_retention_s(settings: Settings) -> float:
    """The events a restarted stage B re-reads reach back the longest window a command may ask for plus the
    lateness (and slack): the topic keeps them that long, and no longer."""
    return WINDOW_S_RANGE[1] + settings.allowed_lateness_s + 2 * REWIND_SLACK_MS / 1000


def run_repartition(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    producer = make_producer(settings, STAGE)
    stage_a = StatsRepartition(settings, load_geo(settings), Replies(settings, producer))
    commands = CommandLog(settings, settings.topics.control_stats, f"{STAGE}-commands")
    stage = Stage(STAGE, GROUP, settings.topics.captures, stage_a.handle, commands=((commands, stage_a.apply),))
    run_stage(settings, stage, make_consumer(settings, GROUP, STAGE), producer, stop, ready)


def run_stats(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Both statistics sub-stages, each in its own thread; ``ready`` once both have subscribed."""
    topics = settings.topics
    ensure_topics(settings, repartition_topic(settings, topics.stat_events, topics.captures,
                                              events_retention_s(settings)))
    run_together(STAGE, [partial(run_repartition, settings), partial(run_windows, settings, GROUP)], stop, ready)
