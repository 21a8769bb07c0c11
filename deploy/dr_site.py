"""The disaster-recovery site: the mirrors to its bus and back, and (on demand) its HBase and loaders.

`make up` starts the DR site's bus (secured like the primary's, `deploy/secured_bus.py`) and calls
:func:`mirror_service`: ``python -m dr_mirror`` copying the data topics to it, never the control topics, as the
``mirror`` principal at both ends (``[bus]`` and ``[dr]`` ``client_properties_dir``: MM2's ``primary.*`` and ``dr.*``
cluster keys), while the active-site record names the primary; and :func:`reverse_mirror_service`, the same the
other way, standing by until a switchover makes the DR site the active one (`dr_mirror/direction.py`).
``python -m deploy.up --dr-site`` or ``python -m deploy.dr_site`` start the rest (:class:`DrSite`: the HBase gateway
on ``[dr] hbase_port`` and the same loaders reading the mirrored topics), so after a failover the DR site holds the
same HBase tables; and its object store (:class:`DrObjectStore`: a second embedded SeaweedFS in
``DATA/dr/object-store`` on ``[dr] s3_endpoint``, keys of its own in ``DATA/secrets/dr-object-store``) with the image
copier (``python -m dr_mirror.images``, `deploy/processes/dr_images.py`) putting every mirrored capture's image there
under the same key, so the DR site's records do not name images only the lost site had; and its surveillance service
and monitor, standing by (:meth:`DrSite.start_standby`) until the active-site record (`contracts/active_site.py`) names
the DR site.

The loaders get the primary's solution config pointed at the DR bus (as the ``dr-loaders`` principal) and HBase
(written to ``DATA/dr/solution.toml``), with one change: what the ingest job itself publishes (``ingest.stats``,
dead letters) goes to ``dr.``-prefixed topics (:data:`contracts.topics.DR_PREFIX`), because the mirror must be the
only writer of a mirrored topic (it resumes from the target's log end and keeps the source's offsets).
"""

from __future__ import annotations

import argparse
import contextlib
import json
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

from contracts import active_site, bus_client, s3_credentials
from contracts.config import Config, add_config_flag, preparse_config
from contracts.hbase import HBaseClient
from contracts.processes import spawn, terminate
from contracts.topics import DR_PREFIX, SITE_ALIASES, Topics
from deploy import shutdown
from deploy.object_store import ObjectStore
from deploy.pki import write_private
from deploy.processes import dr_images
from dr_mirror.images import IDENTITY as IMAGES_IDENTITY
from spark_jobs import launch

