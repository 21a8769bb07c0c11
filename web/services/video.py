"""The video business for the console: analysis commands onto the bus, tasks and objects out of HBase.

Commands are validated with the same contract the video ingest job applies (``contracts.video``) and
published to ``video.commands`` keyed by camera; the console never runs an analysis or writes a task
row itself (the job loads ``video_task`` / ``video_object`` from ``video.status`` / ``video.results``),
so what a page shows is what any other reader of those tables sees. Task ids are derived from the
video and the options, so a double click or a second operator asking for the same analysis names the
same task, which the job runs once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import happybase
from confluent_kafka import KafkaException, Producer
from thriftpy2.thrift import TException

from contracts import video as contract
from contracts.tables import video as layout
from video import storage
from web.backends import BUS, Backends, BackendUnavailable
from web.services.captures import is_missing_table
from web.services.errors import Invalid, NotFound
from web.services.video_media import VideoMedia
from web.settings import ConsoleSettings

log = logging.getLogger(__name__)

def task_id_for(video_url: str, options: Mapping[str, Any]) -> str:
    """Stable for the same video and options: asking twice names one task."""
    canonical = json.dumps({"video_url": video_url, "options": dict(options)}, sort_keys=True)
    return _task_id(canonical)


def rerun_id_for(task_id: str) -> str:
    """The task that runs an ended task again: a task id never runs twice, so a re-run is a new task, and
    deriving it from the old id makes a second click (or a retried request) name the same one."""
    return _task_id(f"{task_id}/rerun")


def _task_id(canonical: str) -> str:
    return "v" + hashlib.sha1(canonical.encode()).hexdigest()[:15]


def _cells(row: Mapping[bytes, bytes], family: str) -> dict[str, str]:
    prefix = f"{family}:".encode()
    return {k[len(prefix):].decode(): v.decode(errors="replace") for k, v in row.items() if k.startswith(prefix)}


class VideoService:
    def __init__(self, settings: ConsoleSettings, backends: Backends) -> None:
        self._settings = settings
        self._backends = backends
        self.media = VideoMedia(backends, max_transcodes=settings.max_transcodes,
                                max_transcodes_per_user=settings.max_transcodes_per_user)
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    # -- commands ---------------------------------------------------------------------------------
    def _publish(self, key: str, record: Mapping[str, Any]) -> None:
        """One command onto ``video.commands``, acknowledged by the bus (acks=all) before returning."""
        with self._lock:
            if self._producer is None:
                self._producer = Producer({**self._settings.bus, "acks": "all",
                                           "enable.idempotence": True, "logger": logging.getLogger("web.bus"),
                                           "message.timeout.ms": int(self._settings.backend_timeout_s * 3000)})
            producer = self._producer
        failures: list[str] = []
        try:
            producer.produce(self._settings.topics.video_commands, contract.encode(record), key=key.encode(),
                             on_delivery=lambda err, _msg: failures.append(str(err)) if err else None)
        except (KafkaException, BufferError) as exc:
            raise BackendUnavailable(BUS, str(exc)) from None
        if producer.flush(self._settings.backend_timeout_s * 4) or failures:
            raise BackendUnavailable(BUS, failures[0] if failures else "command not acknowledged in time")

    def analyze(self, video_url: str, camera_id: str | None, options: Mapping[str, Any],
                username: str, task_id: str | None = None) -> dict[str, Any]:
        """Validate, then publish an analyze command; the camera defaults to the key's first part, the task id
        to one derived from the video and options."""
        if self.media.parse(video_url, "video_url")[0] != storage.VIDEOS_BUCKET:
            raise Invalid("video_url", f"only recordings in the {storage.VIDEOS_BUCKET} bucket are analysed")
        camera = camera_id or video_url[len("s3://"):].split("/")[1]
        self.media.stat(video_url)  # 404 now rather than a failed task later
        try:  # validated first, so the task id is derived from the options as normalised
            record = contract.command_record("pending", video_url, camera, username, options)
        except contract.CommandError as exc:
            raise Invalid(exc.field, exc.reason) from None
        record["task_id"] = task_id or task_id_for(record["video_url"], record["options"])
        self._publish(record["camera_id"], record)
        return record

    def rerun(self, task_id: str, username: str) -> dict[str, Any]:
        """Analyse a failed or cancelled task's video again with its options, as a new task."""
        task = self.task(task_id)  # 404 for a task nobody asked for
        if task["status"] not in (contract.FAILED, contract.CANCELLED):
            raise Invalid("task_id", f"task {task_id} is {task['status']}: only a failed or cancelled task runs again")
        if not task.get("video_url"):
            raise Invalid("task_id", f"task {task_id} names no video to analyse")
        return self.analyze(task["video_url"], task.get("camera_id") or None, task.get("options") or {}, username,
                            rerun_id_for(task_id))

    def cancel(self, task_id: str, username: str) -> dict[str, Any]:
        task = self.task(task_id)  # 404 for a task nobody asked for
        if task["status"] in contract.TERMINAL:
            raise Invalid("task_id", f"task {task_id} is already {task['status']}")
        record = contract.cancel_record(task_id, username)
        self._publish(task.get("camera_id") or task_id, record)
        return record

    # -- tasks and objects ------------------------------------------------------------------------
    @contextlib.contextmanager
    def _table(self, name: str) -> Iterator[happybase.Table]:
        with self._backends.hbase() as connection:
            yield connection.table(name)

    def tasks(self, limit: int = 100) -> list[dict[str, Any]]:
        """Tasks, newest request first: the task list's first ``limit`` rows, then their task rows in one call."""
        try:
            with self._backends.hbase() as connection:
                listed = [_cells(row, "t") for _key, row in connection.table(layout.TASK_LIST_TABLE).scan(limit=limit)]
                keys = [layout.task_row_key(entry["task_id"]) for entry in listed]
                rows = dict(connection.table(layout.TASK_TABLE).rows(keys)) if keys else {}
        except TException as exc:  # no task was ever loaded: the job creates the tables
            if not is_missing_table(exc):
                raise
            return []
        # A task listed before its first status row landed shows as what was asked for.
        return [self._task({**entry, "status": contract.QUEUED, **_cells(rows.get(key, {}), "t")})
                for entry, key in zip(listed, keys, strict=True)]

    def search(self, camera_id: str, since: dt.datetime, until: dt.datetime, cls: str | None, color: str | None,
               limit: int) -> list[dict[str, Any]]:
        """Objects a camera saw first in ``[since, until)``, newest first, of a class and colour (None: any)."""
        start, stop = layout.index_scan_range(camera_id, int(since.timestamp() * 1000), int(until.timestamp() * 1000))
        found: list[dict[str, Any]] = []
        try:
            with self._table(layout.INDEX_TABLE) as table:
                for _key, row in table.scan(row_start=start, row_stop=stop):
                    if layout.index_matches(row, cls, color) and b"o:record" in row:
                        found.append(json.loads(row[b"o:record"]))
                        if len(found) >= limit:
                            break
        except TException as exc:  # no task was ever loaded: the job creates the tables
            if not is_missing_table(exc):
                raise
            return []
        return self._with_offsets(found)

    def task(self, task_id: str) -> dict[str, Any]:
        try:
            with self._table(layout.TASK_TABLE) as table:
                row = table.row(layout.task_row_key(task_id))
        except TException as exc:
            if not is_missing_table(exc):
                raise
            raise NotFound("task", task_id) from None
        if not row:
            raise NotFound("task", task_id)
        return self._task(_cells(row, "t"))

    def objects(self, task_id: str) -> list[dict[str, Any]]:
        """Every object of a task (one prefix scan), with its offset into the original video."""
        self.task(task_id)  # 404 for an unknown task rather than an empty list
        with self._table(layout.OBJECT_TABLE) as table:
            rows = table.scan(row_prefix=layout.object_prefix(task_id))
            records = [json.loads(row[b"o:record"]) for _key, row in rows if b"o:record" in row]
        return self._with_offsets(sorted(records, key=lambda r: r["object_id"]))

    def _with_offsets(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each record with its offset into its video (whose start is looked up once per video)."""
        starts: dict[str, dt.datetime | None] = {}
        for record in records:
            if record["video_url"] not in starts:
                starts[record["video_url"]] = self._video_start(record["video_url"])
        return [self._object(r, starts[r["video_url"]]) for r in records]

    def _video_start(self, video_url: str) -> dt.datetime | None:
        try:
            return self.media.start_time(video_url)
        except (NotFound, Invalid):
            return None

    @staticmethod
    def _object(record: dict[str, Any], start: dt.datetime | None) -> dict[str, Any]:
        """The record plus ``offset_s``: where in the original video the object first shows (for seeking)."""
        first = dt.datetime.fromisoformat(record["first_seen"])
        last = dt.datetime.fromisoformat(record["last_seen"])
        origin = start if start is not None and first >= start else None
        offset = (first - origin).total_seconds() if origin else (first - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
                                                                   ).total_seconds()
        return {**record, "offset_s": round(max(0.0, offset), 3),
                "duration_s": round((last - first).total_seconds(), 3)}

    @staticmethod
    def _task(cells: dict[str, str]) -> dict[str, Any]:
        """A task row as the API shows it: numbers as numbers, the rest as stored."""
        task: dict[str, Any] = dict(cells)
        task["status"] = cells.get("status") or cells.get("state") or "queued"
        for name in ("progress", "objects", "frames", "synopsis_frames", "attempt"):
            if cells.get(name):
                with contextlib.suppress(ValueError):
                    task[name] = float(cells[name]) if name == "progress" else int(float(cells[name]))
        for name in ("timings", "options", "camera_motion"):
            if cells.get(name):
                with contextlib.suppress(ValueError):
                    task[name] = json.loads(cells[name])
        return task
