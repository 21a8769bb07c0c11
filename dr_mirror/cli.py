"""`python -m dr_mirror`: MirrorMaker 2's `--config mm2.properties`, or the old MirrorMaker's flags.

Exit status 2 for a setting that cannot be used (the message names the key), as argparse does for
bad flags; SIGTERM / SIGINT stop the mirror cleanly; SIGKILL loses nothing (see worker.py). With ``--site-record``
and ``--source-site`` the mirror copies only while the record names its source site (`dr_mirror/direction.py`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from contracts import active_site
from contracts import config as solution_config
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from dr_mirror import direction
from dr_mirror.metrics import MirrorMetrics
from dr_mirror.mirror import Mirror
from dr_mirror.settings import Settings, SettingsError, defaults_from, from_legacy_flags, load

log = logging.getLogger("dr_mirror")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dr_mirror", description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, help="MirrorMaker 2 properties (clusters, <alias>.bootstrap.servers, "
                                               "<alias>.security.protocol / sasl.* / ssl.*, "
                                               "<source>-><target>.enabled, topics, ...)")
    p.add_argument("--solution-config", type=Path, default=None,
                   help="solution config (TOML) for the defaults: [bus] (as the mirror principal) -> [dr], data "
                        "topics in, control out")
    p.add_argument("--consumer.config", dest="consumer_config", type=Path, help="source consumer properties")
    p.add_argument("--producer.config", dest="producer_config", type=Path, help="target producer properties")
    p.add_argument("--whitelist", "--include", dest="include", help="topics to mirror (regex)")
    p.add_argument("--blacklist", "--exclude", dest="exclude", help="topics not to mirror (regex)")
    p.add_argument("--num.streams", dest="streams", type=int, default=1, help="worker threads (tasks.max)")
    p.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus metrics on this port")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="the address /metrics binds (this host's own, or 0.0.0.0, for a Prometheus on another host)")
    p.add_argument("--site-record", type=Path, default=None,
                   help="the active-site record (DATA/dr/active-site.json): copy only while it names --source-site "
                        "(or a switchover away from it drains), stand by otherwise")
    p.add_argument("--source-site", choices=active_site.SITES, default=None,
                   help="the site this mirror copies from (with --site-record)")
    add_log_flags(p)
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    defaults = defaults_from(solution_config.load(args.solution_config))
    if args.config is not None:
        legacy = [f for f, v in (("--consumer.config", args.consumer_config), ("--producer.config",
                  args.producer_config), ("--whitelist", args.include), ("--blacklist", args.exclude)) if v]
        if legacy:
            raise SettingsError(legacy[0], "cannot be combined with --config (put it in the properties file)")
        return load(args.config, defaults)
    if args.streams < 1:
        raise SettingsError("--num.streams", f"must be at least 1, got {args.streams}")
    return from_legacy_flags(consumer_config=args.consumer_config, producer_config=args.producer_config,
                             include=args.include, exclude=args.exclude, streams=args.streams,
                             solution_defaults=defaults)


def gate_from(args: argparse.Namespace, settings: Settings) -> active_site.Gate | None:
    """The gate the mirror copies through, None without ``--site-record`` (it always copies). A flow between the
    two sites' aliases must start at ``--source-site``: the other way, it would write into the active site."""
    if (args.site_record is None) != (args.source_site is None):
        given, missing = ("--site-record", "--source-site") if args.source_site is None else (
            "--source-site", "--site-record")
        raise SettingsError(missing, f"is needed with {given}")
    if args.source_site is None:
        return None
    if settings.source in active_site.SITES and settings.source != args.source_site:
        raise SettingsError("--source-site", f"is {args.source_site}, but the flow enabled is {settings.source}->"
                                             f"{settings.target}")
    return active_site.Gate(args.source_site, args.site_record, direction.POLL_S, while_switching=True)


def main(argv: list[str] | None = None) -> int:
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    args = parser().parse_args(argv)
    setup_logs("mirror", args.log_format, args.log_level.upper())
    try:
        settings = settings_from(args)
        gate = gate_from(args, settings)
    except (SettingsError, ValueError, FileNotFoundError) as exc:
        print(f"dr_mirror: {exc}", file=sys.stderr)
        return 2
    metrics = MirrorMetrics()
    if args.metrics_port is not None:
        metrics.serve(args.metrics_port, args.metrics_host)
    log.info("mirroring %s (%s) -> %s (%s): topics %s, excluding %s", settings.source, settings.source_bootstrap,
             settings.target, settings.target_bootstrap, ",".join(settings.topics), ",".join(settings.topics_exclude))

    def run(stop: threading.Event) -> None:
        Mirror(settings, metrics, stop).run()

    try:
        if gate is None:
            direction.copy(run, stopping, metrics)
        else:
            direction.follow(gate, run, metrics, stopping, f"{settings.source} -> {settings.target}")
    except Exception as exc:
        log.error("mirror stopped: %s", exc)
        return 1
    return 0