ROOT = Path(__file__).resolve().parents[1]
LOADERS = "dr-loaders"
"""The DR site's loaders' bus principal."""
MONITOR = "monitor"
"""The monitor's identity, on the bus and in the object store (``monitoring.__main__.PRINCIPAL``)."""

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
    s3_endpoint: str = "127.0.0.1:19000"
    object_metrics_port: int = 0
    images_metrics_port: int = 9321
    console_port: int = 18000
    """The DR site's console (``[dr] console_port``), HTTPS with the primary console's certificate."""
    reverse_metrics_port: int = 9322
    """The mirror dr -> primary's /metrics (``[dr] reverse_mirror_metrics_port``; primary -> dr's: ``metrics_port``)."""
    secrets_dir: Path = Path("data/secrets")
    """make up's secrets directory (the primary store's keys; the DR store's are in its ``dr-object-store``)."""
    site_record: Path = Path("data") / active_site.FILE
    """make up's active-site record, which the DR site's services stand by on."""

    @classmethod
    def from_config(cls, config: Config, data_dir: Path) -> DrSettings:
        return cls(bootstrap=str(config.get("dr", "bootstrap_servers", "127.0.0.1:19092")).split(",")[0],
                   controller_port=config.get("dr", "controller_port", 19093),
                   hbase_host=config.get("dr", "hbase_host", "127.0.0.1"),
                   hbase_port=config.get("dr", "hbase_port", 19090),
                   metrics_port=config.get("dr", "mirror_metrics_port", 9320),
                   reverse_metrics_port=config.get("dr", "reverse_mirror_metrics_port", 9322),
                   console_port=int(config.get("dr", "console_port", 18000)),
                   data_dir=data_dir / config.get("dr", "data_dir", "dr"),
                   reports_dir=data_dir / config.get("dr", "reports_dir", "dr/drills"),
                   s3_endpoint=str(config.get("dr", "s3_endpoint", "127.0.0.1:19000")),
                   object_metrics_port=int(config.get("dr", "object_metrics_port", 0)),
                   images_metrics_port=int(config.get("dr", "images_metrics_port", 9321)),
                   secrets_dir=data_dir / "secrets", site_record=active_site.path(data_dir))

    @property
    def s3_secrets_dir(self) -> Path:
        """The DR store's identities' keys (the same identities as the primary's, keys of their own)."""
        return self.secrets_dir / s3_credentials.DR_KEYS

    @property
    def s3_host(self) -> str:
        return self.s3_endpoint.rsplit(":", 1)[0]

    @property
    def s3_port(self) -> int:
        return int(self.s3_endpoint.rsplit(":", 1)[1])

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def console_url(self) -> str:
        return f"https://{self.host}:{self.console_port}"

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
    data["site"] = {"name": "dr", "record": str(dr.site_record),  # its services stand by until the site is active
                    **({"consoles": consoles} if (consoles := config.section("site").get("consoles")) else {})}
    return data


def console_config(config: Config, dr: DrSettings) -> dict[str, object]:
    """The DR console's config: the loaders' (the DR bus, HBase and ``[site]``) with its own port and URL, and the DR
    site's object store (its key: ``--s3-credentials``)."""
    data = loaders_config(config, dr)
    data["console"] = {**config.section("console"), "host": dr.host, "port": dr.console_port, "url": dr.console_url}
    data["object_storage"] = {**config.section("object_storage"), "endpoint": dr.s3_endpoint}
    return data


def mirror_service(config: Config, dr: DrSettings, primary: str) -> Service:
    """The mirror primary -> dr (``primary`` overriding the primary's bootstrap servers), copying while the primary is
    active (and while a switchover away from it drains)."""
    return _mirror_service(config, dr, primary, "primary")


def reverse_mirror_service(config: Config, dr: DrSettings, primary: str) -> Service:
    """The mirror dr -> primary on ``[dr] reverse_mirror_metrics_port``, copying while the DR site is active: after
    a switchover the primary receives what the DR site runs, ready for the failback."""
    return _mirror_service(config, dr, primary, "dr")


def _mirror_service(config: Config, dr: DrSettings, primary: str, source: str) -> Service:
    """A mirror from ``source``, its properties file written next to the DR bus's data: both buses as the ``mirror``
    principal reaches them, so readable by its owner only. The flow's aliases are the sites' names, so its offset
    syncs and checkpoints topics are MM2's for that direction (``mm2-offset-syncs.<target>.internal`` at the source,
    ``<source>.checkpoints.internal`` at the target)."""
    target = next(site for site in SITE_ALIASES if site != source)
    clusters = {"primary": bus_client.java(config, "mirror", primary),
                "dr": bus_client.java(config, "mirror", dr.bootstrap, bus_client.DR)}
    forward = source == "primary"
    name, file, port = ("dr mirror", "mm2.properties", dr.metrics_port) if forward else (
        "reverse mirror", "mm2-reverse.properties", dr.reverse_metrics_port)
    dr.data_dir.mkdir(parents=True, exist_ok=True)
    props = dr.data_dir / file
    props.unlink(missing_ok=True)  # one written before may be open to others: the new file is created owner-only
    write_private(props, mirror_properties(clusters[source], clusters[target], config, aliases=(source, target)))
    addresses = {"primary": primary, "dr": dr.bootstrap}
    return (name, [sys.executable, "-m", "dr_mirror", "--config", str(props), "--metrics-port", str(port),
                   "--site-record", str(dr.site_record), "--source-site", source],
            f"{addresses[source]} -> {addresses[target]} (data topics while {source} is active; {props}; lag "
            f"http://127.0.0.1:{port}/metrics)")


