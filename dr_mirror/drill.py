"""Failover drills at the bus level: `python -m dr_mirror.drill --scenario primary-loss|mirror-crash [--report DIR]`.

Self-contained: starts a primary and a DR broker (`bus broker` on free ports), the mirror
(`python -m dr_mirror`), a device fleet (the capture simulator's traffic: real record ids) and a
consumer group standing in for the loaders, then injects the failure and measures.
- primary-loss: kill -9 of the primary broker. Devices that hear no acknowledgement for
  `--failover-after` seconds switch to the DR bootstrap and re-send their replay window (the last
  `--replay` seconds of what they sent; recognition servers have disks); the consumer group resumes
  on DR from the offsets the mirror translated and committed there. Measured: RPO (records the primary
  acknowledged that the mirror had not copied, and their time span), the loss after the replay
  (zero when the window covers the mirror's lag), RTO (failure -> first record DR acknowledged, and
  -> first record the group consumed on DR), duplicates (replayed records: harmless downstream,
  where row keys are deterministic).
- mirror-crash: kill -9 of the mirror, restart after `--outage` seconds. Measured: the lag it built
  up (the RPO had the primary been lost then), the time from the restart to catching up, and that
  DR holds exactly the primary's records afterwards.
Writes `drill.json`, `drill.md` and `drill.png` (lag and throughput over the drill) to `--report`.
Exit status 0 when the drill ran, whatever it measured. Not covered yet: the ingest slice and HBase
rows at the DR site, and the failback scenario.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from contracts.topics import Topics
from ingest.city import build_city
from ingest.traffic import Traffic, TrafficConfig

ROOT = Path(__file__).resolve().parents[1]
TOPICS = Topics()
CAPTURES = list(TOPICS.captures)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


class Child:
    """A subprocess of the drill with its log; `kill()` is kill -9."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, *self.args], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        return self

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def start_broker(work: Path, name: str) -> tuple[Child, str]:
    port, controller = _free_port(), _free_port()
    overrides = {"listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}",
                 "controller.quorum.voters": f"1@127.0.0.1:{controller}", "log.dirs": str(work / name),
                 "group.initial.rebalance.delay.ms": "0", "offsets.topic.replication.factor": "1",
                 "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1"}
    args = ["-m", "bus", "broker"] + [a for k, v in overrides.items() for a in ("--override", f"{k}={v}")]
    child = Child(args, work / f"{name}.log").start()
    _wait_port(port)
    return child, f"127.0.0.1:{port}"


class Fleet(threading.Thread):
    """Capture devices: produce to the active cluster, keep a replay window, fail over when acks stop."""

    def __init__(self, primary: str, dr: str, rate: float, failover_after: float, replay: float) -> None:
        super().__init__(daemon=True)
        self.primary, self.dr, self.rate = primary, dr, rate
        self.failover_after, self.replay = failover_after, replay
        self.traffic = Traffic(build_city(7, 24), TrafficConfig(seed=7, curve="flat", malformed_rate=0.0))
        self.window: collections.deque[tuple[float, str, bytes, bytes, str]] = collections.deque()
        self.acked: dict[str, tuple[str, float]] = {}
        self.active = "primary"
        self.switched_at: float | None = None
        self.first_dr_ack: float | None = None
        self.last_ack = time.time()
        self.stopping = threading.Event()
        self.samples: list[tuple[float, int]] = []

    def _producer(self, bootstrap: str) -> Producer:
        return Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 600_000, "log_level": 0})

    def _send(self, producer: Producer, cluster: str, topic: str, key: bytes, value: bytes, record_id: str) -> None:
        def done(err: Any, _msg: Any) -> None:
            if err is None:
                now = time.time()
                self.last_ack = now
                self.acked.setdefault(record_id, (cluster, now))
                if cluster == "dr" and self.first_dr_ack is None:
                    self.first_dr_ack = now

        while True:
            try:
                producer.produce(topic, value, key, on_delivery=done)
                return
            except BufferError:
                producer.poll(0.05)

    def run(self) -> None:
        producer = self._producer(self.primary)
        start = time.monotonic()
        sent = 0.0
        while not self.stopping.is_set():
            elapsed = time.monotonic() - start
            due = int(elapsed * self.rate - sent)
            for emitted in self.traffic.records(max(due, 0), elapsed):
                record_id = json.loads(emitted.value)["record_id"]
                topic = TOPICS.of_kind(emitted.kind)
                self.window.append((time.time(), topic, emitted.key, emitted.value, record_id))
                self._send(producer, self.active, topic, emitted.key, emitted.value, record_id)
            sent += max(due, 0)
            cutoff = time.time() - self.replay
            while self.window and self.window[0][0] < cutoff:
                self.window.popleft()
            producer.poll(0.02)
            self.samples.append((time.time(), len(self.acked)))
            if self.active == "primary" and time.time() - self.last_ack > self.failover_after:
                producer = self._failover()
        producer.flush(30)

    def _failover(self) -> Producer:
        """No acknowledgement for `failover_after` seconds: devices fall back to the secondary bootstrap."""
        self.active, self.switched_at = "dr", time.time()
        producer = self._producer(self.dr)
        for _, topic, key, value, record_id in list(self.window):
            self._send(producer, "dr", topic, key, value, record_id)
        return producer


