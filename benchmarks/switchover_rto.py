"""The RTO of a planned switchover to the DR site and of the failback, under the load users run: `make up --dr-site`
with its pipeline (the capture simulator at ``--rate``, both sites' Spark ingest jobs, surveillance, the monitors).

`make up` starts as users start it (the shipped config, its own free ports, a fresh data directory). Once the devices
have produced for ``--warmup-s`` and the DR site's ingest job writes rows to DR HBase, ``python -m dr_mirror
switchover --to dr`` runs; then, the same way, ``--to primary``. For each, in seconds from the command's start:

- **(a) switch**: the record naming the new site (its ``since``), the command's end, and the ``drained_s`` /
  ``switch_s`` it reports in the record's ``last``;
- **(b) first capture at the new bus**: the earliest Kafka timestamp (CreateTime, the devices' clock = this machine's)
  of a capture record on the new site's ``capture.vehicle`` / ``capture.face`` written after the flip (timestamp at
  or after the record's ``since``: the mirrored ones are older, the devices write there only once the record names
  it), and when this script's consumer saw it;
- **(c) first such capture ingested at the new site**: the first new captures' rows (the first few of each partition,
  looked up by their row keys, `contracts.tables.captures`) in the new site's HBase; the figure is the smallest
  ``ingest_time`` the ingest job stamped in them (right before the write), and when this script first read one;
  "none in 300 s" otherwise;
- **(d) first hit at the new site**: the first ``surveillance.hits`` record at the new bus written after the flip
  (make up watches the simulator's recurring targets), or "none in 120 s";
- **records lost**: the old site's capture partitions' end offsets at the drain's end (read while the record says
  ``switching_to``: the devices are fenced, nothing is written there until the mirror back copies the new site's)
  and, for every offset below them, the record at the new site at the same offset: lost = offsets whose record is
  missing or another there.

Beside them: both sites' ingest status (records/s, capture -> HBase p99 of its 30 s window, rows so far) before each
switchover and once its figures are in (a growing p99 at 0 records/s: an ingest falling behind), the machine's load
averages at the start and the end, and the lines with ``ERROR`` or a traceback each log under the data directory got
after the first switchover. A JSON summary ends the output; `make down` stops everything, whatever happens.

    .venv/bin/python benchmarks/switchover_rto.py [--rate 500] [--warmup-s 60] [--data-dir DIR] [--keep]

``--data-dir DIR`` (default a temporary directory): the run's config and `make up`'s data (``DIR/data``), removed at
the end unless ``--keep``. A run takes 5-10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import happybase  # type: ignore[import-untyped]
from confluent_kafka import Consumer, Message, TopicPartition

from contracts import active_site
from contracts.ports import free_port
from contracts.processes import spawn
from contracts.records import epoch_ms
from contracts.tables import captures as capture_tables
from contracts.topics import Topics
from deploy.object_store import free_port_pair
from deploy.processes.make_up import MAKE_UP_PORTS, MARK_ENV, bus_settings, down, marked, start_up, write_config
from dr_mirror.switchover import other
from testkit.polling import poll

TOPICS = Topics()
CAPTURES = list(TOPICS.captures)
START_S = 600.0
"""make up's own start (both buses, both HBase gateways, the DR object store) on a loaded machine."""
FIRST_ROWS_S = 600.0
"""Both Spark ingest jobs starting and writing their first rows (minutes on a loaded 2-core machine)."""
SWITCH_S = 300.0
INGEST_WAIT_S = 300.0
HIT_WAIT_S = 120.0
CANDIDATES_PER_PARTITION = 5
"""The first new captures of each partition looked up in HBase: a device's malformed record has no row."""
ANSWER_S = 15.0
SETTLE_S = 3.0
"""After the first new record seen, how long the other partitions' first ones are waited for."""


def now_ms() -> int:
    return int(time.time() * 1000)


def partition_of(message: Message) -> tuple[str, int]:
    return str(message.topic()), int(message.partition() or 0)


