"""Reading the cameras' segments as the monitor's own object-store identity (``monitor``: ``Read:videos`` and
``List:videos``), with short timeouts and no SDK retries, as :mod:`monitoring.image_store` reads capture images.

A store that does not answer raises :class:`monitoring.image_sampler.StoreUnavailable`: the watch skips the camera
this round (no gap found or cleared on a listing it did not get) and tries again next interval. "No such key" (a
segment deleted between listing and reading) is an answer: None. A missing ``videos`` bucket lists as empty.
"""

from __future__ import annotations

import urllib3
from minio.error import S3Error

from contracts.s3_credentials import Credentials
from ingest.images.store import STORE_ERRORS
from video import storage

from .image_sampler import StoreUnavailable
from .image_store import ABSENT

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 10.0


class S3VideoReader:
    def __init__(self, endpoint: str, credentials: Credentials, bucket: str = storage.VIDEOS_BUCKET) -> None:
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                                   retries=False, maxsize=2)
        self.client = storage.connect(endpoint, credentials.access_key, credentials.secret_key, http_client=http)
        self.bucket = bucket

    def list(self, prefix: str, recursive: bool = True) -> list[tuple[str, int]]:
        """(key, size) of the objects under ``prefix``; without ``recursive``, the next level's prefixes (ending in
        ``/``, size 0) and the objects at this level."""
        try:
            return [(obj.object_name or "", obj.size or 0)
                    for obj in self.client.list_objects(self.bucket, prefix=prefix, recursive=recursive)]
        except S3Error as exc:
            if exc.code == "NoSuchBucket":
                return []
            raise StoreUnavailable(f"{exc.code}: {exc.message}") from None
        except STORE_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from None

    def fetch(self, key: str, max_bytes: int) -> bytes | None:
        try:
            response = self.client.get_object(self.bucket, key)
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
