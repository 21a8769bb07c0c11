"""`make up`: start the solution on one machine with embedded defaults and say where to look.

The bus (one combined broker+controller node of `deploy/cluster.py` under ``DATA/bus-cluster/``; with ``--cluster
N`` (1, 3 or 5), `make up CLUSTER=3`, that many), secured: SASL_SSL with SCRAM-SHA-512 and TLS from make up's own CA,
ACLs enforced, every service logging in as its own principal with only the rights `contracts/bus_acls.py` gives it.
The CA (``DATA/secrets/ca.pem``), the nodes' certificates, each principal's password (in its Kafka client
properties file ``DATA/secrets/<principal>.properties``) and each object-store key are made on the first start,
owner-only, and never printed or put on a command line; every child gets ``--config DATA/solution.toml``, the
config with the bus's ``bootstrap_servers`` and ``client_properties_dir``. The DR site's bus is made the same way
(`deploy/secured_bus.py`: ``DATA/dr/bus-cluster``, its own passwords in ``DATA/secrets/dr``, the same CA and ACL
table; ``[dr] client_properties_dir`` in ``DATA/solution.toml``). Then the embedded HBase Thrift gateway,
object storage and the operator console (``python -m web``; the first start creates its ``admin`` with a random
password in ``DATA/console/admin_password``), the monitor (``python -m monitoring``, once the bus and HBase answer: it
creates its tables and topics at start-up), then the Spark capture ingest job (`deploy/pipeline.py`) with a status
line every few seconds; once its query runs, the city simulator, the surveillance service and hit loader with
watches on the simulator's recurring targets (`deploy/surveillance.py`), the camera simulator and the video ingest
job, the last two at ``[cameras]`` / ``[video] nice``. The mirror to the DR site's bus (`deploy/dr_site.py`)
starts with the console, and the one back, standing by until a switchover makes the DR site the active one;
``--dr-site`` also starts its HBase and loaders, its object store and the image copier;
``--prometheus`` (`make up PROMETHEUS=1`) Debian's prometheus scraping every process (`deploy/prometheus/`). Each
service is a child process; Ctrl-C, SIGTERM or `make down` (``--down``, which signals the pid in ``DATA/up.pid``)
stops them all, the bus's nodes last, with SIGTERM (a controlled shutdown). Endpoints default to
`contracts/solution.toml`; node i serves clients on ``--kafka-port`` + i - 1 and the quorum on ``--controller-port``
(default: the Kafka port + N) + i - 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import tomli_w

from bus.client.admin import AdminError
from contracts import active_site as dr_active_site
from contracts import bus_client, s3_credentials
from contracts.bus_acls import role_of
from contracts.config import Config, add_config_flag, preparse_config
from contracts.config import load as load_config
from contracts.hbase import HBaseClient
from contracts.processes import niced, spawn, terminate
from contracts.topics import Topics
from deploy import cluster, dr_site, object_store, secured_bus, shutdown
from deploy import surveillance as surveillance_slice
from deploy.cluster_security import ClusterSecurity
from deploy.pipeline import Endpoints, Pipeline
from deploy.processes.spark_cluster import SparkCluster
from deploy.prometheus import scrape as prometheus_scrape
from deploy.secured_bus import SecuredBus
from spark_jobs import launch

STATUS_EVERY_S = 5.0
SPARK_WORKER_CORES = 4
SPARK_WORKER_MEMORY = "2g"
"""A `make up SPARK=N` worker: room for an executor (one core, [spark] executor_memory) of each running job."""
SPARK_STOP_S = 60.0
"""How long a Spark job may take to finish its batch after SIGTERM before its process group gets SIGTERM, then
SIGKILL (`launch.SparkJob.stop`: 30 s each)."""
DOWN_WAIT_S = SPARK_STOP_S + 60 + 2 * shutdown.SERVICE_GRACE_S + 2 * secured_bus.STOP_S + 60
"""`make down` waits this long at most: the bound of make up's stop (the Spark jobs and services at once, the DR
site's gateway after its loaders; then the servers; then a cluster's brokers and its controllers) and a minute."""


def primary_bus(data_dir: Path, args: argparse.Namespace, metrics_port: int) -> SecuredBus:
    """The primary's bus: ``--cluster N`` nodes (one without it) in ``DATA/bus-cluster``, its secrets (and the CA
    both sites share) in ``DATA/secrets``."""
    directory = data_dir / "bus-cluster"
    return SecuredBus("bus", directory, cluster.plan(args.cluster or 1, args.host, args.kafka_port, directory,
                                                     args.controller_port),
                      ClusterSecurity.ensure(secrets_dir(data_dir)), "primary", metrics_port)


def dr_bus(data_dir: Path, dr: dr_site.DrSettings) -> SecuredBus:
    """The DR site's bus: one node on ``[dr] bootstrap_servers`` / ``controller_port`` in ``DATA/dr/bus-cluster``,
    its own passwords in ``DATA/secrets/dr``, the primary's CA."""
    directory = dr.data_dir / "bus-cluster"
    return SecuredBus("dr bus", directory, cluster.plan(1, dr.host, dr.port, directory, dr.controller_port),
                      ClusterSecurity.ensure(dr_secrets_dir(data_dir), ca_directory=secrets_dir(data_dir)), "dr")


