"""The video loader: ``video.results`` and ``video.status`` records -> HBase rows (:mod:`contracts.tables.video`).

The only writer of the video tables, run inside the video ingest job's micro-batches, so a DR site
that receives the mirrored topics rebuilds the same tables with the same code. Every write is
idempotent: objects and index rows have deterministic keys (a replayed batch rewrites the same cells),
and a task row folds its status records in bus order with one rule that makes replays and late or
duplicate records harmless: a task in a terminal state (done, failed, cancelled) stays in it.

A task says ``done`` only once all its objects are in HBase. The batch job puts its results on the bus
before ``done``, but on their own topic, and a micro-batch's offsets are read topic by topic (on a
cluster, broker by broker), so a ``done`` can arrive a micro-batch before the last results. Such a
``done`` is held in the row (``t:held_done``, the row keeps its state) and promoted by the micro-batch
that loads the task's last object. The hold is in HBase, not in memory: the micro-batch that carried the
``done`` is committed, and a restarted job must still promote it.
"""

from __future__ import annotations

import json
import re
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
    object_prefix,
    object_row,
    object_row_key,
    task_list_key,
    task_list_row,
    task_row,
    task_row_key,
)
from contracts.video import CAMERA_ID, DONE, TASK_ID, TERMINAL, CommandError, decode, encode, parse_status

RESULT_FIELDS = ("task_id", "object_id", "camera_id", "first_seen")
_STATUS_CORE = ("task_id", "state", "timings", "status")
"""Status fields that do not become cells of their own: the row's ``t:status`` holds the state (a record's own
``status`` field, which none of ours has, would collide with it) and timings are merged."""
HELD = b"t:held_done"
MAX_NESTING = 32
"""How deep a record's JSON may nest (ours: 3, a result's track). Deeper than Python can encode again a few calls
further down, in the writes, it would fail them: see :func:`_check_storable`."""


def check_result(raw: bytes | None) -> dict[str, Any]:
    """A ``video.results`` record whose rows can be written, or a ValueError naming what is wrong with it.

    This and :func:`check_status` are the loader's door: any producer may write to the topics, and a record let
    through must not be able to fail the writes (a failed write fails the micro-batch, and its replay again)."""
    try:
        record = decode(raw)
    except CommandError as exc:  # the contract's decoding error, named for commands (as in parse_status)
        raise ValueError(str(exc)) from None
    if not isinstance(record, dict):
        raise ValueError(f"not a JSON object: {type(record).__name__}")
    missing = [f for f in RESULT_FIELDS if f not in record]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    _check_id(record, "task_id", TASK_ID)
    _check_id(record, "camera_id", CAMERA_ID)
    _check_count(record, "object_id")
    _check_time(record, "first_seen")
    _check_storable(record)
    return record


def check_status(raw: bytes | None) -> dict[str, Any]:
    """A ``video.status`` record the task row can fold in (:func:`fold`), or a ValueError naming what is wrong."""
    status = parse_status(raw)
    _check_id(status, "task_id", TASK_ID)
    _check_time(status, "time")
    if status.get("requested_at"):  # the list row's key, when the record starts a task
        _check_time(status, "requested_at")
    for name in ("objects", "attempt"):
        if status.get(name) is not None:
            _check_count(status, name)
    if not isinstance(status.get("timings") or {}, dict):
        raise ValueError(f"timings must be an object, not {status['timings']!r:.60}")
    _check_storable(status)
    return status


def _check_id(record: dict[str, Any], name: str, pattern: re.Pattern[str]) -> None:
    """Ids go into row keys: the contract's pattern keeps them short and free of the keys' separators."""
    value = record[name]
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise ValueError(f"{name} {value!r:.60} does not match {pattern.pattern}")


