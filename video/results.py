"""What a finished analysis publishes: one `video.results` record per object (ARCHITECTURE.md) and
the `video_task` / `video_object` HBase rows, with deterministic keys so a re-run rewrites the same
cells (idempotent), hash-prefixed so tasks do not hot-spot one region."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from video.render import Timebase
from video.synopsis import Schedule
from video.track import Tube

TASK_TABLE = "video_task"
OBJECT_TABLE = "video_object"
FAMILIES = {TASK_TABLE: "t", OBJECT_TABLE: "o"}
TRACK_SAMPLES = 20


def task_id_for(video_url: str) -> str:
    return hashlib.sha1(video_url.encode()).hexdigest()[:16]


def _salt(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()[:4]


def task_row_key(task_id: str) -> bytes:
    return f"{_salt(task_id)}:{task_id}".encode()


def object_row_key(task_id: str, object_id: int) -> bytes:
    """All objects of a task are one contiguous scan under the task's prefix."""
    return f"{_salt(task_id)}:{task_id}:{object_id:06d}".encode()


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


def object_row(record: dict[str, Any]) -> dict[bytes, bytes]:
    cells = {f"o:{k}".encode(): str(record[k]).encode() for k in
             ("class", "color", "first_seen", "last_seen", "thumbnail_url", "synopsis_time", "camera_id")}
    cells[b"o:record"] = json.dumps(record, ensure_ascii=False).encode()
    return cells


def task_row(task_id: str, video_url: str, status: str, **fields: Any) -> dict[bytes, bytes]:
    cells = {b"t:task_id": task_id.encode(), b"t:video_url": video_url.encode(), b"t:status": status.encode()}
    cells.update({f"t:{k}".encode(): str(v).encode() for k, v in fields.items()})
    return cells


def ensure_tables(conn: Any) -> None:
    existing = {name.decode() for name in conn.tables()}
    for table, family in FAMILIES.items():
        if table not in existing:
            conn.create_table(table, {family: {}})
