"""The monitor's reads from the object store, as its own identity (``monitor``: read ``captures``, read and list
``videos``): capture images for the sampler, the cameras' segments for the footage watch.

Short timeouts and no SDK retries: a check skips what the store does not answer for (counted as ``store_error``)
rather than stall, and tries again later. "No such key" is an answer (None: the image is ``missing``, or a segment
was deleted between listing and reading), never an error; a missing bucket lists as empty. A read stops one byte
past the caller's cap, so an object larger than any capture image or segment is never read whole.
"""

from __future__ import annotations

import urllib3
from minio.error import S3Error

from contracts.s3_credentials import Credentials
from ingest.images.keys import BUCKET as CAPTURES
from ingest.images.store import STORE_ERRORS
from video import storage

from .image_sampler import StoreUnavailable

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 10.0
ABSENT = ("NoSuchKey", "NoSuchObject")
"""S3 error codes meaning the object is not there (SeaweedFS answers a missing key with ``NoSuchKey``)."""


class StoreReads:
    def __init__(self, endpoint: str, credentials: Credentials) -> None:
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                                   retries=False, maxsize=2)
        self.client = storage.connect(endpoint, credentials.access_key, credentials.secret_key, http_client=http)

    def fetch(self, bucket: str, key: str, max_bytes: int) -> bytes | None:
        """At most ``max_bytes + 1`` bytes of the object (more than ``max_bytes``: it is too large); None when there
        is no such key; raises :class:`StoreUnavailable` when the store does not answer."""
        try:
            response = self.client.get_object(bucket, key)
        except S3Error as exc:
            if exc.code in ABSENT:
                return None
            raise StoreUnavailable(f"{exc.code}: {exc.message}") from None
        except STORE_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from None
        try:
            return response.read(max_bytes + 1)
        except STORE_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from None
        finally:
            response.close()
            response.release_conn()

    def list(self, bucket: str, prefix: str, recursive: bool = True) -> list[tuple[str, int]]:
        """(key, size) of the objects under ``prefix``; without ``recursive``, the next level's prefixes (ending in
        ``/``, size 0) and the objects at this level."""
        try:
            return [(obj.object_name or "", obj.size or 0)
                    for obj in self.client.list_objects(bucket, prefix=prefix, recursive=recursive)]
        except S3Error as exc:
            if exc.code == "NoSuchBucket":
                return []
            raise StoreUnavailable(f"{exc.code}: {exc.message}") from None
        except STORE_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from None


class S3ImageReader:
    """The sampler's fetch: a capture image by key, truncated at ``max_bytes`` (the judge finds it undecodable)."""

    def __init__(self, reads: StoreReads, max_bytes: int) -> None:
        self.reads, self.max_bytes = reads, max_bytes

    def __call__(self, key: str) -> bytes | None:
        data = self.reads.fetch(CAPTURES, key, self.max_bytes)
        return None if data is None else data[: self.max_bytes]


class S3VideoReader:
    """The footage watch's listing and reads in the ``videos`` bucket."""

    def __init__(self, reads: StoreReads, bucket: str = storage.VIDEOS_BUCKET) -> None:
        self.reads, self.bucket = reads, bucket

    def list(self, prefix: str, recursive: bool = True) -> list[tuple[str, int]]:
        return self.reads.list(self.bucket, prefix, recursive)

    def fetch(self, key: str, max_bytes: int) -> bytes | None:
        return self.reads.fetch(self.bucket, key, max_bytes)
