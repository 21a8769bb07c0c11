"""The cameras' footage watch: every ``interval_s`` it lists the ``videos`` bucket per camera, finds the new segments,
downloads a capped number of them and judges each (:mod:`monitoring.video_judge`).

Which cameras: the deployment map's devices of kind ``video``, every camera the fleet has watched before (persisted),
and every top-level prefix of the bucket that holds scheduled segments (a camera the map does not know is still
watched, located as unknown). A camera's segments are listed by day prefix, ``CAMERA/YYYY/MM/DD/`` (UTC, as
:func:`video.storage.video_key` lays them out): today's, and yesterday's while the camera's newest segment is older
than today or midnight is recent; never the whole history.

What counts as a segment: a key ``CAMERA/YYYY/MM/DD/HHMMSS_segment.webm`` with bytes in it (what the media server,
``video.cameras``, uploads). Anything else in the bucket is set aside once, counted in
``monitor_videos_skipped_total`` by reason, and changes nothing: a key of another layout (``foreign_key``), another
upload under a camera (``not_segment``: the daily real clip, an operator's file), an empty object (``empty``: it is
no footage, so a camera that uploads only empty files shows a gap), one dated ahead (``future``). A segment whose
bytes are not a video is a camera fault, judged ``undecodable``.

Which segments are judged: those that began after the newest one seen before (on a camera's first sight, those of
the last ``gap_factor * segment_s``), the newest of each camera first, round the cameras, at most
``max_per_interval`` per interval; the rest are skipped (``rate_limited``) and never queued, so the watch never
falls behind and a camera's newest footage is what is judged. A segment the store does not hand over is skipped
(``store_error``, ``gone``, ``too_large``).

The gap itself is the fleet's judgement (:meth:`monitoring.video_health.VideoWindow.gap`), from what each listing
reports: the newest segment's start and when the listing was made. A listing the store does not answer reports
nothing, so a store outage holds every camera's state instead of making them all silent.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from video import storage

from . import metrics
from .config import Video
from .image_sampler import StoreUnavailable
from .record_checks import MAX_AHEAD_S
from .video_judge import Thresholds, judge

log = logging.getLogger(__name__)

SEGMENT_NAME = "segment.webm"
"""The name part of a scheduled segment's key (``HHMMSS_segment.webm``)."""
RATE_LIMITED, STORE_ERROR, GONE, TOO_LARGE = "rate_limited", "store_error", "gone", "too_large"
EMPTY, FOREIGN_KEY, NOT_SEGMENT, FUTURE = "empty", "foreign_key", "not_segment", "future"
ASIDE_KEPT = 100_000
"""Keys remembered as set aside (each counted once); beyond, the memory starts over."""


class VideoStore(Protocol):
    def list(self, prefix: str, recursive: bool = True) -> list[tuple[str, int]]: ...

    def fetch(self, key: str, max_bytes: int) -> bytes | None: ...


@dataclass(frozen=True)
class Segment:
    camera_id: str
    key: str
    start: float
    size: int