@dataclass
class Site:
    """One site as this script reads it: its bus as ``admin``, its HBase, its ingest job's status file."""

    name: str
    bus: dict[str, str]
    hbase_port: int
    status_file: Path
    _consumer: Consumer | None = None

    def ends(self, topics: Iterable[str]) -> dict[tuple[str, int], int]:
        """Each partition's end offset (a topic not there yet has none)."""
        if self._consumer is None:
            self._consumer = Consumer({**self.bus, "group.id": f"switchover-rto-{self.name}", "log_level": 0})
        found = {}
        for topic in topics:
            meta = self._consumer.list_topics(topic, timeout=ANSWER_S).topics[topic]
            for partition in meta.partitions if meta.error is None else ():
                found[(topic, partition)] = self._consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=ANSWER_S)[1]
        return found

    def hbase(self) -> happybase.Connection:
        return happybase.Connection("127.0.0.1", self.hbase_port, timeout=60_000)

    def has_rows(self) -> bool:
        """Whether the ingest job has written a vehicle row yet."""
        with contextlib.suppress(Exception):  # the gateway starting, the table not created yet
            conn = self.hbase()
            try:
                return b"vehicle" in conn.tables() and next(conn.table("vehicle").scan(limit=1), None) is not None
            finally:
                conn.close()
        return False

    def ingest(self) -> str:
        """The ingest job's status in a few words (its 30 s window)."""
        try:
            status: dict[str, Any] = json.loads(self.status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return "no status yet"
        return (f"{status.get('records_per_s', 0):.0f} records/s, p99 {status.get('latency_ms', {}).get('p99')} ms, "
                f"{sum(status.get('valid', {}).values()):,} rows")

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


class FirstAfter:
    """The first records of each partition (from given offsets) whose Kafka timestamp is at or after ``since_ms``,
    with the wall time this consumer saw them."""

    def __init__(self, site: Site, starts: dict[tuple[str, int], int], since_ms: int, keep: int) -> None:
        self.consumer = Consumer({**site.bus, "group.id": f"switchover-rto-first-{site.name}",
                                  "enable.auto.commit": False, "log_level": 0})
        self.consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])
        self.since_ms, self.keep, self.partitions = since_ms, keep, len(starts)
        self.found: dict[tuple[str, int], list[tuple[Message, int]]] = {}

    def poll(self) -> None:
        for message in self.consumer.consume(1000, 0.2):
            key = partition_of(message)
            if message.error() is None and message.timestamp()[1] >= self.since_ms and \
                    len(self.found.setdefault(key, [])) < self.keep:
                self.found[key].append((message, now_ms()))

    def first(self) -> tuple[Message, int] | None:
        """The earliest by timestamp, and when it was seen, once every partition has shown its first (or
        ``SETTLE_S`` after the first seen: a partition may get none)."""
        found = [entry for entries in self.found.values() for entry in entries]
        if not found or (len(self.found) < self.partitions and now_ms() - min(s for _, s in found) < SETTLE_S * 1000):
            return None
        return min(found, key=lambda entry: entry[0].timestamp()[1])

    def close(self) -> None:
        self.consumer.close()


def ingested_ms(site: Site, messages: list[Message]) -> int | None:
    """The smallest ``ingest_time`` in the rows of ``messages`` in the site's HBase (its main table by the record's
    kind, or ``capture_unrecognized``), None while none is there."""
    stamps = []
    conn = site.hbase()
    try:
        for message in messages:
            try:
                record = json.loads(message.value() or b"")
                topic = partition_of(message)[0]
                kind = TOPICS.kind_of(topic)
                places = [(kind.value, capture_tables.record_key(str(record["record_id"])))] if kind else []
                places.append(capture_tables.row_for_unrecognized(topic, record, (), "")[:2])
            except (ValueError, KeyError, TypeError):  # a device's malformed record: a dead letter, no row
                continue
            for table, key in places:
                cells = conn.table(table).row(key, columns=[capture_tables.RECORD_COLUMN])
                if cells:
                    stamps.append(epoch_ms(capture_tables.read_record(cells)["ingest_time"]))
                    break
    finally:
        conn.close()
    return min(stamps) if stamps else None


