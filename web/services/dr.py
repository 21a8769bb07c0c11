"""The DR page's data: which site is active, the mirror's lag (live and over the last hour), its checkpoints, and the
drills.

- Live lag per topic and partition comes from the mirror's own Prometheus endpoint (``[dr]
  mirror_metrics_port``): the mirror knows each source high watermark and its position, the console
  does not have to ask two clusters.
- The last hour is sampled server-side (every ``lag_sample_interval_s``, like the groups' lag history in
  ``lag_history.py``) into ``console_dr_lag`` with the same row layout, so a reload or a console
  restart keeps the chart.
- Checkpoints are MirrorMaker 2's records in ``<source>.checkpoints.internal`` on the DR cluster, read
  with ``dr_mirror.formats``; the newest per group and partition. A record there that is not a
  checkpoint (another tool's, or garbage) is left out, counted and logged (``web.metrics.skipped``).
- The image copier's state (``python -m dr_mirror.images`` at the DR site: lag in records and seconds, images copied,
  missing at the primary, set aside) comes from its own Prometheus endpoint (``[dr] images_metrics_port``), as the
  mirror's lag does.
- Drills are ``python -m dr_mirror.drill`` runs, each in its own directory under ``[dr] reports_dir``
  (``drill.json``, ``drill.md``, ``drill.png``). One runs at a time, as a subprocess of the console.
"""

from __future__ import annotations

import json
import logging
import math
import re
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from contracts import active_site
from contracts.config import Config
from contracts.processes import spawn
from contracts.tables import console as tables
from dr_mirror.formats import Checkpoint, FormatError
from dr_mirror.lag import parse_lag
from web.auth.table import ConsoleTable

from ..backends import Backends, BackendUnavailable
from ..metrics import skipped
from ..settings import ConsoleSettings
from .background import Sampler
from .errors import Conflict, NotFound

log = logging.getLogger(__name__)

WINDOW_MS = 3600 * 1000
SCENARIOS = ("primary-loss", "mirror-crash", "failback")
REPORT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
REPORT_FILES = {"json": "drill.json", "md": "drill.md", "png": "drill.png"}
MIRROR_ID = "primary->dr"  # the lag rows' id: the one mirror the DR site runs
READER = "dr_checkpoints"
"""This reader's label in ``console_bus_records_skipped_total``."""


@dataclass(frozen=True)
class DrSettings:
    """What the console needs of ``[dr]``; paths relative to make up's data dir (the console's data dir's parent)."""

    client: dict[str, str] = field(default_factory=lambda: {"bootstrap.servers": "127.0.0.1:19092"}, repr=False)
    """The console's client settings for the DR bus (librdkafka's keys; may hold its password)."""
    metrics_url: str = "http://127.0.0.1:9320/metrics"
    reverse_metrics_url: str = "http://127.0.0.1:9322/metrics"
    """The mirror back (dr -> primary), which copies while the DR site is active."""
    images_metrics_url: str = "http://127.0.0.1:9321/metrics"
    source_alias: str = "primary"
    reports_dir: Path = Path("data/dr/drills")
    site_record: Path = Path("data") / active_site.FILE
    """make up's active-site record (``contracts.active_site``): which site runs the business."""
    make_up_dir: Path = Path("data")
    """make up's data directory, which a switchover started here is given (``--data-dir``)."""
    timeout_s: float = 3.0

    @classmethod
    def from_console(cls, settings: ConsoleSettings) -> DrSettings:
        dr = Config({"dr": settings.dr})
        return cls(client=settings.dr_bus,
                   metrics_url=f"http://127.0.0.1:{dr.get('dr', 'mirror_metrics_port', 9320)}/metrics",
                   reverse_metrics_url=f"http://127.0.0.1:{dr.get('dr', 'reverse_mirror_metrics_port', 9322)}/metrics",
                   images_metrics_url=f"http://127.0.0.1:{dr.get('dr', 'images_metrics_port', 9321)}/metrics",
                   reports_dir=settings.data_dir.parent / str(dr.get("dr", "reports_dir", "dr/drills")),
                   site_record=active_site.path(settings.data_dir.parent), make_up_dir=settings.data_dir.parent,
                   timeout_s=settings.backend_timeout_s)