class DrObjectStore(ObjectStore):
    """The DR site's embedded store: the primary's buckets, policies and lifecycle rules, the same identities with
    keys of their own, and the DR site's rights (:func:`contracts.s3_credentials.site_rights`: only here may the
    ``dr-images`` copier put into ``captures``)."""

    def command(self) -> list[str]:
        args = super().command()  # writes the identities file with the primary's rights: rewritten below
        config = self.data_dir / "s3-identities.json"
        config.unlink(missing_ok=True)
        write_private(config, json.dumps(s3_credentials.identities(self.keys, site="dr")))
        return args


def dr_object_store(dr: DrSettings) -> DrObjectStore:
    """The DR site's object store as `make up --dr-site` runs it (tied to make up: SIGTERM when it dies)."""
    dr.s3_secrets_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return DrObjectStore(dr.data_dir / "object-store", dr.s3_port, dr.s3_secrets_dir, dr.s3_host,
                         metrics_port=dr.object_metrics_port, tied_to_parent=True)


def images_command(config: Config, dr: DrSettings, primary_endpoint: str | None = None) -> list[str]:
    """The image copier as make up runs it: its config (the DR bus as ``dr-loaders``), the ``dr-images`` key of each
    store (read-only at the primary; read and put at the DR site), its metrics on ``[dr] images_metrics_port``, and
    the cameras' footage copied too (its state in ``DATA/dr/videos-copied.json``)."""
    name = s3_credentials.file_name(IMAGES_IDENTITY)
    return dr_images.command(config.path, dr.secrets_dir / name, dr.s3_secrets_dir / name,
                             metrics_port=dr.images_metrics_port, source_endpoint=primary_endpoint,
                             target_endpoint=dr.s3_endpoint,
                             extra=("--videos-state", str(dr.data_dir / "videos-copied.json")))


