"""The real services of the video pipeline (broker, HBase gateway, object store, a solution config naming them) and
the video ingest job as a process, for the tests and the benchmarks: `video_services(tmp)` starts the services and
stops them on exit, `start_ingest` starts (or restarts) ``spark_jobs/video_ingest.py`` and waits until it has taken
over; `VideoServices` also watches a task as the tests do (its HBase rows, its ``video.status`` records).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import happybase
from confluent_kafka import Consumer, Producer

from contracts.tables.video import (
    INDEX_TABLE,
    OBJECT_TABLE,
    TASK_LIST_TABLE,
    TASK_TABLE,
    object_prefix,
    task_row_key,
)
from contracts.topics import Topics
from contracts.video import encode
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from spark_jobs import launch
from video import storage
from video.scene import street_scene

TOPICS = Topics()
START = dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC)


@dataclass
class VideoServices:
    store: ObjectStore
    broker: BrokerProcess
    gateway: Gateway
    config: Path
    tmp: Path

    def s3(self) -> Any:
        return storage.connect(self.store.url, self.store.access_key, self.store.secret_key)

    def hbase(self) -> happybase.Connection:
        return happybase.Connection("127.0.0.1", self.gateway.port, timeout=60_000)

    def upload_scene(self, name: str, seconds: float, n_objects: int, seed: int, camera: str = "cam-1",
                     minute: int = 0) -> str:
        """A synthetic street clip in the ``videos`` bucket; returns its s3:// URL."""
        path = street_scene(seconds=seconds, n_objects=n_objects, seed=seed, width=320, height=180).write(
            self.tmp / name)
        return storage.upload_video(self.s3(), path, camera, START + dt.timedelta(minutes=minute)).url

    def publish(self, *values: dict[str, Any] | bytes, key: bytes = b"cam-1") -> None:
        producer = Producer({"bootstrap.servers": self.broker.bootstrap})
        for value in values:
            producer.produce(TOPICS.video_commands, key=key, value=value if isinstance(value, bytes) else encode(value))
        assert producer.flush(30) == 0

    def task(self, task_id: str) -> dict[str, str]:
        conn = self.hbase()
        try:
            cells = conn.table(TASK_TABLE).row(task_row_key(task_id))
        finally:
            conn.close()
        return {k.decode()[2:]: v.decode() for k, v in cells.items()}

    def wait_task(self, task_id: str, states: set[str], timeout: float = 300.0,
                  job: IngestJob | None = None) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        row: dict[str, str] = {}
        while time.monotonic() < deadline:
            row = self.task(task_id)
            if row.get("status") in states:
                return row
            if job is not None:
                assert job.proc.poll() is None, f"video ingest job exited:\n{job.log_tail()}"
            time.sleep(0.5)
        raise AssertionError(f"task {task_id} not {states} within {timeout}s: {row}\n"
                             f"{job.log_tail() if job else ''}")

    def objects(self, task_id: str) -> dict[bytes, dict[bytes, bytes]]:
        conn = self.hbase()
        try:
            return dict(conn.table(OBJECT_TABLE).scan(row_prefix=object_prefix(task_id)))
        finally:
            conn.close()

    def index_rows(self, task_id: str) -> list[dict[bytes, bytes]]:
        conn = self.hbase()
        try:
            return [cells for _key, cells in conn.table(INDEX_TABLE).scan() if cells[b"o:task_id"] == task_id.encode()]
        finally:
            conn.close()

    def listed_tasks(self) -> list[str]:
        conn = self.hbase()
        try:
            return [cells[b"t:task_id"].decode() for _key, cells in conn.table(TASK_LIST_TABLE).scan()]
        finally:
            conn.close()

    def statuses(self, task_id: str | None = None, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every ``video.status`` record so far (of one task, if given), in bus order per task."""
        return [r for r in read_topic(self.broker.bootstrap, TOPICS.video_status, timeout)
                if task_id is None or r["task_id"] == task_id]


def read_topic(bootstrap: str, topic: str, timeout: float) -> list[dict[str, Any]]:
    """All records of a topic from the start, until ``timeout`` passes with nothing new."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records = []
    try:
        quiet_until = time.monotonic() + timeout
        while time.monotonic() < quiet_until:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                records.append(json.loads(msg.value()))
                quiet_until = time.monotonic() + 1.0
    finally:
        consumer.close()
    return records


@contextlib.contextmanager
def video_services(tmp: Path) -> Iterator[VideoServices]:
    with ObjectStore(tmp / "s3", port=0) as store:
        broker = BrokerProcess(tmp / "bus").start()
        gateway = start_gateway(tmp / "hbase")
        config = tmp / "solution.toml"
        config.write_text(
            f'[bus]\nbootstrap_servers = "{broker.bootstrap}"\n'
            f'[hbase]\nhost = "127.0.0.1"\nport = {gateway.port}\n'
            f'[object_storage]\nendpoint = "{store.endpoint}"\ncredentials_dir = "{store.secrets}"\n'
            '[topics]\npartitions = 2\n')
        try:
            yield VideoServices(store, broker, gateway, config, tmp)
        finally:
            gateway.kill()
            broker.stop()


@dataclass
class IngestJob:
    """``spark_jobs/video_ingest.py`` as the deployment starts it (:func:`spark_jobs.launch.submit`)."""

    job: launch.SparkJob
    log: Path
    jobs_dir: Path

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        return self.job.proc

    def log_tail(self, size: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-size:]

    def batch_logs(self, task_id: str) -> list[Path]:
        return sorted(self.jobs_dir.glob(f"{task_id}.*.log"))

    def pid_file(self, task_id: str) -> Path:
        return self.jobs_dir / f"{task_id}.json"


def start_ingest(services: VideoServices, name: str, *flags: str) -> IngestJob:
    """Start (or, with a name used before, restart on the same checkpoint) the ingest job; returns once it
    has taken over (tables and topics exist, orphans killed)."""
    checkpoint = services.tmp / f"{name}-checkpoint"
    log = services.tmp / f"{name}.log"
    starts = _starts(log)
    with log.open("ab") as out:
        job = launch.submit(launch.ROOT / "spark_jobs" / "video_ingest.py",
                            ["--config", str(services.config), "--checkpoint", str(checkpoint), "--trigger-ms", "300",
                             "--s3-credentials", str(services.store.credentials_file("video-jobs")), *flags],
                            stdout=out, stderr=out)
    found = IngestJob(job, log, Path(f"{checkpoint}.jobs"))
    deadline = time.monotonic() + 180
    while _starts(log) == starts:
        if job.proc.poll() is not None or time.monotonic() >= deadline:
            raise RuntimeError(f"ingest job did not start:\n{found.log_tail()}")
        time.sleep(0.3)
    return found


def _starts(log: Path) -> int:
    return log.read_text(errors="replace").count('"started": true') if log.exists() else 0
