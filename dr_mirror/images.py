"""The DR image copier: every mirrored capture's image, copied to the DR site's object store under the same key.

    python -m dr_mirror.images --config DATA/solution.toml --source-credentials F --target-credentials F
                               [--metrics-port 9321] [--videos-state F] [--check]

With ``--videos-state`` it copies the cameras' footage too, in a thread of its own (`dr_mirror/videos.py`).

The capture records reach the DR bus through the mirror (same topic names, same offsets); their images stay in the
primary's object store until this worker copies them. It follows the mirrored ``vehicle`` and ``face`` topics on the
DR bus as the ``dr-loaders`` principal in its own group (``dr-images``), and for each record naming an image in the
``captures`` bucket: HEAD at the DR store (there already: skipped, ``present``), else GET from the primary and PUT at
the DR store under the same key. A put of the same bytes under the same key changes nothing, so a record handled
twice is harmless: offsets are committed only once every record before them was handled (copied or set aside), and
a kill -9 re-reads at most the batch in flight (at-least-once handling, idempotent puts). One writer: the group
has one member (make up starts one copier); a second one would only share the partitions.

What a record can be (``dr_images_skipped_total{reason}``):

* ``present``: the DR store has the key already (a re-read batch, a copier restarted after its put);
* ``no_image``: ``image_url`` empty (the device sent none; its ``image_error`` says why), nothing to copy;
* ``malformed``: not a JSON object, or no ``image_url`` string: set aside, logged, counted, never retried;
* ``foreign``: an ``image_url`` outside the ``captures`` bucket (another bucket, another store, a key that climbs out
  of its folder): set aside, never fetched;
* ``missing_at_source``: the primary answers that the key does not exist (a device that announced an image it never
  uploaded, or retention expired it): asked twice, then counted and passed;
* ``error``: what no check foresaw (logged with its trace): set aside, so one record never stops the copier.

A store that does not answer (either site's, or refusing this identity) is not a record's fault: the record is
retried with a growing pause (``dr_images_retries_total{store}``), the offsets stay where they are, and the copier
goes on once the store is back; nothing is skipped. ``dr_images_lag_records`` is the records on the DR topics not yet
handled (high watermark minus the copier's position, summed); ``dr_images_lag_seconds`` is now minus the capture time
of the last record handled while records wait (0 when none wait); both are NaN until first measured (no partitions
assigned yet), not 0. The console's DR page reads both.

``--check`` reads the DR topics from their start to their end (no group, no commit) and counts the images their
records name that are missing at the DR site (and at the primary): the drill report's figure
(:func:`dr_mirror.drill.report.image_gaps`), printed as JSON.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from contracts import bus_client, s3_credentials
from contracts.config import Config, add_config_flag, preparse_config
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.metrics_http import serve_metrics
from contracts.records import is_image_url, parse_time
from contracts.topics import Topics

log = logging.getLogger("dr_mirror.images")

BUCKET = "captures"
PRINCIPAL = "dr-loaders"
GROUP = "dr-images"
IDENTITY = "dr-images"
"""The object-store identity at both sites (read-only at the primary, read and put at the DR site)."""
PRESENT, NO_IMAGE, MALFORMED, FOREIGN, MISSING_AT_SOURCE, ERROR = (
    "present", "no_image", "malformed", "foreign", "missing_at_source", "error")
SKIP_REASONS = (PRESENT, NO_IMAGE, MALFORMED, FOREIGN, MISSING_AT_SOURCE, ERROR)
COPIED = "copied"
SOURCE, TARGET = "primary", "dr"
SESSION_TIMEOUT_MS = 10_000
"""How long the group waits for a copier killed -9 before its restart gets the partitions (librdkafka's default is
45 s: the lag would grow that long after every crash)."""
ABSENT = ("NoSuchKey", "NoSuchObject", "NotFound", "ResourceNotFound")
"""S3 error codes meaning the object is not there (a HEAD's 404 has no body: minio-py calls it ``NoSuchKey``)."""


class Unavailable(Exception):
    """A store did not answer (or refused): retry later; never a record's fault."""


class Stopped(Exception):
    """The copier was asked to stop while a record waited for a store: that record is not handled."""


class SetAside(Exception):
    """A record that names no image this copier can copy (malformed or foreign)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class Store(Protocol):
    """The ``captures`` bucket of one site's store; each method raises :class:`Unavailable` when it does not answer."""

    def exists(self, key: str) -> bool: ...

    def get(self, key: str) -> bytes | None:
        """The object's bytes, None when there is no such key."""

    def put(self, key: str, data: bytes) -> None: ...


@dataclass(frozen=True)
class Image:
    key: str
    capture_time: float | None
    """The record's capture time (epoch seconds), None when it has none that parses."""


def parse(raw: bytes | None) -> Image | None:
    """The image a capture record names (None: it names none); raises :class:`SetAside`."""
    if raw is None:
        raise SetAside(MALFORMED, "null value")
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise SetAside(MALFORMED, f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise SetAside(MALFORMED, f"not a JSON object: {type(record).__name__}")
    url = record.get("image_url")
    if not isinstance(url, str):
        raise SetAside(MALFORMED, "field 'image_url' missing or not a string")
    if url == "":
        return None
    if not is_image_url(url):
        raise SetAside(FOREIGN, f"image_url {url[:120]!r} is not an image in the {BUCKET} bucket")
    try:
        when: float | None = parse_time(record.get("capture_time")).timestamp()
    except (TypeError, ValueError):
        when = None
    return Image(url[len(f"s3://{BUCKET}/"):], when)


class CopierMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.copied = Counter("dr_images_copied", "Images copied from the primary's store to the DR site's",
                              registry=r)
        self.bytes = Counter("dr_images_copied_bytes", "Bytes of the images copied", registry=r)
        self.skipped = Counter("dr_images_skipped", "Records whose image was not copied, by reason", ("reason",),
                               registry=r)
        for reason in SKIP_REASONS:
            self.skipped.labels(reason)
        self.retries = Counter("dr_images_retries", "Store calls retried because the store did not answer",
                               ("store",), registry=r)
        for store in (SOURCE, TARGET):
            self.retries.labels(store)
        self.lag_records = Gauge("dr_images_lag_records",
                                 "Records on the mirrored capture topics not yet handled by the copier", registry=r)
        self.lag_seconds = Gauge("dr_images_lag_seconds", "Now minus the capture time of the last record handled, "
                                 "while records wait (0 when none wait)", registry=r)
        for gauge in (self.lag_records, self.lag_seconds):
            gauge.set(math.nan)  # not measured yet (no partitions assigned): unknown, not "caught up"
        self.delay = Histogram("dr_images_copy_delay_seconds", "From a record's capture time to its image stored at "
                               "the DR site", buckets=(0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30, 60, 300),
                               registry=r)

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        return serve_metrics(port, host=host, registry=self.registry, name="dr_images")


class Copier:
    """One record's work (module docstring), without Kafka: :meth:`handle` returns ``copied`` or a skip reason."""

    def __init__(self, source: Store, target: Store, metrics: CopierMetrics | None = None,
                 stopping: threading.Event | None = None, backoff_s: float = 0.2, max_backoff_s: float = 5.0,
                 missing_attempts: int = 2, missing_pause_s: float = 0.2,
                 clock: Callable[[], float] = time.time) -> None:
        self.source, self.target = source, target
        self.metrics = metrics or CopierMetrics()
        self.stopping = stopping or threading.Event()
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.missing_attempts, self.missing_pause_s = max(missing_attempts, 1), missing_pause_s
        self.clock = clock
        self.last_capture_time: float | None = None

    def handle(self, raw: bytes | None) -> str:
        """Copy the image ``raw`` names, or say why not; raises :class:`Stopped` while a store is away."""
        try:
            image = parse(raw)
        except SetAside as exc:
            self.metrics.skipped.labels(exc.reason).inc()
            log.warning("set aside a record (%s): %s", exc.reason, exc)
            return exc.reason
        if image is None:
            self.metrics.skipped.labels(NO_IMAGE).inc()
            return NO_IMAGE
        outcome = self._copy(image.key)
        if image.capture_time is not None:
            self.last_capture_time = max(self.last_capture_time or 0.0, image.capture_time)
            if outcome == COPIED:
                self.metrics.delay.observe(max(self.clock() - image.capture_time, 0.0))
        return outcome

    def _copy(self, key: str) -> str:
        if self._call(TARGET, lambda: self.target.exists(key)):
            self.metrics.skipped.labels(PRESENT).inc()
            return PRESENT
        data = None
        for attempt in range(self.missing_attempts):
            data = self._call(SOURCE, lambda: self.source.get(key))
            if data is not None:
                break
            if attempt + 1 < self.missing_attempts and self.stopping.wait(self.missing_pause_s):
                raise Stopped(key)
        if data is None:
            self.metrics.skipped.labels(MISSING_AT_SOURCE).inc()
            log.warning("image %s is not in the primary's store: counted missing_at_source", key)
            return MISSING_AT_SOURCE
        self._call(TARGET, lambda: self.target.put(key, data))
        self.metrics.copied.inc()
        self.metrics.bytes.inc(len(data))
        return COPIED

    def _call(self, store: str, call: Callable[[], Any]) -> Any:
        """``call()`` until the store answers, with a growing pause; :class:`Stopped` when asked to stop."""
        pause = self.backoff_s
        while True:
            try:
                return call()
            except Unavailable as exc:
                self.metrics.retries.labels(store).inc()
                log.warning("the %s store did not answer (%s): retrying in %.1f s", store, exc, pause)
            if self.stopping.wait(pause):
                raise Stopped(store)
            pause = min(pause * 2, self.max_backoff_s)


Position = tuple[str, int]


def committable(handled: Iterable[tuple[str, int, int, bool]]) -> dict[Position, int]:
    """Per partition, the offset to commit: one past the last record that has every record before it (in this batch)
    handled. ``handled`` is (topic, partition, offset, done) in consumption order."""
    out: dict[Position, int] = {}
    blocked: set[Position] = set()
    for topic, partition, offset, done in handled:
        where = (topic, partition)
        if where in blocked:
            continue
        if done:
            out[where] = offset + 1
        else:
            blocked.add(where)
    return out


class Runner:
    """The consumer loop: a batch handled on ``workers`` threads, then its offsets committed; lag every second."""

    def __init__(self, copier: Copier, consumer: Any, workers: int = 16, batch: int = 500,
                 lag_every_s: float = 1.0, wait_s: float = 0.1) -> None:
        self.copier, self.consumer = copier, consumer
        self.metrics = copier.metrics
        self.workers, self.batch, self.lag_every_s, self.wait_s = workers, batch, lag_every_s, wait_s
        self.positions: dict[Position, int] = {}
        """Per partition, the offset committed (every record before it handled)."""
        self._next_lag = 0.0

    def _one(self, message: Any) -> bool:
        try:
            self.copier.handle(message.value())
        except Stopped:
            return False
        except Exception as exc:  # what no check foresaw: still one record, set aside (logged with its trace)
            self.copier.metrics.skipped.labels(ERROR).inc()
            log.exception("set aside the record at %s[%d]@%d: %s", message.topic(), message.partition(),
                          message.offset(), exc)
        return True

    def run(self) -> None:
        stopping = self.copier.stopping
        with ThreadPoolExecutor(self.workers, thread_name_prefix="dr-images") as pool:
            while not stopping.is_set():
                # a short wait: consume() returns when the batch is full or the wait is over, and a batch is handled
                # as a whole before the next is read, so the wait is latency added to every image
                messages = [m for m in self.consumer.consume(self.batch, self.wait_s) if self._usable(m)]
                if messages:
                    futures = [pool.submit(self._one, m) for m in messages]
                    while wait(futures, timeout=self.lag_every_s).not_done:
                        self._lag_due()  # a store away holds the batch: the lag keeps being measured meanwhile
                    done = [f.result() for f in futures]
                    self._commit(committable((m.topic(), m.partition(), m.offset(), ok)
                                             for m, ok in zip(messages, done, strict=True)))
                    if not all(done):
                        break  # stopping while a store was away: what was not handled is read again at the restart
                self._lag_due()

    def _lag_due(self) -> None:
        if time.monotonic() >= self._next_lag:
            self.update_lag()
            self._next_lag = time.monotonic() + self.lag_every_s

    @staticmethod
    def _usable(message: Any) -> bool:
        if message.error() is not None:
            log.warning("consumer: %s", message.error())
            return False
        return True

    def _commit(self, offsets: dict[Position, int]) -> None:
        if not offsets:
            return
        from confluent_kafka import TopicPartition

        self.positions.update(offsets)
        try:
            self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                 asynchronous=False)
        except Exception as exc:  # a rebalance took the partition: its new owner re-reads from the last commit
            log.warning("commit failed (the records are read again): %s", exc)

    def update_lag(self) -> int | None:
        """Records not yet handled (high watermark minus position, summed over the assignment)."""
        from confluent_kafka import OFFSET_INVALID, KafkaException

        try:
            assignment = self.consumer.assignment()
            if not assignment:
                return None
            unknown = [tp for tp in assignment if (tp.topic, tp.partition) not in self.positions]
            for tp in self.consumer.committed(unknown, timeout=2.0) if unknown else ():
                if tp.offset != OFFSET_INVALID and tp.offset >= 0:
                    self.positions[(tp.topic, tp.partition)] = tp.offset
            total = 0
            for tp in assignment:
                low, high = self.consumer.get_watermark_offsets(tp, timeout=2.0, cached=False)
                at = self.positions.get((tp.topic, tp.partition), low)  # handled up to here (committed)
                total += max(high - max(at, low), 0)
        except KafkaException as exc:
            log.debug("lag not measured: %s", exc)
            return None
        self.metrics.lag_records.set(total)
        last = self.copier.last_capture_time
        self.metrics.lag_seconds.set(0.0 if total == 0 or last is None else max(self.copier.clock() - last, 0.0))
        return total


class S3Store:
    """One site's ``captures`` bucket through the minio SDK: short timeouts, no SDK retries (the Copier retries)."""

    def __init__(self, endpoint: str, credentials: s3_credentials.Credentials, connections: int = 16) -> None:
        import urllib3

        from video import storage

        http = urllib3.PoolManager(timeout=urllib3.Timeout(connect=2.0, read=10.0), retries=False,
                                   maxsize=connections)
        self.endpoint = endpoint
        self.client = storage.connect(endpoint, credentials.access_key, credentials.secret_key, http_client=http)

    def _answer(self, call: Callable[[], Any], absent: Any = None) -> Any:
        from minio.error import S3Error

        from ingest.images.store import STORE_ERRORS

        try:
            return call()
        except S3Error as exc:
            if exc.code in ABSENT:
                return absent
            raise Unavailable(f"{self.endpoint}: {exc.code}: {exc.message}") from None
        except STORE_ERRORS as exc:
            raise Unavailable(f"{self.endpoint}: {type(exc).__name__}: {exc}") from None

    def exists(self, key: str) -> bool:
        return bool(self._answer(lambda: self.client.stat_object(BUCKET, key) is not None, absent=False))

    def get(self, key: str) -> bytes | None:
        def read() -> bytes:
            response = self.client.get_object(BUCKET, key)
            try:
                return response.read()
            finally:
                response.close()
                response.release_conn()

        return self._answer(read)

    def put(self, key: str, data: bytes) -> None:
        self._answer(lambda: self.client.put_object(BUCKET, key, io.BytesIO(data), len(data),
                                                    content_type="image/jpeg"))


def image_keys(bus: dict[str, str], topics: list[str], timeout_s: float = 60.0) -> tuple[int, list[str]]:
    """Records on ``topics`` from their start to their end now, and the image keys they name (in order, once each);
    a record that names none or is set aside names nothing."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**bus, "group.id": f"{GROUP}-check", "enable.auto.commit": False, "log_level": 0})
    records = 0
    keys: dict[str, None] = {}
    try:
        ends: dict[Position, int] = {}
        assign = []
        for topic in topics:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is None or meta.error is not None:
                continue
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    ends[(topic, p)] = high
                    assign.append(TopicPartition(topic, p, low))
        consumer.assign(assign)
        deadline = time.monotonic() + timeout_s
        while ends and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    continue
                where = (message.topic(), message.partition())
                if message.offset() + 1 >= ends.get(where, 0):
                    ends.pop(where, None)
                records += 1
                try:
                    image = parse(message.value())
                except SetAside:
                    continue
                if image is not None:
                    keys[image.key] = None
    finally:
        consumer.close()
    return records, list(keys)


def _store(endpoint: str, credentials: s3_credentials.Credentials, workers: int) -> S3Store:
    return S3Store(endpoint, credentials, connections=workers + 2)


def parser(config: Config) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dr_mirror.images", description=__doc__.splitlines()[0])
    add_config_flag(p)
    p.add_argument("--source-endpoint", default=config.get("object_storage", "endpoint", "127.0.0.1:9000"),
                   help="the primary's object store (default [object_storage] endpoint)")
    p.add_argument("--source-credentials", type=Path, default=None,
                   help=f"the {IDENTITY} key of the primary's store (make up: DATA/secrets/"
                        f"{s3_credentials.file_name(IDENTITY)}); default as every store client finds its key")
    p.add_argument("--target-endpoint", default=config.get("dr", "s3_endpoint", "127.0.0.1:19000"),
                   help="the DR site's object store (default [dr] s3_endpoint)")
    p.add_argument("--target-credentials", type=Path, required=False, default=None,
                   help=f"the {IDENTITY} key of the DR site's store (make up: DATA/secrets/dr-object-store/"
                        f"{s3_credentials.file_name(IDENTITY)})")
    p.add_argument("--bus-principal", default=PRINCIPAL, help="the DR bus identity ([dr] client_properties_dir)")
    p.add_argument("--group", default=GROUP, help="consumer group on the DR bus")
    p.add_argument("--workers", type=int, default=16, help="images copied at once")
    p.add_argument("--metrics-port", type=int, default=config.get("dr", "images_metrics_port", 9321),
                   help="Prometheus /metrics (0: a free port, logged; -1: none)")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="the address /metrics binds (this host's own, or 0.0.0.0, for a Prometheus on another host)")
    p.add_argument("--videos-state", type=Path, default=None,
                   help="also copy the cameras' footage (the videos bucket, dr_mirror/videos.py), keeping the last "
                        "key copied per camera in this file (make up: DATA/dr/videos-copied.json)")
    p.add_argument("--videos-interval", type=float, default=10.0, help="seconds between two passes over the footage")
    p.add_argument("--check", action="store_true",
                   help="count the images the DR topics' records name that are missing at the DR site, print JSON")
    add_log_flags(p)
    return p


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    args = parser(config).parse_args(argv)
    setup_logs("dr-images", args.log_format, args.log_level.upper())
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        try:
            source_key = s3_credentials.resolve(config, IDENTITY, args.source_credentials)
        except s3_credentials.MissingCredentials:
            raise s3_credentials.MissingCredentials(
                f"no key for the primary's store: give --source-credentials FILE (make up: DATA/secrets/"
                f"{s3_credentials.file_name(IDENTITY)})") from None
        if args.target_credentials is None:
            raise s3_credentials.MissingCredentials("no key for the DR site's store: give --target-credentials FILE")
        target_key = s3_credentials.read_file(args.target_credentials)
        bus = bus_client.librdkafka(config, args.bus_principal, section=bus_client.DR)
        topics = Topics.from_config(config)
    except (s3_credentials.CredentialsError, bus_client.BusCredentialsError, ValueError) as exc:
        print(f"dr_mirror.images: {exc}", file=sys.stderr)
        return 2
    workers = max(args.workers, 1)
    source, target = _store(args.source_endpoint, source_key, workers), _store(args.target_endpoint, target_key,
                                                                              workers)
    if args.check:
        from dr_mirror.drill.report import image_gaps

        records, keys = image_keys(bus, list(topics.captures))
        print(json.dumps({"records": records, **image_gaps(keys, source.exists, target.exists)}), flush=True)
        return 0
    metrics = CopierMetrics()
    if args.metrics_port >= 0:
        port = metrics.serve(args.metrics_port, args.metrics_host)
        log.info("metrics on http://127.0.0.1:%d/metrics", port)
    from confluent_kafka import Consumer

    consumer = Consumer({**bus, "group.id": args.group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "client.id": "dr-images", "log_level": 3, "topic.metadata.refresh.interval.ms": 5000,
                         "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": SESSION_TIMEOUT_MS // 5})
    consumer.subscribe(list(topics.captures))
    log.info("copying the images of %s (DR bus %s, group %s) from %s to %s", ", ".join(topics.captures),
             bus.get("bootstrap.servers"), args.group, args.source_endpoint, args.target_endpoint)
    copier = Copier(source, target, metrics, stopping)
    footage = None
    if args.videos_state is not None:
        from dr_mirror.videos import VideoCopier, VideoMetrics

        videos = VideoCopier(source.client, target.client, args.videos_state, VideoMetrics(metrics.registry))
        footage = threading.Thread(target=videos.run, args=(stopping, args.videos_interval), name="footage",
                                   daemon=True)
        footage.start()
        log.info("copying the cameras' footage too (state %s, a pass every %g s)", args.videos_state,
                 args.videos_interval)
    try:
        Runner(copier, consumer, workers=workers).run()
    finally:
        consumer.close()
        if footage is not None:
            footage.join(30)
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
