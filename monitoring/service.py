"""The monitor process: a consumer-group member over heartbeats, ingest statistics and dead letters.

The main thread consumes and folds records into the fleet and the series; every
``flush_interval_s`` it writes the changed series buckets, device rows and job marks to HBase and
only then commits the consumed offsets (so a kill -9 re-reads at most one flush interval, and the
replay marks make that re-read count nothing twice). apscheduler runs the evaluation on its own
thread every ``evaluation_interval_s``, one at a time (``max_instances=1``), and a run missed while
the previous one was slow is coalesced into one instead of queueing up.

Any record of any input may be malformed or foreign: it is set aside, counted in
``monitor_records_malformed_total`` by topic and reason, logged with why, and the next one is
taken. A record must never stop the monitor, since a restart would only read it again.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from apscheduler.schedulers.background import BackgroundScheduler
from confluent_kafka import Consumer, KafkaError, TopicPartition

from contracts.active_site import Gate
from contracts.ingest_stats import IngestStats, StatsError, parse_stats
from contracts.records import encode
from contracts.topics import Topics
from ingest.producer import open_producer

from . import metrics
from .alerts import Alert
from .config import MonitoringConfig
from .engine import Engine
from .health import DeviceTrack, Fleet
from .lag import GroupLag
from .leader import Leadership, LostLeadership
from .locator import Locator
from .notify import Notifier
from .record_checks import ERROR, INVALID, MalformedRecord, decode_object, record_time
from .series import Series, quality_scopes
from .store import Store

if TYPE_CHECKING:  # built by __main__ and handed over: the monitor only starts, feeds and stops them
    from .image_sampler import ImageSampler, Judged
    from .video_watch import VideoWatch

log = logging.getLogger(__name__)


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and bool(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def parse_heartbeat(raw: bytes | None, now: float) -> dict[str, Any]:
    beat = decode_object(raw)
    for name in ("device_ip", "recognizer_ip", "checkpoint_id", "topic", "time"):
        if not _is_name(beat.get(name)):
            raise MalformedRecord(INVALID, f"field {name!r} missing or not a string")
    for name in ("produced", "unrecognized"):
        if not _is_count(beat.get(name)):
            raise MalformedRecord(INVALID, f"field {name!r} missing or not a count")
    beat["t"] = record_time(beat["time"], now)
    return beat


def parse_ingest_stats(raw: bytes | None, now: float) -> tuple[IngestStats, float]:
    """The batch and its time. Beyond what :func:`parse_stats` checks, each device must be named by strings (they
    become keys and labels) and counted without negatives."""
    data = decode_object(raw)
    try:
        stats = parse_stats(data)
    except (StatsError, OverflowError) as exc:  # OverflowError: a count of 1e999 (infinity) made an int
        raise MalformedRecord(INVALID, str(exc)) from None
    for d in stats.devices:
        if not all(_is_name(v) for v in (d.device_ip, d.recognizer_ip, d.checkpoint_id, d.topic)):
            raise MalformedRecord(INVALID, f"a device not named by strings: {d}")
        if min(d.valid, d.unrecognized, d.invalid) < 0:
            raise MalformedRecord(INVALID, f"a device with negative counts: {d}")
    return stats, record_time(stats.time, now)


def check_deadletter(raw: bytes | None) -> None:
    """A dead letter as the ingest job writes them: at least the topic it came from and why it was refused."""
    letter = decode_object(raw)
    for name in ("topic", "reason"):
        if not _is_name(letter.get(name)):
            raise MalformedRecord(INVALID, f"field {name!r} missing or not a string")


class Monitor:
    def __init__(self, cfg: MonitoringConfig, topics: Topics, bus: dict[str, str], store: Store,
                 locator: Locator) -> None:
        """``bus``: the monitor's client settings (:func:`contracts.bus_client.librdkafka`), which every client
        of it starts from; they may hold its password (never logged)."""
        self.cfg = cfg
        self.topics = topics
        self.bus = bus
        self.store = store
        self.fleet = Fleet(cfg.health, locator, time.time(), cfg.images, cfg.video)
        self.fleet.live_since = None
        self._assigned: set[tuple[str, int]] = set()
        self._at_end: set[tuple[str, int]] = set()
        self.lock = threading.Lock()
        self.series = Series(store)
        self.stopping = threading.Event()
        self.producer = open_producer(bus, {"client.id": "monitor", "enable.idempotence": True, "linger.ms": 0})
        self.notifiers: dict[str, Notifier] = {}
        self.engine = Engine(cfg, self.fleet, self.lock, store, self._publish, self._submit, GroupLag(bus))
        self.consumer: Consumer | None = None
        self.scheduler = BackgroundScheduler()
        self.partitions = 1
        self.leader: Leadership | None = None
        """The single-monitor lock (None: unguarded, as in-process tests run it)."""
        self.lost_leadership = False
        self.site: Gate | None = None
        """At a site that may stand by: whether it is the active one (the monitor stops evaluating when not)."""
        self.stood_down = False
        self.sampler: ImageSampler | None = None
        """The capture-image sampler (``__main__`` builds it when images are on and the store has a key for the
        monitor); started with the monitor, so only the active one fetches images."""
        self.watch: VideoWatch | None = None
        """The cameras' footage watch (``__main__`` builds it when video is on and the store has a key for the
        monitor); started after the fleet is restored, so it resumes after the segments judged before."""

    # start-up and shutdown
    def start(self) -> None:
        self.store.ensure_tables()
        self.producer.ensure_topics({self.topics.alerts: 1, **{t: self.partitions for t in self._inputs()}})
        self.fleet.locator.refresh()
        for ip, row in self.store.states("device"):
            self.fleet.devices[ip] = DeviceTrack.from_json(row)
        for job, row in self.store.states("job"):
            self.fleet.restore_job(job, row["batch_id"], row["t"], row.get("position", row["t"]))  # older rows
        self.engine.load()
        for receiver in self.engine.dispatcher.receivers:
            self.notifiers[receiver.name] = Notifier(receiver, self.cfg.retry, self.engine.dispatcher.delivered,
                                                     self.cfg.external_url)
        self.consumer = Consumer({**self.bus, "group.id": self.cfg.group_id,
                                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                  "client.id": "monitor", "log_level": 3, "enable.partition.eof": True,
                                  # A restarted or standby monitor gets the inputs once the dead one's session
                                  # expires: no later than the lock, so lock_session_s bounds a takeover.
                                  "session.timeout.ms": int(self.cfg.lock_session_s * 1000),
                                  "topic.metadata.refresh.interval.ms": 5000})
        self.consumer.subscribe(list(self._inputs()), on_assign=self._assigned_now, on_revoke=self._revoked)
        for sender in self.engine.alertmanagers:
            sender.start()
        self.scheduler.add_job(self.evaluate, "interval", seconds=self.cfg.evaluation_interval_s, max_instances=1,
                               coalesce=True, misfire_grace_time=None, id="evaluate")
        self.scheduler.start()
        if self.sampler is not None:
            self.sampler.start(self.topics, self.bus, self.images_group, self.cfg.flush_interval_s)
        if self.watch is not None:
            self.watch.start()

    @property
    def images_group(self) -> str:
        """The sampler's consumer group: inside the monitor principal's ``monitoring`` group prefix (its ACL)."""
        return f"{self.cfg.group_id}-images"

    def take_image(self, judged: Judged) -> None:
        """The sampler's judgements into the fleet (called on the sampler's thread)."""
        with self.lock:
            self.fleet.image(judged.device_ip, judged.recognizer_ip, judged.checkpoint_id, judged.topic, judged.t,
                             judged.result)

    def video_cameras(self) -> dict[str, float | None]:
        """The cameras the watch lists, with their newest segment known (called on the watch's thread)."""
        with self.lock:
            return self.fleet.cameras()

    def take_video_listing(self, camera_id: str, newest: float | None, t: float) -> None:
        with self.lock:
            self.fleet.video_listed(camera_id, newest, t)

    def take_video_segment(self, camera_id: str, start: float, result: str, t: float) -> None:
        with self.lock:
            self.fleet.video_segment(camera_id, start, result, t)

    def evaluate(self) -> None:
        if self.leader is not None and not self.leader.vouch():
            log.warning("evaluation skipped: the lock is not vouched for (lost, or the consume loop stalled)")
            return
        try:
            self.engine.evaluate(time.time())
        except Exception:  # one bad evaluation (HBase or bus hiccup) must not stop the schedule
            metrics.EVALUATION_ERRORS.inc()
            log.exception("evaluation failed; next tick retries")

    def run(self) -> None:
        """Consume until :attr:`stopping` is set; flushes and commits on the way out."""
        assert self.consumer is not None
        next_flush = time.monotonic() + self.cfg.flush_interval_s
        try:
            while not self.stopping.is_set():
                if self.leader is not None:
                    self.leader.check()
                if self.site is not None and not self.site.active():
                    log.warning("the site stands by (%s): this monitor stops evaluating and waits", self.site.record)
                    self.stood_down = True
                    break
                messages = self.consumer.consume(500, 0.2)
                if messages:
                    with self.lock:
                        for message in messages:
                            self._take(message)
                if time.monotonic() >= next_flush:
                    self.flush()
                    next_flush = time.monotonic() + self.cfg.flush_interval_s
        except LostLeadership:
            self.lost_leadership = True
        finally:
            self.close()

    def close(self) -> None:
        """Stops evaluating, flushes and commits, unless the lock was lost: then another monitor owns the
        state and this one writes nothing more (fencing)."""
        self.scheduler.shutdown(wait=True)
        if self.sampler is not None:
            self.sampler.stop()
        if self.watch is not None:
            self.watch.stop()
        try:
            if not self.lost_leadership:
                self.flush()
        finally:
            for notifier in self.notifiers.values():
                notifier.close()
            for sender in self.engine.alertmanagers:
                sender.close()
            if self.consumer is not None:
                self.consumer.close()
            self.producer.flush(10.0)
            self.store.close()

    # consuming
    def _assigned_now(self, _consumer: Any, partitions: list[TopicPartition]) -> None:
        with self.lock:
            self._assigned = {(p.topic, p.partition) for p in partitions}
            self._at_end = set()
            self.fleet.live_since = None

    def _revoked(self, _consumer: Any, _partitions: list[TopicPartition]) -> None:
        with self.lock:
            self._assigned = set()
            self.fleet.live_since = None

    def _take(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                self._at_end.add((message.topic(), message.partition()))
                if self._assigned and self._at_end >= self._assigned and self.fleet.live_since is None:
                    self.fleet.live_since = time.time()
                    log.info("caught up with %d partitions: judging silence from now", len(self._assigned))
            else:
                log.warning("consumer: %s", error)
            return
        topic = message.topic()
        metrics.RECORDS.labels(topic).inc()
        try:
            if topic == self.topics.heartbeat:
                self._heartbeat(message.value())
            elif topic == self.topics.ingest_stats:
                self._stats(message.value())
            else:
                check_deadletter(message.value())
                self.series.add_counts(("city",), (message.timestamp()[1] or time.time() * 1000) / 1000,
                                       {"deadletter": 1})
        except MalformedRecord as exc:
            self._set_aside(message, exc.reason, exc)
        except Exception as exc:  # what no check foresaw: still one record, and reading it again would fail again
            self._set_aside(message, ERROR, exc)

    def _set_aside(self, message: Any, reason: str, exc: Exception) -> None:
        metrics.MALFORMED.labels(message.topic(), reason).inc()
        log.warning("set aside the record at %s[%d]@%d (%s): %s", message.topic(), message.partition(),
                    message.offset(), reason, exc, exc_info=reason == ERROR)

    def _heartbeat(self, raw: bytes | None) -> None:
        beat = parse_heartbeat(raw, time.time())
        delta = self.fleet.heartbeat(beat["device_ip"], beat["recognizer_ip"], beat["checkpoint_id"], beat["topic"],
                                     beat["t"], beat["produced"], beat["unrecognized"])
        if delta is None:
            metrics.DUPLICATES.labels(self.topics.heartbeat).inc()
            return
        where = self.fleet.locator.locate(beat["device_ip"], beat["recognizer_ip"], beat["checkpoint_id"])
        self.series.add_counts(quality_scopes(where.district, where.recognizer_ip, beat["device_ip"]), beat["t"],
                               {"produced": delta.produced, "reported_unrecognized": delta.unrecognized})

    def _stats(self, raw: bytes | None) -> None:
        stats, t = parse_ingest_stats(raw, time.time())
        if self.fleet.is_replay(stats, t):
            metrics.DUPLICATES.labels(self.topics.ingest_stats).inc()
            return
        self.fleet.ingest_stats(stats, t)
        for stage, histogram in stats.latency.items():
            self.series.add_latency(stage, t, histogram)
        for d in stats.devices:
            where = self.fleet.locator.locate(d.device_ip, d.recognizer_ip, d.checkpoint_id)
            self.series.add_counts(quality_scopes(where.district, where.recognizer_ip, d.device_ip), t,
                                   {"read": d.read, "valid": d.valid, "unrecognized": d.unrecognized,
                                    "invalid": d.invalid})

    def flush(self) -> None:
        """Series, device rows and job marks to HBase, then the offsets (never the other way round)."""
        with self.lock:
            self.series.flush()
            devices = [(ip, self.fleet.devices[ip].to_json()) for ip in self.fleet.dirty if ip in self.fleet.devices]
            self.fleet.dirty.clear()
            jobs = [(job, {"batch_id": b, "t": t, "position": p}) for job, (b, t, p) in self.fleet.jobs.items()]
            self.store.put_states("device", devices)
            self.store.put_states("job", jobs)
        metrics.FLUSHES.inc()
        if self.consumer is not None:
            try:
                self.consumer.commit(asynchronous=False)
            except Exception as exc:  # nothing consumed yet (NO_OFFSET) or a rebalance: next flush commits
                log.debug("commit: %s", exc)

    # outputs
    def _publish(self, alerts: list[Alert]) -> set[str]:
        acked: set[str] = set()

        def done(fp: str) -> Any:
            def report(error: str | None) -> None:
                if error is None:
                    acked.add(fp)
                else:
                    log.warning("alerts topic: %s", error)
            return report

        for alert in alerts:
            self.producer.produce(self.topics.alerts, alert.fp.encode(), encode(alert.event()), done(alert.fp))
        self.producer.flush(10.0)
        return acked

    def _submit(self, notification: Any) -> None:
        self.notifiers[notification.receiver.name].submit(notification)

    def _inputs(self) -> tuple[str, ...]:
        """The topics the monitor reads."""
        return (self.topics.heartbeat, self.topics.ingest_stats, self.topics.deadletter)
