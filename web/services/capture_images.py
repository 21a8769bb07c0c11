"""Capture images as the console's pages show them: the JPEG a device uploaded, or a small thumbnail of it.

A record names its image (``image_url`` = ``s3://captures/<key>``, :mod:`ingest.images.keys`) or says why it has
none (``image_error``). The browser gets the bytes through the console, never from the store: the store's
credentials stay on the server and the page's content-security policy allows images from the console only.

What the store holds is untrusted input (a device's upload): an object larger than ``max_bytes`` is refused on its
size alone (its ``stat``), before a byte of it is read, so a 50 MB object never reaches a decoder; one that is not a
decodable JPEG (a truncated upload, a black frame is fine) is refused with the decoder's reason. Decoding runs in the
route's worker thread (FastAPI runs sync routes in its thread pool, never on the event loop), at most
``max_decodes`` at once, so a burst of thumbnails cannot take every core from the other pages.

A thumbnail is made once and cached in the store under ``thumbs/<original key>`` (the console's only write right in
the ``captures`` bucket, ``contracts.s3_credentials``); the bucket's retention expires it with the captures.

:class:`LiveCaptures` feeds the map's live image walls: a checkpoint's captures as they arrive on the bus.
"""

from __future__ import annotations

import asyncio
import collections
import io
import json
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition
from PIL import Image, UnidentifiedImageError
from sse_starlette import ServerSentEvent

from contracts.records import IMAGE_ERROR, IMAGES_BUCKET
from web.backends import Backends
from web.services.background import BackgroundThread
from web.services.errors import NotFound
from web.services.video_media import _s3_call

log = logging.getLogger(__name__)

THUMBS_PREFIX = "thumbs/"
"""Where cached thumbnails live in the captures bucket (the console may write under it, nowhere else there)."""
JPEG = "image/jpeg"
MAX_PIXELS = 40_000_000
"""A JPEG whose header claims more pixels than this is refused before decoding (a decompression bomb fits in a few
kilobytes; the largest capture camera, 8K, has 33 million)."""
VERIFIED_CACHE = 4096
"""How many (key, ETag) pairs already decoded once are remembered, so a page's repeated views decode nothing."""


class ImageTooLarge(Exception):
    """The object is larger than ``[console] max_image_bytes`` (HTTP 413): refused unread."""


class ImageUnreadable(Exception):
    """The object is not a decodable JPEG (HTTP 422), with the decoder's reason."""


class DecodersBusy(Exception):
    """Every decode slot stayed taken for ``wait_s`` (HTTP 429 with ``Retry-After``)."""


@dataclass(frozen=True)
class StoredImage:
    """An image as served: its bytes and an ETag a browser may revalidate with."""

    data: bytes
    etag: str


def image_key(kind: str, record: dict[str, object]) -> str:
    """The image's key in the captures bucket, from the record; NotFound carrying the record's ``image_error`` (why
    the device sent no image, or why it could not be stored) when ``image_url`` is empty or not a capture image."""
    url = str(record.get("image_url") or "")
    prefix = f"s3://{IMAGES_BUCKET}/"
    if not url.startswith(prefix) or len(url) == len(prefix):
        why = record.get(IMAGE_ERROR) or ("no image_url" if not url else f"image_url {url!r} is not a capture image")
        raise NotFound("capture image", f"{kind}/{record.get('record_id')}: {why}")
    return url[len(prefix):]


