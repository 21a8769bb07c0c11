"""The HBase layout of video analysis: tasks, the objects found, and the indexes the console searches.

| table | row key | holds |
|---|---|---|
| ``video_task`` | ``h4(task):task_id`` | family ``t``: status, progress, error, attempt, stage, timings, counts, URLs |
| ``video_task_list`` | ``reversed_ms(requested):task_id`` | family ``t``: task_id, camera_id, video_url, newest first |
| ``video_object`` | ``h4(task):task_id:object_id`` | family ``o``: class, colour, times, thumbnail + the record |
| ``video_object_index`` | ``h4(camera):camera:reversed_ms(first_seen):task_id:object_id`` | family ``o``: as above |

All objects of a task are one contiguous scan under the task's prefix; all objects of a camera between
two times are one scan of the index (newest first), class and colour being cell values filtered on
the scan (:func:`index_matches`). Only the video ingest job's loader writes these tables, from
``video.status`` and ``video.results`` (a DR site rebuilds them from the mirrored topics).
A done task's row also holds the job's camera verdict (``camera_motion``) and ``capped``.
"""

from __future__ import annotations

import json
from typing import Any

from contracts.records import epoch_ms

from . import Families, ensure_tables, reversed_ms, salt

TASK_TABLE = "video_task"
TASK_LIST_TABLE = "video_task_list"
OBJECT_TABLE = "video_object"
INDEX_TABLE = "video_object_index"
TABLES: dict[str, Families] = {TASK_TABLE: {"t": {}}, TASK_LIST_TABLE: {"t": {}}, OBJECT_TABLE: {"o": {}},
                               INDEX_TABLE: {"o": {}}}
OBJECT_CELLS = ("class", "color", "first_seen", "last_seen", "thumbnail_url", "synopsis_url", "synopsis_time",
                "camera_id", "task_id", "video_url", "object_id")


def task_row_key(task_id: str) -> bytes:
    return f"{salt(task_id)}:{task_id}".encode()


def task_list_key(requested_at: str, task_id: str) -> bytes:
    return f"{reversed_ms(epoch_ms(requested_at))}:{task_id}".encode()


def object_row_key(task_id: str, object_id: int) -> bytes:
    return f"{salt(task_id)}:{task_id}:{object_id:06d}".encode()


def object_prefix(task_id: str) -> bytes:
    """Scan prefix of one task's objects in ``video_object``."""
    return f"{salt(task_id)}:{task_id}:".encode()


def index_row_key(record: dict[str, Any]) -> bytes:
    camera = record["camera_id"]
    return (f"{salt(camera)}:{camera}:{reversed_ms(epoch_ms(record['first_seen']))}:"
            f"{record['task_id']}:{int(record['object_id']):06d}").encode()


def index_scan_range(camera_id: str, since_ms: int, until_ms: int) -> tuple[bytes, bytes]:
    """``row_start``/``row_stop`` of the index scan for objects first seen in ``[since_ms, until_ms)``."""
    head = f"{salt(camera_id)}:{camera_id}:"
    return f"{head}{reversed_ms(until_ms - 1)}".encode(), f"{head}{reversed_ms(since_ms)}~".encode()


def index_matches(cells: dict[bytes, bytes], cls: str | None = None, color: str | None = None) -> bool:
    """Whether an index row's object has the wanted class and colour (None: any)."""
    return ((cls is None or cells.get(b"o:class", b"").decode() == cls)
            and (color is None or cells.get(b"o:color", b"").decode() == color))


def object_row(record: dict[str, Any]) -> dict[bytes, bytes]:
    """The cells of an object (in ``video_object`` and ``video_object_index`` alike)."""
    cells = {f"o:{k}".encode(): str(record.get(k, "")).encode() for k in OBJECT_CELLS}
    cells[b"o:record"] = json.dumps(record, ensure_ascii=False).encode()
    return cells


def task_row(task_id: str, status: str, **fields: Any) -> dict[bytes, bytes]:
    """Cells of a task row; dict, list and bool values (``timings``, ``options``, ``camera_motion``,
    ``capped``) as JSON, so a reader in any language parses them (``true``, not Python's ``True``)."""
    cells = {b"t:task_id": task_id.encode(), b"t:status": status.encode()}
    for name, value in fields.items():
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list | bool) else str(value)
        cells[f"t:{name}".encode()] = text.encode()
    return cells


def task_list_row(task_id: str, camera_id: str, video_url: str, requested_at: str) -> dict[bytes, bytes]:
    return {b"t:task_id": task_id.encode(), b"t:camera_id": camera_id.encode(),
            b"t:video_url": video_url.encode(), b"t:requested_at": requested_at.encode()}


def ensure_video_tables(connection: Any) -> None:
    ensure_tables(connection, TABLES)
