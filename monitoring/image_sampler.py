"""The capture-image sampler: a deterministic sample of capture records whose images the monitor fetches and judges.

Why a sample: judging every image means reading every JPEG the city uploads, more than the monitor should move; a
device with an image fault sends bad images all the time, so a few per window find it. Why by a hash of
``record_id``: every run and every monitor (after a restart, a standby after a takeover, a test) picks the same
records, so a judgement can be reproduced, and no device can be missed by luck of arrival order. A cap per second
bounds the load on the store whatever the traffic or the backlog; sampled records beyond it are skipped and counted
(``monitor_images_skipped_total{reason="rate_limited"}``), never waited for, so the sampler keeps up with the topics.

It runs on its own thread with its own consumer group (``<group_id>-images``, inside the monitor principal's
``monitoring`` group prefix), so a slow store never holds up heartbeats and statistics. Offsets are committed every
``commit_interval_s``, after the judged images were handed over: a crash re-reads at most that much (the device
windows persisted with the fleet then count a few images twice, which a share tolerates). A group without
committed offsets starts at the topics' end: images older than the judging window would be trimmed unjudged anyway.

Only a sampled record is checked in full: a record that is not JSON, has no ``record_id``, lacks the fields a
capture has, is dated ahead, or names an image outside the ``captures`` bucket is set aside and counted in
``monitor_records_malformed_total`` (one record never stops the sampler). A record without an image whose
``image_error`` is ``no_image`` (the device sent none) counts as ``missing`` without fetching anything; one whose
upload failed or that was made with images off says nothing about its device and is skipped.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contracts.records import IMAGE_ERROR, is_image_url
from contracts.topics import Topics
from ingest.images import keys
from ingest.images.stage import NO_IMAGE

from . import metrics
from .config import Images
from .image_judge import MISSING, judge
from .record_checks import ERROR, INVALID, MalformedRecord, decode_object, record_time

log = logging.getLogger(__name__)

RATE_LIMITED, STORE_ERROR, NO_IMAGE_URL = "rate_limited", "store_error", "no_image_url"
"""Why a sampled record's image was not judged: over the cap; the store did not answer; no image, for a reason
that is not its device's fault."""


class StoreUnavailable(Exception):
    """The object store did not answer (as opposed to: it answered that there is no such key)."""


Fetch = Callable[[str], "bytes | None"]
"""The image under a key in the captures bucket; None when there is no such key; raises StoreUnavailable."""


