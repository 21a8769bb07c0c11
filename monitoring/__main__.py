"""``python -m monitoring [--config F]``: the latency, quality and device-health monitor.

Only one instance evaluates (:mod:`monitoring.leader`): another started with the same ``group_id``
waits as a standby and takes over when the active one dies.

Its /metrics is served on ``metrics_port``; when that port is taken (a standby started from the same
config on the same host) it is logged and a free one is used instead.

With ``[monitoring.images] enabled`` it also samples capture images from the object store as its own identity
``monitor`` (``--s3-credentials``, else the usual places, :func:`contracts.s3_credentials.resolve`); without a
key it runs without judging images and says so. With ``[monitoring.video] enabled`` it watches the cameras' segments
in the ``videos`` bucket with the same identity (gaps in their schedule, undecodable, black, blurred or frozen
footage); without a key it says cameras are not watched.

At a site that may stand by (``[site]``, :class:`contracts.active_site.Gate`: the DR site's monitor) it waits, taking
no lock and reading nothing, until the active-site record names its site; when the record names the other site again
it stops evaluating (state flushed, offsets committed, the lock left) and waits again.

Exit status 2 when the ``[monitoring]`` or ``[site]`` config is invalid (the message names the rule and field; a
metrics port that cannot be bound for another reason than being taken, too) or a backend is
unreachable at start-up; 3 when this instance lost the single-monitor lock to another
(it writes nothing more); 0 after SIGTERM/SIGINT (state flushed, offsets committed).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from dataclasses import dataclass, field

from contracts import bus_client, s3_credentials
from contracts.active_site import Gate
from contracts.config import Config, add_config_flag, preparse_config
from contracts.deployment_map import map_path
from contracts.hbase import HBaseClient
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.metrics_http import serve_metrics
from contracts.topics import Topics
from contracts.topics import partitions as topic_partitions

from .config import ConfigError, MonitoringConfig, load
from .image_sampler import ImageSampler
from .leader import Leadership
from .locator import Locator
from .service import Monitor
from .store import Store
from .store_reads import S3ImageReader, S3VideoReader, StoreReads
from .video_watch import VideoWatch

PRINCIPAL = "monitor"
"""The monitor's bus identity (:data:`contracts.bus_client.PRINCIPALS`)."""


STOOD_DOWN = -1
"""What :func:`serve` returns when the site stopped being the active one (the monitor then waits again)."""


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m monitoring", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    add_log_flags(parser)
    s3_credentials.add_store_flags(parser, config, PRINCIPAL)
    args = parser.parse_args(argv)
    setup_logs("monitor", args.log_format, args.log_level)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per run would drown the log
    try:
        cfg = load(config)
        site = Gate.from_config(config)
        parts = Parts(cfg, Topics.from_config(config), topic_partitions(config),
                      bus_client.librdkafka(config, PRINCIPAL), HBaseClient.from_config(config),
                      Locator(map_path(config)))
    except (ConfigError, ValueError) as exc:  # HBaseSettingsError is a ValueError
        print(f"monitoring: invalid config {config.path}: {exc}", file=sys.stderr)
        return 2
    terminating = threading.Event()
    running: list[Monitor] = []

    def stop(*_: object) -> None:
        terminating.set()
        for monitor in running:
            monitor.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if cfg.metrics_port:
        try:
            serve_metrics(cfg.metrics_port, host=cfg.metrics_host, name="monitoring")
        except OSError as exc:
            print(f"monitoring: cannot serve /metrics on port {cfg.metrics_port}: {exc}", file=sys.stderr)
            return 2
    while True:
        if site is not None and not site.active():
            print(f"monitoring: standing by: site {site.site} is not the active one ({site.record})", file=sys.stderr,
                  flush=True)
            while not site.active():
                if terminating.wait(STANDBY_WAIT_S):
                    return 0
        status = serve(config, parts, args, site, (terminating, running))
        if status != STOOD_DOWN:
            return status
        if terminating.is_set():
            return 0