def solution_config(config: Config, bus: SecuredBus, dr: SecuredBus, console_tls: dict[str, str],
                    consoles: dict[str, str], spark_master: str | None = None) -> Config:
    """The loaded config with ``[bus]`` and ``[dr]`` naming the two secured buses (``bootstrap_servers``,
    ``client_properties_dir``), the console's certificate (HTTPS) and, with ``--spark-workers``, ``[spark] master``
    naming the standalone cluster, ``[site]`` (the primary, where the active-site record is, and each site's console
    URL, ``consoles``), written to
    ``DATA/solution.toml``: what every child is given with ``--config``, so each reads its principal's client
    properties there, and every Spark job (the video batch jobs too) its master."""
    path = bus.security.directory.parent / "solution.toml"
    data = {**config.data,
            **({"spark": {**config.section("spark"), "master": spark_master}} if spark_master else {}),
            "bus": {**config.section("bus"), "bootstrap_servers": bus.bootstrap,
                    bus_client.KEY: str(bus.security.directory)},
            "dr": {**config.section("dr"), "bootstrap_servers": dr.bootstrap,
                   bus_client.KEY: str(dr.security.directory)},
            "console": {**config.section("console"), **console_tls, "url": consoles["primary"]},
            # the active-site record: the primary's services stand down while a switchover drains and while the DR
            # site runs the business; the capture devices follow it to the active site's bus
            "site": {"name": "primary", "record": str(dr_active_site.path(bus.security.directory.parent)),
                     "consoles": consoles}}
    path.write_text(tomli_w.dumps(data))
    return Config(data, path)


def console_tls(bus: SecuredBus) -> dict[str, str]:
    """The console's HTTPS: its certificate from make up's CA (for the bus's host, localhost and 127.0.0.1)."""
    chain, key = bus.security.server_certificate("console", bus.nodes[0].host)
    return {"tls_cert": str(chain), "tls_key": str(key)}


def _services(data_dir: Path, args: argparse.Namespace) -> list[tuple[str, list[str], str]]:
    """The servers beside the bus: the HBase gateway and the object store."""
    py = sys.executable
    services = []
    gateway = Path(__file__).parent / "hbase_gateway" / "__main__.py"
    if gateway.exists():
        config = load_config(args.config)
        hbase = HBaseClient.from_config(config)  # the clients' transport and protocol: the gateway serves them
        services.append((
            "hbase gateway",
            [py, "-m", "deploy.hbase_gateway", "--host", args.host, "--port", str(args.hbase_port),
             "--data-dir", str(data_dir / "hbase"), "--transport", hbase.transport, "--protocol", hbase.protocol,
             "--metrics-port", str(config.get("hbase", "metrics_port", 0))],
            f"HBase Thrift (happybase): {args.host}:{args.hbase_port} ({hbase.transport}, {hbase.protocol})",
        ))
    # Object storage: SeaweedFS behind S3, an identity per component (contracts/s3_credentials.py), keys in
    # DATA/secrets (made by ensure_secrets before anything starts).
    s3_port = str(_s3_port(load_config(args.config)))
    services.append((
        "object store",
        [py, "-m", "deploy.object_store", "--host", args.host, "--port", s3_port,
         "--data-dir", str(data_dir / "s3"), "--secrets-dir", str(secrets_dir(data_dir)),
         *(["--config", str(args.config)] if args.config else [])],
        f"S3 object storage (minio SDK): http://{args.host}:{s3_port}  (buckets {', '.join(s3_credentials.BUCKETS)};"
        f" a key per component in {secrets_dir(data_dir)})",
    ))
    return services


