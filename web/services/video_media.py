"""Videos in object storage as the console's browser needs them: listed by camera and day, read by byte range,
and made playable.

The browser plays a video through the console (``/api/v1/video/media``), never from the object store
directly: the page's content-security policy allows media from the console only, the store's credentials
stay on the server, and ranges are passed through so the player can seek without downloading the file.
Chromium plays VP8/VP9 WebM and H.264; anything else (mp4v, MJPG from older uploads) is transcoded once
to VP8 WebM with OpenCV (whose wheel writes VP80) in a background thread, and the
result is kept in the synopsis bucket, so the next request plays it at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minio.error import S3Error

from contracts.records import CITY_TZ
from video import storage
from web.backends import OBJECT_STORE, Backends, BackendUnavailable
from web.services.errors import Invalid, NotFound

log = logging.getLogger(__name__)

CHUNK = 256 * 1024
BROWSER_CODECS = frozenset({"vp80", "vp90", "vp08", "vp09", "avc1", "h264", "x264"})
"""FourCCs (lower case) Chromium decodes; OpenCV reports VP8/VP9 WebM as VP80/VP90."""
TRANSCODED_PREFIX = "transcoded"
MEDIA_CSP = "sandbox; default-src 'none'; media-src 'self'; img-src 'self'"
"""Whatever an object holds, opened as a page it runs nothing and reaches nothing."""


def media_headers(content_type: str | None) -> tuple[str, dict[str, str]]:
    """The type an object is served as, and the headers that keep it from acting as a page of the console.

    Video and images keep their own type (a player and an ``<img>`` need it); anything else, HTML, SVG (an
    image that runs scripts), JavaScript or unknown, is an ``application/octet-stream`` attachment. Every answer
    says ``nosniff`` and carries a sandboxing content-security policy.
    """
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    headers = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": MEDIA_CSP}
    if kind.startswith(("video/", "image/")) and kind != "image/svg+xml" and "xml" not in kind:
        return kind, headers
    headers["Content-Disposition"] = "attachment"
    return "application/octet-stream", headers


class TranscodesBusy(Exception):
    """Too many transcodes running (HTTP 429 with ``Retry-After``)."""

    def __init__(self, reason: str, retry_after: int = 10) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


@dataclass(frozen=True)
class VideoFile:
    url: str
    camera_id: str
    start_time: dt.datetime
    size: int
    name: str


@dataclass(frozen=True)
class ByteRange:
    start: int
    end: int
    """Inclusive, as in Content-Range."""

    @property
    def length(self) -> int:
        return self.end - self.start + 1


class RangeNotSatisfiable(ValueError):
    """A Range header outside the object (HTTP 416)."""


def parse_range(header: str | None, size: int) -> ByteRange | None:
    """The single byte range of a ``Range: bytes=a-b`` header (None: the whole object); multi-range is refused."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec or "-" not in spec:
        raise RangeNotSatisfiable(f"unsupported range {header!r}")
    first, _, last = (part.strip() for part in spec.partition("-"))
    try:
        if not first:  # the last N bytes
            start, end = max(0, size - int(last)), size - 1
        else:
            start, end = int(first), min(int(last), size - 1) if last else size - 1
    except ValueError:
        raise RangeNotSatisfiable(f"malformed range {header!r}") from None
    if start > end or start >= size:
        raise RangeNotSatisfiable(f"range {header!r} outside 0..{size - 1}")
    return ByteRange(start, end)


def _s3_call(what: str) -> contextlib.AbstractContextManager[None]:
    """S3 'no such key/bucket' -> NotFound; any other failure to talk to the store -> BackendUnavailable."""

    @contextlib.contextmanager
    def guard() -> Iterator[None]:
        try:
            yield
        except S3Error as exc:
            if exc.code in ("NoSuchKey", "NoSuchBucket", "NoSuchObject"):
                raise NotFound("video", what) from None
            raise BackendUnavailable(OBJECT_STORE, f"{exc.code}: {exc.message}") from None
        except (NotFound, Invalid, RangeNotSatisfiable):
            raise
        except Exception as exc:  # urllib3 and socket errors alike
            raise BackendUnavailable(OBJECT_STORE, f"{type(exc).__name__}: {exc}") from None

    return guard()