STANDBY_WAIT_S = 0.5
"""How often a standing-by monitor looks at the active-site record."""


@dataclass(frozen=True)
class Parts:
    """What every monitor this process runs is built from, read from the config once."""

    cfg: MonitoringConfig
    topics: Topics
    partitions: int
    bus: dict[str, str] = field(repr=False)  # may hold the monitor's password
    hbase: HBaseClient
    locator: Locator


def serve(config: Config, parts: Parts, args: argparse.Namespace, site: Gate | None,
          signals: tuple[threading.Event, list[Monitor]]) -> int:
    """One monitor from start to stop: the process's exit status, or :data:`STOOD_DOWN`. ``signals`` is what the
    signal handler sets (terminating) and stops (the monitor running, which this one is meanwhile)."""
    cfg = parts.cfg
    monitor = Monitor(cfg, parts.topics, parts.bus, Store(parts.hbase), parts.locator)
    monitor.partitions = parts.partitions
    monitor.site = site
    try:
        reads = store_reads(config, cfg, args)
        monitor.sampler = image_sampler(cfg, monitor, reads)
        monitor.watch = video_watch(cfg, monitor, reads)
    except s3_credentials.CredentialsError as exc:  # a key file open to others, or malformed: refuse, as for the bus
        print(f"monitoring: {exc}", file=sys.stderr)
        return 2
    terminating, running = signals
    running[:] = [monitor]
    if terminating.is_set():  # a signal before it was registered
        monitor.stopping.set()
    try:
        leader = monitor.leader = Leadership(monitor.bus, cfg.group_id, cfg.lock_session_s,
                                             monitor.producer.ensure_topics)
        if not leader.acquire(monitor.stopping):
            leader.close()
            return 0
        monitor.start()
    except Exception as exc:  # HBase or the bus unreachable: say which, do not hang
        print(f"monitoring: cannot start: {exc}", file=sys.stderr)
        return 2
    print(f"monitor running: {len(cfg.rules)} rules, {len(cfg.receivers)} receivers, "
          f"evaluation every {cfg.evaluation_interval_s:g} s", file=sys.stderr, flush=True)
    try:
        monitor.run()
    finally:
        monitor.stopping.set()  # the lock's watcher thread too
        leader.close()
    if monitor.lost_leadership:
        print("monitoring: lost the single-monitor lock to another instance; stopped without writing",
              file=sys.stderr, flush=True)
        return 3
    return STOOD_DOWN if monitor.stood_down else 0


def store_reads(config: Config, cfg: MonitoringConfig, args: argparse.Namespace) -> StoreReads | None:
    """The object-store reads of the image sampler and the footage watch, or None when both are off or no key names
    the monitor (the rest of the monitor does not need the store, so it runs on, saying what is not judged)."""
    if not (cfg.images.enabled or cfg.video.enabled):
        return None
    try:
        key = s3_credentials.resolve(config, PRINCIPAL, args.s3_credentials)
    except s3_credentials.MissingCredentials as exc:
        print(f"monitoring: capture images and the cameras' video not judged: {exc}", file=sys.stderr, flush=True)
        return None
    return StoreReads(args.endpoint, key)


def image_sampler(cfg: MonitoringConfig, monitor: Monitor, reads: StoreReads | None) -> ImageSampler | None:
    """The capture-image sampler (None: off, or no store to read)."""
    if reads is None or not cfg.images.enabled:
        return None
    return ImageSampler(cfg.images, S3ImageReader(reads, cfg.images.max_bytes), monitor.take_image)


def video_watch(cfg: MonitoringConfig, monitor: Monitor, reads: StoreReads | None) -> VideoWatch | None:
    """The cameras' footage watch (None: off, or no store to read)."""
    if reads is None or not cfg.video.enabled:
        return None
    return VideoWatch(cfg.video, S3VideoReader(reads), monitor.video_cameras, monitor.take_video_listing,
                      monitor.take_video_segment)


if __name__ == "__main__":
    sys.exit(main())
