"""Putting capture images into the ``captures`` bucket: retries, and a breaker for a store that is down.

A device retries a failed upload a few times (a restarting store, a dropped connection), then gives up and the
record is published marked (``image_error``). While the store is down, trying every capture would hold each one for
the whole retry schedule and stall the simulator, so after an upload fails for good the store counts as down: for
``down_s`` uploads are not tried (their records are marked at once), then one capture probes it, and the first
success closes the breaker again.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable
from typing import Protocol

import urllib3
from minio.error import MinioException

from contracts.s3_credentials import Credentials
from video import storage

from .keys import BUCKET

CONNECT_TIMEOUT_S = 2.0
READ_TIMEOUT_S = 5.0
STORE_ERRORS: tuple[type[BaseException], ...] = (MinioException, urllib3.exceptions.HTTPError, OSError)
"""What a failed put raises: refused by the store (S3Error, ServerError), or no answer at all."""


class ImageStore(Protocol):
    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` in the captures bucket; raises one of :data:`STORE_ERRORS` on failure."""


class S3Images:
    """The captures bucket through the minio SDK, with short timeouts and no retries of its own (the
    :class:`Uploader` decides), as the simulator's identity, which may only put into ``captures``."""

    def __init__(self, endpoint: str, credentials: Credentials, connections: int) -> None:
        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=READ_TIMEOUT_S),
                                   retries=False, maxsize=connections)
        self.client = storage.connect(endpoint, credentials.access_key, credentials.secret_key, http_client=http)

    def put(self, key: str, data: bytes) -> None:
        self.client.put_object(BUCKET, key, io.BytesIO(data), len(data), content_type="image/jpeg")


class SiteImages:
    """The captures bucket of the site that runs the business: each put goes to the store of the site ``site()``
    names now (the active-site record, as the devices read it), so the image is where its record is published and
    where that site's console and loaders read it (a record's ``image_url`` names no store)."""

    def __init__(self, stores: dict[str, ImageStore], site: Callable[[], str]) -> None:
        self.stores = stores
        self._site = site

    def put(self, key: str, data: bytes) -> None:
        site = self._site()
        store = self.stores.get(site)
        if store is None:
            raise OSError(f"no object store known for the {site} site")
        store.put(key, data)


class Uploader:
    """Uploads with retries behind a breaker (module docstring); thread-safe."""

    def __init__(self, store: ImageStore, attempts: int = 3, backoff_s: float = 0.2, down_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.down_s = down_s
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tripped = False
        self._until = 0.0
        self._probing = False
        self.last_error = ""

    def down(self) -> bool:
        """Whether uploads are not being tried now (the store failed for good lately, and is being probed or
        rests): the caller can mark its record without rendering its image."""
        with self._lock:
            return self._tripped and (self._probing or self._clock() < self._until)

    def upload(self, key: str, data: bytes) -> bool:
        """Put ``data`` under ``key``, retrying with growing pauses; False when it failed for good or the store
        is down."""
        if not self._admit():
            return False
        for attempt in range(self.attempts):
            try:
                self.store.put(key, data)
            except STORE_ERRORS as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"[:300]
                if attempt + 1 < self.attempts:
                    self._sleep(self.backoff_s * 2 ** attempt)
                continue
            self._settle(ok=True)
            return True
        self._settle(ok=False)
        return False

    def _admit(self) -> bool:
        with self._lock:
            if not self._tripped:
                return True
            if self._probing or self._clock() < self._until:
                return False
            self._probing = True
            return True

    def _settle(self, ok: bool) -> None:
        with self._lock:
            self._probing = False
            self._tripped = not ok
            if not ok:
                self._until = self._clock() + self.down_s