IMAGE_FIGURES = {"dr_images_copied_total": "copied", "dr_images_lag_records": "lag_records",
                 "dr_images_lag_seconds": "lag_seconds", "dr_videos_copied_total": "videos_copied",
                 "dr_videos_pending": "videos_pending", "dr_videos_lag_seconds": "videos_lag_seconds"}


def parse_images(text: str) -> dict[str, Any]:
    """The image copier's figures from its exposition text: lag (records, seconds), copied, and the skipped by
    reason (``missing_at_source`` apart: images the primary never had, the ones a failover would lack); and the
    footage it copies (segments waiting, their lag, copied; None when it copies none)."""
    out: dict[str, Any] = {"copied": 0, "lag_records": 0, "lag_seconds": 0.0, "skipped": {},
                           "videos_copied": None, "videos_pending": math.nan, "videos_lag_seconds": math.nan}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in IMAGE_FIGURES:
                out[IMAGE_FIGURES[sample.name]] = sample.value
            elif sample.name == "dr_images_skipped_total" and "reason" in sample.labels:
                out["skipped"][sample.labels["reason"]] = int(sample.value)
    out["copied"] = int(out["copied"])
    # NaN: the copier has not measured its lag yet (no partitions assigned): unknown, shown as such
    out["lag_records"] = None if math.isnan(out["lag_records"]) else int(out["lag_records"])
    out["lag_seconds"] = None if math.isnan(out["lag_seconds"]) else round(float(out["lag_seconds"]), 3)
    out["missing_at_source"] = out["skipped"].get("missing_at_source", 0)
    if out["videos_copied"] is not None:
        out["videos_copied"] = int(out["videos_copied"])
    out["videos_pending"] = None if math.isnan(out["videos_pending"]) else int(out["videos_pending"])
    out["videos_lag_seconds"] = (None if math.isnan(out["videos_lag_seconds"])
                                 else round(float(out["videos_lag_seconds"]), 3))
    return out