def _check_count(record: dict[str, Any], name: str) -> None:
    value = record[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be a whole number >= 0, not {value!r:.60}")


def _check_storable(record: dict[str, Any]) -> None:
    """A ValueError unless the record's JSON can be encoded again, as its cells are (an object's record, a task's
    dict and list fields, a held done): not nested too deep, and no lone surrogate (JSON's ``\\ud800`` decodes
    to one, and UTF-8 cannot carry it)."""
    level: list[Any] = [record]
    for _ in range(MAX_NESTING):
        level = [v for item in level if isinstance(item, dict | list)
                 for v in (item.values() if isinstance(item, dict) else item)]
        if not level:
            break
    else:
        raise ValueError(f"nested deeper than {MAX_NESTING} levels")
    encode(record)


def _check_time(record: dict[str, Any], name: str) -> None:
    value = record.get(name)
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a time, not {value!r:.60}")
    try:
        parse_time(value)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def fold(current: Mapping[bytes, bytes], statuses: Iterable[Mapping[str, Any]], now: float,
         loaded: int) -> dict[bytes, bytes]:
    """The cells a task row gets from its current cells and new status records (oldest first).

    ``loaded`` is how many of the task's objects HBase holds. A ``done`` announcing more is held (see the
    module docstring). Timings merge stage by stage; reaching ``done`` adds the ``load`` stage: the seconds
    from the done record's time to the write that makes the task done."""
    state = current.get(b"t:status", b"").decode()
    timings = json.loads(current.get(b"t:timings", b"{}") or b"{}")
    cells: dict[bytes, bytes] = {}
    for status in statuses:
        if state in TERMINAL:
            break
        if status["state"] == DONE and loaded < int(status.get("objects") or 0):
            cells[HELD] = json.dumps(status, ensure_ascii=False).encode()
            continue
        state = status["state"]
        timings.update(status.get("timings") or {})
        if state == DONE:
            timings["load"] = round(max(0.0, now - parse_time(status["time"]).timestamp()), 3)
        extra = {k: v for k, v in status.items() if k not in _STATUS_CORE}
        cells.update(task_row(status["task_id"], state, timings=timings, **extra))
    return cells


def _announces_objects(statuses: Iterable[Mapping[str, Any]]) -> bool:
    return any(s["state"] == DONE and int(s.get("objects") or 0) > 0 for s in statuses)


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
                cells = fold(old, records, now, self.loaded(task_id) if _announces_objects(records) else 0)
                if not cells:
                    continue
                batch.put(key, cells)
                if not old:
                    first = records[0]
                    requested_at = first.get("requested_at") or first["time"]
                    listing.put(task_list_key(requested_at, task_id),
                                task_list_row(task_id, str(first.get("camera_id", "")),
                                              str(first.get("video_url", "")), requested_at))

    def promote_held(self, task_ids: Iterable[str]) -> list[str]:
        """Make ``done`` the tasks (of those given: the ones this micro-batch loaded results for) whose held
        ``done`` now has all its objects in HBase; returns their ids."""
        keys = {task_row_key(t): t for t in set(task_ids)}
        if not keys:
            return []
        tasks = self.connection.table(TASK_TABLE)
        now = time.time()
        promoted = []
        with tasks.batch() as batch:
            for key, cells in tasks.rows(list(keys)):
                if HELD not in cells:
                    continue
                task_id = keys[key]
                current = {k: v for k, v in cells.items() if k != HELD}
                done = fold(current, [json.loads(cells[HELD])], now, self.loaded(task_id))
                if done.get(b"t:status") == DONE.encode():
                    batch.put(key, done)
                    batch.delete(key, columns=[HELD])
                    promoted.append(task_id)
        return promoted

    def loaded(self, task_id: str) -> int:
        """How many of the task's objects ``video_object`` holds."""
        scan = self.connection.table(OBJECT_TABLE).scan(row_prefix=object_prefix(task_id),
                                                        columns=[b"o:object_id"])
        return sum(1 for _ in scan)

    def stored_states(self, task_ids: Iterable[str]) -> dict[str, str]:
        """The state each task's row holds, for the tasks that have one."""
        keys = {task_row_key(t): t for t in set(task_ids)}
        if not keys:
            return {}
        rows = self.connection.table(TASK_TABLE).rows(list(keys), columns=[b"t:status"])
        return {keys[key]: cells[b"t:status"].decode() for key, cells in rows if b"t:status" in cells}

    def unfinished(self) -> list[dict[str, str]]:
        """Rows of tasks not in a terminal state (what a restarted job takes over), as text cells; a task
        with a held ``done`` is finished (its results are on the bus) and is not taken over."""
        found = []
        for _key, cells in self.connection.table(TASK_TABLE).scan():
            if cells.get(b"t:status", b"").decode() not in TERMINAL and HELD not in cells:
                found.append({k.decode()[2:]: v.decode() for k, v in cells.items()})
        return found