class VideoMedia:
    """Listing, ranged reads and on-demand transcoding over the console's object-store client."""

    def __init__(self, backends: Backends, buckets: tuple[str, ...] = (storage.VIDEOS_BUCKET,
                                                                       storage.SYNOPSIS_BUCKET),
                 max_transcodes: int = 2, max_transcodes_per_user: int = 1) -> None:
        self._backends = backends
        self._buckets = buckets
        self.max_transcodes = max_transcodes
        self.max_transcodes_per_user = max_transcodes_per_user
        self._lock = threading.Lock()
        self._transcoding: dict[str, str | None] = {}
        """Original URL -> None while a transcode runs, or the reason it failed."""
        self._running: dict[str, str] = {}
        """Original URL -> who started its running transcode (the limits count these)."""
        self._codecs: dict[tuple[str, str], str] = {}
        """(URL, ETag) -> the video's FourCC, so a file is probed once."""

    # -- browsing -----------------------------------------------------------------------------------
    def _files(self, camera_id: str) -> list[VideoFile]:
        client = self._backends.s3()
        found = []
        with _s3_call(camera_id):
            for obj in client.list_objects(storage.VIDEOS_BUCKET, prefix=f"{camera_id}/", recursive=True):
                key = obj.object_name or ""
                start = storage.start_from_key(key)
                if start is not None:
                    found.append(VideoFile(f"s3://{storage.VIDEOS_BUCKET}/{key}", camera_id, start, obj.size or 0,
                                           key.rsplit("/", 1)[-1].split("_", 1)[-1]))
        return sorted(found, key=lambda f: (f.start_time, f.url))

    def cameras(self) -> list[str]:
        """Cameras that have uploaded anything: the top-level prefixes of the videos bucket."""
        client = self._backends.s3()
        with _s3_call(storage.VIDEOS_BUCKET):
            return sorted((obj.object_name or "").rstrip("/") for obj in client.list_objects(storage.VIDEOS_BUCKET)
                          if obj.is_dir)

    def days(self, camera_id: str) -> list[dict[str, Any]]:
        """The city-time days on which the camera recorded, newest first, with how many videos each."""
        counts: dict[dt.date, int] = {}
        for file in self._files(camera_id):
            day = file.start_time.astimezone(CITY_TZ).date()
            counts[day] = counts.get(day, 0) + 1
        return [{"day": day.isoformat(), "videos": n} for day, n in sorted(counts.items(), reverse=True)]

    def videos(self, camera_id: str, day: dt.date) -> list[VideoFile]:
        """The camera's videos that started on ``day`` (city time), oldest first."""
        return [f for f in self._files(camera_id) if f.start_time.astimezone(CITY_TZ).date() == day]

    def start_time(self, url: str) -> dt.datetime | None:
        """When the video's first frame was recorded: from its key, else its ``start-time`` metadata."""
        bucket, key = self.parse(url)
        start = storage.start_from_key(key)
        if start is not None:
            return start
        with _s3_call(url):
            meta = self._backends.s3().stat_object(bucket, key).metadata or {}
        value = meta.get("x-amz-meta-start-time") or meta.get("X-Amz-Meta-Start-Time")
        with contextlib.suppress(TypeError, ValueError):
            return dt.datetime.fromisoformat(value)
        return None

    # -- reading ----------------------------------------------------------------------------------
    def parse(self, url: str, field: str = "url") -> tuple[str, str]:
        """``s3://bucket/key`` of one of the console's buckets, else Invalid naming ``field``."""
        try:
            bucket, key = storage.parse_s3_url(url)
        except ValueError as exc:
            raise Invalid(field, str(exc)) from None
        if bucket not in self._buckets:
            raise Invalid(field, f"bucket {bucket!r} is not one of {', '.join(self._buckets)}")
        return bucket, key

    def stat(self, url: str) -> Any:
        bucket, key = self.parse(url)
        with _s3_call(url):
            return self._backends.s3().stat_object(bucket, key)

    def read(self, url: str, byte_range: ByteRange | None) -> Iterator[bytes]:
        """The object's bytes (or one range of them) in chunks; opened now, so a missing object fails here."""
        bucket, key = self.parse(url)
        with _s3_call(url):
            if byte_range is None:
                response = self._backends.s3().get_object(bucket, key)
            else:
                response = self._backends.s3().get_object(bucket, key, offset=byte_range.start,
                                                          length=byte_range.length)

        def chunks() -> Iterator[bytes]:
            try:
                yield from response.stream(CHUNK)
            finally:  # also when the player hangs up mid-range
                response.close()
                response.release_conn()

        return chunks()

    # -- playable copies --------------------------------------------------------------------------
    def playable(self, url: str, user: str = "") -> dict[str, Any]:
        """Where the browser can play ``url``: itself, a finished transcode, or ``transcoding`` (started now if idle).

        ``{"state": "ready", "media_url": s3://...}``, ``{"state": "transcoding"}`` or
        ``{"state": "failed", "error": reason}`` (a file no decoder reads). A new transcode starts only while
        fewer than ``max_transcodes`` run, and fewer than ``max_transcodes_per_user`` of ``user``'s: else
        :class:`TranscodesBusy` (asking about a transcode already running is always answered).
        """
        info = self.stat(url)
        if (info.content_type or "").startswith("video/webm") or url.endswith(".webm"):
            return {"state": "ready", "media_url": url}
        copy = self._copy_url(url)
        with contextlib.suppress(NotFound):
            self.stat(copy)
            return {"state": "ready", "media_url": copy}
        codec = self._codec(url, info.etag or "")
        if codec in BROWSER_CODECS:
            return {"state": "ready", "media_url": url}
        with self._lock:
            if url in self._transcoding:
                error = self._transcoding[url]
                if error is None:
                    return {"state": "transcoding"}
                del self._transcoding[url]  # report once; a later request tries again
                return {"state": "failed", "error": error}
            if len(self._running) >= self.max_transcodes:
                raise TranscodesBusy(f"{len(self._running)} transcodes are running (at most {self.max_transcodes})")
            mine = sum(1 for who in self._running.values() if who == user)
            if mine >= self.max_transcodes_per_user:
                raise TranscodesBusy(f"{user or 'this user'} already has {mine} transcode(s) running "
                                     f"(at most {self.max_transcodes_per_user} per user)")
            self._transcoding[url] = None
            self._running[url] = user
        threading.Thread(target=self._transcode, args=(url, copy), name="video-transcode", daemon=True).start()
        return {"state": "transcoding"}

    def _copy_url(self, url: str) -> str:
        bucket, key = self.parse(url)
        return f"s3://{storage.SYNOPSIS_BUCKET}/{TRANSCODED_PREFIX}/{bucket}/{Path(key).with_suffix('')}.webm"

    def _codec(self, url: str, etag: str) -> str:
        """The video's FourCC, read by OpenCV's FFmpeg backend over a presigned URL (headers only, by range)."""
        import cv2

        if (url, etag) not in self._codecs:
            with _s3_call(url):
                link = storage.presigned_url(self._backends.s3(), url)
            capture = cv2.VideoCapture(link)
            try:
                fourcc = int(capture.get(cv2.CAP_PROP_FOURCC)) if capture.isOpened() else 0
            finally:
                capture.release()
            self._codecs[(url, etag)] = fourcc.to_bytes(4, "little").decode("latin-1").strip("\0 ").lower()
        return self._codecs[(url, etag)]

    def _transcode(self, url: str, copy: str) -> None:
        """Decode every frame and write VP8 WebM at the same size and rate; store it under ``copy``."""
        import cv2

        error: str | None = None
        try:
            with tempfile.TemporaryDirectory(prefix="console-transcode-") as tmp:
                source = storage.download(self._backends.s3(), url, Path(tmp) / "original")
                capture = cv2.VideoCapture(str(source))
                if not capture.isOpened():
                    raise ValueError("no decoder reads this file (not a video, or truncated)")
                fps = capture.get(cv2.CAP_PROP_FPS) or 25.0
                size = (int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)), int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)))
                out_path = Path(tmp) / "playable.webm"
                writer = cv2.VideoWriter(str(out_path), cv2.VideoWriter_fourcc(*"VP80"), fps, size)
                frames = 0
                try:
                    while True:
                        ok, frame = capture.read()
                        if not ok:
                            break
                        writer.write(frame)
                        frames += 1
                finally:
                    writer.release()
                    capture.release()
                if frames == 0:
                    raise ValueError("the file holds no decodable frame")
                bucket, key = storage.parse_s3_url(copy)
                storage.put_bytes(self._backends.s3(), bucket, key, out_path.read_bytes(), "video/webm")
                log.info("transcoded %s (%d frames) to %s", url, frames, copy)
        except Exception as exc:  # kept for the page: the reason is what an operator needs to see
            log.warning("transcoding %s failed: %s", url, exc)
            error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
        with self._lock:
            self._running.pop(url, None)
            if error is None:
                self._transcoding.pop(url, None)
            else:
                self._transcoding[url] = error
