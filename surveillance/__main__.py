"""``python -m surveillance [--config F]``: watchlists, cloned plates and live statistics over the captures.

Prints ``surveillance ready`` on stderr once every stage has read its commands and subscribed. Exit
status 2 for an invalid ``[surveillance]`` config, 1 when a stage failed, 0 after SIGTERM/SIGINT (outputs
acknowledged, offsets committed).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from threadpoolctl import threadpool_limits

from contracts.config import add_config_flag, preparse_config
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.metrics_http import serve_metrics

from .service import STAGES, Service
from .settings import Settings


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m surveillance", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    parser.add_argument("--stages", default=",".join(STAGES),
                        help=f"comma-separated stages to run in this process (default all: {','.join(STAGES)}); "
                             "a stage scales by running it in more processes")
    parser.add_argument("--nice", type=int, default=0, metavar="N",
                        help="lower this process's CPU priority by N (os.nice): `make up` runs the cloned-plate and "
                             "statistics stages this way, so when the machine saturates they fall behind, not the "
                             "watch stage's hits")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="override [surveillance] metrics_port (a second process of the service, 0: none)")
    add_log_flags(parser)
    args = parser.parse_args(argv)
    if not 0 <= args.nice <= 19:
        parser.error(f"--nice must be 0 to 19, not {args.nice}")
    unknown = set(args.stages.split(",")) - set(STAGES)
    if unknown:
        parser.error(f"unknown stages {', '.join(sorted(unknown))}: choose from {', '.join(STAGES)}")
    setup_logs("surveillance", args.log_format, args.log_level)
    try:
        settings = Settings.from_config(config)
    except ValueError as exc:
        print(f"surveillance: invalid config {config.path}: {exc}", file=sys.stderr)
        return 2
    if args.nice:
        os.nice(args.nice)
    port = settings.metrics_port if args.metrics_port is None else args.metrics_port
    if port:  # a second instance from the same config gets a free port: scaling out edits nothing
        serve_metrics(port, host=settings.metrics_host, name="surveillance")
    # Face matching is one (batch x watchlist) product per batch: small enough for one BLAS thread, while
    # OpenBLAS's default worker per core spins between calls and takes the CPU the broker and the other
    # stages need (the benchmark's hit latency: p50 40 -> 25 ms, p99 103 -> 91 ms at 5,000 records/s).
    threadpool_limits(1, user_api="blas")
    service = Service(settings, {name: STAGES[name] for name in args.stages.split(",")})

    def stop(*_: object) -> None:
        service.stop.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    service.start()
    if service.wait_ready():
        standby = f"; standing by: site {settings.site.site} is not the active one" if settings.standing_by() else ""
        print(f"surveillance ready: stages {', '.join(service.stages)} ({settings.instance}{standby})",
              file=sys.stderr, flush=True)
    service.join()
    return 1 if service.failed else 0


if __name__ == "__main__":
    sys.exit(main())