def fingerprints(site: Site, below: dict[tuple[str, int], int]) -> dict[tuple[str, int], dict[int, int]]:
    """The hash of every record's value at offsets below ``below`` per partition, from the partition's start."""
    consumer = Consumer({**site.bus, "group.id": f"switchover-rto-check-{site.name}", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 0})
    found: dict[tuple[str, int], dict[int, int]] = {key: {} for key in below}
    try:
        starts = {key: consumer.get_watermark_offsets(TopicPartition(*key), timeout=ANSWER_S)[0] for key in below}
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for (t, p) in below])
        deadline = time.monotonic() + 300
        while any(len(found[key]) < below[key] - starts[key] for key in below):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the {site.name} site's captures could not be read back")
            for message in consumer.consume(5000, 0.5):
                key, offset = partition_of(message), int(message.offset() or 0)
                if message.error() is None and offset < below[key]:
                    found[key][offset] = hash(message.value())
    finally:
        consumer.close()
    return found


def lost(old: Site, new: Site, drained: dict[tuple[str, int], int]) -> int:
    """Records at the old site below its ends at the drain's end that the new site lacks at the same offset."""
    at_old, at_new = fingerprints(old, drained), fingerprints(new, drained)
    return sum(at_new[key].get(offset) != value for key, offsets in at_old.items() for offset, value in offsets.items())


class Output(threading.Thread):
    """make up's stdout read to its end (its status lines must not fill the pipe)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        super().__init__(daemon=True)
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.text: list[str] = []

    def run(self) -> None:
        while chunk := os.read(self.fd, 65536):
            self.text.append(chunk.decode(errors="replace"))


@dataclass
class Run:
    data_dir: Path
    sites: dict[str, Site]
    proc: subprocess.Popen[bytes]
    output: Output
    figures: dict[str, Any]
    """The summary, filled in as the figures come (what a failed run measured is printed with its error)."""
    logs_before: dict[Path, int]
    """Each log's size when the first switchover began."""

    def say(self, line: str) -> None:
        print(line, flush=True)

    def alive(self) -> None:
        """Raises, with what make up said last, once it has stopped or is stopping (a service of its exited)."""
        said = "".join(self.output.text)
        if self.proc.poll() is not None or "stopping ..." in said:
            lines = [line for line in said.splitlines() if not line.startswith("ingest: ")]
            raise RuntimeError("make up stopped; it said:\n" + "\n".join(lines[-10:]))

    def switch(self, to: str) -> None:
        """One switchover to ``to``, its figures measured from the command's start."""
        old, new = self.sites[other(to)], self.sites[to]
        self.say(f"before the switchover to {to}: ingest {old.name}: {old.ingest()}; {new.name}: {new.ingest()}")
        starts = new.ends([*CAPTURES, TOPICS.surveillance_hits])
        began = now_ms()
        command = spawn([sys.executable, "-m", "dr_mirror", "switchover", "--to", to, "--data-dir",
                         str(self.data_dir), "--reason", "switchover_rto benchmark"], subprocess.PIPE)
        drained: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + SWITCH_S
        while True:  # the old site's ends read while the record still says switching: the last are the drain's
            ends = old.ends(CAPTURES)
            record = active_site.read(self.data_dir)
            if record is not None and record.active == to and record.switching_to is None:
                break
            if record is not None and record.switching_to == to:
                drained = ends
            if command.poll() is not None or time.monotonic() > deadline:
                said = command.communicate()[0].decode(errors="replace")
                raise RuntimeError(f"the switchover to {to} did not switch (exit {command.poll()}):\n{said}")
            time.sleep(0.2)
        said = command.communicate(timeout=SWITCH_S)[0].decode(errors="replace")
        ended = now_ms()
        assert record is not None
        if command.returncode != 0 or not drained:
            raise RuntimeError(f"the switchover to {to} exited {command.returncode} (drain seen: {bool(drained)}):"
                               f"\n{said}")
        since = int(record.since.timestamp() * 1000)
        last = record.last or {}
        figures = self.figures[f"to_{to}"] = {
            "record_flip_s": (since - began) / 1000, "command_end_s": (ended - began) / 1000,
            "reported_drained_s": last.get("drained_s"), "reported_switch_s": last.get("switch_s"),
            "reported_records_lost": last.get("records_lost")}
        self.say(f"switchover to {to}: {said.strip().splitlines()[-1]}")
        self.say(f"  (a) switch: record names {to} at {figures['record_flip_s']:.2f} s, command ended at "
                 f"{figures['command_end_s']:.2f} s; reported drained_s {last.get('drained_s')}, switch_s "
                 f"{last.get('switch_s')}")
        self.after_flip(new, starts, began, since, figures)
        figures["records_lost"] = lost(old, new, drained)
        figures["drained_ends"] = sum(drained.values())
        self.say(f"  records lost: {figures['records_lost']} of the {sum(drained.values()):,} captures {old.name} "
                 f"held at the drain's end (reported {last.get('records_lost')})")
        figures["ingest_after"] = {site.name: site.ingest() for site in (old, new)}
        self.say(f"  ingest now: {old.name}: {old.ingest()}; {new.name}: {new.ingest()}")

    def after_flip(self, new: Site, starts: dict[tuple[str, int], int], began: int, since: int,
                   figures: dict[str, Any]) -> None:
        """(b), (c) and (d) at the new site into ``figures``: polled together until each is in or out of time."""
        captures = FirstAfter(new, {k: v for k, v in starts.items() if k[0] in CAPTURES}, since,
                              CANDIDATES_PER_PARTITION)
        hits = FirstAfter(new, {k: v for k, v in starts.items() if k[0] == TOPICS.surveillance_hits}, since, 1)
        flipped = time.monotonic()
        try:
            while "ingested_s" not in figures or "hit_s" not in figures:
                self.alive()
                waited = time.monotonic() - flipped
                if "first_capture_s" not in figures or "ingested_s" not in figures:
                    captures.poll()
                first = captures.first()
                if first is not None and "first_capture_s" not in figures:
                    figures["first_capture_s"] = (first[0].timestamp()[1] - began) / 1000
                    figures["first_capture_seen_s"] = (first[1] - began) / 1000
                    self.say(f"  (b) first capture at the {new.name} bus: produced at {figures['first_capture_s']:.2f}"
                             f" s (CreateTime), seen at {figures['first_capture_seen_s']:.2f} s")
                if first is not None and "ingested_s" not in figures:
                    stamp = ingested_ms(new, [m for entries in captures.found.values() for m, _ in entries])
                    if stamp is not None:
                        figures["ingested_s"] = (stamp - began) / 1000
                        figures["ingested_seen_s"] = (now_ms() - began) / 1000
                        self.say(f"  (c) first new capture in {new.name} HBase: ingest_time {figures['ingested_s']:.2f}"
                                 f" s, read at {figures['ingested_seen_s']:.2f} s")
                    elif waited > INGEST_WAIT_S:
                        figures["ingested_s"] = None
                        self.say(f"  (c) first new capture in {new.name} HBase: none in {INGEST_WAIT_S:.0f} s")
                if "hit_s" not in figures:
                    hits.poll()
                    hit = hits.first()
                    if hit is not None:
                        figures["hit_s"] = (hit[0].timestamp()[1] - began) / 1000
                        figures["hit_kind"] = json.loads(hit[0].value() or b"{}").get("kind")
                        self.say(f"  (d) first hit at the {new.name} site: {figures['hit_s']:.2f} s "
                                 f"({figures['hit_kind']})")
                    elif waited > HIT_WAIT_S:
                        figures["hit_s"] = None
                        self.say(f"  (d) first hit at the {new.name} site: none in {HIT_WAIT_S:.0f} s")
                time.sleep(0.5)
        finally:
            captures.close()
            hits.close()


