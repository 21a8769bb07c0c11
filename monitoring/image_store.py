"""Reading capture images as the monitor's own object-store identity (``monitor``: read-only on ``captures``).

Short timeouts and no SDK retries: the sampler skips an image the store does not answer for (counted as
``store_error``) rather than stall, and the next sampled record tries again. "No such key" is an answer, the
``missing`` judgement, and never an error; an object larger than the configured cap is not read whole and is
handed back truncated, which the judge finds undecodable.
"""

from __future__ import annotations

import urllib3
from minio.error import S3Error

from contracts.s3_credentials import Credentials
from ingest.images.keys import BUCKET
from ingest.images.store import STORE_ERRORS
from video import storage

from .image_sampler import StoreUnavailable

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 5.0
ABSENT = ("NoSuchKey", "NoSuchObject")
"""S3 error codes meaning the object is not there (SeaweedFS answers a missing key with ``NoSuchKey``)."""


class S3ImageReader:
    def __init__(self, endpoint: str, credentials: Credentials, max_bytes: int) -> None:
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                                   retries=False, maxsize=2)
        self.client = storage.connect(endpoint, credentials.access_key, credentials.secret_key, http_client=http)
        self.max_bytes = max_bytes

    def __call__(self, key: str) -> bytes | None:
        try:
            response = self.client.get_object(BUCKET, key)
        except S3Error as exc:
            if exc.code in ABSENT:
                return None
            raise StoreUnavailable(f"{exc.code}: {exc.message}") from None
        except STORE_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from None
        try:
            return response.read(self.max_bytes + 1)[: self.max_bytes]
        except STORE_ERRORS as exc:
            raise StoreUnavailable(f"{type(exc).__name__}: {exc}") from None
        finally:
            response.close()
            response.release_conn()
