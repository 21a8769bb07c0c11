"""The processes of a drill: one site (a `bus broker`, its HBase gateway, the capture ingest job) and the mirror;
with ``--images``, each site's object store and the DR image copier between them (:class:`ImageSites`).

Everything runs on free ports under the drill's work directory so a drill never touches `make up`'s
services. A site's ingest job is the real one (`spark_jobs/ingest_captures.py`); the DR site's publishes
its stats and dead letters beside the mirrored topics (``contracts.topics.DR_PREFIX``), because the mirror
must be the only writer of a topic it mirrors into.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import happybase
import tomli_w
from thriftpy2.thrift import TException

from contracts.config import Config
from contracts.ports import free_port, wait_for_port
from contracts.processes import ROOT, kill, spawn, terminate
from contracts.tables import captures
from contracts.topics import DR_PREFIX, Topics
from deploy.dr_site import DrObjectStore, broker_command, mirror_properties
from deploy.object_store import ObjectStore
from deploy.processes.dr_images import DrImagesProcess
from deploy.processes.dr_images import command as images_command
from deploy.processes.mirror import MirrorProcess
from dr_mirror.drill.report import image_gaps
from dr_mirror.images import S3Store, Unavailable, image_keys
from spark_jobs import launch

CAPTURE_TABLES = ("vehicle", "face", "capture_unrecognized")
TASK_RETRIES = 4
"""Attempts per task of a drill's ingest job. Local mode gives a task one attempt (``spark.task.maxFailures``
is ignored there), so a Python worker lost mid-task fails the batch, the query and the job; ``local[N,F]``
retries the task instead (its rows are idempotent writes)."""


def with_task_retries(master: str, retries: int = TASK_RETRIES) -> str:
    """``local[N]`` -> ``local[N,retries]``; any other master (already ``local[N,F]``, a cluster) as it is."""
    match = re.fullmatch(r"local\[(\d+|\*)\]", master)
    return f"local[{match.group(1)},{retries}]" if match else master


class Child:
    """A subprocess of the drill with its log; `kill()` is kill -9."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args, self.log = args, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Child:
        self.proc = spawn(self.args, self.log)
        return self

    def kill(self) -> None:
        if self.proc:
            kill(self.proc)

    def stop(self) -> None:
        if self.proc:
            terminate(self.proc, 20)


class Site:
    """One machine room: a broker, and with ``ingest`` its HBase gateway and capture ingest job."""

    BROKER_OVERRIDES = ("group.initial.rebalance.delay.ms=0", "offsets.topic.replication.factor=1",
                        "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1")

    def __init__(self, name: str, work: Path, ingest: bool, dr: bool = False) -> None:
        self.name, self.work, self.ingest, self.dr = name, work, ingest, dr
        self.port, self.controller, self.hbase_port = free_port(), free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.broker: Child | None = None
        self.gateway: Child | None = None
        self.job: launch.SparkJob | None = None
        self.generation = 0  # a rebuilt broker or restarted job gets a fresh log dir / checkpoint

    def start_broker(self, fresh: bool = False) -> None:
        """Start (or restart) the broker; ``fresh``: on an empty log dir, the old one kept beside it."""
        self.generation += fresh
        cmd = broker_command(self.work / f"{self.name}-bus-{self.generation}", "127.0.0.1", self.port, self.controller)
        for override in self.BROKER_OVERRIDES:
            cmd += ["--override", override]
        self.broker = Child(cmd, self.work / f"{self.name}-bus.log").start()
        wait_for_port(self.port, 60)

    def start_hbase(self) -> None:
        if not self.ingest:
            return
        cmd = [sys.executable, "-m", "deploy.hbase_gateway", "--port", str(self.hbase_port),
               "--data-dir", str(self.work / f"{self.name}-hbase")]
        self.gateway = Child(cmd, self.work / f"{self.name}-hbase.log")
        self.gateway.start()
        wait_for_port(self.hbase_port, 60)

    @property
    def status_file(self) -> Path:
        return self.work / f"{self.name}-ingest-status-{self.generation}.json"

    def start_ingest(self, config: Config) -> None:
        """The capture ingest job over this site's bus into its HBase, from a checkpoint of this generation.

        Started again with the same generation (by the drill's supervisor) it resumes from that checkpoint: Spark
        replays the uncommitted batch onto the same row keys, nothing is lost.
        """
        if not self.ingest:
            return
        topics = Topics.from_config(config)
        own = ["--stats-topic", DR_PREFIX + topics.ingest_stats, "--deadletter-topic",
               DR_PREFIX + topics.deadletter] if self.dr else []
        settings = launch.SparkSettings.from_config(config.section("spark"))
        with open(self.work / f"{self.name}-ingest.log", "ab") as log:
            self.job = launch.submit(
                ROOT / "spark_jobs" / "ingest_captures.py",
                ["--bootstrap-server", self.bootstrap, "--hbase-host", "127.0.0.1",
                 "--hbase-port", str(self.hbase_port),
                 "--checkpoint", str(self.work / f"{self.name}-checkpoint-{self.generation}"),
                 "--status-file", str(self.status_file), "--trigger-ms", "500", *own],
                replace(settings, master=with_task_retries(settings.master)), stdout=log, stderr=subprocess.STDOUT)

    def ingest_exited(self) -> int | None:
        """The ingest job's exit status, None while it runs (or none was started)."""
        return None if self.job is None else self.job.poll()

    def ingest_ready(self) -> bool:
        """The job runs and a micro-batch has finished on its checkpoint (the status file exists). A job restarted
        on an idle bus runs no batch until records come, so its predecessor's batch counts."""
        return self.job is not None and self.ingest_exited() is None and self.status_file.exists()

    def ingest_errors(self) -> list[str]:
        """The last exception lines of the ingest job's log, for a message."""
        log = self.work / f"{self.name}-ingest.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        return [line for line in lines if "Exception" in line][-2:]

    def lose(self) -> None:
        """The machine room is lost: kill -9 of everything in it."""
        if self.job is not None:
            self.job.kill()
        for child in (self.gateway, self.broker):
            if child is not None:
                child.kill()

    def stop(self) -> None:
        if self.job is not None and self.job.poll() is None:
            self.job.stop(30)
        for child in (self.gateway, self.broker):
            if child is not None:
                child.stop()

    def hbase_ids(self) -> Counter[str]:
        """Record ids with rows in this site's capture tables (main and unrecognized), with their row counts."""
        counts: Counter[str] = Counter()
        conn = happybase.Connection("127.0.0.1", self.hbase_port, timeout=60_000)
        try:
            tables = {name.decode() for name in conn.tables()}
            for table in CAPTURE_TABLES:
                if table in tables:
                    for key, _ in conn.table(table).scan(batch_size=5000, filter=b"KeyOnlyFilter()"):
                        counts[captures.record_id_of(key)] += 1
        finally:
            conn.close()
        return counts

    def hbase_has_any(self, record_ids: list[tuple[str, str]]) -> bool:
        """Whether any of (kind, record id) has its main row in this site's HBase."""
        conn = happybase.Connection("127.0.0.1", self.hbase_port, timeout=30_000)
        try:
            return any(conn.table(kind).rows([captures.record_key(rid) for k, rid in record_ids if k == kind])
                       for kind in ("vehicle", "face") if any(k == kind for k, _ in record_ids))
        except (OSError, TException):  # tables not created yet, or the gateway busy: not there yet
            return False
        finally:
            conn.close()