class Loader(threading.Thread):
    """A consumer group standing in for the loaders: what it consumed, and when it first read from DR."""

    def __init__(self, primary: str, dr: str, fleet: Fleet) -> None:
        super().__init__(daemon=True)
        self.primary, self.dr, self.fleet = primary, dr, fleet
        self.seen: collections.Counter[str] = collections.Counter()
        self.first_dr_record: float | None = None
        self.stopping = threading.Event()

    def _consumer(self, bootstrap: str) -> Consumer:
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-loader",
                             "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                             "auto.commit.interval.ms": 500, "log_level": 0})
        consumer.subscribe(CAPTURES)
        return consumer

    def run(self) -> None:
        cluster, consumer = "primary", self._consumer(self.primary)
        while not self.stopping.is_set():
            if cluster == "primary" and self.fleet.active == "dr":
                # The group moves to DR, where the mirror committed its translated offsets. Closing the old
                # consumer would wait for the dead primary (leave group, commit), so it is left to a thread.
                threading.Thread(target=consumer.close, daemon=True).start()
                cluster, consumer = "dr", self._consumer(self.dr)
            for msg in consumer.consume(500, 0.2):
                if msg.error():
                    continue
                self.seen[json.loads(msg.value())["record_id"]] += 1
                if cluster == "dr" and self.first_dr_record is None:
                    self.first_dr_record = time.time()
        consumer.close()


def record_ids(bootstrap: str) -> collections.Counter[str]:
    """Every record id in the capture topics of a cluster, with how often it occurs."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-audit", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "log_level": 0})
    out: collections.Counter[str] = collections.Counter()
    try:
        parts = []
        for topic in CAPTURES:
            metadata = consumer.list_topics(topic, timeout=10).topics[topic]
            parts += [TopicPartition(topic, p, 0) for p in metadata.partitions]
        ends = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        consumer.assign(parts)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            positions = consumer.position([TopicPartition(t, p) for t, p in ends])
            if all(tp.offset >= ends[(tp.topic, tp.partition)] for tp in positions if tp.offset >= 0) and all(
                    tp.offset >= 0 or ends[(tp.topic, tp.partition)] == 0 for tp in positions):
                break
            for msg in consumer.consume(1000, 0.5):
                if not msg.error():
                    out[json.loads(msg.value())["record_id"]] += 1
    finally:
        consumer.close()
    return out


class LagProbe(threading.Thread):
    """Samples the mirror's summed partition lag from its /metrics every half second."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.samples: list[tuple[float, float | None]] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=1).read().decode()
                lag = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("dr_mirror_partition_lag_records{"))
            except OSError:
                lag = None  # the mirror is down
            self.samples.append((time.time(), lag))


