"""The console's face search service: builds the face index from HBase at start, then follows the bus.

No extra process: a thread of the console (started and stopped with the app) does three things in order.

1. **Pin the bus positions.** For each partition of the face topic (``[topics] face``, read with the console's own
   bus identity and settings: a console configured for the DR site follows the DR bus's mirrored topic and reads
   the DR HBase), the first offset whose timestamp is at or after ``scan start - follow_margin_s``
   (``offsets_for_times``; the log end where none is). These are concrete offsets taken *before* the scan.
2. **Scan HBase's ``face`` table** (the ingest job's main table: valid records only; records with an
   ``UNRECOGNIZED`` field live in ``capture_unrecognized`` and are never searchable) into the index.
3. **Follow the topic** from the pinned offsets (partitions assigned, never a group joined or offsets committed:
   the group id is only what librdkafka requires, under the console's ``console-`` prefix), validating each record
   with ``contracts.records.parse`` exactly as the ingest job does: only VALID records are indexed; a malformed or
   foreign record is set aside, counted (``console_bus_records_skipped_total{reader="face-search"}``) and logged,
   and the follower goes on. An UNRECOGNIZED record is skipped silently, as the ingest keeps it out of ``face``.

Why there is no gap: a record on the bus either has a timestamp at or after ``scan start - margin``, so the
follower reads it (step 1 pinned an offset at or before it; the margin also absorbs device clocks a little off,
as a record's timestamp is its producer's), or it was produced more than ``margin`` before the
scan began, so the ingest job (whose lag is seconds; the margin defaults to 10 minutes) had written it to HBase
before the scan read the table. The overlap, records both scanned and followed, is removed by the index's
dedupe by record id. A record later than the margin behind (the ingest stopped longer than that) would be missed
until the next restart: the margin is ``[console] face_search_follow_margin_s`` for a site whose ingest may lag more.

The index lives in memory only: a console restart (after a crash too) rebuilds it from HBase and the bus. Until the
build has finished the search answers 503 with Retry-After and the progress; a failed build (HBase down) is
retried. Days older than ``[retention] captures_days`` are dropped from the index as HBase's TTL hides them.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition
from prometheus_client import CollectorRegistry, Gauge
from thriftpy2.thrift import TException

from contracts.records import Kind, Status, decode_feature, epoch_ms, parse
from contracts.tables import captures as layout
from web.backends import Backends, BackendUnavailable
from web.metrics import skipped
from web.services.background import BackgroundThread
from web.services.captures import is_missing_table
from web.services.face_index import DAY_MS, Face, FaceIndex, unit_vector
from web.settings import ConsoleSettings

log = logging.getLogger(__name__)

READER = "face-search"
SCAN_BATCH = 2000
"""Rows per HBase scan call (a face row is ~1 KB: 2 MB a call)."""
POLL_BATCH = 500
RETRY_S = 5.0
EXPIRE_EVERY_S = 60.0
METADATA_EVERY_S = 5.0
BUS_TIMEOUT_S = 5.0
"""A bus call's longest wait: also how long a stop may wait for a build stuck on a bus that does not answer."""


@dataclass(frozen=True)
class FollowSettings:
    """What the service takes from the console's settings (so a DR console follows its own site)."""

    bus: dict[str, str]
    topic: str
    retention_ms: int
    margin_s: float

    @classmethod
    def from_console(cls, settings: ConsoleSettings) -> FollowSettings:
        return cls(settings.bus, settings.topics.face, int(settings.retention.captures_days * DAY_MS),
                   settings.face_search_follow_margin_s)


def face_of(record: dict[str, Any]) -> Face:
    """The index entry of a valid face record; ValueError (or KeyError, TypeError) when it is not one."""
    vector = unit_vector(decode_feature(record["feature"]))
    return Face(str(record["record_id"]), epoch_ms(record["capture_time"]), str(record["checkpoint_id"]), vector)


FACE_ERRORS = (ValueError, KeyError, TypeError)
"""What :func:`face_of` raises for a record that is not a valid face (binascii.Error is a ValueError)."""


