"""What a finished analysis publishes: one `video.results` record per object (docs/architecture.md).

The HBase rows these records become are laid out in :mod:`contracts.tables.video`."""

from __future__ import annotations

import hashlib
from typing import Any

from video.render import Timebase
from video.synopsis import Schedule
from video.track import Tube

TRACK_SAMPLES = 20


def task_id_for(video_url: str) -> str:
    return hashlib.sha1(video_url.encode()).hexdigest()[:16]


def object_records(task_id: str, video_url: str, camera_id: str, tubes: list[Tube], plan: Schedule,
                   timebase: Timebase, synopsis_url: str, thumbnail_urls: dict[int, str]) -> list[dict[str, Any]]:
    records = []
    for tube in tubes:
        step = max(1, len(tube.frames) // TRACK_SAMPLES)
        track = [[round((f - tube.first) / timebase.fps + 0.0, 3), *box]
                 for f, box in list(zip(tube.frames, tube.boxes, strict=True))[::step]]
        records.append({
            "task_id": task_id, "video_url": video_url, "camera_id": camera_id, "object_id": tube.tube_id,
            "class": tube.cls, "color": tube.color,
            "first_seen": timebase.at(tube.first).isoformat(timespec="milliseconds"),
            "last_seen": timebase.at(tube.last).isoformat(timespec="milliseconds"),
            "track": track, "thumbnail_url": thumbnail_urls.get(tube.tube_id, ""), "synopsis_url": synopsis_url,
            "synopsis_time": round(plan.placements[tube.tube_id].start / timebase.fps, 3),
        })
    return records
