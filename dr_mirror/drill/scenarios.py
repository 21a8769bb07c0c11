"""Failover drills: `python -m dr_mirror.drill --scenario primary-loss|mirror-crash|failback [--report DIR]`.

Self-contained: starts two sites (`dr_mirror.drill_sites`: a `bus broker`, an HBase gateway and the real
capture ingest job each, on free ports) and the mirror primary -> dr (`python -m dr_mirror` with the
properties `make up` generates); only once both sites are ready (each ingest job has finished a first
micro-batch, the mirror answers) does it start the device fleet (the simulator's traffic generator
`ingest.traffic`: real records and ids) and a consumer group standing in for the group-based loaders, so
a slow Spark start never becomes mirror lag (`setup_s` in the report says how long getting ready took).
A supervisor (`dr_mirror.drill_supervisor`) restarts an ingest job (from its checkpoint) or a mirror (from
the target's log end) that exits while the drill needs it, at most `--max-restarts` times each, and the
report counts every restart; what a scenario kills on purpose is never restarted. Then the drill injects
the failure and measures. `--no-ingest` runs the same at the bus level (no HBase, no Spark).
- primary-loss: the primary machine room is lost (kill -9 of its broker, gateway and ingest job).
  Devices that hear no acknowledgement for `--failover-after` seconds switch to the DR bootstrap and
  re-send their replay window (the last `--replay` seconds they sent; recognition servers have disks);
  the group resumes on DR from the offsets the mirror translated and committed there. Measured: RPO
  (records the primary acknowledged that the mirror had not copied, and their time span), RTO (failure
  -> first record DR acknowledged; -> first record the group read on DR; -> first new record's row in DR
  HBase), rows in DR HBase against every record acknowledged (the end-to-end loss: zero when the replay
  window covers the mirror's lag), duplicates (replayed records in the DR topics; rows cannot duplicate:
  row keys are deterministic).
- mirror-crash: kill -9 of the mirror, restart after `--outage` seconds. Measured: the lag it built up
  (the RPO had the primary been lost then), the time to catch up, and that DR's topics and HBase hold
  exactly the primary's records afterwards.
- failback: primary-loss, then the primary room returns. Its bus log has diverged past what the mirror
  had copied (those records were re-sent to DR), so its broker starts on an empty log dir and a reverse
  mirror dr -> primary copies the topics back with their offsets (and the group's translated offsets);
  once it has caught up, devices hold their records a moment (DR drained), the reverse mirror stops,
  devices and the group switch back to the primary, its ingest job restarts from a new checkpoint (its
  HBase kept its rows; rewriting them is harmless), and the mirror primary -> dr resumes where DR's log
  ends. Measured: records written during the outage, copy-back time, how long devices held, and that
  the primary's topics and HBase hold every record acknowledged by either site.
Writes `drill.json`, `drill.md` and `drill.png` to `--report`. Exit status 0 when the drill ran,
whatever it measured.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from contracts import config as solution_config
from contracts.topics import NEW_TOPIC_ERRORS, Topics
from dr_mirror.drill_report import LagProbe, chart, markdown, mirror_lag
from dr_mirror.drill_sites import MirrorProcess, Site
from dr_mirror.drill_supervisor import Supervisor
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig

TOPICS = Topics()
CAPTURES = list(TOPICS.captures)
HOLD = "hold"  # the fleet's state while it keeps its records for a planned switch


class Fleet(threading.Thread):
    """Capture devices: produce to the active site, keep a replay window, fail over when acks stop.

    ``switch(site)`` is the planned move of failback: flush to the current site, then send to the new one;
    ``switch(HOLD)`` keeps what the devices capture meanwhile (sent on the next switch).
    """

    def __init__(self, sites: dict[str, str], rate: float, failover_after: float, replay: float) -> None:
        super().__init__(daemon=True)
        self.sites, self.rate = sites, rate
        self.failover_after, self.replay = failover_after, replay
        self.traffic = Traffic(build_city(7, 24), TrafficConfig(seed=7, curve="flat", malformed_rate=0.0))
        self.window: collections.deque[tuple[float, str, bytes, bytes, str]] = collections.deque()
        self.held: list[tuple[str, bytes, bytes, str]] = []
        self.acked: dict[str, tuple[str, float]] = {}  # record id -> (site, time) of its first acknowledgement
        self.acks: list[tuple[float, str]] = []  # every acknowledgement (replays too), for the chart
        self.kind: dict[str, str] = {}
        self.active = "primary"
        self.requested: str | None = None
        self.failed_over = False
        self.switched_at: float | None = None
        self.first_ack: dict[str, float] = {}  # site -> first acknowledgement since the fleet moved there
        self.last_ack = time.time()
        self.stopping = threading.Event()

    def _producer(self, site: str) -> Producer:
        return Producer({"bootstrap.servers": self.sites[site], "linger.ms": 5, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 600_000, "log_level": 0})

    def _send(self, producer: Producer, site: str, topic: str, key: bytes, value: bytes, record_id: str) -> None:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                now = time.time()
                self.last_ack = now
                self.acked.setdefault(record_id, (site, now))
                self.acks.append((now, site))
                self.first_ack.setdefault(site, now)

        while True:
            try:
                producer.produce(topic, value, key, on_delivery=done)
                return
            except BufferError:
                producer.poll(0.05)

    def run(self) -> None:
        producer = self._producer(self.active)
        start, sent = time.monotonic(), 0
        self.last_ack = time.time()  # the silence that triggers a failover counts from here
        while not self.stopping.is_set():
            due = max(int((time.monotonic() - start) * self.rate) - sent, 0)
            for emitted in self.traffic.records(due, time.monotonic() - start):
                record_id = json.loads(emitted.value)["record_id"]
                topic = TOPICS.of_kind(emitted.kind)
                self.kind[record_id] = emitted.kind.value
                self.window.append((time.time(), topic, emitted.key, emitted.value, record_id))
                if self.active == HOLD:
                    self.held.append((topic, emitted.key, emitted.value, record_id))
                else:
                    self._send(producer, self.active, topic, emitted.key, emitted.value, record_id)
            sent += due
            cutoff = time.time() - self.replay
            while self.window and self.window[0][0] < cutoff:
                self.window.popleft()
            producer.poll(0.02)
            if self.requested is not None:
                producer = self._switch(producer, self.requested)
            elif self._primary_silent():
                producer = self._failover()
        producer.flush(30)

    def _primary_silent(self) -> bool:
        return not self.failed_over and self.active == "primary" and time.time() - self.last_ack > self.failover_after

    def _failover(self) -> Producer:
        """No acknowledgement for `failover_after` seconds: fall back to the DR bootstrap, re-send the window."""
        self.active, self.failed_over, self.switched_at = "dr", True, time.time()
        self.first_ack.pop("dr", None)
        producer = self._producer("dr")
        for _, topic, key, value, record_id in list(self.window):
            self._send(producer, "dr", topic, key, value, record_id)
        return producer

    def _switch(self, producer: Producer, site: str) -> Producer:
        if self.active != HOLD:
            producer.flush(60)  # a planned switch: everything sent to the old site is acknowledged first
        self.active, self.requested, self.last_ack = site, None, time.time()
        if site == HOLD:
            return producer
        self.first_ack.pop(site, None)
        producer = self._producer(site)
        for topic, key, value, record_id in self.held:
            self._send(producer, site, topic, key, value, record_id)
        self.held.clear()
        return producer

    def switch(self, site: str, timeout: float = 90) -> None:
        self.requested = site
        _wait(lambda: self.active == site, timeout, f"devices switched to {site}")


class Loader(threading.Thread):
    """A consumer group standing in for the group-based loaders; it follows the devices from site to site."""

    def __init__(self, sites: dict[str, str], fleet: Fleet) -> None:
        super().__init__(daemon=True)
        self.sites, self.fleet = sites, fleet
        self.seen: collections.Counter[str] = collections.Counter()
        self.first_record: dict[str, float] = {}  # site -> first record read there after moving
        self.stopping = threading.Event()

    def _consumer(self, site: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": self.sites[site], "group.id": "drill-loader",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "auto.commit.interval.ms": 500, "log_level": 0})
        consumer.subscribe(CAPTURES)
        return consumer

    def run(self) -> None:
        site, consumer = "primary", self._consumer("primary")
        while not self.stopping.is_set():
            if self.fleet.active not in (site, HOLD):
                # The group moves where the mirror committed its translated offsets. Closing the old consumer
                # may wait for a dead site (leave group, commit), so that is left to a thread.
                threading.Thread(target=consumer.close, daemon=True).start()
                site = self.fleet.active
                self.first_record.pop(site, None)
                consumer = self._consumer(site)
            for msg in consumer.consume(500, 0.2):
                if not msg.error():
                    self.seen[json.loads(msg.value())["record_id"]] += 1
                    self.first_record.setdefault(site, time.time())
        consumer.close()


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `condition()` holds. A retriable Kafka error while asking (a partition between leaders, a broker
    restarting) is asked again, not a failed drill."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except KafkaException as exc:
            error = exc.args[0]
            # librdkafka marks a watermark query's NOT_LEADER_FOR_PARTITION (a partition the mirror just created
            # on a broker that has just started) as not retriable; it is as transient as the others.
            if not (error.retriable() or error.code() in NEW_TOPIC_ERRORS) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.2)


def record_ids(bootstrap: str) -> collections.Counter[str]:
    """Every record id in the capture topics of a cluster, with how often it occurs."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 0})
    out: collections.Counter[str] = collections.Counter()
    try:
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1]
                for tp in _partitions(consumer)}
        consumer.assign([TopicPartition(t, p, 0) for t, p in ends])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = {(tp.topic, tp.partition): tp.offset
                         for tp in consumer.position([TopicPartition(t, p) for t, p in ends])}
            if all(positions[tp] >= end or (positions[tp] < 0 and end == 0) for tp, end in ends.items()):
                break
            for msg in consumer.consume(1000, 0.5):
                if not msg.error():
                    out[json.loads(msg.value())["record_id"]] += 1
    finally:
        consumer.close()
    return out


