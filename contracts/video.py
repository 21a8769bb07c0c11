"""The video analysis records (docs/architecture.md "Record schemas"): ``video.commands`` and ``video.status``.

The console validates a command with :func:`validate_command` before publishing it (a 422 naming the
field), and the video ingest job validates every value it reads again with :func:`parse_command`: the
bus carries bytes anyone may have written. A command the job cannot use still ends as a ``failed``
task with the reason, so its task id must exist even when the command has none: :func:`task_id_of`
falls back to a deterministic id derived from the value's bytes (a replayed value fails the same task,
never a new one).

``video.status`` values are built only by :func:`status_record`: the task's ``state``, ``progress``
0..1, ``error``, ``time``, the ``attempt`` (a batch job that died is retried a bounded number of
times), the ``stage`` the task is in and the seconds spent per stage so far (``timings``), so the end
to end benchmark's breakdown is read from the records rather than measured on the side.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from contracts.commands import CommandError

from .records import now_time, parse_time

ANALYZE, CANCEL = "analyze", "cancel"
ACTIONS = (ANALYZE, CANCEL)

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
STATES = (QUEUED, RUNNING, DONE, FAILED, CANCELLED)
TERMINAL = frozenset({DONE, FAILED, CANCELLED})
"""States a task never leaves: a later command or status for it changes nothing."""

STAGES = ("queue", "spark_start", "analysis", "render", "load")
"""Where a task's time goes, in order: waiting for a slot, the batch job's JVM and Spark context
starting, the analysis of the frames, rendering + uploading the synopsis, loading the results into HBase."""

CLASSES = ("person", "vehicle", "other")
"""Object classes the engine labels (``options.classes`` selects among them)."""

TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""Task ids go into row keys (``:``-separated) and object keys (``TASK/synopsis.webm``): no ``:`` or ``/``."""
CAMERA_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""Camera ids are the first part of video keys ``CAMERA/YYYY/MM/DD/HHMMSS_name``."""
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3 bucket naming rules (3-63 characters)
MAX_TEXT = 256
_MAX_SECONDS = 1e300  # finite, as a float (math.isfinite would raise OverflowError on an int over a float's range)
OPTIONS = ("classes", "window")
"""Known options: ``classes`` (a subset of :data:`CLASSES`: only these objects are reported) and
``window`` (``[from_s, to_s]`` seconds into the video: only objects seen inside it). Other keys are
refused, so a typo is an error rather than silently ignored."""


@dataclass(frozen=True)
class VideoCommand:
    """A validated ``video.commands`` value. ``video_url`` and ``camera_id`` are empty for a cancel."""

    task_id: str
    action: str
    video_url: str
    camera_id: str
    requested_by: str
    requested_at: str
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def bucket(self) -> str:
        return split_s3_url(self.video_url)[0]

    @property
    def key(self) -> str:
        return split_s3_url(self.video_url)[1]

    def record(self) -> dict[str, Any]:
        """The wire form (what :func:`encode` publishes)."""
        return {"task_id": self.task_id, "action": self.action, "video_url": self.video_url,
                "camera_id": self.camera_id, "requested_by": self.requested_by,
                "requested_at": self.requested_at, "options": dict(self.options)}


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key), or a CommandError on ``video_url`` saying what is wrong."""
    if not isinstance(url, str) or not url.startswith("s3://"):
        raise CommandError("video_url", f"must be s3://bucket/key, not {_show(url)}")
    bucket, _, key = url[len("s3://"):].partition("/")
    if not _BUCKET.fullmatch(bucket):
        raise CommandError("video_url", f"bad bucket name {bucket!r}")
    if not key or key.endswith("/") or "//" in key or len(key) > 1024:
        raise CommandError("video_url", f"bad object key {key!r}")
    return bucket, key


def _show(value: Any) -> str:
    return repr(value)[:60]


def _text(record: Mapping[str, Any], name: str, pattern: re.Pattern[str] | None = None) -> str:
    if name not in record or record[name] is None:
        raise CommandError(name, "missing")
    value = record[name]
    if not isinstance(value, str) or not value.strip():
        raise CommandError(name, f"must be a non-empty string, not {_show(value)}")
    if len(value) > MAX_TEXT:
        raise CommandError(name, f"longer than {MAX_TEXT} characters")
    if pattern is not None and not pattern.fullmatch(value):
        raise CommandError(name, f"{_show(value)} does not match {pattern.pattern}")
    return value