class FaceSearch:
    """The app's face index, its build and its follower (``start``/``stop`` with the app's lifespan)."""

    def __init__(self, follow: FollowSettings, backends: Backends) -> None:
        self.follow = follow
        self._backends = backends
        self.index = FaceIndex()
        self._thread = BackgroundThread("console-face-search", self._run)
        self._ready = threading.Event()
        self._scanned = 0
        self._started = time.monotonic()
        self.build_seconds: float | None = None
        self.set_aside = 0
        self.error: str | None = None
        self.faces = Gauge("console_face_index_faces", "Face captures in the face search index", registry=None)
        self.faces.set_function(lambda: len(self.index))
        self.build_gauge = Gauge("console_face_index_build_seconds",
                                 "Seconds the last face index build took (HBase scan), 0 until one finished",
                                 registry=None)

    def register_metrics(self, registry: CollectorRegistry) -> None:
        """Faces indexed and build seconds; the records set aside count in the shared skipped-records counter."""
        registry.register(self.faces)
        registry.register(self.build_gauge)

    # -- lifecycle ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop(BUS_TIMEOUT_S + 5)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def progress(self) -> dict[str, Any]:
        """The build's state for the 503 answer, the page and tests."""
        return {"ready": self.ready, "faces": len(self.index), "days": self.index.days, "scanned": self._scanned,
                "elapsed_s": round(time.monotonic() - self._started, 1), "build_seconds": self.build_seconds,
                "set_aside": self.set_aside, "error": self.error}

    def ready_index(self) -> FaceIndex | None:
        """The index once it is whole (a search answers 503 with :meth:`progress` until then), else None."""
        index = self.index
        return index if self.ready else None

    # -- the thread ---------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._thread.stopping:
            consumer = Consumer({**self.follow.bus, "group.id": f"console-face-search-{uuid.uuid4().hex}",
                                 "enable.auto.commit": False, "enable.auto.offset.store": False,
                                 "allow.auto.create.topics": False, "logger": log})
            try:
                self._build(consumer)
                self._follow(consumer)
                return
            except (BackendUnavailable, TException, KafkaException, OSError) as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                log.warning("face index build or follow failed (retrying in %.0f s): %s", RETRY_S, self.error)
            except Exception:
                log.exception("face index build or follow failed (retrying in %.0f s)", RETRY_S)
                self.error = "internal error (logged)"
            finally:
                consumer.close()
            self._ready.clear()  # a failed follower too: 503 again until the rebuilt index is whole
            self.index = FaceIndex()  # a retry starts over: the next scan fills it again
            self._thread.wait(RETRY_S)

    def _build(self, consumer: Consumer) -> None:
        self._started = time.monotonic()
        self._scanned = 0
        scan_start_ms = int(time.time() * 1000)
        positions = self._pin(consumer, scan_start_ms - int(self.follow.margin_s * 1000))
        horizon = scan_start_ms - self.follow.retention_ms
        with self._backends.hbase() as conn:
            try:
                rows = conn.table(Kind.FACE.value).scan(columns=[layout.RECORD_COLUMN], batch_size=SCAN_BATCH)
                batch: list[Face] = []
                for _key, cells in rows:
                    if self._thread.stopping:
                        return
                    self._scanned += 1
                    try:
                        face = face_of(layout.read_record(cells))
                    except FACE_ERRORS as exc:
                        log.warning("face index: an unreadable row in HBase's face table: %s", exc)
                        continue
                    if face.capture_ms >= horizon:
                        batch.append(face)
                    if len(batch) >= SCAN_BATCH:
                        self.index.add(batch)
                        batch = []
                self.index.add(batch)
            except TException as exc:
                if not is_missing_table(exc):
                    raise
                # no table yet: nothing was ingested, and the follower brings everything from the bus
        if positions:
            consumer.incremental_assign(positions)
        self.build_seconds = round(time.monotonic() - self._started, 3)
        self.build_gauge.set(self.build_seconds)
        self.error = None
        self._ready.set()
        log.info("face index built: %d faces over %d days from HBase in %.1f s", len(self.index), self.index.days,
                 self.build_seconds)

    def _pin(self, consumer: Consumer, since_ms: int) -> list[TopicPartition]:
        """Each known partition's first offset at or after ``since_ms`` (its log end when none is), as concrete
        offsets taken now: records produced during the scan come after them."""
        metadata = consumer.list_topics(self.follow.topic, timeout=BUS_TIMEOUT_S)
        topic = metadata.topics.get(self.follow.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            return []  # not made yet: the follower takes its partitions from the start once they appear
        asked = [TopicPartition(self.follow.topic, p, since_ms) for p in sorted(topic.partitions)]
        found = consumer.offsets_for_times(asked, timeout=BUS_TIMEOUT_S)
        pinned = []
        for tp in found:
            offset = tp.offset
            if offset < 0:
                end = consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=BUS_TIMEOUT_S)
                offset = end[1]
            pinned.append(TopicPartition(tp.topic, tp.partition, offset))
        return pinned

    def _follow(self, consumer: Consumer) -> None:
        assigned = {tp.partition for tp in consumer.assignment()}
        next_look = next_expiry = 0.0
        while not self._thread.stopping:
            now = time.monotonic()
            if now >= next_look:
                next_look = now + METADATA_EVERY_S
                assigned |= self._assign_new(consumer, assigned)
            if now >= next_expiry:
                next_expiry = now + EXPIRE_EVERY_S
                self.index.drop_before(int(time.time() * 1000) - self.follow.retention_ms)
            if not assigned:
                self._thread.wait(0.5)
                continue
            self.index.add(self._faces(consumer.consume(POLL_BATCH, 0.5)))

    def _assign_new(self, consumer: Consumer, assigned: set[int]) -> set[int]:
        """Partitions that appeared since (a topic made after the start, or grown): read from their beginning,
        since all of them is newer than the scan."""
        try:
            metadata = consumer.list_topics(self.follow.topic, timeout=BUS_TIMEOUT_S)
        except KafkaException as exc:
            log.warning("face search: bus metadata unavailable: %s", exc)
            return set()
        topic = metadata.topics.get(self.follow.topic)
        if topic is None or topic.error is not None:
            return set()
        new = sorted(set(topic.partitions) - assigned)
        if new:
            consumer.incremental_assign([TopicPartition(self.follow.topic, p, OFFSET_BEGINNING) for p in new])
        return set(new)

    def _faces(self, messages: Iterable[Message]) -> list[Face]:
        """The VALID face records among ``messages``; every other record but an UNRECOGNIZED one is set aside."""
        faces = []
        horizon = int(time.time() * 1000) - self.follow.retention_ms
        for message in messages:
            if message.error() is not None:
                continue  # end of partition and the like: librdkafka retries what it can
            checked = parse(Kind.FACE, message.value())
            where = f"partition {message.partition()} offset {message.offset()}"
            if checked.status is Status.UNRECOGNIZED:
                continue
            if checked.status is Status.INVALID or checked.record is None:
                self._set_aside("invalid record", f"{where}: {checked.reason}")
                continue
            try:
                face = face_of(checked.record)
            except FACE_ERRORS as exc:
                self._set_aside("bad feature", f"{where}: {exc}")
                continue
            if face.capture_ms >= horizon:
                faces.append(face)
        return faces

    def _set_aside(self, reason: str, detail: str) -> None:
        self.set_aside += 1
        skipped(READER, self.follow.topic, reason, detail)