class DrSite:
    """The rest of the DR site: its HBase gateway, the loaders of the mirrored topics, its object store and the
    image copier."""

    def __init__(self, config: Config, dr: DrSettings) -> None:
        self.config, self.dr = config, dr
        self.config_file = dr.data_dir / "solution.toml"
        self.children: list[tuple[str, subprocess.Popen[bytes] | launch.SparkJob]] = []
        self.store: DrObjectStore | None = None
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
        hbase = HBaseClient.from_config(self.config)  # the DR loaders' transport and protocol, as at the primary
        self._python("dr hbase gateway", ["-m", "deploy.hbase_gateway", "--host", self.dr.hbase_host, "--port",
                                          str(self.dr.hbase_port), "--data-dir", str(self.dr.data_dir / "hbase"),
                                          "--transport", hbase.transport, "--protocol", hbase.protocol])
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
        self._write_config()
        status = self.dr.data_dir / "ingest-status.json"
        self._spark("dr ingest job", "ingest_captures.py", ["--status-file", str(status), "--bus-principal", LOADERS])
        lines = [f"  {'dr ingest job':<14} {self.dr.bootstrap} -> DR HBase (config {self.config_file})"]
        self._python("dr surveillance loader", ["-m", "surveillance.loader", "--config", str(self.config_file),
                                                "--bus-principal", LOADERS])
        lines.append(f"  {'dr hit loader':<14} surveillance.hits -> DR HBase")
        # --loader-only: the DR site loads the mirrored video.status/results; it never launches analyses
        # (video.commands is a control topic, not mirrored, and a queued task must not start twice).
        self._spark("dr video ingest", "video_ingest.py",
                    ["--loader-only", "--checkpoint", str(self.dr.data_dir / "spark" / "video_ingest"),
                     "--bus-principal", LOADERS])
        lines.append(f"  {'dr video':<14} video.status / video.results -> DR HBase")
        return lines

    def _write_config(self) -> None:
        self.dr.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(tomli_w.dumps(loaders_config(self.config, self.dr)))

    def start_standby(self) -> list[str]:
        """The DR site's surveillance service and monitor, standing by (``[site]`` of their config) until the
        active-site record names the DR site.

        The surveillance service follows the watchlists and statistics the mirror brings and publishes nothing, joins
        no consumer group (the mirror keeps the primary's offsets for them there), and takes over from those offsets.
        The monitor takes no lock and reads nothing until then; promoted, it judges the DR site's bus, HBase and
        object store (its key there), sending to the same receivers. Standing by, both cost next to nothing. They
        need the DR gateway to answer, as the loaders do."""
        self._write_config()
        self._python("dr surveillance", ["-m", "surveillance", "--config", str(self.config_file), "--metrics-port",
                                         "0"])
        key = self.dr.s3_secrets_dir / s3_credentials.file_name(MONITOR)
        self._python("dr monitor", ["-m", "monitoring", "--config", str(self.config_file), "--endpoint",
                                    self.dr.s3_endpoint, "--s3-credentials", str(key)])
        console_file = self.dr.data_dir / "console.toml"
        console_file.write_text(tomli_w.dumps(console_config(self.config, self.dr)))
        # the same users, sessions and token key as the primary's console: its data dir (the signing key) is make
        # up's, the users and sessions come through the mirror (web/services/account_sync.py)
        self._python("dr console", ["-m", "web", "--config", str(console_file), "--data-dir",
                                    str(self.dr.secrets_dir.parent / "console"), "--s3-credentials",
                                    str(self.dr.s3_secrets_dir / s3_credentials.file_name("console"))])
        return [*(f"  {name:<14} standing by until {self.dr.site_record} names the DR site (log "
                  f"{self._log_path(name)})" for name in ("dr surveillance", "dr monitor")),
                f"  {'dr console':<14} {self.dr.console_url} (read-only until the DR site is active; log "
                f"{self._log_path('dr console')})"]

    def start_images(self, primary_endpoint: str | None = None) -> list[str]:
        """The DR site's object store (ready when this returns), then the image copier from the primary's to it."""
        self.store = dr_object_store(self.dr)
        self.store.start()
        self.dr.s3_secrets_dir.chmod(0o700)
        lines = [f"  {'dr object store':<14} S3 {self.store.url} (log {self.store.log_path}; a key per component in "
                 f"{self.dr.s3_secrets_dir})"]
        name = "dr images"
        self.children.append((name, spawn(images_command(self.config, self.dr, primary_endpoint),
                                          self._log_path(name))))
        lines.append(f"  {name:<14} capture images -> DR store (group dr-images; lag "
                     f"http://127.0.0.1:{self.dr.images_metrics_port}/metrics)")
        return lines

    def failed(self) -> str | None:
        for name, child in self.children:
            if child.poll() is not None:
                return f"{name} exited; see {self._log_path(name)}"
        if self.store is not None and (self.store.proc is None or self.store.proc.poll() is not None):
            return f"dr object store exited; see {self.store.log_path}"
        return None

    def stop(self) -> None:
        """The loaders and the image copier first, all at once (each finishes its batch; one after another, two Spark
        jobs and a loader took two minutes on a loaded machine), the gateway (started first) and the object store
        last."""
        gateway = next((child for name, child in self.children if name == "dr hbase gateway"), None)
        loaders = [child for _name, child in self.children if child is not gateway]
        with ThreadPoolExecutor() as pool:
            list(pool.map(_stop, loaders))
        if gateway is not None:
            _stop(gateway)
        if self.store is not None:
            self.store.stop()
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
    lines = [site.start_gateway(), *site.start_loaders(), *site.start_standby(), *site.start_images()]
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