def validate_options(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise CommandError("options", f"must be an object, not {_show(value)}")
    unknown = sorted(set(value) - set(OPTIONS))
    if unknown:
        raise CommandError(f"options.{unknown[0]}", f"unknown option (known: {', '.join(OPTIONS)})")
    options: dict[str, Any] = {}
    if "classes" in value:
        classes = value["classes"]
        if not isinstance(classes, list) or not classes or any(c not in CLASSES for c in classes):
            raise CommandError("options.classes", f"must be a non-empty list of {', '.join(CLASSES)}")
        options["classes"] = sorted(set(classes), key=CLASSES.index)
    if "window" in value:
        window = value["window"]
        if (not isinstance(window, list) or len(window) != 2
                or not all(isinstance(x, int | float) and not isinstance(x, bool) and abs(x) <= _MAX_SECONDS
                           for x in window) or not 0 <= window[0] < window[1]):
            raise CommandError("options.window", "must be [from_s, to_s] with 0 <= from_s < to_s")
        options["window"] = [float(window[0]), float(window[1])]
    return options


def validate_command(record: Mapping[str, Any]) -> VideoCommand:
    """Check a decoded command; the first problem raises :class:`CommandError` (field, reason)."""
    if not isinstance(record, Mapping):
        raise CommandError("value", f"must be a JSON object, not {type(record).__name__}")
    task_id = _text(record, "task_id", TASK_ID)
    action = record.get("action", ANALYZE)
    if action not in ACTIONS:
        raise CommandError("action", f"must be one of {', '.join(ACTIONS)}, not {_show(action)}")
    requested_by = _text(record, "requested_by")
    requested_at = _text(record, "requested_at")
    try:
        parse_time(requested_at)
    except (TypeError, ValueError) as exc:
        raise CommandError("requested_at", f"not an ISO-8601 time with offset: {exc}") from None
    if action == CANCEL:
        return VideoCommand(task_id, CANCEL, "", "", requested_by, requested_at, {})
    video_url = _text(record, "video_url")
    split_s3_url(video_url)
    camera_id = _text(record, "camera_id", CAMERA_ID)
    return VideoCommand(task_id, ANALYZE, video_url, camera_id, requested_by, requested_at,
                        validate_options(record.get("options")))


def decode(raw: bytes | None) -> Any:
    """The JSON of a bus value, or a CommandError (``value``) when it is none."""
    if raw is None:
        raise CommandError("value", "null value")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # bad UTF-8 or JSON, an int over Python's digit limit, deep nesting
        raise CommandError("value", f"not JSON: {exc}") from None


def parse_command(raw: bytes | None) -> VideoCommand:
    """Decode and validate a raw ``video.commands`` value."""
    return validate_command(decode(raw))


def fallback_task_id(raw: bytes | None) -> str:
    """The id of a command's task when the command carries no usable one: stable for the same bytes."""
    return "invalid-" + hashlib.sha1(raw or b"").hexdigest()[:16]


def task_id_of(raw: bytes | None) -> str:
    """The task a raw command is about: its own ``task_id`` when usable, else :func:`fallback_task_id`."""
    try:
        value = decode(raw)
    except CommandError:
        return fallback_task_id(raw)
    task_id = value.get("task_id") if isinstance(value, dict) else None
    if isinstance(task_id, str) and TASK_ID.fullmatch(task_id):
        return task_id
    return fallback_task_id(raw)


def command_record(task_id: str, video_url: str, camera_id: str, requested_by: str,
                   options: Mapping[str, Any] | None = None, requested_at: str | None = None) -> dict[str, Any]:
    """A validated analyze command, ready to publish (the console's and the benchmark's builder)."""
    return validate_command({"task_id": task_id, "action": ANALYZE, "video_url": video_url, "camera_id": camera_id,
                             "requested_by": requested_by, "requested_at": requested_at or now_time(),
                             "options": dict(options or {})}).record()


def cancel_record(task_id: str, requested_by: str, requested_at: str | None = None) -> dict[str, Any]:
    return validate_command({"task_id": task_id, "action": CANCEL, "requested_by": requested_by,
                             "requested_at": requested_at or now_time()}).record()


def status_record(task_id: str, state: str, *, progress: float | None = None, error: str = "",
                  attempt: int = 0, stage: str = "", timings: Mapping[str, float] | None = None,
                  time: str | None = None, **extra: Any) -> dict[str, Any]:
    """One ``video.status`` value. ``progress`` defaults to 1 for ``done`` and 0 otherwise; ``extra``
    carries what a state adds (e.g. ``objects``, ``synopsis_url``, ``camera_motion`` on ``done``)."""
    if state not in STATES:
        raise ValueError(f"state must be one of {', '.join(STATES)}, not {state!r}")
    if stage and stage not in STAGES:
        raise ValueError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")
    if progress is None:
        progress = 1.0 if state == DONE else 0.0
    if not 0.0 <= progress <= 1.0:
        raise ValueError(f"progress must lie in 0..1, not {progress!r}")
    unknown = set(timings or {}) - set(STAGES)
    if unknown:
        raise ValueError(f"timings for unknown stages: {sorted(unknown)}")
    return {"task_id": task_id, "state": state, "progress": round(progress, 4), "error": error,
            "time": time or now_time(), "attempt": attempt, "stage": stage,
            "timings": {k: round(float(v), 3) for k, v in (timings or {}).items()}, **extra}


def parse_status(raw: bytes | None) -> dict[str, Any]:
    """Decode a ``video.status`` value; a ValueError when it is not one (the loader skips and counts it)."""
    try:
        value = decode(raw)
    except CommandError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(value, dict) or not isinstance(value.get("task_id"), str) or value.get("state") not in STATES:
        raise ValueError(f"not a video.status record: {str(raw)[:80]}")
    return value


def encode(record: Mapping[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()
