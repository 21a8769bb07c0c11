"""Watchlist hits and their alerts, each with where it happened and the watch's trajectory so far.

The trajectory is the last N sightings of a watch, from every instance: each instance rebuilds it at
start by reading ``surveillance.hits`` back and keeps tailing that topic (hits of other instances
included), de-duplicated by hit id, so any instance's next hit carries the whole recent path.

A hit read back from the topic is not published again: a capture consumed a second time (a replay after a
crash, or at the DR site, promoted, from the offsets the mirror synced while the primary had published hits
beyond them) whose hit is among its watch's last N on the topic yields nothing new. Hit ids are deterministic
(watch and record), so an older one published again is still recognisable downstream.
"""

from __future__ import annotations

import time
from typing import Any

from contracts.alerts import FIRING, alert_record, fingerprint
from contracts.records import encode, epoch_ms, now_time
from contracts.surveillance import WATCH_KINDS, WatchCommand, hit_record, watch_hit_id

from .geo import Geo
from .settings import Settings
from .streams import Output

ALERT_NAME = "WatchlistHit"
ALERT_HOLD_S = 600.0
"""A hit's alert resolves by itself this long after the capture unless a newer hit refreshes it
(Alertmanager's ``endsAt``: a watch hit is an event, not a lasting condition)."""


class Trajectories:
    """Per watch, its last ``points`` sightings in capture-time order, de-duplicated by hit id."""

    def __init__(self, points: int) -> None:
        self.points = points
        self._paths: dict[str, dict[str, tuple[int, dict[str, Any]]]] = {}
        self._on_topic: dict[str, set[str]] = {}
        """Per watch, the ids of its kept hits read back from ``surveillance.hits``."""

    def add(self, hit: dict[str, Any], on_topic: bool = False) -> None:
        """Add a hit (as :func:`contracts.surveillance.parse_hit` checked it), ``on_topic`` when it was read back
        from the hits topic; ValueError on a capture time that is not one, before anything is kept. A hit read
        back from the topic may be foreign: a watch id or a location of another type is ignored rather than
        trusted."""
        watch_id = hit.get("watch_id")
        if not isinstance(watch_id, str) or not watch_id or hit["kind"] not in WATCH_KINDS:
            return  # a cloned-plate hit repeats two sightings
        capture_ms = epoch_ms(hit["capture_time"])
        path = self._paths.setdefault(watch_id, {})
        if on_topic:
            self._on_topic.setdefault(watch_id, set()).add(hit["hit_id"])
        if hit["hit_id"] in path:
            return
        location = hit.get("location")
        location = location if isinstance(location, dict) else {}
        path[hit["hit_id"]] = (capture_ms, {
            "record_id": hit["record_id"], "checkpoint_id": hit["checkpoint_id"],
            "capture_time": hit["capture_time"], "lat": location.get("lat"), "lon": location.get("lon")})
        if len(path) > self.points:
            oldest = min(path, key=lambda hit_id: path[hit_id][0])
            del path[oldest]
            self._on_topic.get(watch_id, set()).discard(oldest)

    def published(self, watch_id: str, hit_id: str) -> bool:
        """Whether this hit, among the watch's kept ones, was read back from the hits topic. A hit only built here
        does not count: its publishing may have failed, and the capture is consumed again for that reason."""
        return hit_id in self._on_topic.get(watch_id, ())

    def of(self, watch_id: str) -> list[dict[str, Any]]:
        return [entry for _ms, entry in sorted(self._paths.get(watch_id, {}).values(), key=lambda e: e[0])]

    def forget(self, watch_id: str) -> None:
        self._paths.pop(watch_id, None)
        self._on_topic.pop(watch_id, None)


class HitPublisher:
    """Builds a hit and its alert as the two outputs of one matched capture."""

    def __init__(self, settings: Settings, geo: Geo, trajectories: Trajectories) -> None:
        self.topics = settings.topics
        self.geo = geo
        self.trajectories = trajectories

    def outputs(self, watch: WatchCommand, kind: str, record: dict[str, Any], score: float,
                match: str | None = None) -> list[Output]:
        checkpoint_id = record["checkpoint_id"]
        hit_id = watch_hit_id(watch.watch_id, record["record_id"])
        if self.trajectories.published(watch.watch_id, hit_id):
            return []
        hit = hit_record(
            hit_id=hit_id, watch_id=watch.watch_id, kind=kind,
            record_id=record["record_id"], checkpoint_id=checkpoint_id, capture_time=record["capture_time"],
            score=score, location=self.geo.location(checkpoint_id), detected_at=now_time(), match=match,
            plate=record.get("plate_number") if kind == "plate" else None)
        self.trajectories.add(hit)
        hit["trajectory"] = self.trajectories.of(watch.watch_id)
        labels = {"alertname": ALERT_NAME, "watch_id": watch.watch_id, "kind": kind, "severity": "critical",
                  "district": hit["location"]["district"]}
        what = f"plate {hit['plate']}" if kind == "plate" else "face"
        annotations = {"summary": f"watched {what} seen at {checkpoint_id} ({match or f'score {score:.3f}'})",
                       "description": watch.reason, "hit_id": hit["hit_id"], "record_id": record["record_id"],
                       "checkpoint_id": checkpoint_id, "capture_time": record["capture_time"]}
        now = time.time()  # an alert never starts in the future (nor ends past year 9999: a foreign capture time)
        alert = alert_record(FIRING, labels, annotations, min(epoch_ms(record["capture_time"]) / 1000, now),
                             now + ALERT_HOLD_S)
        return [Output(self.topics.surveillance_hits, watch.watch_id.encode(), encode(hit)),
                Output(self.topics.alerts, fingerprint(labels).encode(), encode(alert))]
