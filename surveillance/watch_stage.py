"""The watch stage (group ``surveillance-watch``): captures against the plate and face watchlists.

Per batch of consumed captures: each vehicle's plate is one dictionary lookup, all faces of the batch
are one matrix product. A matched capture yields a hit on ``surveillance.hits`` and an alert on
``alerts``; the capture's offset is committed once both are acknowledged (``bus.run_stage``). A capture
that is not a usable record (bad JSON, no plate, a malformed embedding) is skipped and counted: the
ingest job has already dead-lettered it, and this stage must not stall on it. So is a record of
``surveillance.hits`` that is not a hit (:mod:`surveillance.skipped`); a watch command that cannot be read
is rejected with a reply like any invalid one.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from confluent_kafka import Message

from contracts.deployment_map import DeploymentMap, MapError
from contracts.records import FEATURE_DIM, UNRECOGNIZED, Kind, epoch_ms, is_checkpoint_id, is_plate
from contracts.surveillance import ACCEPTED, REJECTED, REMOVED, WatchCommand, parse_hit, parse_watch

from . import metrics
from .faces import FaceWatchlist
from .geo import Geo
from .hits import HitPublisher, Trajectories
from .plates import PlateWatchlist
from .settings import Settings
from .skipped import UNREADABLE, refusal, skip, where
from .streams import CommandLog, Output, Replies, Stage, make_consumer, make_producer, run_stage

log = logging.getLogger(__name__)
GROUP = "surveillance-watch"
STAGE = "watch"


class SkippedRecord(ValueError):
    """A capture a stage cannot use: ``reason`` is the metric's label, ``detail`` what the log adds."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def _capture(raw: bytes | None, kind: Kind) -> dict[str, Any]:
    """The few fields matching needs, checked; raises :class:`SkippedRecord` naming the reason."""
    try:
        record = json.loads(raw) if raw is not None else None
    except (ValueError, RecursionError) as exc:
        raise SkippedRecord("malformed", f"not JSON: {type(exc).__name__}") from None
    if not isinstance(record, dict):
        raise SkippedRecord("malformed", f"not a JSON object: {type(record).__name__}")
    if not isinstance(record.get("record_id"), str) or not is_checkpoint_id(record.get("checkpoint_id")):
        raise SkippedRecord("malformed", "no record_id or checkpoint_id")
    try:
        epoch_ms(record.get("capture_time"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SkippedRecord("malformed", "capture_time") from None
    field = "plate_number" if kind is Kind.VEHICLE else "feature"
    if record.get(field) == UNRECOGNIZED:
        raise SkippedRecord("unrecognized", field)
    if kind is Kind.VEHICLE and not is_plate(record.get("plate_number")):
        raise SkippedRecord("malformed", "plate_number")
    if kind is Kind.FACE:
        try:
            raw_feature = base64.b64decode(record.get("feature"), validate=True)  # type: ignore[arg-type]
        except (binascii.Error, TypeError, ValueError):
            raise SkippedRecord("malformed", "feature") from None
        if len(raw_feature) != 4 * FEATURE_DIM:
            raise SkippedRecord("malformed", "feature")
        record["_vector"] = np.frombuffer(raw_feature, dtype="<f4")
    return record


def read_watch(key: bytes | None, value: bytes | None) -> tuple[str, WatchCommand | None, str | None]:
    """A ``control.watchlist`` record as (watch id from the key, the watch or None when removed, the rejection
    reason). Whatever the value holds this returns: a record that cannot be read is one more rejection, and
    the latest record of a key is the watch (as compaction will leave it), so it removes the one it replaces."""
    watch_id = key.decode("utf-8", "replace") if key else ""
    try:
        return watch_id, parse_watch(key, value), None
    except UNREADABLE as exc:
        return watch_id, None, refusal(exc)


def load_geo(settings: Settings) -> Geo:
    """The deployment map; without one, hits still flow with the district from the checkpoint id."""
    try:
        return Geo(DeploymentMap.load(settings.map_path))
    except MapError as exc:
        log.warning("%s: hits carry no coordinates", exc)
        return Geo(DeploymentMap((), (), (), ()))


class WatchMatcher:
    """The watchlists, kept current from ``control.watchlist``, and the matching of capture batches."""

    def __init__(self, settings: Settings, replies: Replies, geo: Geo) -> None:
        self.settings = settings
        self.replies = replies
        self.geo = geo
        self.plates = PlateWatchlist(settings.fuzzy)
        self.faces = FaceWatchlist()
        self.trajectories = Trajectories(settings.trajectory_points)
        self.hits = HitPublisher(settings, geo, self.trajectories)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One ``control.watchlist`` record: add, replace or remove a watch, and reply what was done."""
        watch_id, watch, reason = read_watch(key, value)
        self.plates.remove(watch_id)
        self.faces.remove(watch_id)
        if reason is not None:
            self.replies.send(watch_id or "?", "watch", REJECTED, reason)
            return
        if watch is None:
            self.trajectories.forget(watch_id)
            self.replies.send(watch_id, "watch", REMOVED)
            return
        (self.plates if watch.kind == "plate" else self.faces).add(watch)
        expired = not watch.active(int(time.time() * 1000))
        self.replies.send(watch_id, "watch", ACCEPTED, "already expired" if expired else "")

    def read_hit(self, _key: bytes | None, value: bytes | None) -> None:
        """A record of ``surveillance.hits`` (CommandLog ``Apply``): into the trajectories, or set aside."""
        try:
            self.trajectories.add(parse_hit(value), on_topic=True)
        except UNREADABLE as exc:
            skip(STAGE, "malformed hit", self.settings.topics.surveillance_hits, f"{type(exc).__name__}: {exc}")

    def handle(self, messages: Sequence[Message]) -> list[list[Output]]:
        now_ms = int(time.time() * 1000)
        outputs: list[list[Output]] = [[] for _ in messages]
        faces: list[tuple[int, dict[str, Any]]] = []
        for n, message in enumerate(messages):
            kind = self.settings.topics.kind_of(message.topic())
            try:
                record = _capture(message.value(), kind)  # type: ignore[arg-type]
            except SkippedRecord as exc:
                skip(STAGE, exc.reason, where(message), exc.detail)
                continue
            if kind is Kind.FACE:
                faces.append((n, record))
                continue
            district = self.geo.district(record["checkpoint_id"])
            for found in self.plates.match(record["plate_number"], record["checkpoint_id"], district, now_ms):
                published = self.hits.outputs(found.watch, "plate", record, found.score, found.match)
                if published:  # nothing when the hit is already on the topic
                    metrics.HITS.labels("plate", found.match).inc()
                outputs[n] += published
        if faces and len(self.faces):
            matches = self.faces.match(np.stack([record["_vector"] for _n, record in faces]))
            for (n, record), found_all in zip(faces, matches, strict=True):
                district = self.geo.district(record["checkpoint_id"])
                for found in found_all:
                    if not found.watch.active(now_ms):
                        self.faces.remove(found.watch.watch_id)
                    elif found.watch.in_scope(record["checkpoint_id"], district):
                        published = self.hits.outputs(found.watch, "face", record, found.score)
                        if published:
                            metrics.HITS.labels("face", "").inc()
                        outputs[n] += published
        return outputs


def run_watch(settings: Settings, stop: threading.Event, ready: threading.Event | None = None) -> None:
    """The stage's thread: rebuild trajectories and watchlists from their topics, then match until ``stop``."""
    producer = make_producer(settings, STAGE)
    matcher = WatchMatcher(settings, Replies(settings, producer), load_geo(settings))
    hits_log = CommandLog(settings, settings.topics.surveillance_hits, f"{STAGE}-hits")
    watch_log = CommandLog(settings, settings.topics.control_watchlist, f"{STAGE}-commands")
    stage = Stage(STAGE, GROUP, settings.topics.captures, matcher.handle,
                  commands=((hits_log, matcher.read_hit), (watch_log, matcher.apply)))
    run_stage(settings, stage, make_consumer(settings, GROUP, STAGE), producer, stop, ready)