def log_sizes(data_dir: Path) -> dict[Path, int]:
    return {path: path.stat().st_size for path in sorted(data_dir.rglob("*.log"))}


def log_problems(data_dir: Path, before: dict[Path, int]) -> dict[str, int]:
    """Per log, the lines with ``ERROR`` or ``Traceback`` written since ``before``."""
    found = {}
    for path in sorted(data_dir.rglob("*.log")):
        with path.open("rb") as log:
            log.seek(before.get(path, 0))
            count = sum(b"ERROR" in line or b"Traceback" in line for line in log)
        if count:
            found[str(path.relative_to(data_dir))] = count
    return found


def warm_up(run: Run, warmup_s: float) -> float:
    """Wait for the devices' first capture at the primary, then for ``warmup_s`` of captures and the DR site's
    first row (both sites' ingest said every 30 s); returns the seconds the devices had run."""
    primary, dr = run.sites["primary"], run.sites["dr"]

    def devices_on() -> bool:
        run.alive()
        return sum(primary.ends(CAPTURES).values()) > 0

    poll(devices_on, FIRST_ROWS_S, interval=2, what="the devices' first capture at the primary")
    devices = time.monotonic()
    run.say("the devices produce at the primary")
    said = [devices]

    def ready() -> bool:
        run.alive()
        if time.monotonic() - said[-1] >= 30:
            said.append(time.monotonic())
            run.say(f"  {said[-1] - devices:3.0f} s: ingest primary: {primary.ingest()}; dr: {dr.ingest()}")
        return time.monotonic() - devices >= warmup_s and dr.has_rows()

    poll(ready, FIRST_ROWS_S + warmup_s, interval=2, what="the DR site's ingest writing rows")
    return time.monotonic() - devices