class DrService:
    def __init__(self, settings: DrSettings, backends: Backends, interval_s: float) -> None:
        self.settings, self.backends = settings, backends
        self.interval_ms = max(int(interval_s * 1000), 1)
        self._table = ConsoleTable(backends.hbase, tables.DR_LAG_TABLE)
        self._sampler = Sampler("dr-lag-sampler", self.interval_ms / 1000, self.sample, log=log, what="DR lag sample",
                                expected=(BackendUnavailable,), expected_level=logging.DEBUG)
        """No mirror running is nothing to record: its samples are skipped quietly."""
        self._drill: tuple[str, subprocess.Popen[bytes]] | None = None
        self._switchover: tuple[dict[str, str], subprocess.Popen[bytes], Path] | None = None
        self._drill_lock = threading.Lock()

    # -- the active site ---------------------------------------------------------------------------
    def active_site(self) -> dict[str, Any]:
        """Which site runs the business, since when and why; the primary, since nobody knows when, without a record
        (make up writes one at its first start); 503 naming ``active_site`` for a record that is not one."""
        try:
            site = active_site.read_record(self.settings.site_record)
        except active_site.SiteRecordError as exc:
            raise BackendUnavailable("active_site", str(exc)) from None
        if site is None:
            return {"active": "primary", "since": None, "reason": "", "switching_to": None, "last": None}
        return {"active": site.active, "since": site.since.isoformat(), "reason": site.reason,
                "switching_to": site.switching_to, "last": site.last}

    # -- lag ---------------------------------------------------------------------------------------
    def lag_now(self) -> list[dict[str, Any]]:
        """The lag per partition now of the mirror copying from the active site (the mirror back once the DR site is
        active); 503 naming ``dr_mirror`` when it does not answer."""
        url = self.settings.reverse_metrics_url if self.active_site()["active"] == "dr" else self.settings.metrics_url
        try:
            with urllib.request.urlopen(url, timeout=self.settings.timeout_s) as response:
                return parse_lag(response.read().decode())
        except OSError as exc:
            raise BackendUnavailable("dr_mirror", exc) from None

    def images_now(self) -> dict[str, Any]:
        """The DR image copier's lag and counts now; 503 naming ``dr_images`` when it does not answer."""
        try:
            with urllib.request.urlopen(self.settings.images_metrics_url,
                                        timeout=self.settings.timeout_s) as response:
                return parse_images(response.read().decode())
        except OSError as exc:
            raise BackendUnavailable("dr_images", exc) from None

    def sample(self, now_ms: int | None = None) -> int:
        """Record the mirror's lag now (time rounded down to the interval); returns how many partitions."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        at = now_ms - now_ms % self.interval_ms
        partitions = self.lag_now()
        with self._table.open() as table:
            table.put(tables.lag_row_key(MIRROR_ID, at),
                      tables.lag_row(at, [(p["topic"], p["partition"], p["lag"]) for p in partitions]))
        return len(partitions)

    def history(self, window_ms: int = WINDOW_MS, now_ms: int | None = None) -> list[dict[str, Any]]:
        """The samples of the last ``window_ms``, oldest first."""
        now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        with self._table.open() as table:
            rows = list(table.scan(row_start=tables.lag_row_key(MIRROR_ID, now_ms),
                                   row_stop=tables.lag_row_key(MIRROR_ID, max(now_ms - window_ms, 1) - 1),
                                   limit=window_ms // self.interval_ms + 2))
        points = []
        for _key, cells in reversed(rows):
            sample = tables.read_lag(cells)
            points.append({"time_ms": sample["time_ms"], "total": sample["total"],
                           "partitions": [{"topic": t, "partition": p, "lag": lag}
                                          for t, p, lag in sample["partitions"]]})
        return points

    # -- checkpoints -------------------------------------------------------------------------------
    def checkpoints(self) -> list[dict[str, Any]]:
        """The newest MM2 checkpoint per (group, topic, partition) on the DR cluster, with its record time."""
        topic = f"{self.settings.source_alias}.checkpoints.internal"
        consumer = Consumer({**self.settings.client, "group.id": "console-dr",
                             "enable.auto.commit": False, "log_level": 0})
        latest: dict[tuple[str, str, int], dict[str, Any]] = {}
        try:
            metadata = consumer.list_topics(topic, timeout=self.settings.timeout_s).topics.get(topic)
            if metadata is None or metadata.error is not None:
                return []
            ends = {}
            for p in metadata.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self.settings.timeout_s)
                if high > low:
                    ends[p] = high
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            deadline = time.monotonic() + 10
            while ends and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.5):
                    if msg.error():
                        continue
                    if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                        ends.pop(msg.partition(), None)
                    try:
                        cp = Checkpoint.decode(msg.key() or b"", msg.value() or b"")
                    except FormatError as exc:
                        skipped(READER, topic, exc.reason, f"partition {msg.partition()} offset {msg.offset()}: {exc}",
                                record=(msg.partition(), msg.offset()))
                        continue
                    latest[(cp.group, cp.topic, cp.partition)] = {
                        "group": cp.group, "topic": cp.topic, "partition": cp.partition,
                        "upstream_offset": cp.upstream_offset, "downstream_offset": cp.downstream_offset,
                        "time_ms": msg.timestamp()[1]}
        except KafkaException as exc:
            raise BackendUnavailable("dr_bus", exc) from None
        finally:
            consumer.close()
        return [latest[k] for k in sorted(latest)]

    # -- drills ------------------------------------------------------------------------------------
    def _report_dir(self, name: str) -> Path:
        path = self.settings.reports_dir / name
        if not REPORT_NAME.fullmatch(name) or not (path / "drill.json").is_file():
            raise NotFound("drill report", name)
        return path

    def reports(self) -> list[dict[str, Any]]:
        """Every finished drill, newest first: its name, when it ended, and its JSON figures."""
        found = []
        root = self.settings.reports_dir
        for path in root.iterdir() if root.is_dir() else ():
            try:
                report = json.loads((path / "drill.json").read_text())
            except (OSError, ValueError):
                continue  # running, or not a drill directory
            found.append({"name": path.name, "finished": _iso((path / "drill.json").stat().st_mtime),
                          "scenario": report.get("scenario"), "has_chart": (path / "drill.png").is_file(),
                          "report": report})
        return sorted(found, key=lambda r: r["finished"], reverse=True)

    def report(self, name: str) -> dict[str, Any]:
        path = self._report_dir(name)
        return {"name": name, "finished": _iso((path / "drill.json").stat().st_mtime),
                "report": json.loads((path / "drill.json").read_text()),
                "markdown": (path / "drill.md").read_text() if (path / "drill.md").is_file() else None,
                "has_chart": (path / "drill.png").is_file()}

    def report_file(self, name: str, kind: str) -> Path:
        path = self._report_dir(name) / REPORT_FILES[kind]
        if not path.is_file():
            raise NotFound("drill report file", f"{name}/{REPORT_FILES[kind]}")
        return path

    def running(self) -> dict[str, Any] | None:
        with self._drill_lock:
            if self._drill is None:
                return None
            name, proc = self._drill
            code = proc.poll()
            return {"name": name, "running": code is None, "exit_code": code}

    def start_drill(self, scenario: str, ingest: bool = True) -> str:
        """Start ``python -m dr_mirror.drill`` into a new report directory; Conflict while one runs."""
        with self._drill_lock:
            if self._drill is not None and self._drill[1].poll() is None:
                raise Conflict(f"drill {self._drill[0]} is still running")
            name = f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{scenario}"
            report = self.settings.reports_dir / name
            report.mkdir(parents=True)
            # mirror-crash with ingest also measures the capture images (each throw-away site gets an object store,
            # the image copier crashes with the mirror): its report counts the images missing at the DR site. A
            # bus-only drill (no ingest) has no stores either.
            args = ["--scenario", scenario, "--report", str(report), *([] if ingest else ["--no-ingest"]),
                    *(["--images"] if scenario == "mirror-crash" and ingest else [])]
            proc = spawn([sys.executable, "-m", "dr_mirror.drill", *args], report / "drill.log")
            self._drill = (name, proc)
            return name

    # -- switchover ---------------------------------------------------------------------------------
    def start_switchover(self, to: str, reason: str, force: bool) -> dict[str, Any]:
        """Start ``python -m dr_mirror switchover`` on make up's data directory (its log under ``DATA/dr/switchovers``);
        Conflict while the one this console started runs (another's is refused by the command's own lock)."""
        with self._drill_lock:
            if self._switchover is not None and self._switchover[1].poll() is None:
                raise Conflict(f"the switchover to {self._switchover[0]['to']} is still running")
            log = self.settings.make_up_dir / "dr" / "switchovers" / f"{datetime.now(UTC):%Y%m%dT%H%M%S.%fZ}-{to}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            proc = spawn([sys.executable, "-m", "dr_mirror", "switchover", "--to", to, "--data-dir",
                          str(self.settings.make_up_dir), "--reason", reason, *(["--force"] if force else [])], log)
            self._switchover = ({"to": to, "reason": reason}, proc, log)
        return self.switchover_state() or {}

    def switchover_state(self) -> dict[str, Any] | None:
        """The switchover this console started last: whether it runs, its exit code and its last lines."""
        with self._drill_lock:
            if self._switchover is None:
                return None
            asked, proc, log = self._switchover
        code = proc.poll()
        said = log.read_text(errors="replace").splitlines()[-12:] if log.exists() else []
        return {**asked, "running": code is None, "exit_code": code, "said": "\n".join(said)}

    # -- the sampler thread ------------------------------------------------------------------------
    def start(self) -> None:
        self._sampler.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._sampler.stop(timeout)


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat(timespec="seconds")
