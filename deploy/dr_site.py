"""The disaster-recovery site: the mirror to its bus, and (on demand) its HBase and loaders.

`make up` starts the DR site's bus (secured like the primary's, `deploy/secured_bus.py`) and calls
:func:`mirror_service`: ``python -m dr_mirror`` copying the data topics to it, never the control topics, as the
``mirror`` principal at both ends (``[bus]`` and ``[dr]`` ``client_properties_dir``: MM2's ``primary.*`` and ``dr.*``
cluster keys). ``python -m deploy.up --dr-site`` or ``python -m deploy.dr_site`` start the rest (:class:`DrSite`:
the HBase gateway on ``[dr] hbase_port`` and the same loaders reading the mirrored topics), so after a failover the
DR site holds the same HBase tables.

The loaders get the primary's solution config pointed at the DR bus (as the ``dr-loaders`` principal) and HBase
(written to ``DATA/dr/solution.toml``), with one change: what the ingest job itself publishes (``ingest.stats``,
dead letters) goes to ``dr.``-prefixed topics (:data:`contracts.topics.DR_PREFIX`), because the mirror must be the
only writer of a mirrored topic (it resumes from the target's log end and keeps the source's offsets).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import tomli_w

from contracts import bus_client
from contracts.config import Config, add_config_flag, preparse_config
from contracts.processes import spawn, terminate
from contracts.topics import DR_PREFIX, SITE_ALIASES, Topics
from deploy import shutdown
from deploy.pki import write_private
from spark_jobs import launch

ROOT = Path(__file__).resolve().parents[1]
LOADERS = "dr-loaders"
"""The DR site's loaders' bus principal."""

Service = tuple[str, list[str], str]  # (name, command, where to look)


@dataclass(frozen=True)
class DrSettings:
    """The ``[dr]`` section, with the data-dir-relative paths resolved."""

    bootstrap: str
    controller_port: int
    hbase_host: str
    hbase_port: int
    metrics_port: int
    data_dir: Path
    reports_dir: Path

    @classmethod
    def from_config(cls, config: Config, data_dir: Path) -> DrSettings:
        return cls(bootstrap=str(config.get("dr", "bootstrap_servers", "127.0.0.1:19092")).split(",")[0],
                   controller_port=config.get("dr", "controller_port", 19093),
                   hbase_host=config.get("dr", "hbase_host", "127.0.0.1"),
                   hbase_port=config.get("dr", "hbase_port", 19090),
                   metrics_port=config.get("dr", "mirror_metrics_port", 9320),
                   data_dir=data_dir / config.get("dr", "data_dir", "dr"),
                   reports_dir=data_dir / config.get("dr", "reports_dir", "dr/drills"))

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])


def broker_command(log_dir: Path, host: str, port: int, controller_port: int, metrics_port: int = 0) -> list[str]:
    """A single-node combined broker+controller (`bus broker`) listening on ``port``; with ``metrics_port`` its
    Prometheus metrics (Kafka's names) on ``host:metrics_port``."""
    overrides = {"log.dirs": str(log_dir),
                 "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}",
                 "controller.quorum.voters": f"1@{host}:{controller_port}",
                 **({"bus.metrics.listener": f"{host}:{metrics_port}"} if metrics_port else {})}
    return [sys.executable, "-m", "bus", "broker",
            *(a for k, v in overrides.items() for a in ("--override", f"{k}={v}"))]


def mirror_properties(source: str | Mapping[str, str], target: str | Mapping[str, str], config: Config,
                      intervals_s: float = 5.0, aliases: tuple[str, str] = SITE_ALIASES) -> str:
    """MirrorMaker 2 properties for primary -> dr (or back): the solution's data topics in, control topics out.

    ``source`` and ``target`` are each a cluster's bootstrap servers (PLAINTEXT), or its client settings in Kafka's
    keys (:func:`contracts.bus_client.java`), written as MM2's cluster keys (``primary.security.protocol``, ...):
    the text then holds a password (see :func:`mirror_service`). Identity naming (topic names and offsets stay the
    same), group offsets synced to the target so the loaders resume there from translated offsets.
    """
    topics = Topics.from_config(config)
    include = ",".join(sorted(re.escape(t) for t in topics.data()))
    exclude = ",".join(sorted(re.escape(t) for t in topics.control()))
    seconds = f"{intervals_s:g}"
    a, b = aliases
    return "\n".join([
        "# Generated from the solution config by deploy/dr_site.py; MirrorMaker 2's dedicated-mode format.",
        f"clusters = {a}, {b}",
        *(f"{alias}.{key} = {_escaped(value)}" for alias, cluster in ((a, source), (b, target))
          for key, value in ({"bootstrap.servers": cluster} if isinstance(cluster, str) else cluster).items()),
        f"{a}->{b}.enabled = true",
        f"{a}->{b}.topics = {include}",
        f"{a}->{b}.topics.exclude = {exclude}",
        "replication.policy.class = org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "sync.group.offsets.enabled = true",
        *(f"{key} = {seconds}" for key in ("emit.checkpoints.interval.seconds", "sync.group.offsets.interval.seconds",
                                           "refresh.topics.interval.seconds", "refresh.groups.interval.seconds")),
        "",
    ])


def _escaped(value: str) -> str:
    """A value as a properties file holds it (a backslash in a password stays one)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def loaders_config(config: Config, dr: DrSettings) -> dict[str, object]:
    """The primary's solution config pointed at the DR site (bus, HBase, the loaders' own state and topics)."""
    data = {name: (dict(value) if isinstance(value, dict) else value) for name, value in config.data.items()}
    topics = Topics.from_config(config)
    # The DR site's bus, reached with its own identities ([dr] client_properties_dir; none: PLAINTEXT)
    data["bus"] = {**{k: v for k, v in config.section("bus").items() if k != bus_client.KEY},
                   "bootstrap_servers": dr.bootstrap,
                   **({bus_client.KEY: str(directory)} if (directory := bus_client.properties_dir(
                       config, bus_client.DR)) else {})}
    data["hbase"] = {**config.section("hbase"), "host": dr.hbase_host, "port": dr.hbase_port}
    data["topics"] = {**config.section("topics"), "ingest_stats": DR_PREFIX + topics.ingest_stats,
                      "deadletter": DR_PREFIX + topics.deadletter}
    data["ingest"] = {**config.section("ingest"), "checkpoint": str(dr.data_dir / "spark" / "ingest_captures")}
    return data


def mirror_service(config: Config, dr: DrSettings, primary: str) -> Service:
    """The mirror primary -> dr, its properties file written next to the DR bus's data: both buses as the
    ``mirror`` principal reaches them (``primary`` overriding the primary's bootstrap servers), so readable by its
    owner only."""
    dr.data_dir.mkdir(parents=True, exist_ok=True)
    props = dr.data_dir / "mm2.properties"
    props.unlink(missing_ok=True)  # one written before may be open to others: the new file is created owner-only
    write_private(props, mirror_properties(bus_client.java(config, "mirror", primary),
                                           bus_client.java(config, "mirror", dr.bootstrap, bus_client.DR), config))
    return ("dr mirror", [sys.executable, "-m", "dr_mirror", "--config", str(props),
                          "--metrics-port", str(dr.metrics_port)],
            f"{primary} -> {dr.bootstrap} (data topics; {props}; lag http://127.0.0.1:{dr.metrics_port}/metrics)")


class DrSite:
    """The rest of the DR site: its HBase gateway and the loaders of the mirrored topics."""

    def __init__(self, config: Config, dr: DrSettings) -> None:
        self.config, self.dr = config, dr
        self.config_file = dr.data_dir / "solution.toml"
        self.children: list[tuple[str, subprocess.Popen[bytes] | launch.SparkJob]] = []
        self._logs: list[IO[bytes]] = []

    def _log_path(self, name: str) -> Path:
        return self.dr.data_dir / f"{name.replace(' ', '-')}.log"

    def _log(self, name: str) -> IO[bytes]:
        handle = self._log_path(name).open("ab")
        self._logs.append(handle)
        return handle

    def _python(self, name: str, args: list[str]) -> None:
        self.children.append((name, spawn([sys.executable, *args], self._log_path(name))))

    def _spark(self, name: str, script: str, args: list[str]) -> None:
        job = launch.submit(ROOT / "spark_jobs" / script, ["--config", str(self.config_file), *args],
                            launch.SparkSettings.from_config(self.config.section("spark")),
                            stdout=self._log(name), stderr=subprocess.STDOUT)
        self.children.append((name, job))

    def start_gateway(self) -> str:
        self.dr.data_dir.mkdir(parents=True, exist_ok=True)
        self._python("dr hbase gateway", ["-m", "deploy.hbase_gateway", "--host", self.dr.hbase_host, "--port",
                                          str(self.dr.hbase_port), "--data-dir", str(self.dr.data_dir / "hbase")])
        return f"  {'dr hbase':<14} DR HBase Thrift: {self.dr.hbase_host}:{self.dr.hbase_port}"

    def start_loaders(self, timeout: float = 60.0) -> list[str]:
        """The capture ingest job, and the surveillance and video loaders where they are installed.

        They create their HBase tables at start-up, so they start once the DR gateway answers.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((self.dr.hbase_host, self.dr.hbase_port), 0.5):
                break
            time.sleep(0.2)
        self.config_file.write_text(tomli_w.dumps(loaders_config(self.config, self.dr)))
        status = self.dr.data_dir / "ingest-status.json"
        self._spark("dr ingest job", "ingest_captures.py", ["--status-file", str(status), "--bus-principal", LOADERS])
        lines = [f"  {'dr ingest job':<14} {self.dr.bootstrap} -> DR HBase (config {self.config_file})"]
        self._python("dr surveillance loader", ["-m", "surveillance.loader", "--config", str(self.config_file),
                                                "--bus-principal", LOADERS])
        lines.append(f"  {'dr surveillance':<14} surveillance.hits -> DR HBase")
        # --loader-only: the DR site loads the mirrored video.status/results; it never launches analyses
        # (video.commands is a control topic, not mirrored, and a queued task must not start twice).
        self._spark("dr video ingest", "video_ingest.py",
                    ["--loader-only", "--checkpoint", str(self.dr.data_dir / "spark" / "video_ingest"),
                     "--bus-principal", LOADERS])
        lines.append(f"  {'dr video':<14} video.status / video.results -> DR HBase")
        return lines

    def failed(self) -> str | None:
        for name, child in self.children:
            if child.poll() is not None:
                return f"{name} exited; see {self._log_path(name)}"
        return None

    def stop(self) -> None:
        """The loaders first, all at once (each finishes its batch; one after another, two Spark jobs and a
        loader took two minutes on a loaded machine), the gateway (started first) last."""
        if not self.children:
            return
        gateway, *loaders = [child for _name, child in self.children]
        with ThreadPoolExecutor() as pool:
            list(pool.map(_stop, loaders))
        _stop(gateway)
        for handle in self._logs:
            handle.close()


def _stop(child: subprocess.Popen[bytes] | launch.SparkJob) -> None:
    if isinstance(child, launch.SparkJob):
        child.stop(60)
    else:
        terminate(child, shutdown.SERVICE_GRACE_S)


def main(argv: list[str] | None = None) -> int:
    """`python -m deploy.dr_site`: start the DR site's HBase and loaders (the DR bus and mirror run under make up)."""
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m deploy.dr_site", description=main.__doc__)
    add_config_flag(parser)
    parser.add_argument("--data-dir", type=Path, default=Path("data"), help="make up's data dir")
    args = parser.parse_args(argv)
    site = DrSite(config, DrSettings.from_config(config, args.data_dir.resolve()))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    lines = [site.start_gateway(), *site.start_loaders()]
    print("The DR site is up:\n" + "\n".join(lines), flush=True)
    problem = None
    while not stopping and problem is None:
        time.sleep(0.5)
        problem = site.failed()
    if problem:
        print(problem, file=sys.stderr)
    site.stop()
    return 1 if problem else 0


if __name__ == "__main__":
    sys.exit(main())
