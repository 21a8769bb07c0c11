"""The video loader: ``video.results`` and ``video.status`` records -> HBase rows (:mod:`contracts.tables.video`).

The only writer of the video tables, run inside the video ingest job's micro-batches, so a DR site
that receives the mirrored topics rebuilds the same tables with the same code. Every write is
idempotent: objects and index rows have deterministic keys (a replayed batch rewrites the same cells),
and a task row folds its status records in bus order with one rule that makes replays and late or
duplicate records harmless: a task in a terminal state (done, failed, cancelled) stays in it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from contracts.records import parse_time
from contracts.tables.video import (
    INDEX_TABLE,
    OBJECT_TABLE,
    TASK_LIST_TABLE,
    TASK_TABLE,
    index_row_key,
    object_row,
    object_row_key,
    task_list_key,
    task_list_row,
    task_row,
    task_row_key,
)
from contracts.video import DONE, TERMINAL

RESULT_FIELDS = ("task_id", "object_id", "camera_id", "first_seen")
_STATUS_CORE = ("task_id", "state", "timings")


def check_result(record: Any) -> dict[str, Any]:
    """A ``video.results`` record with what the row keys need, or a ValueError naming what is missing."""
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    missing = [f for f in RESULT_FIELDS if f not in record]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    parse_time(record["first_seen"])
    int(record["object_id"])
    return record


def fold(current: Mapping[bytes, bytes], statuses: Iterable[Mapping[str, Any]], now: float) -> dict[bytes, bytes]:
    """The cells a task row gets from its current cells and new status records (oldest first).

    Timings merge stage by stage; reaching ``done`` adds the ``load`` stage: the seconds from the done
    record's time to this write (the results precede it on the bus, so they are loaded by now)."""
    state = current.get(b"t:status", b"").decode()
    timings = json.loads(current.get(b"t:timings", b"{}") or b"{}")
    cells: dict[bytes, bytes] = {}
    for status in statuses:
        if state in TERMINAL:
            break
        state = status["state"]
        timings.update(status.get("timings") or {})
        if state == DONE:
            timings["load"] = round(max(0.0, now - parse_time(status["time"]).timestamp()), 3)
        extra = {k: v for k, v in status.items() if k not in _STATUS_CORE}
        cells.update(task_row(status["task_id"], state, timings=timings, **extra))
    return cells


class VideoLoader:
    """Writes one micro-batch's records through a happybase connection the caller opens and closes."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def load_results(self, records: list[dict[str, Any]]) -> None:
        with self.connection.table(OBJECT_TABLE).batch() as objects, \
                self.connection.table(INDEX_TABLE).batch() as index:
            for record in records:
                cells = object_row(record)
                objects.put(object_row_key(record["task_id"], int(record["object_id"])), cells)
                index.put(index_row_key(record), cells)

    def load_statuses(self, statuses: list[dict[str, Any]]) -> None:
        """Fold each task's records (in bus order) into its row; a new task also gets its list row."""
        by_task: dict[str, list[dict[str, Any]]] = {}
        for status in statuses:
            by_task.setdefault(status["task_id"], []).append(status)
        tasks = self.connection.table(TASK_TABLE)
        current = dict(tasks.rows([task_row_key(t) for t in by_task]))
        now = time.time()
        with tasks.batch() as batch, self.connection.table(TASK_LIST_TABLE).batch() as listing:
            for task_id, records in by_task.items():
                key = task_row_key(task_id)
                old = current.get(key, {})
                cells = fold(old, records, now)
                if not cells:
                    continue
                batch.put(key, cells)
                if not old:
                    first = records[0]
                    requested_at = first.get("requested_at") or first["time"]
                    listing.put(task_list_key(requested_at, task_id),
                                task_list_row(task_id, str(first.get("camera_id", "")),
                                              str(first.get("video_url", "")), requested_at))

    def stored_states(self, task_ids: Iterable[str]) -> dict[str, str]:
        """The state each task's row holds, for the tasks that have one."""
        keys = {task_row_key(t): t for t in set(task_ids)}
        if not keys:
            return {}
        rows = self.connection.table(TASK_TABLE).rows(list(keys), columns=[b"t:status"])
        return {keys[key]: cells[b"t:status"].decode() for key, cells in rows if b"t:status" in cells}

    def unfinished(self) -> list[dict[str, str]]:
        """Rows of tasks not in a terminal state (what a restarted job takes over), as text cells."""
        found = []
        for _key, cells in self.connection.table(TASK_TABLE).scan():
            if cells.get(b"t:status", b"").decode() not in TERMINAL:
                found.append({k.decode()[2:]: v.decode() for k, v in cells.items()})
        return found