@dataclass
class Round:
    """What one poll did (for tests and the log)."""

    listed: dict[str, float | None] = field(default_factory=dict)
    judged: list[tuple[Segment, str]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    unreachable: list[str] = field(default_factory=list)

    def skip(self, reason: str, n: int = 1) -> None:
        if n:
            metrics.VIDEOS_SKIPPED.labels(reason).inc(n)
            self.skipped[reason] = self.skipped.get(reason, 0) + n


def thresholds(cfg: Video) -> Thresholds:
    return Thresholds(cfg.frames_sampled, cfg.black_luminance, cfg.blur_laplacian, cfg.frozen_diff,
                      cfg.min_decoded_share)


class VideoWatch:
    """List, pick, fetch, judge, report (module docstring). :meth:`poll` is one round, with an injectable clock;
    :meth:`start` runs it every ``interval_s`` on its own thread."""

    def __init__(self, cfg: Video, store: VideoStore, cameras: Callable[[], dict[str, float | None]],
                 listed: Callable[[str, float | None, float], None], judged: Callable[[str, float, str, float], None],
                 clock: Callable[[], float] = time.time, judge_bytes: Callable[[bytes], str] | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.cameras = cameras
        self.listed = listed
        self.judged = judged
        self.clock = clock
        limits = thresholds(cfg)
        self.judge_bytes = judge_bytes or (lambda data: judge(data, limits))
        self.seen: dict[str, float] = {}
        """Per camera: the start of the newest segment already taken (judged or skipped)."""
        self.aside: set[str] = set()
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    @property
    def gap_s(self) -> float:
        return self.cfg.gap_factor * self.cfg.segment_s

    def poll(self) -> Round:
        now = self.clock()
        done = Round()
        known = self.cameras()
        for camera_id, newest in known.items():
            if newest is not None and camera_id not in self.seen:
                self.seen[camera_id] = newest  # a restarted monitor resumes after what was seen before
        try:
            found = self._discover(done)
        except StoreUnavailable as exc:  # one line per round, not one per camera: every state holds
            log.warning("video watch: the videos bucket could not be listed: %s", exc)
            done.unreachable.extend(sorted(known))
            return done
        new: dict[str, list[Segment]] = {}
        for camera_id in sorted(set(known) | found):
            if not camera_id or "/" in camera_id:
                continue
            try:
                segments = self._segments(camera_id, now, done)
            except StoreUnavailable as exc:
                done.unreachable.append(camera_id)
                log.warning("video watch: camera %s not listed: %s", camera_id, exc)
                continue
            if not segments and camera_id not in known:
                continue  # a prefix without scheduled segments (the real clip, an operator's uploads): no camera
            newest = max((s.start for s in segments), default=None)
            done.listed[camera_id] = newest
            self.listed(camera_id, newest, now)
            after = self.seen.get(camera_id, now - self.gap_s - self.cfg.segment_s)
            fresh = sorted((s for s in segments if s.start > after), key=lambda s: s.start, reverse=True)
            if fresh:
                new[camera_id] = fresh
                self.seen[camera_id] = fresh[0].start
        for segment in self._pick(new, done):
            result = self._judge(segment, done)
            if result is not None:
                metrics.VIDEOS_CHECKED.labels(result).inc()
                done.judged.append((segment, result))
                self.judged(segment.camera_id, segment.start, result, now)
        return done

    def _discover(self, done: Round) -> set[str]:
        """Cameras with a prefix in the bucket; objects at its top level are set aside."""
        found = set()
        for key, _ in self.store.list("", recursive=False):
            if key.endswith("/"):
                found.add(key[:-1])
            else:
                self._aside(key, FOREIGN_KEY, done)
        return found

    def _segments(self, camera_id: str, now: float, done: Round) -> list[Segment]:
        today = dt.datetime.fromtimestamp(now, dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        days = [today]
        seen = self.seen.get(camera_id)
        if seen is None or seen < today.timestamp() or now - today.timestamp() < self.gap_s + self.cfg.interval_s:
            days.insert(0, today - dt.timedelta(days=1))
        segments = []
        for day in days:
            for key, size in self.store.list(f"{camera_id}/{day:%Y/%m/%d}/"):
                segment = self._segment(camera_id, key, size, now, done)
                if segment is not None:
                    segments.append(segment)
        return segments

    def _segment(self, camera_id: str, key: str, size: int, now: float, done: Round) -> Segment | None:
        start = storage.start_from_key(key)
        if start is None:
            reason = FOREIGN_KEY
        elif key.rsplit("/", 1)[-1].split("_", 1)[-1] != SEGMENT_NAME:
            reason = NOT_SEGMENT
        elif start.timestamp() > now + MAX_AHEAD_S:
            reason = FUTURE
        elif size <= 0:
            reason = EMPTY
        else:
            return Segment(camera_id, key, start.timestamp(), size)
        self._aside(key, reason, done)
        return None

    def _aside(self, key: str, reason: str, done: Round) -> None:
        if key not in self.aside:
            if len(self.aside) >= ASIDE_KEPT:
                self.aside.clear()
            self.aside.add(key)
            done.skip(reason)
            log.info("video watch: %s set aside (%s)", key, reason)

    def _pick(self, new: dict[str, list[Segment]], done: Round) -> list[Segment]:
        """Round the cameras, newest segment first, up to the cap; oldest first within a camera in the result."""
        picked: list[Segment] = []
        queues = [list(segments) for _, segments in sorted(new.items())]
        while queues and len(picked) < self.cfg.max_per_interval:
            for queue in queues:
                if queue and len(picked) < self.cfg.max_per_interval:
                    picked.append(queue.pop(0))
            queues = [q for q in queues if q]
        done.skip(RATE_LIMITED, sum(len(q) for q in queues))
        return sorted(picked, key=lambda s: (s.camera_id, s.start))

    def _judge(self, segment: Segment, done: Round) -> str | None:
        """The segment's result; None when it was skipped (counted in ``done``)."""
        reason = self._fetch(segment)
        if isinstance(reason, bytes):
            return self.judge_bytes(reason)
        done.skip(reason)
        return None

    def _fetch(self, segment: Segment) -> bytes | str:
        """The segment's bytes, or why they are not judged."""
        if segment.size > self.cfg.max_bytes:
            return TOO_LARGE
        try:
            data = self.store.fetch(segment.key, self.cfg.max_bytes)
        except StoreUnavailable as exc:
            log.debug("segment %s not fetched: %s", segment.key, exc)
            return STORE_ERROR
        if data is None:
            return GONE
        if len(data) > self.cfg.max_bytes:
            return TOO_LARGE
        return data if data else EMPTY

    # the thread
    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="monitor-video", daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(60.0)

    def _run(self) -> None:
        while not self.stopping.is_set():
            began = time.monotonic()
            try:
                done = self.poll()
                if done.judged or done.skipped:
                    log.info("video watch: %d cameras listed, %d segments judged, skipped %s", len(done.listed),
                             len(done.judged), done.skipped or "none")
            except Exception:  # one bad round (what no check foresaw) must not stop the watch
                log.exception("video watch round failed; the next one retries")
            self.stopping.wait(max(0.0, self.cfg.interval_s - (time.monotonic() - began)))