def chart(path: Path, t0: float, lag: list[tuple[float, float | None]], acked: list[tuple[float, int]],
          events: dict[str, float]) -> None:
    """A PNG of mirror lag (red) and acknowledged records per second (blue) over the drill, events as lines."""
    import cv2
    import numpy as np

    width, height, margin = 900, 360, 40
    img = np.full((height, width, 3), 255, np.uint8)
    end = max([t for t, _ in lag] + [t for t, _ in acked] + [t0 + 1]) - t0
    rates = [(acked[i][0], (acked[i][1] - acked[i - 10][1]) / max(acked[i][0] - acked[i - 10][0], 1e-3))
             for i in range(10, len(acked), 10)]

    def plot(points: list[tuple[float, float]], colour: tuple[int, int, int]) -> None:
        top = max([v for _, v in points] + [1.0])
        xy = [(int(margin + (t - t0) / end * (width - 2 * margin)),
               int(height - margin - v / top * (height - 2 * margin))) for t, v in points]
        for a, b in itertools.pairwise(xy):
            cv2.line(img, a, b, colour, 2)
        cv2.putText(img, f"max {top:.0f}", (xy[0][0] if xy else margin, 15 + 15 * (colour == (200, 0, 0))),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.4, colour, 1)

    plot([(t, v) for t, v in lag if v is not None], (0, 0, 200))
    plot(rates, (200, 0, 0))
    for name, t in events.items():
        x = int(margin + (t - t0) / end * (width - 2 * margin))
        cv2.line(img, (x, margin), (x, height - margin), (120, 120, 120), 1)
        cv2.putText(img, name, (x + 3, height - margin - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (80, 80, 80), 1)
    cv2.putText(img, f"red: mirror lag (records)  blue: acked records/s  {end:.0f} s", (margin, height - 10),
                cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1)
    cv2.imwrite(str(path), img)


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    primary_broker, primary = start_broker(work, "primary")
    dr_broker, dr = start_broker(work, "dr")
    metrics_port = _free_port()
    props = work / "mm2.properties"
    props.write_text(f"clusters = primary, dr\nprimary.bootstrap.servers = {primary}\ndr.bootstrap.servers = {dr}\n"
                     "primary->dr.enabled = true\nsync.group.offsets.enabled = true\n"
                     "emit.checkpoints.interval.seconds = 1\nsync.group.offsets.interval.seconds = 1\n"
                     "refresh.topics.interval.seconds = 1\nrefresh.groups.interval.seconds = 1\n")
    mirror_args = ["-m", "dr_mirror", "--config", str(props), "--metrics-port", str(metrics_port)]
    mirror = Child(mirror_args, work / "mirror.log").start()
    Producer({"bootstrap.servers": primary}).list_topics(timeout=10)
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": primary})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in CAPTURES]).values():
        future.result(30)
    fleet = Fleet(primary, dr, args.rate, args.failover_after, args.replay)
    loader = Loader(primary, dr, fleet)
    probe = LagProbe(metrics_port)
    t0 = time.time()
    events: dict[str, float] = {}  # name -> wall-clock time
    for thread in (fleet, loader, probe):
        thread.start()
    report: dict[str, Any] = {"scenario": args.scenario, "rate": args.rate, "load_s": args.seconds}
    try:
        deadline = time.monotonic() + 120  # a loaded machine starts processes slowly: the clock starts with the mirror
        while time.monotonic() < deadline and not (fleet.acked and any(v for _, v in probe.samples)):
            time.sleep(0.2)
        time.sleep(args.seconds)
        if args.scenario == "primary-loss":
            report.update(primary_loss(args, primary_broker, dr, fleet, loader, events))
        else:
            report.update(mirror_crash(args, mirror, mirror_args, work, primary, dr, fleet, probe, events))
    finally:
        for thread in (fleet, loader, probe):
            thread.stopping.set()
        for thread in (fleet, loader, probe):
            thread.join(30)
        mirror.stop()
        primary_broker.stop()
        dr_broker.stop()
    lags = [v for _, v in probe.samples if v is not None]
    report["max_mirror_lag_records"] = max(lags, default=None)
    if args.report:
        args.report.mkdir(parents=True, exist_ok=True)
        chart(args.report / "drill.png", t0, probe.samples, fleet.samples, events)
    return report


def primary_loss(args: argparse.Namespace, primary_broker: Child, dr: str, fleet: Fleet, loader: Loader,
                 events: dict[str, float]) -> dict[str, Any]:
    failed = time.time()
    primary_broker.kill()
    events["primary killed"] = failed
    time.sleep(1.0)  # what the mirror had copied: nothing more can arrive from a dead primary
    mirrored = record_ids(dr)
    acked_primary = {r: t for r, (c, t) in fleet.acked.items() if c == "primary"}
    missing = sorted(acked_primary[r] for r in acked_primary if r not in mirrored)
    deadline = time.monotonic() + args.failover_after + 60
    while (fleet.first_dr_ack is None or loader.first_dr_record is None) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(args.after)
    fleet.stopping.set()
    fleet.join(60)
    time.sleep(2)
    final = record_ids(dr)
    lost = [r for r in fleet.acked if r not in final]
    return {
        "acknowledged_by_primary": len(acked_primary),
        "rpo_records": len(missing),
        "rpo_span_s": round(missing[-1] - missing[0], 3) if missing else 0.0,
        "lost_after_replay": len(lost),
        "rto_producers_s": round(fleet.first_dr_ack - failed, 3) if fleet.first_dr_ack else None,
        "rto_consumers_s": round(loader.first_dr_record - failed, 3) if loader.first_dr_record else None,
        "duplicates_in_dr_topics": sum(n - 1 for n in final.values() if n > 1),
        "consumed_twice": sum(n - 1 for n in loader.seen.values() if n > 1),
        "acknowledged_total": len(fleet.acked), "dr_records": sum(final.values()),
        "hbase_rows": "not measured: the DR site's loaders and gateway (issue 14 item 5) are not built yet",
    }


def end_total(bootstrap: str) -> int:
    """Records in the capture topics of a cluster (their high watermarks: no transactions here)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "drill-audit", "log_level": 0})
    try:
        total = 0
        for topic in CAPTURES:
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
        return total
    finally:
        consumer.close()


def mirror_crash(args: argparse.Namespace, mirror: Child, mirror_args: list[str], work: Path, primary: str, dr: str,
                 fleet: Fleet, probe: LagProbe, events: dict[str, float]) -> dict[str, Any]:
    crashed = time.time()
    mirror.kill()
    events["mirror killed"] = crashed
    time.sleep(args.outage)
    behind = end_total(primary) - end_total(dr)  # what a primary loss now would cost (the RPO at its worst)
    restarted = Child(mirror_args, work / "mirror.log").start()
    restart = time.time()
    events["mirror restarted"] = restart
    caught_up = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if end_total(dr) >= end_total(primary) - args.rate * 0.5:  # within half a second of load
            caught_up = time.time()
            break
        time.sleep(0.2)
    time.sleep(args.after)
    fleet.stopping.set()
    fleet.join(60)
    deadline = time.monotonic() + 60
    while end_total(dr) < end_total(primary) and time.monotonic() < deadline:
        time.sleep(0.5)
    source, target = record_ids(primary), record_ids(dr)
    restarted.stop()
    return {
        "outage_s": args.outage,
        "behind_at_restart_records": behind,
        "catch_up_s": round(caught_up - restart, 3) if caught_up else None,
        "primary_records": sum(source.values()), "dr_records": sum(target.values()),
        "missing_at_dr": sum((source - target).values()), "extra_at_dr": sum((target - source).values()),
    }


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# DR drill: {report['scenario']}", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report.items() if k != "scenario"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dr_mirror.drill", description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True, choices=("primary-loss", "mirror-crash"))
    parser.add_argument("--report", type=Path, default=None, help="directory for drill.json, drill.md, drill.png")
    parser.add_argument("--rate", type=float, default=300.0, help="capture records per second")
    parser.add_argument("--seconds", type=float, default=15.0, help="load before the failure")
    parser.add_argument("--after", type=float, default=10.0, help="load after the failover / restart")
    parser.add_argument("--failover-after", type=float, default=5.0, help="seconds without acks before devices switch")
    parser.add_argument("--replay", type=float, default=30.0, help="seconds of sent records devices re-send to DR")
    parser.add_argument("--outage", type=float, default=5.0, help="mirror-crash: seconds before the restart")
    args = parser.parse_args(argv)
    if args.report:  # the brokers' data and every process's log stay with the report
        report = run(args, Path(tempfile.mkdtemp(prefix="work-", dir=_mkdir(args.report))))
    else:
        with tempfile.TemporaryDirectory(prefix="dr-drill-") as tmp:
            report = run(args, Path(tmp))
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        (args.report / "drill.json").write_text(text + "\n")
        (args.report / "drill.md").write_text(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
