"""Evidence locks: an operator locks a capture, a hit or a video as evidence; an admin unlocks it.

Personal data expires (``[retention]``: HBase column-family TTLs, bucket lifecycle rules); a locked item must not. A
lock is one row of ``console_evidence`` (:mod:`contracts.tables.console`, no TTL) holding a JSON copy of the item as
the console shows it when it is locked, so the copy outlives the item's own table:

- ``capture``: a capture record id, read as the capture detail route reads it (the vehicle table, then the face
  table), with its kind, ingest latency and location;
- ``hit``: a surveillance hit id, found in the hit loader's by-time table (one bucket's keys, filtered by the id);
- ``video``: a footage object of the ``videos`` bucket (its key, or its ``s3://videos/...`` URL): its metadata, and a
  server-side copy of the object into the ``evidence`` bucket (no lifecycle rule) under the same key, which the
  console serves as the locked footage and removes when the lock is removed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import happybase
from minio.commonconfig import CopySource
from thriftpy2.thrift import TException

from contracts.records import CITY_TZ, Kind
from contracts.s3_credentials import EVIDENCE_BUCKET
from contracts.tables import console as layout
from contracts.tables import surveillance as hits_layout
from video import storage
from web.backends import Backends
from web.services.captures import Locate, capture_detail, is_missing_table
from web.services.errors import Conflict, Invalid, NotFound
from web.services.video_media import VideoMedia, _s3_call

KINDS = ("capture", "hit", "video")
MAX_LIMIT = 500
CAPTURE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@#-]{0,199}")
HIT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
MAX_KEY = 1024
VIDEO_URL_PREFIX = f"s3://{storage.VIDEOS_BUCKET}/"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def check_id(kind: str, ident: str) -> str:
    """The item's id as locks name it (a video's URL becomes its key), or Invalid naming ``id``."""
    if kind == "capture":
        if not CAPTURE_ID.fullmatch(ident):
            raise Invalid("id", "not a capture record id (letters, digits and ._:@#-, at most 200 characters)")
        return ident
    if kind == "hit":
        if not HIT_ID.fullmatch(ident):
            raise Invalid("id", "not a hit id (letters, digits and ._:@-, at most 128 characters)")
        return ident
    if kind == "video":
        key = ident[len(VIDEO_URL_PREFIX):] if ident.startswith(VIDEO_URL_PREFIX) else ident
        if ident.startswith("s3://") and key == ident:
            raise Invalid("id", f"a video is an object of the {storage.VIDEOS_BUCKET} bucket ({VIDEO_URL_PREFIX}...)")
        segments = key.split("/")
        if (not key or len(key) > MAX_KEY or any(s in ("", ".", "..") for s in segments)
                or any(ord(c) < 32 or c in "\\\x7f" for c in key)):
            raise Invalid("id", "not a video's object key (CAMERA/YYYY/MM/DD/HHMMSS_name) or s3://videos/ URL")
        return key
    raise Invalid("kind", f"kind must be one of {', '.join(KINDS)}")


def target(kind: str, ident: str) -> str:
    """What the audit trail names: a record id, a hit id, a video's URL."""
    return f"{VIDEO_URL_PREFIX}{ident}" if kind == "video" else ident


def encode_cursor(locked_at: str, key: bytes) -> str:
    return base64.urlsafe_b64encode(locked_at.encode() + b"\n" + key).rstrip(b"=").decode()


