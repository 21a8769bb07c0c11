"""``python -m monitoring [--config F]``: the latency, quality and device-health monitor.

Exit status 2 when the ``[monitoring]`` config is invalid (the message names the rule and field)
or a backend is unreachable at start-up; 0 after SIGTERM/SIGINT (state flushed, offsets committed).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from prometheus_client import start_http_server

from contracts.config import add_config_flag, preparse_config
from contracts.deployment_map import map_path
from contracts.topics import Topics
from contracts.topics import partitions as topic_partitions

from .config import ConfigError, load
from .locator import Locator
from .service import Monitor
from .store import Store


def main(argv: list[str] | None = None) -> int:
    config = preparse_config(argv)
    parser = argparse.ArgumentParser(prog="python -m monitoring", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one line per run would drown the log
    try:
        cfg = load(config)
        topics = Topics.from_config(config)
        partitions = topic_partitions(config)
    except (ConfigError, ValueError) as exc:
        print(f"monitoring: invalid config {config.path}: {exc}", file=sys.stderr)
        return 2
    store = Store(config.get("hbase", "host", "127.0.0.1"), config.get("hbase", "port", 9090))
    monitor = Monitor(cfg, topics, config.get("bus", "bootstrap_servers", "127.0.0.1:9092"), store,
                      Locator(map_path(config)))
    monitor.partitions = partitions
    try:
        monitor.start()
    except Exception as exc:  # HBase or the bus unreachable: say which, do not hang
        print(f"monitoring: cannot start: {exc}", file=sys.stderr)
        return 2
    if cfg.metrics_port:
        start_http_server(cfg.metrics_port, addr="127.0.0.1")

    def stop(*_: object) -> None:
        monitor.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"monitor running: {len(cfg.rules)} rules, {len(cfg.receivers)} receivers, "
          f"evaluation every {cfg.evaluation_interval_s:g} s", file=sys.stderr, flush=True)
    monitor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