def _partitions(consumer: Consumer) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for topic in CAPTURES
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions]


def end_total(bootstrap: str) -> int:
    """Records in the capture topics of a cluster (their high watermarks: no transactions here)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-audit", "log_level": 0})
    try:
        return sum(consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in _partitions(consumer))
    finally:
        consumer.close()


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in CAPTURES]).values():
        future.result(30)


class Drill:
    """The two sites, the mirror and the load of one drill, and the events on its clock."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.config = solution_config.load(args.config)
        self.primary = Site("primary", work, ingest=args.ingest)
        self.dr = Site("dr", work, ingest=args.ingest, dr=True)
        sites = {"primary": self.primary.bootstrap, "dr": self.dr.bootstrap}
        self.fleet = Fleet(sites, args.rate, args.failover_after, args.replay)
        self.loader = Loader(sites, self.fleet)
        self.mirror: MirrorProcess | None = None  # the one primary -> dr
        self.mirrors: list[MirrorProcess] = []  # every mirror started, for the teardown
        self.probes: list[LagProbe] = []
        self.events: dict[str, float] = {}
        self.supervisor = Supervisor(args.max_restarts,
                                     on_restart=lambda name, n: self.event(f"{name} restarted ({n})"))
        self.setup_s: float | None = None
        self.t0 = time.time()

    def event(self, name: str) -> float:
        self.events[name] = now = time.time()
        return now

    def start_mirror(self, source: Site, target: Site) -> MirrorProcess:
        name = f"{source.name}->{target.name}"
        mirror = MirrorProcess(f"mirror-{source.name}-{target.name}", self.work, source, target, self.config).start()
        self.mirrors.append(mirror)
        self.supervisor.watch(f"mirror {name}", mirror.exited, mirror.child.start)  # resumes at the target's log end
        again = " (resumed)" if any(p.name.startswith(name) for p in self.probes) else ""
        probe = LagProbe(mirror.metrics_port, f"{name}{again}")
        probe.start()
        self.probes.append(probe)
        return mirror

    def start_ingest(self, site: Site) -> None:
        """Start a site's ingest job under supervision: restarted from its checkpoint if it exits."""
        site.start_ingest(self.config)
        self.supervisor.watch(f"{site.name} ingest", site.ingest_exited, lambda: site.start_ingest(self.config))

    def setup(self) -> None:
        """Both sites and the mirror first, the load only once both are ready: devices that send while Spark
        still starts (minutes on a loaded machine) let the mirror fall behind by more than their replay window,
        and records would really be lost. Ready: each ingest job has finished a first micro-batch, the mirror
        answers on its metrics port."""
        began = time.time()
        self.supervisor.start()
        for site in (self.primary, self.dr):
            site.start_broker()
            site.start_hbase()
            create_topics(site.bootstrap)  # the DR ingest job subscribes before the mirror's first copy
        self.mirror = self.start_mirror(self.primary, self.dr)
        ingest = [site for site in (self.primary, self.dr) if self.args.ingest]
        for site in ingest:  # both at once: nothing flows yet, and a job that dies while starting is restarted
            self.start_ingest(site)
        _wait(lambda: self._sites_ready(ingest), self.args.ready_timeout, "both sites ready")
        self.t0 = self.event("sites ready")
        self.setup_s = round(self.t0 - began, 1)
        self.fleet.start()
        self.loader.start()
        _wait(lambda: bool(self.fleet.acked) and any(v for _, v in self.probes[0].samples), 120, "load mirrored")
        self.event("load steady")

    def _sites_ready(self, ingest: list[Site]) -> bool:
        """Every ingest job has run a batch and the mirror answers; RuntimeError once the supervisor gave up."""
        for site in ingest:
            if f"{site.name} ingest" in self.supervisor.summary()["gave_up_on"]:
                raise RuntimeError(f"the {site.name} ingest job exited {self.args.max_restarts + 1} times: "
                                   f"{site.ingest_errors()}; see {self.work}")
        assert self.mirror is not None
        return all(site.ingest_ready() for site in ingest) and mirror_lag(self.mirror.metrics_port) is not None

    def teardown(self) -> None:
        self.supervisor.stopping.set()  # first: what the teardown stops must stay stopped
        if self.supervisor.is_alive():
            self.supervisor.join(30)
        for thread in (self.fleet, self.loader, *self.probes):
            thread.stopping.set()
        for thread in (self.fleet, self.loader, *self.probes):
            if thread.is_alive():
                thread.join(30)
        for mirror in self.mirrors:
            mirror.child.stop()
        self.primary.stop()
        self.dr.stop()

    def stop_load(self) -> None:
        self.fleet.stopping.set()
        self.fleet.join(60)
        self.loader.stopping.set()

    def hbase_loss(self, site: Site, expected: set[str]) -> dict[str, Any]:
        """Rows in a site's HBase against the records acknowledged, once its ingest has caught up."""
        if not self.args.ingest:
            return {}
        rows: collections.Counter[str] = collections.Counter()
        deadline = time.monotonic() + self.args.settle
        while time.monotonic() < deadline:
            rows = site.hbase_ids()
            if expected <= rows.keys():
                break
            time.sleep(2)
        return {f"{site.name}_hbase_rows": sum(rows.values()),
                f"missing_in_{site.name}_hbase": len(expected - rows.keys()),
                f"duplicate_rows_in_{site.name}_hbase": sum(rows.values()) - len(rows)}

    def steady_load(self) -> None:
        """The load before the failure; with ``--crash-dr-ingest`` the DR ingest job is killed -9 halfway through,
        an accident the supervisor has to repair (from its checkpoint, nothing lost) and the report counts."""
        if not (self.args.crash_dr_ingest and self.args.ingest and self.dr.job is not None):
            time.sleep(self.args.seconds)
            return
        time.sleep(self.args.seconds / 2)
        self.event("dr ingest crashed")
        self.dr.job.kill()
        time.sleep(self.args.seconds / 2)

    # -- scenarios ------------------------------------------------------------------------------

    def primary_loss(self) -> dict[str, Any]:
        self.supervisor.unwatch("mirror primary->dr")  # its source is about to go: the drill no longer needs it
        if self.args.mirror_behind > 0:  # a mirror that is behind when the room is lost: what the replay is for
            assert self.mirror is not None and self.mirror.child.proc is not None
            self.event("mirror frozen")
            self.mirror.child.proc.send_signal(signal.SIGSTOP)
            time.sleep(self.args.mirror_behind)
        failed = self.event("primary lost")
        self.supervisor.unwatch("primary ingest")  # killed on purpose, with its room
        self.primary.lose()
        if self.args.mirror_behind > 0:
            assert self.mirror is not None and self.mirror.child.proc is not None
            self.mirror.child.proc.send_signal(signal.SIGCONT)  # nothing more can come from a dead primary
        time.sleep(1.0)  # what the mirror had copied: nothing more can arrive from a dead primary
        mirrored = record_ids(self.dr.bootstrap)
        acked_primary = {r: t for r, (site, t) in list(self.fleet.acked.items()) if site == "primary"}
        missing = sorted(acked_primary[r] for r in acked_primary if r not in mirrored)
        _wait(lambda: "dr" in self.fleet.first_ack and "dr" in self.loader.first_record,
              self.args.failover_after + 60, "devices and group on DR")
        self.event("devices on DR")
        rows_at = None
        if self.args.ingest:  # the first records sent only to DR: when does one of them have its row there?
            fresh = [(self.fleet.kind[r], r) for r, (site, _) in list(self.fleet.acked.items()) if site == "dr"
                     and r not in mirrored][:50]
            deadline = time.monotonic() + 120
            while rows_at is None and time.monotonic() < deadline:
                rows_at = time.time() if fresh and self.dr.hbase_has_any(fresh) else None
                time.sleep(0.25)
        return {
            "acknowledged_by_primary": len(acked_primary),
            "rpo_records": len(missing),
            "rpo_span_s": round(missing[-1] - missing[0], 3) if missing else 0.0,
            "rto_producers_s": round(self.fleet.first_ack["dr"] - failed, 3),
            "rto_consumers_s": round(self.loader.first_record["dr"] - failed, 3),
            "rto_rows_s": round(rows_at - failed, 3) if rows_at else None,
        }

    def after_primary_loss(self) -> dict[str, Any]:
        time.sleep(self.args.after)
        self.stop_load()
        final = record_ids(self.dr.bootstrap)
        acked = set(self.fleet.acked)
        return {"acknowledged_total": len(acked), "dr_records": sum(final.values()),
                "lost_in_dr_topics": len(acked - final.keys()),
                "duplicates_in_dr_topics": sum(n - 1 for n in final.values() if n > 1),
                "consumed_twice": sum(n - 1 for n in self.loader.seen.values() if n > 1),
                **self.hbase_loss(self.dr, acked)}

    def mirror_crash(self) -> dict[str, Any]:
        assert self.mirror is not None
        self.supervisor.unwatch("mirror primary->dr")  # the deliberate kill window
        self.event("mirror killed")
        self.mirror.child.kill()
        time.sleep(self.args.outage)
        behind = end_total(self.primary.bootstrap) - end_total(self.dr.bootstrap)  # the RPO at its worst
        self.mirror.child.start()
        self.supervisor.watch("mirror primary->dr", self.mirror.exited, self.mirror.child.start)
        restart = self.event("mirror restarted")
        caught_up = None
        deadline = time.monotonic() + 120
        while caught_up is None and time.monotonic() < deadline:
            if end_total(self.dr.bootstrap) >= end_total(self.primary.bootstrap) - self.args.rate * 0.5:
                caught_up = time.time()
            time.sleep(0.2)
        time.sleep(self.args.after)
        self.stop_load()
        _wait(lambda: end_total(self.dr.bootstrap) >= end_total(self.primary.bootstrap), 60, "mirror caught up")
        source, target = record_ids(self.primary.bootstrap), record_ids(self.dr.bootstrap)
        return {"outage_s": self.args.outage, "behind_at_restart_records": behind,
                "catch_up_s": round(caught_up - restart, 3) if caught_up else None,
                "primary_records": sum(source.values()), "dr_records": sum(target.values()),
                "missing_at_dr": sum((source - target).values()), "extra_at_dr": sum((target - source).values()),
                **self.hbase_loss(self.dr, set(source))}

    def failback(self) -> dict[str, Any]:
        report = self.primary_loss()
        time.sleep(self.args.outage)
        assert self.mirror is not None
        self.mirror.child.stop()  # the mirror's source is gone; a new one runs once the primary is back
        back = self.event("primary back (empty log)")
        self.primary.start_broker(fresh=True)
        self.primary.start_hbase()
        reverse = self.start_mirror(self.dr, self.primary)
        _wait(lambda: end_total(self.primary.bootstrap) >= end_total(self.dr.bootstrap) - self.args.rate * 0.5,
              180, "copied back to the primary")
        copied = time.time()
        hold = self.event("switch back")
        self.fleet.switch(HOLD)
        _wait(lambda: end_total(self.primary.bootstrap) >= end_total(self.dr.bootstrap), 60, "DR drained")
        self.supervisor.unwatch("mirror dr->primary")
        reverse.child.stop()  # the primary's topics are DR's, offset for offset; from here the primary writes them
        if self.args.ingest:
            self.start_ingest(self.primary)  # a new checkpoint: the old one's offsets were of the lost log
        self.fleet.switch("primary")
        self.mirror = self.start_mirror(self.primary, self.dr)
        self.event("mirror primary->dr resumed")
        _wait(lambda: "primary" in self.fleet.first_ack and "primary" in self.loader.first_record, 60,
              "devices and group back on the primary")
        outage = {r for r, (site, _) in list(self.fleet.acked.items()) if site == "dr"}
        report.update({"written_during_outage": len(outage), "copy_back_s": round(copied - back, 3),
                       "devices_held_s": round(self.fleet.first_ack["primary"] - hold, 3),
                       "group_back_s": round(self.loader.first_record["primary"] - hold, 3)})
        time.sleep(self.args.after)
        self.stop_load()
        _wait(lambda: end_total(self.dr.bootstrap) >= end_total(self.primary.bootstrap), 60, "mirror caught up")
        on_primary, on_dr = record_ids(self.primary.bootstrap), record_ids(self.dr.bootstrap)
        acked = set(self.fleet.acked)
        report.update({"acknowledged_total": len(acked), "primary_records": sum(on_primary.values()),
                       "lost_in_primary_topics": len(acked - on_primary.keys()),
                       "outage_records_missing_on_primary": len(outage - on_primary.keys()),
                       "primary_equals_dr": on_primary == on_dr,
                       "duplicates_in_primary_topics": sum(n - 1 for n in on_primary.values() if n > 1),
                       **self.hbase_loss(self.primary, acked), **self.hbase_loss(self.dr, acked)})
        return report

    def run(self) -> dict[str, Any]:
        report: dict[str, Any] = {"scenario": self.args.scenario, "rate": self.args.rate, "load_s": self.args.seconds,
                                  "ingest": self.args.ingest}
        try:
            self.setup()
            self.steady_load()
            if self.args.scenario == "primary-loss":
                report.update(self.primary_loss())
                report.update(self.after_primary_loss())
            elif self.args.scenario == "mirror-crash":
                report.update(self.mirror_crash())
            else:
                report.update(self.failback())
        finally:
            self.teardown()
        report["setup_s"] = self.setup_s
        report.update(self.supervisor.summary())
        lags = [v for p in self.probes for _, v in p.samples if v is not None]
        report["max_mirror_lag_records"] = max(lags, default=None)
        if self.args.report:
            chart(self.args.report / "drill.png", f"DR drill: {self.args.scenario}", self.t0, self.probes,
                  self.fleet.acks, self.events)
        return report


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dr_mirror.drill", description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, choices=("primary-loss", "mirror-crash", "failback"))
    p.add_argument("--report", type=Path, default=None, help="directory for drill.json, drill.md, drill.png")
    p.add_argument("--config", type=Path, default=None, help="solution config (topics, Spark settings)")
    p.add_argument("--rate", type=float, default=300.0, help="capture records per second")
    p.add_argument("--seconds", type=float, default=15.0, help="steady load before the failure")
    p.add_argument("--after", type=float, default=10.0, help="load after the failover / restart / switch back")
    p.add_argument("--failover-after", type=float, default=5.0, help="seconds without acks before devices switch")
    p.add_argument("--replay", type=float, default=30.0, help="seconds of sent records devices re-send to DR")
    p.add_argument("--outage", type=float, default=5.0, help="seconds the mirror (or the primary room) stays down")
    p.add_argument("--mirror-behind", type=float, default=0.0,
                   help="primary-loss/failback: freeze the mirror (SIGSTOP) this many seconds before the room is "
                        "lost, so records the primary acknowledged are missing at DR (RPO > 0) and only the "
                        "devices' replay window (--replay) can bring them back")
    p.add_argument("--settle", type=float, default=180.0, help="at most this long for rows to land at the end")
    p.add_argument("--ready-timeout", type=float, default=600.0,
                   help="at most this long for both sites to be ready before the load starts (each ingest job's "
                        "first micro-batch: Spark starts slowly when loaded)")
    p.add_argument("--max-restarts", type=int, default=3,
                   help="restarts per ingest job or mirror that exits while the drill needs it (each one reported)")
    p.add_argument("--no-ingest", dest="ingest", action="store_false",
                   help="bus only: no HBase gateways and ingest jobs (faster; no row counts)")
    p.add_argument("--crash-dr-ingest", action="store_true",
                   help="also kill -9 the DR ingest job halfway through the steady load (the supervisor restarts it)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.report:  # the sites' data and every process's log stay with the report
        args.report.mkdir(parents=True, exist_ok=True)
        report = Drill(args, Path(tempfile.mkdtemp(prefix="work-", dir=args.report))).run()
    else:
        with tempfile.TemporaryDirectory(prefix="dr-drill-") as tmp:
            report = Drill(args, Path(tmp)).run()
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        (args.report / "drill.json").write_text(text + "\n")
        (args.report / "drill.md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
