"""A Spark standalone cluster from the pyspark jars: Spark's own master and workers
(``org.apache.spark.deploy.master.Master``, ``org.apache.spark.deploy.worker.Worker`` through ``spark-class``).

`make up SPARK=N` runs every job on one of these (N workers); tests run jobs on it the way a city runs them on its
cluster. Each worker has a work directory of its own (where the executors unpack the shipped environment) and a
log file beside it. ``wrap`` turns a worker's command into another (tests start workers in mount namespaces that hide
this checkout, to prove an executor needs nothing of it, or on hosts of their own), ``spark_home`` is the Spark the
workers run from (it must be visible inside such a namespace). The master binds ``host``; each worker binds and
advertises ``host`` too unless ``worker_hosts`` gives it an address of its own (a worker on another host, which
``wrap`` then starts there; ``wrap_master`` likewise places the master).

The cluster is up when the master's JSON status counts every worker ALIVE.

Nothing of it accepts work unauthenticated beyond what the solution uses: since Spark 4.1 the master also serves a
REST submission server (port 6066) by default, which runs any driver it is sent without authentication (Spark's own
advisory, CVE-2018-11770); it is turned off (``spark.master.rest.enabled=false``), as are the web UIs' kill buttons
(``spark.ui.killEnabled=false``: the UIs have no login).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from contracts import processes as child
from contracts.ports import free_port, wait_for_port

SPARK_HOME = Path(__import__("pyspark").__file__).parent
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
GRACE_S = 20.0
LOCKED_DOWN = {
    "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false -Dspark.ui.killEnabled=false",
    "SPARK_WORKER_OPTS": "-Dspark.ui.killEnabled=false",
}
"""Java options of the master and the workers (added to any the environment sets): see the module's docstring."""

Wrap = Callable[[int, list[str]], list[str]]
"""(worker index, its command) -> the command to run instead."""


@dataclass
class SparkCluster:
    data_dir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "1g"
    host: str = "127.0.0.1"
    wrap: Wrap | None = None
    worker_hosts: Sequence[str] = ()
    wrap_master: Callable[[list[str]], list[str]] | None = None
    spark_home: Path = SPARK_HOME
    port: int = 0
    webui_port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def ui(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def worker_dir(self, index: int) -> Path:
        return self.data_dir / f"worker-{index}"

    def worker_host(self, index: int) -> str:
        return self.worker_hosts[index] if self.worker_hosts else self.host

    def _env(self, spark_home: Path, host: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON")}
        return {**env, "SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": host,
                "SPARK_LOG_DIR": str(self.data_dir), "SPARK_NO_DAEMONIZE": "1",
                **{name: f"{env.get(name, '')} {options}".strip() for name, options in LOCKED_DOWN.items()}}

    def _class(self, spark_home: Path, main: str, *args: str) -> list[str]:
        return [str(spark_home / "bin" / "spark-class"), main, *args]

    def start(self, timeout: float = 120.0) -> SparkCluster:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.webui_port = self.webui_port or free_port()
        master = self._class(SPARK_HOME, MASTER, "--host", self.host,
                             "--port", str(self.port), "--webui-port", str(self.webui_port))
        self.procs.append(child.spawn(master if self.wrap_master is None else self.wrap_master(master),
                                      self.data_dir / "master.log", env=self._env(SPARK_HOME, self.host),
                                      die_with_parent=True))
        wait_for_port(self.webui_port, timeout, self.host)
        for index in range(self.workers):
            work = self.worker_dir(index)
            work.mkdir(parents=True, exist_ok=True)
            host = self.worker_host(index)
            cmd = self._class(self.spark_home, WORKER, "--host", host, "--cores", str(self.cores),
                              "--memory", self.memory, "--work-dir", str(work), "--webui-port", "0", self.url)
            self.procs.append(child.spawn(cmd if self.wrap is None else self.wrap(index, cmd),
                                          self.data_dir / f"worker-{index}.log", env=self._env(self.spark_home, host),
                                          die_with_parent=True))
        self._wait_alive(timeout)
        return self

    def status(self) -> dict[str, object]:
        """The master's JSON status. ValueError while its UI is still starting: the UI attaches its pages one by
        one, and until ``/json`` is attached the root page answers for it in HTML (a CI run failed on that)."""
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as response:  # Spark says text/json
            status: dict[str, object] = json.load(response)
            return status

    def _wait_alive(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark process exited with {proc.returncode}: see {self.data_dir}/*.log")
            try:
                if self.status().get("aliveworkers") == self.workers:
                    return
            except (OSError, ValueError):  # not listening yet, or its UI still starting
                pass
            time.sleep(0.5)
        raise TimeoutError(f"Spark master at {self.ui} did not see {self.workers} workers in {timeout}s")

    def worker(self, index: int) -> subprocess.Popen[bytes]:
        """Worker ``index``'s process (the JVM, or the wrapper that exec'd it)."""
        return self.procs[1 + index]

    def executor_dirs(self, index: int) -> list[Path]:
        """The executors worker ``index`` has run (``<work-dir>/<app id>/<executor id>/``, with their logs)."""
        return sorted(path for path in self.worker_dir(index).glob("app-*/*") if path.is_dir())

    def stop(self) -> None:
        for proc in reversed(self.procs):  # workers first: they kill their executors
            child.terminate(proc, GRACE_S)
        self.procs.clear()

    def __enter__(self) -> SparkCluster:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def hidden(paths: Sequence[Path], binds: Sequence[tuple[Path, Path]]) -> Wrap:
    """A wrapper that runs a worker in a mount namespace of its own (``unshare``), where each of ``binds``
    (source, target) is bind-mounted first and each of ``paths`` is then covered by an empty tmpfs: the worker, and
    every executor it starts, cannot see them."""
    script = "set -e; " + "; ".join([*(f"mount --bind '{src}' '{dst}'" for src, dst in binds),
                                     *(f"mount -t tmpfs tmpfs '{path}'" for path in paths)]) + '; exec "$@"'

    def wrap(_index: int, cmd: list[str]) -> list[str]:
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "worker", *cmd]

    return wrap