def _console_service(data_dir: Path, args: argparse.Namespace) -> tuple[str, list[str], str]:
    """The console: after the bus's identities exist, since its first acts (the audit topic, its loader) use them."""
    console = [sys.executable, "-m", "web", *(["--config", str(args.config)] if args.config else []),
               "--host", args.host, "--port", str(args.console_port), "--data-dir", str(data_dir / "console"),
               "--s3-credentials", str(s3_key_file(data_dir, "console")),
               *(["--prometheus-url", f"http://{args.host}:{args.prometheus_port}"] if args.prometheus else [])]
    return "console", console, f"operator console: {_console_url(args)}"


def _monitor_service(data_dir: Path, args: argparse.Namespace) -> tuple[str, list[str], str]:
    """The monitor needs the bus and HBase at start-up (it exits 2 without them), so it starts after they answer.
    Its object-store key is for its capture-image sampler (read-only on ``captures``); the store need not answer
    yet (an image it cannot fetch is skipped, not judged)."""
    metrics_port = load_config(args.config).get("monitoring", "metrics_port", 9310)
    where = "latency, quality, device health, alerts" + (
        f"  (metrics http://127.0.0.1:{metrics_port}/metrics)" if metrics_port else "")
    return ("monitor", [sys.executable, "-m", "monitoring", *(["--config", str(args.config)] if args.config else []),
                        "--s3-credentials", str(s3_key_file(data_dir, "monitor"))], where)


def _cameras_service(data_dir: Path, args: argparse.Namespace, config: Config) -> tuple[str, list[str], str]:
    """The camera simulator (video.cameras): segments into the videos bucket; it waits for the store. It stands in
    for cameras and a media server that are not on this machine: at ``[cameras] nice`` it draws and encodes on the
    CPU the solution leaves (a segment that ends late is uploaded late, well inside the monitor's gap threshold)."""
    nice = int(config.get("cameras", "nice", 10))
    key = s3_key_file(data_dir, "cameras")
    dr_key = key.parent / s3_credentials.DR_KEYS / key.name  # with --dr-site: footage follows the active site
    return ("cameras", [*niced(nice), sys.executable, "-m", "video.cameras",
                        *(["--config", str(args.config)] if args.config else []),
                        "--s3-credentials", str(key),
                        *(["--dr-s3-credentials", str(dr_key)] if dr_key.exists() else []), "--wait-s", "120"],
            f"camera simulator: a WebM segment per camera a minute into `videos` (nice {nice})")


def secrets_dir(data_dir: Path) -> Path:
    return data_dir / "secrets"


def dr_secrets_dir(data_dir: Path) -> Path:
    return secrets_dir(data_dir) / "dr"


def s3_key_file(data_dir: Path, component: str) -> Path:
    return secrets_dir(data_dir) / s3_credentials.file_name(component)


def ensure_secrets(data_dir: Path) -> str:
    """Every identity's object-store key, made at the first start (mode 0600 in a 0700 directory), before any
    process that reads one starts; the line make up prints says where they are, never what."""
    directory = secrets_dir(data_dir)
    made = not directory.exists()
    s3_credentials.ensure_files(directory)
    directory.chmod(0o700)
    return (f"  {'secrets':<14} {'made' if made else 'kept'} in {directory} (mode 0600): an object-store key per "
            f"component (s3-<component>.env)")


