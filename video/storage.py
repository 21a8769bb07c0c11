"""Videos in object storage, through the `minio` SDK only (so SeaweedFS, MinIO or any S3 store works).

Videos never travel on the bus: commands carry ``s3://bucket/key`` URLs. Keys are laid out as
``CAMERA/YYYY/MM/DD/HHMMSS_NAME`` so "this camera between t1 and t2" is one prefix listing plus a
filter on the start time encoded in the key (no database needed), and the start time also rides in
the object's metadata for tools that do not know the layout.
"""

from __future__ import annotations

import datetime as dt
import mimetypes
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from minio import Minio
from minio.error import S3Error

VIDEOS_BUCKET = "videos"
SYNOPSIS_BUCKET = "synopsis"
# Above this size fput_object switches to multipart uploads of PART_SIZE parts (S3's minimum is 5 MiB).
PART_SIZE = 5 * 1024 * 1024
_KEY_TIME = "%Y/%m/%d/%H%M%S"


@dataclass(frozen=True)
class StoredVideo:
    bucket: str
    key: str
    camera_id: str
    start_time: dt.datetime
    size: int

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


REGION = "us-east-1"
"""The region requests are signed for. Given, the SDK never asks the bucket's location first, which an identity
that may only put into a bucket (a camera) is refused."""


def connect(endpoint: str, access_key: str, secret_key: str, http_client: Any = None, region: str = REGION) -> Minio:
    """A client for ``http://host:port``, ``https://host:port`` or bare ``host:port``.

    ``http_client`` (a urllib3 PoolManager) sets timeouts and retries; the SDK's default retries a
    dead endpoint for minutes, which an interactive caller (the console) cannot wait for.
    """
    parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
    return Minio(parsed.netloc, access_key=access_key, secret_key=secret_key, secure=parsed.scheme == "https",
                 http_client=http_client, region=region)


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> (bucket, key); anything else is a ValueError with the reason."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc or not parsed.path.strip("/"):
        raise ValueError(f"not an s3://bucket/key URL: {url!r}")
    return parsed.netloc, parsed.path.lstrip("/")


def ensure_bucket(client: Minio, bucket: str) -> None:
    """Make ``bucket`` if it is missing. An identity that may not even look at the bucket (a camera may only put
    into it) takes it as there: the object store's wrapper makes the solution's buckets."""
    try:
        if not client.bucket_exists(bucket):
            client.make_bucket(bucket)
    except S3Error as exc:
        if exc.code != "AccessDenied":
            raise


def video_key(camera_id: str, start_time: dt.datetime, name: str) -> str:
    if "/" in camera_id or not camera_id:
        raise ValueError(f"camera id must be non-empty without '/': {camera_id!r}")
    start = start_time.astimezone(dt.UTC)
    return f"{camera_id}/{start.strftime(_KEY_TIME)}_{Path(name).name}"


def start_from_key(key: str) -> dt.datetime | None:
    """The recording start a key made by ``video_key`` carries; None for any other key."""
    parts = key.split("/")
    if len(parts) != 5:
        return None
    try:
        stamp = "/".join([*parts[1:4], parts[4].split("_", 1)[0]])
        return dt.datetime.strptime(stamp, _KEY_TIME).replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def upload_video(client: Minio, path: Path, camera_id: str, start_time: dt.datetime,
                 bucket: str = VIDEOS_BUCKET, part_size: int = PART_SIZE, progress: Any = None) -> StoredVideo:
    """Upload a video file; files larger than ``part_size`` go up as a multipart upload. ``progress``
    is the SDK's progress object (``set_meta(object_name, total_length)``, ``update(bytes)``)."""
    ensure_bucket(client, bucket)
    key = video_key(camera_id, start_time, path.name)
    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    client.fput_object(bucket, key, str(path), content_type=content_type, part_size=part_size, progress=progress,
                       metadata={"camera-id": camera_id, "start-time": start_time.isoformat()})
    return StoredVideo(bucket, key, camera_id, start_time.astimezone(dt.UTC), path.stat().st_size)


def list_videos(client: Minio, camera_id: str, since: dt.datetime | None = None, until: dt.datetime | None = None,
                bucket: str = VIDEOS_BUCKET) -> Iterator[StoredVideo]:
    """Videos of one camera whose start time lies in ``[since, until)``, oldest first."""
    found = []
    for obj in client.list_objects(bucket, prefix=f"{camera_id}/", recursive=True):
        start = start_from_key(obj.object_name or "")
        if start is None or (since and start < since) or (until and start >= until):
            continue
        found.append(StoredVideo(bucket, obj.object_name or "", camera_id, start, obj.size or 0))
    yield from sorted(found, key=lambda video: (video.start_time, video.key))


def presigned_url(client: Minio, url: str, expires: dt.timedelta = dt.timedelta(hours=1)) -> str:
    """An HTTP GET URL the console's browser can play without credentials, valid for ``expires``."""
    bucket, key = parse_s3_url(url)
    return client.presigned_get_object(bucket, key, expires=expires)


def download(client: Minio, url: str, dest: Path) -> Path:
    bucket, key = parse_s3_url(url)
    dest.parent.mkdir(parents=True, exist_ok=True)
    client.fget_object(bucket, key, str(dest))
    return dest


def put_bytes(client: Minio, bucket: str, key: str, data: bytes, content_type: str) -> str:
    """Store a small object (synopsis parts, thumbnails, JSON) and return its s3:// URL."""
    import io

    ensure_bucket(client, bucket)
    client.put_object(bucket, key, io.BytesIO(data), len(data), content_type=content_type)
    return f"s3://{bucket}/{key}"
