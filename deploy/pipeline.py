"""The capture slice under `make up`: the city simulator, the Spark ingest job, and their status line.

`deploy/up.py` starts the servers (bus, HBase gateway, ...) and then calls :meth:`Pipeline.start` here
once they accept connections, which starts the ingest job; once the job's query runs (:meth:`Pipeline.ready`: it
writes its status file before its first batch) :meth:`Pipeline.start_devices` starts the simulator. Devices that
started with the job would pile up a backlog while Spark starts (minutes on a loaded 2-core machine), which the
job then reads at a latency that fires the monitor's own alerts on a fresh install, and their load would slow
Spark's start further. :class:`Pipeline` owns the two processes and reads the ingest job's status file for the
periodic status line (records/s in, rows/s written, latency, rejects).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from contracts import s3_credentials
from contracts.config import Config
from contracts.deployment_map import map_path
from contracts.processes import spawn, terminate
from deploy import shutdown
from spark_jobs import launch

ROOT = Path(__file__).resolve().parents[1]
READY_WAIT_S = 600.0
"""How long the devices wait for the ingest job's query to run before they start regardless."""


@dataclass(frozen=True)
class Endpoints:
    bootstrap: str
    hbase_host: str
    hbase_port: int


class Pipeline:
    def __init__(self, data_dir: Path, endpoints: Endpoints, config: Config, rate: float | None = None,
                 simulator_key: Path | None = None) -> None:
        self.data_dir = data_dir
        self.simulator_key = simulator_key
        """The simulator's object-store key file (its capture images); None: the simulator looks for one itself."""
        self.endpoints = endpoints
        self.config = config
        self.rate = rate
        # Where the console and the monitor read the map ([map] path): the simulator writes it there, not in
        # the data dir, or a `make up DATA=elsewhere` would leave them reading another run's map.
        self.map_path = map_path(config)
        self.status_file = data_dir / "ingest-status.json"
        self.simulator: subprocess.Popen[bytes] | None = None
        self.job: launch.SparkJob | None = None
        self._logs: list[IO[bytes]] = []
        self.started = time.monotonic()
        self.seed: int | None = None
        """The simulator's seed once started (its recurring targets follow from it)."""
        self.launched_at = 0.0
        """Epoch seconds of the simulator's start (the map it writes is newer)."""

    def _log(self, name: str) -> IO[bytes]:
        handle = (self.data_dir / f"{name}.log").open("ab")
        self._logs.append(handle)
        return handle

    def start(self) -> list[str]:
        """Start the ingest job; returns the lines saying where to look (the simulator's included)."""
        e = self.endpoints
        checkpoint = self.data_dir / "spark" / "ingest_captures"
        self.status_file.unlink(missing_ok=True)
        self.job = launch.submit(
            ROOT / "spark_jobs" / "ingest_captures.py",
            ["--bootstrap-server", e.bootstrap, "--hbase-host", e.hbase_host, "--hbase-port", str(e.hbase_port),
             "--checkpoint", str(checkpoint), "--status-file", str(self.status_file),
             *(["--config", str(self.config.path)] if self.config.path else [])],
            launch.SparkSettings.from_config(self.config.section("spark")),
            stdout=self._log("ingest-job"), stderr=subprocess.STDOUT)
        return [
            f"  {'simulator':<14} {e.bootstrap} -> capture.vehicle / capture.face / device.heartbeat, images -> "
            f"s3://captures  (map: {self.map_path}); starts once the ingest job runs",
            f"  {'ingest job':<14} spark-submit spark_jobs/ingest_captures.py -> HBase tables vehicle, face, ..."
            f"  (status: {self.status_file})",
        ]

    def ready(self) -> bool:
        """The ingest job's query runs (its status file exists), or it took so long that the devices start anyway
        (:data:`READY_WAIT_S`: a job that never gets there shows it in its log and status line, with a backlog)."""
        return self.status_file.exists() or time.monotonic() - self.started > READY_WAIT_S

    def start_devices(self) -> None:
        """Start the simulator: the capture devices come online."""
        e = self.endpoints
        # A new seed and sequence base per start: record ids never collide with an earlier run's rows.
        self.launched_at = time.time()
        self.seed = run = int(self.launched_at)
        sim_args = [sys.executable, "-m", "ingest.simulate", "--bootstrap-server", e.bootstrap,
                    "--seed", str(run), "--first-sequence", str(run * 1000),
                    "--map", str(self.map_path)]
        if self.config.path:
            sim_args += ["--config", str(self.config.path)]
        if self.simulator_key is not None:  # capture images go to `captures`: a key file, never a key on a command line
            sim_args += ["--s3-credentials", str(self.simulator_key)]
            dr_key = self.simulator_key.parent / s3_credentials.DR_KEYS / self.simulator_key.name
            if dr_key.exists():  # a DR site's store (--dr-site): the images follow the active site as the records do
                sim_args += ["--dr-s3-credentials", str(dr_key)]
        if self.rate is not None:
            sim_args += ["--rate", str(self.rate)]
        self.simulator = spawn(sim_args, self.data_dir / "simulator.log")

    def failed(self) -> str | None:
        if self.simulator is not None and self.simulator.poll() is not None:
            return f"simulator exited ({self.simulator.returncode}); see {self.data_dir / 'simulator.log'}"
        if self.job is not None and self.job.poll() is not None:
            return f"ingest job exited ({self.job.proc.returncode}); see {self.data_dir / 'ingest-job.log'}"
        return None

    def status_line(self) -> str:
        try:
            status: dict[str, Any] = json.loads(self.status_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            waited = time.monotonic() - self.started
            return f"ingest: starting Spark ({waited:.0f}s; the first start also records a JVM archive)"
        if not status.get("batches"):
            return "ingest: the job runs; the capture devices come online"
        lat = status.get("latency_ms", {})
        rejected = sum(status.get("unrecognized", {}).values())
        invalid = sum(status.get("invalid", {}).values())
        return (f"ingest: {status.get('records_per_s', 0):.0f} records/s in, {status.get('rows_per_s', 0):.0f} rows/s "
                f"written, latency p50 {lat.get('p50')} ms p99 {lat.get('p99')} ms, rejected {rejected} unrecognized "
                f"+ {invalid} dead letters, {sum(status.get('valid', {}).values())} rows total")

    def stop(self) -> None:
        """The simulator and the job at once: the job finishes its batch (the checkpoint keeps its place) while the
        simulator flushes what it has produced; one after the other, their bounds added up."""
        if self.simulator is not None and self.simulator.poll() is None:
            self.simulator.terminate()
        if self.job is not None:
            self.job.stop(60)
        if self.simulator is not None:
            terminate(self.simulator, shutdown.SERVICE_GRACE_S)
        for handle in self._logs:
            handle.close()