class CaptureImages:
    """Reads, checks and thumbnails capture images over the console's object-store client."""

    def __init__(self, backends: Backends, max_bytes: int = 5 * 1024 * 1024, thumb_width: int = 240,
                 max_decodes: int = 2, wait_s: float = 10.0) -> None:
        self._backends = backends
        self.max_bytes = max_bytes
        self.thumb_width = thumb_width
        self.wait_s = wait_s
        self._decodes = threading.BoundedSemaphore(max_decodes)
        self._lock = threading.Lock()
        self._verified: OrderedDict[tuple[str, str], None] = OrderedDict()

    def original(self, key: str) -> StoredImage:
        """The stored JPEG, byte for byte, once it is known to decode (checked once per ETag)."""
        image = self._read(key)
        if not self._is_verified(key, image.etag):
            self._decode(image.data, key)
            self._remember(key, image.etag)
        return image

    def thumbnail(self, key: str) -> StoredImage:
        """The cached thumbnail, else one made now from the original (which is checked as :meth:`original` does)
        and stored for the next request. A failure to store it is logged, not the user's problem: it is served."""
        thumb_key = THUMBS_PREFIX + key
        try:
            return self._read(thumb_key)
        except NotFound:
            pass
        image = self._read(key)
        picture = self._decode(image.data, key)
        self._remember(key, image.etag)
        height = max(1, round(picture.height * self.thumb_width / picture.width))
        out = io.BytesIO()
        picture.convert("RGB").resize((self.thumb_width, height), Image.Resampling.BILINEAR).save(
            out, "JPEG", quality=75, optimize=True)
        data = out.getvalue()
        try:
            with _s3_call(thumb_key):
                self._backends.s3().put_object(IMAGES_BUCKET, thumb_key, io.BytesIO(data), len(data),
                                               content_type=JPEG)
        except Exception as exc:  # a cache that cannot be written only costs the next request
            log.warning("could not cache the thumbnail %s: %s", thumb_key, exc)
        return StoredImage(data, f"{image.etag}-t{self.thumb_width}")

    # -- internals --------------------------------------------------------------------------------
    def _read(self, key: str) -> StoredImage:
        """The object's bytes, refused unread (ImageTooLarge) when its size passes ``max_bytes``; NotFound when it
        does not exist, BackendUnavailable(object_store) when the store cannot be reached."""
        client = self._backends.s3()
        try:
            with _s3_call(key):
                info = client.stat_object(IMAGES_BUCKET, key)
            size = info.size or 0
            if size > self.max_bytes:  # outside the guard, which would take any other error for the store's
                raise ImageTooLarge(f"the stored image is {size} bytes, more than the {self.max_bytes} "
                                    "([console] max_image_bytes) the console decodes; it was not read")
            with _s3_call(key):
                # at most max_bytes + 1: an object replaced by a larger one since the stat is still caught
                response = client.get_object(IMAGES_BUCKET, key, length=min(size, self.max_bytes + 1) or None)
                try:
                    data = response.read()
                finally:
                    response.close()
                    response.release_conn()
        except NotFound:
            raise NotFound("capture image", f"{IMAGES_BUCKET}/{key} (the record names it, the store has no such "
                                            "object)") from None
        if len(data) > self.max_bytes:
            raise ImageTooLarge(f"the stored image is more than {self.max_bytes} bytes ([console] max_image_bytes)")
        return StoredImage(data, (info.etag or "").strip('"'))

    def _decode(self, data: bytes, key: str) -> Image.Image:
        """The decoded picture, or ImageUnreadable saying why (not a JPEG, too many pixels, truncated, corrupt)."""
        if not self._decodes.acquire(timeout=self.wait_s):
            raise DecodersBusy(f"every image decoder stayed busy for {self.wait_s:.0f} s")
        try:
            try:
                picture = Image.open(io.BytesIO(data))
            except UnidentifiedImageError:
                raise ImageUnreadable(f"{key}: the stored object is not an image a decoder recognises") from None
            if picture.format != "JPEG":
                raise ImageUnreadable(f"{key}: the stored object is a {picture.format}, not a JPEG")
            width, height = picture.size
            if width * height > MAX_PIXELS:
                raise ImageUnreadable(f"{key}: the JPEG claims {width}x{height} pixels, more than {MAX_PIXELS}; "
                                      "not decoded")
            try:
                picture.load()  # truncated or corrupt data fails here (LOAD_TRUNCATED_IMAGES stays off)
            except (OSError, SyntaxError, ValueError) as exc:
                raise ImageUnreadable(f"{key}: the stored JPEG does not decode ({exc})") from None
            return picture
        finally:
            self._decodes.release()

    def _is_verified(self, key: str, etag: str) -> bool:
        with self._lock:
            if (key, etag) in self._verified:
                self._verified.move_to_end((key, etag))
                return True
            return False

    def _remember(self, key: str, etag: str) -> None:
        with self._lock:
            self._verified[(key, etag)] = None
            while len(self._verified) > VERIFIED_CACHE:
                self._verified.popitem(last=False)


LIVE_FIELDS = ("record_id", "checkpoint_id", "capture_time", "plate_number", "image_url", IMAGE_ERROR)
"""What a live image wall receives of a capture: enough to show and name its image, never its feature vector."""


