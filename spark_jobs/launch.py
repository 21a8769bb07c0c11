"""How every Spark job of the solution is started: one place for `make up`, ``python -m spark_jobs.submit``, tests
and benchmarks.

The settings are light local ones, measured on a 2-core machine: the driver and Python
workers from the checkout's venv, loopback only, ``local[2]`` with a 512 MB driver, no UI, two
shuffle partitions. A JVM class-data-sharing (CDS) archive halves start-up: the first launch that
finds none records one (into a private file, adopted only after a clean exit, so parallel or killed
runs never leave a half-written archive behind) and later launches map it.

With a cluster master (``spark://...``) the driver still runs here (client mode: it reads the job's script and
its checkpoint from this host), and the executors get what they need from Spark itself (:mod:`spark_jobs.packaging`):
the packed Python environment as ``spark.archives``, the project's code as ``spark.submit.pyFiles``, executors of one
core and ``[spark] executor_memory`` (a worker of one core and 1 GiB holds one), at most ``[spark] cores_max`` cores
per job, so several streaming jobs share a cluster instead of the first one taking every core.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from contracts import processes as child
from spark_jobs import packaging

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
DEFAULT_CDS = ROOT / ".venv" / "spark-cds.jsa"

LIGHT_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.log.level": "WARN",
    # Python Data Source planning and reads: keep the Python workers between tasks.
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.stopActiveRunOnRestart": "true",
}


@dataclass(frozen=True)
class SparkSettings:
    master: str = "local[2]"
    driver_memory: str = "512m"
    cds_archive: Path | None = DEFAULT_CDS
    conf: Mapping[str, str] = field(default_factory=dict)
    executor_memory: str = "512m"
    cores_max: int = 2
    nice: int = 0
    """Lower CPU priority of the driver, its JVM and Python workers (`contracts.processes.niced`); local jobs."""

    @classmethod
    def from_config(cls, section: Mapping[str, object]) -> SparkSettings:
        cds = section.get("cds_archive", str(DEFAULT_CDS))
        return cls(
            master=str(section.get("master", "local[2]")),
            driver_memory=str(section.get("driver_memory", "512m")),
            cds_archive=Path(str(cds)) if cds else None,
            conf={str(k): str(v) for k, v in dict(section.get("conf", {}) or {}).items()},  # type: ignore[call-overload]
            executor_memory=str(section.get("executor_memory", "512m")),
            cores_max=int(str(section.get("cores_max", 2))),
        )

    @property
    def on_cluster(self) -> bool:
        """Executors on other hosts (any master but ``local``): they get the environment and code shipped."""
        return not self.master.startswith("local")

    @property
    def local_ip(self) -> str | None:
        """The address the driver binds and hands its executors (Spark's ``SPARK_LOCAL_IP``): ``spark.driver.host``
        when the config names one (a driver on a cluster's network: executors on other hosts connect back to it),
        loopback for a local master or one on loopback, else None (Spark takes the host's own address)."""
        if "spark.driver.host" in self.conf:
            return self.conf["spark.driver.host"]
        host = self.master.removeprefix("spark://").split(",")[0].rsplit(":", 1)[0]
        return "127.0.0.1" if not self.on_cluster or host in ("127.0.0.1", "localhost") else None

    def cluster_conf(self, progress: packaging.Progress) -> dict[str, str]:
        """What a cluster's executors need (module docstring); building the environment the first time."""
        if VENV_BIN != ROOT / packaging.ENVIRONMENT / "bin":
            raise packaging.PackagingError(
                f"a cluster submission runs its driver from {ROOT / packaging.ENVIRONMENT} (`make install`), whose "
                f"Python its executors' environment stands in for; this is {VENV_BIN.parent}")
        environment = packaging.executor_environment(progress=progress)
        return {
            "spark.archives": f"{environment}#{packaging.ENVIRONMENT}",
            "spark.submit.pyFiles": str(packaging.project_archive()),
            "spark.pyspark.python": f"./{packaging.ENVIRONMENT}/bin/python",
            "spark.pyspark.driver.python": str(VENV_BIN / "python"),
            "spark.executor.cores": "1",
            "spark.executor.memory": self.executor_memory,
            "spark.cores.max": str(self.cores_max),
        }


def spark_submit() -> Path:
    """The venv's spark-submit (installed with pyspark)."""
    return VENV_BIN / "spark-submit"


def environment(base: Mapping[str, str] | None = None, local_ip: str | None = "127.0.0.1") -> dict[str, str]:
    """The driver's environment: the venv's Python for the driver (and local workers), the checkout importable, and
    ``SPARK_LOCAL_IP`` set to ``local_ip`` (``SparkSettings.local_ip``), or as the environment has it when None."""
    env = dict(os.environ if base is None else base)
    if local_ip:
        env["SPARK_LOCAL_IP"] = local_ip
    python = str(VENV_BIN / "python")
    env.update({
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "PYTHONUNBUFFERED": "1",
    })
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{existing}" if existing else str(ROOT)
    return env


def _java_options(cds: Path | None) -> tuple[list[str], Path | None]:
    """JVM flags for the driver, and the private file a new CDS archive is recorded into (if any)."""
    opts = ["-Xss4m"]
    if cds is None:
        return opts, None
    if cds.exists():
        return [*opts, f"-XX:SharedArchiveFile={cds}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"], None
    cds.parent.mkdir(parents=True, exist_ok=True)
    pending = cds.with_name(f"{cds.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    return [*opts, f"-XX:ArchiveClassesAtExit={pending}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"], pending


def command(script: Path | str, args: Sequence[str], settings: SparkSettings,
            progress: packaging.Progress = lambda _: None) -> tuple[list[str], Path | None]:
    java_opts, pending = _java_options(settings.cds_archive)
    cmd = [
        *child.niced(settings.nice),
        str(spark_submit()),
        "--master", settings.master,
        "--driver-memory", settings.driver_memory,
        "--driver-java-options", " ".join(java_opts),
    ]
    cluster = settings.cluster_conf(progress) if settings.on_cluster else {}
    for key, value in {**LIGHT_CONF, **cluster, **settings.conf}.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, str(script), *args], pending


@dataclass
class SparkJob:
    """A running ``spark-submit``; :meth:`wait` / :meth:`stop` adopt a freshly recorded CDS archive."""

    proc: subprocess.Popen[bytes]
    cds_archive: Path | None
    pending_cds: Path | None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        code = self.proc.poll()
        if code is not None:
            self._adopt_archive(code)
        return code

    def wait(self, timeout: float | None = None) -> int:
        code = self.proc.wait(timeout)
        self._adopt_archive(code)
        return code

    def _signal(self, sig: int) -> None:
        """Signal the job's whole process group: the JVM, the Python driver and its Python workers."""
        with contextlib.suppress(ProcessLookupError, PermissionError):  # the group may be gone already
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL to every process of the job, like a crash: no shutdown hook runs, nothing is archived."""
        self._signal(signal.SIGKILL)
        self.proc.wait(30)
        self._adopt_archive(-9)

    def python_driver(self) -> int | None:
        """The pid of the Python driver spark-submit started (a child of the JVM), if it runs."""
        with contextlib.suppress(OSError):
            # A JVM thread other than main starts it: look at the children of every thread.
            children = [pid for task in Path(f"/proc/{self.proc.pid}/task").iterdir()
                        for pid in (task / "children").read_text().split()]
            for pid in children:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                if any(part.endswith(b".py") for part in cmdline[1:]):
                    return int(pid)
        return None

    def stop(self, timeout: float = 60.0) -> int:
        """Graceful: SIGTERM to the Python driver, which stops its query between batches and exits
        (the JVM follows); the whole group gets SIGTERM, then SIGKILL, if that takes too long. Once the JVM has
        exited, whatever is left of the job's group (a Python driver that outlived it, its workers) gets SIGKILL:
        orphaned, it would run on unseen (a CI run left a video ingest driver running after its test)."""
        try:
            return self._stop(timeout)
        finally:
            self._signal(signal.SIGKILL)

    def _stop(self, timeout: float) -> int:
        driver = self.python_driver()
        if driver is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(driver, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                return self.wait(timeout)
        self._signal(signal.SIGTERM)
        try:
            return self.wait(30)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL)
        return self.wait(30)

    def _adopt_archive(self, code: int) -> None:
        pending, target = self.pending_cds, self.cds_archive
        if pending is None or target is None:
            return
        self.pending_cds = None
        if pending.exists() and pending.stat().st_size > 0 and code == 0 and not target.exists():
            os.replace(pending, target)
        else:
            pending.unlink(missing_ok=True)


def _say(line: str) -> None:
    print(f"spark: {line}", file=sys.stderr, flush=True)


def submit(script: Path | str, args: Sequence[str], settings: SparkSettings | None = None, *,
           stdout: IO[bytes] | int | None = None, stderr: IO[bytes] | int | None = None,
           progress: packaging.Progress = _say) -> SparkJob:
    """Start ``spark-submit script args`` in the background (light local settings unless ``settings`` say
    otherwise; on a cluster, after packing what its executors need, which ``progress`` reports)."""
    settings = settings or SparkSettings()
    cmd, pending = command(script, args, settings, progress)
    # From the checkout: the config's relative paths are relative to it, and so is the driver's ``./.venv`` (packaging)
    proc = child.spawn(cmd, stdout, stderr=stderr, env=environment(local_ip=settings.local_ip), cwd=ROOT,
                       new_session=True)
    return SparkJob(proc, settings.cds_archive, pending)