def measure(run: Run, warmup_s: float) -> None:
    try:
        ran = warm_up(run, warmup_s)
        run.figures["devices_ran_s"] = round(ran, 1)
        run.say(f"devices ran {ran:.0f} s; the DR site's ingest writes rows")
        run.logs_before.update(log_sizes(run.data_dir))
        run.switch("dr")
        run.switch("primary")
    except Exception:  # a bus or HBase gone: make up stopping says why
        run.alive()
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=500.0, help="the simulator's captures/s (500)")
    parser.add_argument("--warmup-s", type=float, default=60.0, help="seconds the devices run before (60)")
    parser.add_argument("--data-dir", type=Path, default=None, help="the run's directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory at the end")
    args = parser.parse_args(argv)
    base = args.data_dir or Path(tempfile.mkdtemp(prefix="switchover-rto-"))
    if (base / "data").exists():
        parser.error(f"{base / 'data'} exists: give a fresh --data-dir")
    base.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()
    began = time.monotonic()
    print(f"make up --dr-site --rate {args.rate:g} in {base}; load average at the start "
          f"{' '.join(f'{x:.1f}' for x in load_start)} ({len(os.sched_getaffinity(0))} cores)", flush=True)
    marker = uuid.uuid4().hex
    ports = {name: free_port() for name in (*MAKE_UP_PORTS, "drh", "dri", "drcon")} | {"drs": free_port_pair()}
    config = write_config(base, ports, shipped=True)
    data_dir = base / "data"
    proc = None
    figures: dict[str, Any] = {"rate": args.rate, "warmup_s": args.warmup_s}
    logs_before: dict[Path, int] = {}
    try:
        proc, _ = start_up(config, data_dir, ports, "--dr-site", "--rate", str(args.rate), pipeline=True,
                           env={MARK_ENV: marker}, timeout=START_S)
        output = Output(proc)
        output.start()
        print(f"make up ready in {time.monotonic() - began:.0f} s", flush=True)
        sites = {"primary": Site("primary", bus_settings(data_dir), ports["hbase"], data_dir / "ingest-status.json"),
                 "dr": Site("dr", bus_settings(data_dir, section="dr"), ports["drh"],
                            data_dir / "dr" / "ingest-status.json")}
        try:
            measure(Run(data_dir, sites, proc, output, figures, logs_before), args.warmup_s)
        finally:
            for site in sites.values():
                site.close()
    except Exception as exc:  # printed with the figures measured so far
        figures["error"] = f"{type(exc).__name__}: {exc}"
        print(f"FAILED: {figures['error']}", flush=True)
    finally:
        if proc is not None:
            print(f"make down: {down(data_dir, proc, timeout=180).strip().splitlines()[-1:]}", flush=True)
        for left in marked(marker):  # what make down left behind, by its pid
            print(f"left running, killed: {left.pid} {' '.join(left.cmdline())[:120]}", flush=True)
            with contextlib.suppress(Exception):
                left.kill()
        if logs_before:
            figures["log_problems_after_switch"] = log_problems(data_dir, logs_before)
            for name, count in figures["log_problems_after_switch"].items():
                print(f"log {name}: {count} lines with ERROR or Traceback after the first switchover", flush=True)
        if not args.keep and args.data_dir is None:
            shutil.rmtree(base, ignore_errors=True)
    load_end = os.getloadavg()
    print(f"load average at the end {' '.join(f'{x:.1f}' for x in load_end)}; the run took "
          f"{time.monotonic() - began:.0f} s", flush=True)
    figures |= {"load_start": load_start, "load_end": load_end, "run_s": round(time.monotonic() - began, 1),
                "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    print(json.dumps(figures))
    return 1 if "error" in figures else 0


if __name__ == "__main__":
    sys.exit(main())
