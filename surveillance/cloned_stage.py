"""The cloned-plate stages: re-key plate sightings by plate, then judge each plate's trips.

Captures are keyed by checkpoint, so the sightings of one plate are spread over every partition. As
Kafka Streams does before a keyed aggregation, stage A (group ``surveillance-sightings``) repartitions:
each readable plate capture becomes a small sighting record keyed by the plate on the internal topic
``surveillance.plate-sightings`` (as many partitions as ``capture.vehicle``, delete policy, short
retention). Stage B (group ``surveillance-cloned``) then sees every sighting of a plate in one partition
and one instance, keeps the plate's recent sightings (:mod:`surveillance.cloned`) and publishes a
``cloned_plate`` hit plus a "cloned plate suspected" alert per impossible trip. It follows
``control.watchlist`` only to name the watch of a watched plate in the hit (it sends no replies: the
watch stage does). Both commit after the acknowledgements (``bus.run_stage``); stage B's state is
rebuilt on assignment by re-reading the horizon before its committed offsets (:mod:`surveillance.rewind`),
so a kill -9 loses no pair and replays produce the same hit ids.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from confluent_kafka import Message, TopicPartition

from contracts.alerts import FIRING, alert_record, fingerprint
from contracts.records import Kind, encode, epoch_ms, now_time
from contracts.records import Status as RecordStatus
from contracts.surveillance import WatchCommand, cloned_hit_id, hit_record

from . import metrics
from .cloned import Clone, CloneDetector, CloneRules, Sighting
from .geo import Geo
from .rewind import EAGER, Rewind
from .settings import Settings
from .skipped import FUTURE_TOLERANCE_MS, UNREADABLE, read_capture, skip, where
from .streams import (
    BATCHED,
    CommandLog,
    Output,
    Stage,
    TopicSpec,
    ensure_topics,
    make_admin,
    make_consumer,
    make_producer,
    run_stage,
)
from .watch_stage import SkippedRecord, load_geo, read_watch

log = logging.getLogger(__name__)
SIGHTINGS_GROUP, SIGHTINGS_STAGE = "surveillance-sightings", "sightings"
CLONED_GROUP, CLONED_STAGE = "surveillance-cloned", "cloned"
ALERT_NAME = "ClonedPlateSuspected"
ALERT_HOLD_S = 3600.0
"""A clone alert resolves by itself an hour after the last impossible trip unless a newer one refreshes it."""
HORIZON_SLACK_S = 60.0
"""Added to the horizon derived from the map (clock differences, the pipeline's own delay)."""


# -- stage A: repartition ---------------------------------------------------------------------

def sighting_of(raw: bytes | None) -> dict[str, Any]:
    """The sighting a capture makes; :class:`SkippedRecord` when it makes none (not a vehicle record, or no
    plate read). A capture whose other fields were unreadable still places its plate at a checkpoint at a time."""
    checked = read_capture(Kind.VEHICLE, raw)
    record = checked.record
    if checked.status is RecordStatus.INVALID or record is None:
        raise SkippedRecord("malformed", checked.reason)
    if "plate_number" in checked.unrecognized:
        raise SkippedRecord("unrecognized", "plate_number")
    return {"plate": record["plate_number"], "record_id": record["record_id"],
            "checkpoint_id": record["checkpoint_id"], "capture_time": record["capture_time"]}


def repartition(topic: str, messages: Sequence[Message]) -> list[list[Output]]:
    out: list[list[Output]] = []
    for message in messages:
        try:
            sighting = sighting_of(message.value())
        except SkippedRecord as exc:
            skip(SIGHTINGS_STAGE, exc.reason, where(message), exc.detail)
            out.append([])
            continue
        out.append([Output(topic, sighting["plate"].encode(), encode(sighting))])
    return out


def sightings_topic(settings: Settings) -> dict[str, TopicSpec]:
    """The repartition topic: as many partitions as ``capture.vehicle`` has (or will be created with)."""
    admin = make_admin(settings)
    vehicle = admin.list_topics(timeout=15).topics.get(settings.topics.vehicle)
    count = len(vehicle.partitions) if vehicle is not None and vehicle.error is None else settings.partitions
    retention_ms = str(round(settings.sightings_retention_s * 1000))
    return {settings.topics.plate_sightings: TopicSpec(count, {"cleanup.policy": "delete",
                                                               "retention.ms": retention_ms})}


def run_sightings(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    topic = settings.topics.plate_sightings
    stage = Stage(SIGHTINGS_STAGE, SIGHTINGS_GROUP, [settings.topics.vehicle],
                  lambda messages: repartition(topic, messages))
    run_stage(settings, stage, make_consumer(settings, SIGHTINGS_GROUP, SIGHTINGS_STAGE, **BATCHED),
              make_producer(settings, SIGHTINGS_STAGE), stop, ready)


# -- stage B: detection -----------------------------------------------------------------------

def parse_sighting(raw: bytes | None) -> Sighting:
    """A record of the repartition topic; ValueError/KeyError/TypeError for anything else."""
    data = json.loads(raw) if raw is not None else None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    fields = [data["plate"], data["record_id"], data["checkpoint_id"], data["capture_time"]]
    if not all(isinstance(f, str) and f for f in fields):
        raise ValueError("fields must be non-empty strings")
    return Sighting(epoch_ms(data["capture_time"]), data["record_id"], data["plate"], data["checkpoint_id"],
                    data["capture_time"])


def effective_horizon_s(configured_s: float, geo: Geo, speed_kmh: float) -> float:
    """No pair further apart in time than the city's diameter at the speed limit can be a clone."""
    diameter = geo.diameter_km()
    if diameter <= 0:
        return configured_s
    return min(configured_s, diameter / speed_kmh * 3600 + HORIZON_SLACK_S)


class ClonedPlates:
    """Stage B's work: sightings in, hits and alerts out; the watched plates on the side."""

    def __init__(self, settings: Settings, geo: Geo, rewind: Rewind | None = None) -> None:
        self.settings = settings
        self.geo = geo
        self.rewind = rewind
        horizon = effective_horizon_s(settings.sighting_horizon_s, geo, settings.clone_speed_kmh)
        self.rules = CloneRules(speed_limit_kmh=settings.clone_speed_kmh, horizon_s=horizon,
                                max_per_plate=max(2, settings.sighting_max_per_plate))
        self.detector = CloneDetector(self.rules, geo.distance_km)
        self.watches: dict[str, WatchCommand] = {}
        """The plate watches by id."""

    def apply_watch(self, key: bytes | None, value: bytes | None) -> None:
        """A ``control.watchlist`` record: only plate watches matter here. A rejected one removes the watch it
        replaces (:func:`surveillance.watch_stage.read_watch`); the watch stage answers it."""
        watch_id, command, _reason = read_watch(key, value)
        self.watches.pop(watch_id, None)
        if command is not None and command.kind == "plate":
            self.watches[command.watch_id] = command

    def watch_of(self, plate: str, now_ms: int) -> str | None:
        """The watch that names this plate (the first by id when several do), if one is active."""
        return min((w for w, c in self.watches.items() if c.plate == plate and c.active(now_ms)), default=None)

    def reset(self, _partitions: list[TopicPartition] | None = None) -> None:
        """Forget every plate (revoked: the next assignment rebuilds from the topic)."""
        self.detector = CloneDetector(self.rules, self.geo.distance_km)

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        out: list[list[Output]] = []
        future_ms = time.time() * 1000 + FUTURE_TOLERANCE_MS
        for message in messages:
            try:
                sighting = parse_sighting(message.value())
            except UNREADABLE as exc:
                skip(CLONED_STAGE, "malformed", where(message), f"{type(exc).__name__}: {exc}")
                out.append([])
                continue
            if sighting.capture_ms > future_ms:  # would make every plate's sightings look expired
                skip(CLONED_STAGE, "future", where(message), sighting.capture_time)
                out.append([])
                continue
            clones = self.detector.observe(sighting)
            if self.rewind is not None and self.rewind.replaying(message):
                clones = []
            out.append([output for clone in clones for output in self.outputs(clone)])
        return out

    def _sighting_json(self, sighting: Sighting) -> dict[str, Any]:
        return {"record_id": sighting.record_id, "checkpoint_id": sighting.checkpoint_id,
                "capture_time": sighting.capture_time, "location": self.geo.location(sighting.checkpoint_id)}

    def outputs(self, clone: Clone) -> list[Output]:
        """The hit (named after the later sighting, keyed by the watch or the plate) and its alert."""
        topics = self.settings.topics
        later = clone.second
        watch_id = self.watch_of(clone.plate, round(time.time() * 1000))
        hit = hit_record(
            hit_id=cloned_hit_id(clone.first.record_id, later.record_id), watch_id=watch_id, kind="cloned_plate",
            record_id=later.record_id, checkpoint_id=later.checkpoint_id, capture_time=later.capture_time,
            score=clone.speed_kmh / self.rules.speed_limit_kmh, location=self.geo.location(later.checkpoint_id),
            detected_at=now_time(), plate=clone.plate,
            sightings=[self._sighting_json(clone.first), self._sighting_json(later)],
            speed_kmh=clone.speed_kmh, distance_km=clone.distance_km)
        metrics.HITS.labels("cloned_plate", "").inc()
        labels = {"alertname": ALERT_NAME, "plate": clone.plate, "severity": "critical"}
        annotations = {
            "summary": f"cloned plate suspected: {clone.plate} at {clone.first.checkpoint_id} and "
                       f"{later.checkpoint_id}, {clone.distance_km} km apart ({clone.speed_kmh} km/h)",
            "hit_id": hit["hit_id"], "record_ids": f"{clone.first.record_id},{later.record_id}",
            "speed_kmh": str(clone.speed_kmh), "distance_km": str(clone.distance_km)}
        starts = later.capture_ms / 1000
        alert = alert_record(FIRING, labels, annotations, starts, max(starts, time.time()) + ALERT_HOLD_S)
        key = (watch_id or clone.plate).encode()
        return [Output(topics.surveillance_hits, key, encode(hit)),
                Output(topics.alerts, fingerprint(labels).encode(), encode(alert))]


def run_detector(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    geo = load_geo(settings)
    horizon_ms = round(effective_horizon_s(settings.sighting_horizon_s, geo, settings.clone_speed_kmh) * 1000)
    rewind = Rewind(settings, CLONED_STAGE, lambda: horizon_ms + round(HORIZON_SLACK_S * 1000))
    detector = ClonedPlates(settings, geo, rewind)
    log.info("cloned plates: speed limit %.0f km/h, horizon %.0f s", detector.rules.speed_limit_kmh,
             detector.rules.horizon_s)
    watch_log = CommandLog(settings, settings.topics.control_watchlist, f"{CLONED_STAGE}-commands")
    stage = Stage(CLONED_STAGE, CLONED_GROUP, [settings.topics.plate_sightings], detector.handle,
                  commands=((watch_log, detector.apply_watch),), on_assign=rewind.on_assign,
                  on_revoke=detector.reset)
    consumer = rewind.attach(make_consumer(settings, CLONED_GROUP, CLONED_STAGE, **EAGER, **BATCHED))
    try:
        run_stage(settings, stage, consumer, make_producer(settings, CLONED_STAGE), stop, ready)
    finally:
        rewind.close()


def run_cloned(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    """Both cloned-plate stages (A in its own thread); ``ready`` once both have subscribed."""
    ensure_topics(settings, sightings_topic(settings))
    ready_a, ready_b = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    def stage_a() -> None:
        try:
            run_sightings(settings, stop, ready_a)
        except BaseException as exc:
            failed.append(exc)
            stop.set()
            raise

    thread = threading.Thread(target=stage_a, name="stage-sightings")
    thread.start()
    watcher = threading.Thread(target=_both_ready, args=(ready_a, ready_b, ready, stop), name="cloned-ready")
    watcher.start()
    try:
        run_detector(settings, stop, ready_b)
    except BaseException:
        stop.set()  # stage A stops with it
        raise
    finally:
        thread.join()
        watcher.join()
    if failed:
        raise RuntimeError("the sightings stage failed") from failed[0]


def _both_ready(a: threading.Event, b: threading.Event, ready: threading.Event | None,
                stop: threading.Event) -> None:
    while not stop.is_set():
        if a.wait(0.1) and b.wait(0.1):
            if ready is not None:
                ready.set()
            return
