"""The HBase layout of video analysis: one row per task, one per object found.

| table | row key | holds |
|---|---|---|
| ``video_task`` | ``h4(task)|:task_id`` | family ``t``: status, error, counts, synopsis and index URLs |
| ``video_object`` | ``h4(task):task_id:object_id`` | family ``o``: class, colour, times, thumbnail + the record |

All objects of a task are one contiguous scan under the task's prefix.
"""

from __future__ import annotations

import json
from typing import Any

from . import Families, ensure_tables, salt

TASK_TABLE = "video_task"
OBJECT_TABLE = "video_object"
TABLES: dict[str, Families] = {TASK_TABLE: {"t": {}}, OBJECT_TABLE: {"o": {}}}


def task_row_key(task_id: str) -> bytes:
    return f"{salt(task_id)}:{task_id}".encode()


def object_row_key(task_id: str, object_id: int) -> bytes:
    return f"{salt(task_id)}:{task_id}:{object_id:06d}".encode()


def object_row(record: dict[str, Any]) -> dict[bytes, bytes]:
    cells = {f"o:{k}".encode(): str(record[k]).encode() for k in
             ("class", "color", "first_seen", "last_seen", "thumbnail_url", "synopsis_time", "camera_id")}
    cells[b"o:record"] = json.dumps(record, ensure_ascii=False).encode()
    return cells


def task_row(task_id: str, video_url: str, status: str, **fields: Any) -> dict[bytes, bytes]:
    cells = {b"t:task_id": task_id.encode(), b"t:video_url": video_url.encode(), b"t:status": status.encode()}
    cells.update({f"t:{k}".encode(): str(v).encode() for k, v in fields.items()})
    return cells


def ensure_video_tables(connection: Any) -> None:
    ensure_tables(connection, TABLES)