def start_site_mirror(name: str, work: Path, source: Site, target: Site, config: Config) -> MirrorProcess:
    """`python -m dr_mirror` from one site to another, with the solution's generated properties."""
    props = work / f"{name}.properties"
    props.write_text(mirror_properties(source.bootstrap, target.bootstrap, config, intervals_s=1,
                                       aliases=(source.name, target.name)))
    return MirrorProcess(["--config", str(props)], work / f"{name}.log", free_port()).start()


class ImageSites:
    """Each site's object store (the primary's, and the DR site's with its own keys and rights) and the image copier
    (`python -m dr_mirror.images`, as `make up --dr-site` runs it) following the DR site's capture topics. The
    devices put their images into the primary's store before they publish (:meth:`upload`)."""

    def __init__(self, work: Path, dr_bootstrap: str) -> None:
        self.work, self.dr_bootstrap = work, dr_bootstrap
        # the stores' data in a short path of their own: `weed` binds unix sockets there (at most 107 bytes), and a
        # drill's work directory sits in its report directory, deep under the console's data dir
        self.stores = Path(tempfile.mkdtemp(prefix="drill-s3-"))
        self.primary = ObjectStore(self.stores / "primary", port=0)
        self.dr = DrObjectStore(self.stores / "dr", port=0, secrets_dir=self.stores / "dr-secrets")
        self.metrics_port = free_port()
        self.copier: DrImagesProcess | None = None
        self._devices: S3Store | None = None
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self.primary.start()
        self.dr.start()
        config = self.work / "images.toml"
        config.write_text(tomli_w.dumps({"dr": {"bootstrap_servers": self.dr_bootstrap},
                                         "object_storage": {"endpoint": self.primary.endpoint}}))
        self.copier = DrImagesProcess(images_command(
            config, self.primary.credentials_file("dr-images"), self.dr.credentials_file("dr-images"),
            metrics_port=self.metrics_port, source_endpoint=self.primary.endpoint, target_endpoint=self.dr.endpoint),
            self.work / "dr-images.log").start()
        self._devices = S3Store(self.primary.endpoint, self.primary.credentials("simulator"), connections=8)
        self._pool = ThreadPoolExecutor(8, thread_name_prefix="drill-uploads")

    def upload(self, images: list[tuple[str, bytes]]) -> None:
        """The devices' uploads of one batch of captures, before they publish it."""
        assert self._pool is not None and self._devices is not None
        devices = self._devices

        def put(item: tuple[str, bytes]) -> None:
            # a failed upload: published without its image, as a device whose upload failed (missing at both sites)
            with contextlib.suppress(Unavailable):
                devices.put(*item)

        list(self._pool.map(put, images))

    def lag(self) -> float | None:
        """The copier's ``dr_images_lag_records`` (None while it does not answer; NaN until it has measured)."""
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=1).read().decode()
        except OSError:
            return None
        found = [line for line in text.splitlines() if line.startswith("dr_images_lag_records ")]
        return float(found[0].split()[1]) if found else None

    def gaps(self) -> dict[str, int]:
        """The images the DR topics' records name, counted by where they are (``report.image_gaps``)."""
        records, keys = image_keys({"bootstrap.servers": self.dr_bootstrap}, list(Topics().captures))
        at_primary = S3Store(self.primary.endpoint, self.primary.credentials("admin"))
        at_dr = S3Store(self.dr.endpoint, self.dr.credentials("admin"))
        return {"dr_records_naming_images": records, **image_gaps(keys, at_primary.exists, at_dr.exists)}

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        if self.copier is not None:
            self.copier.stop()
        self.dr.stop()
        self.primary.stop()
        for site in ("primary", "dr"):  # their logs stay with the drill's
            with contextlib.suppress(OSError):
                shutil.copy(self.stores / site / "weed.log", self.work / f"{site}-s3-weed.log")
        shutil.rmtree(self.stores, ignore_errors=True)