@dataclass(eq=False)
class _Wall:
    """One page's image wall: its checkpoint, its event loop and a bounded queue (the oldest go first)."""

    checkpoint: bytes
    loop: asyncio.AbstractEventLoop
    queue: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=WALL_QUEUE))
    ready: asyncio.Event = field(default_factory=asyncio.Event)


WALL_QUEUE = 64


class LiveCaptures:
    """The captures of chosen checkpoints as they arrive, for the map's live image walls.

    The raw capture topics carry hundreds of records a second, so the event hub does not follow them; this follower
    does, only while some wall is open: one consumer (no group, from the end) for every wall, which skips a record
    by its key (the checkpoint id the devices key by) before reading its value, and hands a wall only its
    checkpoint's captures, reduced to :data:`LIVE_FIELDS`. The last wall to close stops it.
    """

    def __init__(self, bus: dict[str, str], topics: dict[str, str], poll_s: float = 0.2) -> None:
        """``bus``: the console's bus client settings; ``topics``: capture kind -> its topic."""
        self._bus = bus
        self._kinds = {topic: kind for kind, topic in topics.items()}
        self.poll_s = poll_s
        self._walls: set[_Wall] = set()
        self._lock = threading.Lock()
        self._following = False
        """Under the lock: a follower thread runs that will still see a wall opened now. It ends (and says so under
        the lock) when it finds no wall, so a wall opened while the old one is closing its consumer starts a new one."""

    @property
    def walls(self) -> int:
        return len(self._walls)

    async def stream(self, checkpoint_id: str) -> AsyncIterator[ServerSentEvent]:
        """``event: capture`` per capture at the checkpoint, until the page goes away (then the wall is closed)."""
        wall = _Wall(checkpoint_id.encode(), asyncio.get_running_loop())
        with self._lock:
            self._walls.add(wall)
            if not self._following:  # the last wall to close ended the follower
                self._following = True
                BackgroundThread("console-live-captures", self._run).start()
        try:
            while True:
                await wall.ready.wait()
                wall.ready.clear()
                while wall.queue:
                    yield ServerSentEvent(wall.queue.popleft(), event="capture")
        finally:
            with self._lock:
                self._walls.discard(wall)

    def _offer(self, key: bytes, topic: str, value: bytes) -> None:
        walls = [w for w in list(self._walls) if w.checkpoint == key]
        if not walls:
            return
        try:
            record = json.loads(value)
        except ValueError:
            return  # the ingest job dead-letters it; a wall shows only what parses
        if not isinstance(record, dict):
            return
        data = json.dumps({"kind": self._kinds[topic], **{k: record.get(k) for k in LIVE_FIELDS if k in record}},
                          ensure_ascii=False)
        for wall in walls:
            wall.loop.call_soon_threadsafe(_deliver, wall, data)

    def _run(self) -> None:
        try:
            self._follow()
        except Exception:
            log.exception("live captures stopped")
            with self._lock:
                self._following = False  # the next wall to open starts another follower

    def _follow(self) -> None:
        """Until no wall is open: read the capture topics from their ends and offer each record to the walls."""
        consumer = Consumer({**self._bus, "group.id": f"console-live-{uuid.uuid4().hex}",
                             "enable.auto.commit": False, "enable.auto.offset.store": False,
                             "allow.auto.create.topics": False, "logger": log})
        assigned: set[tuple[str, int]] = set()
        next_look = 0.0
        try:
            while True:
                with self._lock:
                    if not self._walls:
                        self._following = False
                        return
                if time.monotonic() >= next_look:  # topics made after the first wall opened, new partitions
                    next_look = time.monotonic() + 5.0
                    try:
                        metadata = consumer.list_topics(timeout=5)
                    except KafkaException as exc:
                        log.warning("live captures: bus metadata unavailable: %s", exc)
                    else:
                        new = [TopicPartition(t, p, OFFSET_END) for t in self._kinds if t in metadata.topics
                               for p in metadata.topics[t].partitions if (t, p) not in assigned]
                        if new:
                            assigned.update((tp.topic, tp.partition) for tp in new)
                            consumer.incremental_assign(new)
                message = consumer.poll(self.poll_s)
                if message is None or message.error() is not None:
                    continue
                self._offer(message.key() or b"", str(message.topic()), message.value() or b"")
        finally:
            consumer.close()


def _deliver(wall: _Wall, data: str) -> None:
    wall.queue.append(data)
    wall.ready.set()
