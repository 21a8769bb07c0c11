"""The DR footage copier: the cameras' segments, copied from the primary's store to the DR site's under the same key.

A thread of the image copier (``python -m dr_mirror.images``, as the ``dr-images`` identity, which may list and read
``videos`` at the primary and put there at the DR site). Footage has no record on the bus (a camera writes the store
only), so it follows the ``videos`` bucket itself. Every ``interval_s`` it lists, camera by camera (a key's first
level: ``CAMERA/YYYY/MM/DD/HHMMSS_NAME``, so one camera's keys sort by their start time), what came after the last key
it copied of that camera, and copies each in key order: HEAD at the DR store (there already: skipped), else GET at
the primary streamed into a PUT at the DR store, with the object's type and metadata (camera, start time). The last
key copied per camera is kept in a state file (written whole to a temporary file and renamed over), so a restart lists
only what is new; a segment copied twice is the same bytes under the same key.

A store that does not answer stops the pass (counted in ``dr_videos_errors_total{store}``); the next pass resumes from
the last key copied. A segment that vanished at the primary between the listing and the GET (retention) is skipped.
``dr_videos_pending`` is the segments the last listing found and the pass has not copied yet; ``dr_videos_lag_seconds``
now minus the start time of the oldest of them (0 when none wait): the footage that losing the primary now would lose.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from video import storage

log = logging.getLogger("dr_mirror.videos")

BUCKET = storage.VIDEOS_BUCKET
SOURCE, TARGET = "primary", "dr"
ABSENT = ("NoSuchKey", "NoSuchObject", "NotFound", "ResourceNotFound")


class StoreDown(Exception):
    """A store did not answer or refused: the pass stops, the next one resumes."""

    def __init__(self, store: str, detail: str) -> None:
        super().__init__(f"the {store} store: {detail}")
        self.store = store


class VideoMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.copied = Counter("dr_videos_copied", "Footage segments copied from the primary's store to the DR site's",
                              registry=registry)
        self.bytes = Counter("dr_videos_copied_bytes", "Bytes of the footage copied", registry=registry)
        self.errors = Counter("dr_videos_errors", "Passes stopped because a store did not answer", ("store",),
                              registry=registry)
        for store in (SOURCE, TARGET):
            self.errors.labels(store)
        self.pending = Gauge("dr_videos_pending", "Footage segments at the primary not yet copied to the DR site",
                             registry=registry)
        self.lag_seconds = Gauge("dr_videos_lag_seconds", "Now minus the start time of the oldest segment not yet "
                                 "copied (0 when none wait)", registry=registry)
        for gauge in (self.pending, self.lag_seconds):
            gauge.set(float("nan"))  # not measured yet: unknown, not "caught up"


class VideoCopier:
    """Passes over the ``videos`` bucket (module docstring); ``source`` and ``target``: minio clients."""

    def __init__(self, source: Any, target: Any, state: Path, metrics: VideoMetrics,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC)) -> None:
        self.source, self.target = source, target
        self.state = state
        self.metrics = metrics
        self.clock = clock
        self.last: dict[str, str] = _load(state)

    def run(self, stopping: threading.Event, interval_s: float) -> None:
        while not stopping.is_set():
            try:
                self.one_pass(stopping)
            except StoreDown as exc:
                self.metrics.errors.labels(exc.store).inc()
                log.warning("footage copy paused: %s; next pass in %g s", exc, interval_s)
            stopping.wait(interval_s)

    def one_pass(self, stopping: threading.Event | None = None) -> int:
        """List what is new at the primary and copy it; how many segments were copied."""
        waiting = [(camera, key) for camera in self._cameras() for key in self._new(camera)]
        self._measure(waiting)
        copied = 0
        for done, (camera, key) in enumerate(waiting):
            if stopping is not None and stopping.is_set():
                break
            copied += self._copy(key)
            self.last[camera] = key
            self._measure(waiting[done + 1:])
            _save(self.state, self.last)
        return copied

    def _measure(self, waiting: list[tuple[str, str]]) -> None:
        self.metrics.pending.set(len(waiting))
        starts = [start for _camera, key in waiting if (start := storage.start_from_key(key)) is not None]
        self.metrics.lag_seconds.set(max(0.0, (self.clock() - min(starts)).total_seconds()) if starts else 0.0)

    def _cameras(self) -> list[str]:
        listed = _call(SOURCE, lambda: list(self.source.list_objects(BUCKET, recursive=False)))
        return sorted((o.object_name or "").rstrip("/") for o in listed if o.is_dir)

    def _new(self, camera: str) -> list[str]:
        after = self.last.get(camera)
        listed = _call(SOURCE, lambda: list(self.source.list_objects(BUCKET, prefix=f"{camera}/", recursive=True,
                                                                     start_after=after)))
        return sorted(o.object_name for o in listed if o.object_name and not o.is_dir)

    def _copy(self, key: str) -> int:
        if _call(TARGET, lambda: _stat(self.target, key)) is not None:
            return 0
        stat = _call(SOURCE, lambda: _stat(self.source, key))
        if stat is None:  # expired at the primary since it was listed
            log.info("segment %s is gone from the primary's store: not copied", key)
            return 0
        metadata = {name: value for name, value in (stat.metadata or {}).items()
                    if name.lower().startswith("x-amz-meta-")}
        response = _call(SOURCE, lambda: self.source.get_object(BUCKET, key))
        try:  # streamed: a segment is never held in memory whole
            _call(TARGET, lambda: self.target.put_object(BUCKET, key, response, stat.size,
                                                         content_type=stat.content_type, metadata=metadata,
                                                         part_size=storage.PART_SIZE))
        finally:
            response.close()
            response.release_conn()
        self.metrics.copied.inc()
        self.metrics.bytes.inc(stat.size or 0)
        return 1


def _stat(client: Any, key: str) -> Any:
    from minio.error import S3Error

    try:
        return client.stat_object(BUCKET, key)
    except S3Error as exc:
        if exc.code in ABSENT:
            return None
        raise


def _call(store: str, call: Callable[[], Any]) -> Any:
    from minio.error import MinioException
    from urllib3.exceptions import HTTPError

    try:
        return call()
    except (MinioException, HTTPError, OSError) as exc:
        raise StoreDown(store, f"{type(exc).__name__}: {exc}") from None


def _load(state: Path) -> dict[str, str]:
    """The last key copied per camera; an unreadable state starts over (a re-copy is skipped by its HEAD)."""
    try:
        raw = json.loads(state.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("footage copy state %s unreadable (%s): listing every camera from its start", state, exc)
        return {}
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}


def _save(state: Path, last: dict[str, str]) -> None:
    state.parent.mkdir(parents=True, exist_ok=True)
    temporary = state.with_name(f".{state.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(last, sort_keys=True))
    os.replace(temporary, state)