def _video_ingest_job(data_dir: Path, args: argparse.Namespace, config: Config,
                      bootstrap: str) -> tuple[launch.SparkJob, str]:
    """The video ingest job (spark_jobs/video_ingest.py): analysis commands -> batch jobs, results -> HBase. At
    ``[video] nice`` (its batch jobs inherit it): an analysis an operator asked for may take longer on a busy
    machine, a capture must not."""
    nice = int(config.get("video", "nice", 10))
    log = (data_dir / "video-ingest.log").open("ab")
    with log:
        job = launch.submit(launch.ROOT / "spark_jobs" / "video_ingest.py", [
            *(["--config", str(args.config)] if args.config else []),
            "--bootstrap-server", bootstrap, "--hbase-host", args.host,
            "--hbase-port", str(args.hbase_port), "--checkpoint", str(data_dir / "spark" / "video_ingest"),
            "--s3-credentials", str(s3_key_file(data_dir, "video-jobs"))],
            dataclasses.replace(launch.SparkSettings.from_config(config.section("spark")), nice=nice),
            stdout=log, stderr=subprocess.STDOUT)
    return job, f"video.commands -> synopsis batch jobs; video.status/results -> HBase (nice {nice}; log {log.name})"


def _start(data_dir: Path, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
    return spawn(cmd, data_dir / f"{name.replace(' ', '-')}.log")


def _prometheus_service(data_dir: Path, args: argparse.Namespace, config: Config) -> tuple[str, list[str], str]:
    """Debian's prometheus on loopback, scraping what this run started (its config written into DATA/prometheus)."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("--prometheus: Debian's prometheus is not installed (make system-deps, or apt-get install "
                         "prometheus)")
    home = data_dir / "prometheus"
    home.mkdir(exist_ok=True)
    found = prometheus_scrape.targets(config, args.host, args.console_port, args.dr_site)
    config_file = home / "prometheus.yml"
    config_file.write_text(json.dumps(prometheus_scrape.scrape_config(found, secrets_dir(data_dir) / "ca.pem"),
                                      indent=2))
    listen = f"{args.host}:{args.prometheus_port}"
    jobs = ", ".join(dict.fromkeys(t.job for t in found))
    return ("prometheus", prometheus_scrape.command(config_file, home / "data", listen, binary),
            f"Prometheus http://{listen}  (scraping {jobs}; rules from deploy/prometheus/)")


def _console_url(args: argparse.Namespace) -> str:
    return f"https://{args.host}:{args.console_port}"


def ensure_admin(data_dir: Path, config: Path | None) -> str:
    """Create the console's ``admin`` with a random password the first time; say where the password is.

    The password file (mode 0600) is written before the user is added and kept only if that worked, so
    an ``admin`` never exists with a password nobody has, unless someone removed the file by hand.
    """
    password_file = data_dir / "console" / "admin_password"
    if password_file.exists():
        return f"log in as admin, password in {password_file}"
    password_file.parent.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(18)
    pending = password_file.with_suffix(".new")
    pending.unlink(missing_ok=True)
    fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    result = subprocess.run([sys.executable, "-m", "web", *(["--config", str(config)] if config else []),
                             "users", "add", "admin", "--role", "admin"], input=password + "\n",
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        pending.unlink(missing_ok=True)
        return (f"admin not created ({result.stderr.strip()}); manage users with "
                "`python -m web users add NAME --role ROLE`")
    pending.rename(password_file)
    return f"log in as admin, password in {password_file}"


def _wait_for(host: str, port: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return True
        time.sleep(0.2)
    return False


def _down(data_dir: Path, timeout: float = DOWN_WAIT_S) -> int:
    """`make down`: SIGTERM the running `make up` (it stops its children) and wait until it is gone, saying what
    it still waits for (``DATA/up.stopping``) whenever that changes and every half minute."""
    pid_file = data_dir / "up.pid"
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        print(f"nothing to stop (no running make up for {data_dir})")
        pid_file.unlink(missing_ok=True)
        return 0
    started = time.monotonic()
    said: tuple[list[str] | None, float] = (None, started)
    while time.monotonic() - started < timeout:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            print(f"stopped ({time.monotonic() - started:.0f} s)", flush=True)
            return 0
        names = shutdown.waiting_for(data_dir, pid)
        if names is not None and (names != said[0] or time.monotonic() - said[1] >= 30):
            print(f"stopping ({time.monotonic() - started:.0f} s): waiting for {shutdown.describe(names)}", flush=True)
            said = (names, time.monotonic())
        time.sleep(0.5)
    names = shutdown.waiting_for(data_dir, pid) or []
    print(f"make up (pid {pid}) still running after {timeout:.0f} s, waiting for {shutdown.describe(names)}; "
          f"its stop should have ended by then: see the logs in {data_dir}", file=sys.stderr)
    return 1


def _stop(data_dir: Path, services: dict[str, subprocess.Popen[bytes]], servers: dict[str, subprocess.Popen[bytes]],
          video_job: launch.SparkJob | None, pipeline: Pipeline | None, site: dr_site.DrSite | None,
          buses: list[SecuredBus], spark: SparkCluster | None) -> None:
    """Everything that works against the servers at once (the Spark jobs finish their batch, the services commit),
    then the servers, then a cluster's nodes (brokers first, in a controlled shutdown): each step bounded."""
    stopping = shutdown.Shutdown(data_dir)
    first: dict[str, Callable[[], object]] = {
        name: partial(terminate, child, shutdown.SERVICE_GRACE_S) for name, child in services.items()}
    if video_job is not None:
        first["video ingest job"] = partial(video_job.stop, SPARK_STOP_S)
    if pipeline is not None:
        first["simulator and ingest job"] = pipeline.stop
    if site is not None:
        first["dr site loaders and gateway"] = site.stop
    stopping.phase(first)
    stopping.phase({**{name: partial(terminate, child, shutdown.SERVICE_GRACE_S) for name, child in servers.items()},
                    **({"spark cluster": spark.stop} if spark is not None else {})})
    # last: the other services finished their work against them
    stopping.phase({bus.name: bus.stop for bus in buses})
    (data_dir / "up.pid").unlink(missing_ok=True)
    stopping.done()


def _spark_cluster(data_dir: Path, args: argparse.Namespace, config: Config) -> SparkCluster | None:
    """With ``--spark-workers N``: the standalone cluster every job runs on (not started yet). Each worker offers
    ``SPARK_WORKER_CORES`` cores, scheduling slots rather than processors: every streaming job (the capture ingest,
    the video ingest, the DR site's loaders) holds executors for as long as it runs, and a job that got no core
    would never run a task. Each job takes at most ``[spark] cores_max``."""
    if not args.spark_workers:
        return None
    return SparkCluster(data_dir / "spark-cluster", workers=args.spark_workers, cores=SPARK_WORKER_CORES,
                        memory=SPARK_WORKER_MEMORY, host=args.host,
                        port=int(config.get("spark", "standalone_port", 7077)),
                        webui_port=int(config.get("spark", "standalone_ui_port", 8080)))


def _s3_port(config: Config) -> int:
    return int(str(config.get("object_storage", "endpoint", "127.0.0.1:9000")).rsplit(":", 1)[1])


def _bus_port(config: Config) -> int:
    bootstrap = str(config.get("bus", "bootstrap_servers", "127.0.0.1:9092")).split(",")[0]
    return int(bootstrap.rsplit(":", 1)[1])


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m deploy.up", description=__doc__)
    add_config_flag(parser)
    parser.add_argument("--data-dir", default="data", help="where every service keeps its data")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--kafka-port", type=int, default=_bus_port(config))
    parser.add_argument("--controller-port", type=int, default=None,
                        help="the bus's KRaft quorum listener (default: the Kafka port + 1); with --cluster N, "
                             "node i's is this + i - 1 (default: the Kafka port + N)")
    parser.add_argument("--cluster", type=int, choices=cluster.VOTER_COUNTS, default=None,
                        help="N combined broker+controller nodes (deploy/cluster.py) instead of the single broker; "
                             "node i serves clients on the Kafka port + i - 1")
    parser.add_argument("--hbase-port", type=int, default=config.get("hbase", "port", 9090))
    parser.add_argument("--console-port", type=int, default=config.get("console", "port", 8000))
    parser.add_argument("--rate", type=float, default=None, help="simulator records/s (default: the config's)")
    parser.add_argument("--no-pipeline", action="store_true", help="servers only: no simulator, no Spark job")
    parser.add_argument("--down", action="store_true", help="stop the `make up` running on this data dir")
    parser.add_argument("--dr-site", action="store_true",
                        help="also the DR site's HBase and loaders, object store and image copier (dr_site.py)")
    parser.add_argument("--prometheus", action="store_true",
                        help="also Debian's prometheus, scraping every process with deploy/prometheus/'s rules")
    parser.add_argument("--prometheus-port", type=int, default=config.get("prometheus", "port", 9190))
    parser.add_argument("--spark-workers", type=int, default=0, metavar="N",
                        help="run every Spark job on a standalone cluster of N workers started here (`make up "
                             "SPARK=N`; deploy/processes/spark_cluster.py) instead of [spark] master")
    args = parser.parse_args(argv)
    if args.spark_workers < 0:
        parser.error(f"--spark-workers must be 0 or more, not {args.spark_workers}")
    if args.cluster and args.controller_port is not None and abs(args.controller_port - args.kafka_port) < args.cluster:
        parser.error(f"--controller-port {args.controller_port} overlaps the {args.cluster} client ports from "
                     f"--kafka-port {args.kafka_port}")
    try:
        object_store.check_s3_port(_s3_port(config))
    except ValueError as exc:
        parser.error(f"[object_storage] endpoint in {config.path}: {exc}")
    data_dir = Path(args.data_dir).resolve()
    if args.down:
        return _down(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    children: list[subprocess.Popen[bytes]] = []
    servers: dict[str, subprocess.Popen[bytes]] = {}  # stopped last: the other children work against them
    services: dict[str, subprocess.Popen[bytes]] = {}
    lines = [ensure_secrets(data_dir)]
    dr = dr_site.DrSettings.from_config(config, data_dir)
    bus = primary_bus(data_dir, args, int(config.get("bus", "metrics_port", 0)))
    buses = [bus, dr_bus(data_dir, dr)]
    bootstrap = bus.bootstrap
    spark = _spark_cluster(data_dir, args, config)
    # every child: --config DATA/solution.toml
    consoles = {"primary": _console_url(args), **({"dr": dr.console_url} if args.dr_site else {})}
    config = solution_config(config, bus, buses[1], console_tls(bus), consoles,
                             spark.url if spark is not None else None)
    args.config = config.path
    for site_bus in buses:
        site_bus.start()
    for name, cmd, where in _services(data_dir, args):
        child = _start(data_dir, name, cmd)
        children.append(child)
        servers[name] = child
        lines.append(f"  {name:<14} {where}")
    spark_failed = False
    if spark is not None:
        try:
            spark.start()
            lines.append(f"  {'spark cluster':<14} {spark.url}: {spark.workers} workers of {spark.cores} cores, "
                         f"{spark.memory}  (UI {spark.ui}; logs {spark.data_dir})")
        except (RuntimeError, TimeoutError) as exc:
            print(f"spark cluster: {exc}", file=sys.stderr)
            spark_failed = True
    time.sleep(1.5)
    ready = _wait_for(args.host, args.kafka_port, 30) and _wait_for(args.host, args.hbase_port, 30)
    failed = [c for c in children if c.poll() is not None]
    topics = Topics.from_config(config)
    # the primary runs the business until a switchover says otherwise; each site's ACLs are those of its role now (a
    # site a switchover left, e.g. the old primary started again, stays fenced from the devices until the failback)
    active = dr_active_site.ensure(data_dir, "make up").active
    for position, site_bus in enumerate(buses if ready and not failed else ()):
        try:  # the primary's lines first, the DR site's after them, before the other servers'
            lines[0 if position == 0 else len(bus.nodes) + 2:0] = [
                *site_bus.ready(), site_bus.grant(topics, role_of(site_bus.site, active))]
        except (TimeoutError, AdminError) as exc:
            print(f"{site_bus.name}: {exc}", file=sys.stderr)
            ready = False
            break
    if failed or not ready or spark_failed:
        print(f"a service failed to start; see the logs in {data_dir}", file=sys.stderr)
        _stop(data_dir, services, servers, None, None, None, buses, spark)
        return 1

    def start(name: str, cmd: list[str]) -> None:
        services[name] = _start(data_dir, name, cmd)
        children.append(services[name])

    name, cmd, where = _console_service(data_dir, args)
    start(name, cmd)
    lines.append(f"  {name:<14} {where}")
    for mirror in (dr_site.mirror_service, dr_site.reverse_mirror_service):  # the second stands by until a switchover
        name, cmd, where = mirror(config, dr, bootstrap)
        start(name, cmd)
        lines.append(f"  {name:<14} {where}")
    name, cmd, where = _monitor_service(data_dir, args)
    start(name, cmd)
    lines.append(f"  {'':<14} {ensure_admin(data_dir, args.config)}")
    lines.append(f"  {name:<14} {where}")
    if not _wait_for(args.host, args.console_port, 30):
        print(f"the console did not start; see {data_dir / 'console.log'}", file=sys.stderr)
    pipeline = video_job = None

    def start_surveillance() -> list[str]:
        """The surveillance service and hit loader (the service creates its topics at start)."""
        said = []
        for name, cmd, where in surveillance_slice.services(config):
            start(name, cmd)
            said.append(f"  {name:<14} {where}")
        return said

    def start_devices(pipeline: Pipeline) -> list[str]:
        """Once the capture ingest runs: the capture devices, the surveillance service watching them, the cameras
        and the video ingest job (a second JVM, at ``[video] nice``: it starts on what the capture path leaves)."""
        nonlocal video_job
        pipeline.start_devices()
        # The service reads the map at start: wait until this run's simulator has written it.
        surveillance_slice.wait_for_map(pipeline.map_path, pipeline.launched_at)
        said = [surveillance_slice.watch_targets(config, pipeline.seed), *start_surveillance()]
        name, cmd, where = _cameras_service(data_dir, args, config)
        start(name, cmd)
        said.append(f"  {name:<14} {where}")
        video_job, where = _video_ingest_job(data_dir, args, config, bootstrap)
        said.append(f"  {'video ingest':<14} {where}")
        return said

    if args.no_pipeline:
        lines += start_surveillance()
    else:
        pipeline = Pipeline(data_dir, Endpoints(bootstrap, args.host, args.hbase_port), config, args.rate,
                            s3_key_file(data_dir, "simulator"))
        lines += pipeline.start()
        lines.append(f"  {'then':<14} the surveillance service, the cameras and the video ingest job, with the "
                     f"simulator")
    if args.prometheus:
        name, cmd, where = _prometheus_service(data_dir, args, config)
        start(name, cmd)
        lines.append(f"  {name:<14} {where}")
    site = dr_site.DrSite(config, dr) if args.dr_site else None
    if site is not None:
        lines += [site.start_gateway(), *site.start_loaders(), *site.start_standby(), *site.start_images()]
    print("The security-video data bus is up:\n" + "\n".join(lines))
    print(f"  logs and data   {data_dir}\nPress Ctrl-C (or run `make down`) to stop.", flush=True)
    (data_dir / "up.pid").write_text(str(os.getpid()))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    next_status = time.monotonic() + STATUS_EVERY_S
    while not stopping and all(c.poll() is None for c in children):
        bus.processes.report_exits()
        if site is not None and (problem := site.failed()):
            print(problem, file=sys.stderr, flush=True)
            break
        if pipeline is not None and pipeline.simulator is None and pipeline.ready():
            print("The ingest job runs; starting the capture devices and what watches them:\n"
                  + "\n".join(start_devices(pipeline)), flush=True)
        if pipeline is not None:
            problem = pipeline.failed()
            if problem:
                print(problem, file=sys.stderr, flush=True)
                break
            if video_job is not None and video_job.poll() is not None:
                print(f"video ingest job exited; see {data_dir / 'video-ingest.log'}", file=sys.stderr, flush=True)
                break
            if time.monotonic() >= next_status:
                print(pipeline.status_line(), flush=True)
                next_status = time.monotonic() + STATUS_EVERY_S
        time.sleep(0.5)
    print("stopping ...", flush=True)
    _stop(data_dir, services, servers, video_job, pipeline, site, buses, spark)
    return 0


if __name__ == "__main__":
    sys.exit(main())