def selected(record_id: str, share: float) -> bool:
    """Whether ``record_id`` is in the sample: its hash, read as a fraction of 2**64, falls below ``share``."""
    digest = hashlib.blake2b(record_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") < share * 2 ** 64


class RateCap:
    """A token bucket of ``per_s`` tokens a second holding at most one second's worth."""

    def __init__(self, per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_s = per_s
        self.clock = clock
        self.tokens = per_s
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.per_s, self.tokens + (now - self.at) * self.per_s)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


@dataclass(frozen=True)
class Judged:
    """One sampled record's image as judged, with the device it came from."""

    device_ip: str
    recognizer_ip: str
    checkpoint_id: str
    topic: str
    t: float
    """The record's capture time (epoch seconds)."""
    result: str


@dataclass(frozen=True)
class Sampled:
    """A sampled record's device and image: ``key`` None when the record carries no image URL."""

    device_ip: str
    recognizer_ip: str
    checkpoint_id: str
    t: float
    key: str | None
    image_error: str


def parse_capture(raw: bytes | None, share: float, now: float) -> Sampled | None:
    """The record if it is in the sample (None: not sampled); raises :class:`MalformedRecord`."""
    record = decode_object(raw)
    record_id = record.get("record_id")
    if not isinstance(record_id, str) or not record_id:
        raise MalformedRecord(INVALID, "field 'record_id' missing or not a string")
    if not selected(record_id, share):
        return None
    for name in ("device_ip", "recognizer_ip", "checkpoint_id", "capture_time"):
        if not isinstance(record.get(name), str) or not record[name]:
            raise MalformedRecord(INVALID, f"field {name!r} missing or not a string")
    url = record.get("image_url")
    if not is_image_url(url):
        raise MalformedRecord(INVALID, f"image_url {url!r} is not an image in the {keys.BUCKET} bucket")
    error = record.get(IMAGE_ERROR)
    return Sampled(record["device_ip"], record["recognizer_ip"], record["checkpoint_id"],
                   record_time(record["capture_time"], now), keys.key_of(url) if url else None,
                   error if isinstance(error, str) else "")


class ImageSampler:
    """Sample, fetch, judge, hand over (module docstring). :meth:`take` is the whole per-record logic, without
    Kafka; :meth:`start` runs it on a consumer thread."""

    def __init__(self, cfg: Images, fetch: Fetch, deliver: Callable[[Judged], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.fetch = fetch
        self.deliver = deliver
        self.cap = RateCap(cfg.max_per_s, clock)
        self.stopping = threading.Event()
        self.thread: threading.Thread | None = None

    def take(self, topic: str, raw: bytes | None, now: float) -> Judged | None:
        """Judge one record of a capture topic if it is sampled; the judgement is also handed to ``deliver``.
        Raises :class:`MalformedRecord` for a record to set aside."""
        sampled = parse_capture(raw, self.cfg.sample_share, now)
        if sampled is None:
            return None
        if sampled.key is None and sampled.image_error != NO_IMAGE:
            metrics.IMAGES_SKIPPED.labels(NO_IMAGE_URL).inc()
            return None
        if not self.cap.take():
            metrics.IMAGES_SKIPPED.labels(RATE_LIMITED).inc()
            return None
        if sampled.key is None:
            result = MISSING
        else:
            try:
                result = judge(self.fetch(sampled.key), self.cfg.black_luminance)
            except StoreUnavailable as exc:
                metrics.IMAGES_SKIPPED.labels(STORE_ERROR).inc()
                log.debug("image %s not fetched: %s", sampled.key, exc)
                return None
        metrics.IMAGES_CHECKED.labels(result).inc()
        judged = Judged(sampled.device_ip, sampled.recognizer_ip, sampled.checkpoint_id, topic, sampled.t, result)
        self.deliver(judged)
        return judged

    # the consumer thread
    def start(self, topics: Topics, bus: dict[str, str], group_id: str, commit_interval_s: float) -> None:
        from confluent_kafka import Consumer  # here: the per-record logic and its tests need no client

        consumer = Consumer({**bus, "group.id": group_id, "enable.auto.commit": False,
                             "auto.offset.reset": "latest", "client.id": "monitor-images", "log_level": 3,
                             "topic.metadata.refresh.interval.ms": 5000})
        consumer.subscribe([topics.vehicle, topics.face])
        self.thread = threading.Thread(target=self._run, args=(consumer, commit_interval_s), name="monitor-images",
                                       daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        if self.thread is not None:
            self.thread.join(30.0)

    def _run(self, consumer: Any, commit_interval_s: float) -> None:
        next_commit = time.monotonic() + commit_interval_s
        try:
            while not self.stopping.is_set():
                for message in consumer.consume(200, 0.5):
                    if message.error() is not None:
                        log.warning("image sampler consumer: %s", message.error())
                        continue
                    self._take_one(message)
                if time.monotonic() >= next_commit:
                    _commit(consumer)
                    next_commit = time.monotonic() + commit_interval_s
            _commit(consumer)
        finally:
            consumer.close()

    def _take_one(self, message: Any) -> None:
        try:
            self.take(message.topic(), message.value(), time.time())
        except MalformedRecord as exc:
            _set_aside(message, exc.reason, exc)
        except Exception as exc:  # what no check foresaw: still one record
            _set_aside(message, ERROR, exc)


def _commit(consumer: Any) -> None:
    try:
        consumer.commit(asynchronous=False)
    except Exception as exc:  # nothing consumed yet (NO_OFFSET) or a rebalance: the next commit takes it
        log.debug("image sampler commit: %s", exc)


def _set_aside(message: Any, reason: str, exc: Exception) -> None:
    metrics.MALFORMED.labels(message.topic(), reason).inc()
    log.warning("image sampler set aside the record at %s[%d]@%d (%s): %s", message.topic(), message.partition(),
                message.offset(), reason, exc, exc_info=reason == ERROR)