def decode_cursor(text: str) -> tuple[str, bytes]:
    """(locked_at, row key) of the last lock of the previous page; ValueError when it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise ValueError("not a cursor") from None
    locked_at, sep, key = raw.partition(b"\n")
    if not sep or not key:
        raise ValueError("not a cursor")
    return locked_at.decode(errors="replace"), key


class Evidence:
    """Locks in HBase, locked footage in the evidence bucket (the console's own object-store identity)."""

    def __init__(self, backends: Backends) -> None:
        self._backends = backends
        self._ready = False
        self._lock = threading.Lock()
        self.videos = VideoMedia(backends)
        self.footage = VideoMedia(backends, buckets=(EVIDENCE_BUCKET,))
        """The evidence bucket read as the video routes read theirs (``/api/v1/evidence/video/{key}/media``)."""

    @contextlib.contextmanager
    def _connection(self) -> Iterator[happybase.Connection]:
        """A pooled connection; the first one makes sure the console's tables (the evidence table too) exist."""
        with self._backends.hbase() as connection:
            if not self._ready:
                layout.ensure_console_tables(connection, self._backends.settings.retention.audit_ttl_s)
                self._ready = True
            yield connection

    # -- the items ------------------------------------------------------------------------------
    def _capture(self, conn: happybase.Connection, record_id: str, locate: Locate) -> dict[str, Any]:
        for kind in Kind:
            with contextlib.suppress(NotFound):
                return capture_detail(conn, kind, record_id, locate)
        raise NotFound("capture", record_id)

    def _hit(self, conn: happybase.Connection, hit_id: str) -> dict[str, Any]:
        """The hit from the by-time table: its bucket's keys end in ``|hit_id`` (a server-side row filter)."""
        suffix = f"|{hit_id}".encode()
        try:
            rows = conn.table(hits_layout.BY_TIME_TABLE).scan(
                row_prefix=f"{hits_layout.bucket_of(hit_id)}|".encode(),
                filter=f"RowFilter(=, 'substring:{suffix.decode()}')".encode(), batch_size=100)
            for key, cells in rows:
                if key.endswith(suffix):
                    return hits_layout.read_hit(cells)
        except TException as exc:
            if not is_missing_table(exc):
                raise
        raise NotFound("hit", hit_id)

    def _video(self, key: str) -> dict[str, Any]:
        url = f"{VIDEO_URL_PREFIX}{key}"
        info = self.videos.stat(url)  # NotFound when the object is gone (expired)
        start = storage.start_from_key(key)
        modified = info.last_modified.isoformat() if info.last_modified else None
        metadata = {k: v for k, v in (info.metadata or {}).items() if k.lower().startswith("x-amz-meta-")}
        return {"url": url, "bucket": storage.VIDEOS_BUCKET, "key": key, "camera_id": key.split("/", 1)[0],
                "name": key.rsplit("/", 1)[-1].split("_", 1)[-1],
                "start_time": start.astimezone(CITY_TZ).isoformat() if start else None,
                "size": info.size, "content_type": info.content_type, "etag": info.etag, "last_modified": modified,
                "metadata": metadata, "evidence_url": f"s3://{EVIDENCE_BUCKET}/{key}"}

    # -- locks ----------------------------------------------------------------------------------
    def lock(self, kind: str, ident: str, reason: str, username: str, locate: Locate) -> dict[str, Any]:
        """Lock the item (its copy in the lock row; a video's object copied into the evidence bucket): NotFound when
        it does not exist (or has expired), Conflict when it is locked already."""
        key = layout.evidence_row_key(kind, ident)
        with self._lock, self._connection() as conn:
            table = conn.table(layout.EVIDENCE_TABLE)
            if table.row(key, columns=[b"e:kind"]):
                raise Conflict(f"{kind} {ident} is already locked as evidence")
            if kind == "capture":
                record = self._capture(conn, ident, locate)
            elif kind == "hit":
                record = self._hit(conn, ident)
            else:
                record = self._video(ident)
                with _s3_call(record["url"]):
                    self._backends.s3().copy_object(EVIDENCE_BUCKET, ident,
                                                    CopySource(storage.VIDEOS_BUCKET, ident))
            lock = {"kind": kind, "id": ident, "reason": reason, "locked_by": username, "locked_at": now_iso()}
            table.put(key, layout.evidence_row(kind, ident, reason, username, lock["locked_at"], record))
        return lock

    def read(self, kind: str, ident: str) -> dict[str, Any]:
        """The lock with its record; NotFound when the item is not locked."""
        with self._connection() as conn:
            row = conn.table(layout.EVIDENCE_TABLE).row(layout.evidence_row_key(kind, ident))
        if not row:
            raise NotFound("evidence lock", f"{kind}/{ident}")
        return layout.read_evidence(row)

    def locks(self, limit: int, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """A page of locks, newest first (by lock time, then row key), and the next page's cursor."""
        if not 1 <= limit <= MAX_LIMIT:
            raise Invalid("limit", f"limit must be between 1 and {MAX_LIMIT}")
        after = None
        if cursor is not None:
            try:
                after = decode_cursor(cursor)
            except ValueError:
                raise Invalid("cursor", "not a cursor this API returned") from None
        with self._connection() as conn:
            rows = list(conn.table(layout.EVIDENCE_TABLE).scan(columns=layout.EVIDENCE_LIST_COLUMNS,
                                                               batch_size=1000))
        ordered = sorted(((cells.get(b"e:locked_at", b"").decode(errors="replace"), key, cells)
                          for key, cells in rows), key=lambda row: (row[0], row[1]), reverse=True)
        if after is not None:
            ordered = [row for row in ordered if (row[0], row[1]) < after]
        page = ordered[:limit]
        following = encode_cursor(page[-1][0], page[-1][1]) if len(ordered) > limit else None
        return [layout.read_evidence(cells) for _at, _key, cells in page], following

    def unlock(self, kind: str, ident: str) -> dict[str, Any]:
        """Remove the lock (and a video's evidence copy first: a copy never outlives its lock row unnoticed)."""
        key = layout.evidence_row_key(kind, ident)
        with self._lock, self._connection() as conn:
            table = conn.table(layout.EVIDENCE_TABLE)
            row = table.row(key, columns=layout.EVIDENCE_LIST_COLUMNS)
            if not row:
                raise NotFound("evidence lock", f"{kind}/{ident}")
            if kind == "video":
                with _s3_call(f"s3://{EVIDENCE_BUCKET}/{ident}"):
                    self._backends.s3().remove_object(EVIDENCE_BUCKET, ident)
            table.delete(key)
        return layout.read_evidence(row)
