"""``python -m deploy.hbase_gateway``: run the embedded HBase Thrift1 gateway.

Defaults match happybase's (127.0.0.1:9090, buffered transport, binary protocol), so
``happybase.Connection()`` works against it unchanged. Exit status: 0 after SIGTERM/SIGINT,
2 for bad arguments or an unusable data directory, 1 if the port cannot be bound.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sqlite3
import sys
import threading
from pathlib import Path
from types import FrameType

from . import logs, metrics
from .handler import HBaseHandler
from .limits import Limits
from .scanners import ScannerRegistry
from .server import PROTOCOLS, TRANSPORTS, GatewayServer
from .store import Store

log = logging.getLogger("deploy.hbase_gateway")


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range 0-65535: {value}")
    return value


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1: {value}")
    return value


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.hbase_gateway",
        description="Embedded HBase Thrift1 gateway (happybase-compatible) over a durable SQLite store.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=_port, default=9090, help="TCP port, 0 picks a free one (default 9090)")
    parser.add_argument("--metrics-port", type=_port, default=0,
                        help="Prometheus /metrics (requests and latency per Thrift method) on --host (default 0: off)")
    parser.add_argument("--data-dir", type=Path, required=True, help="directory of the durable store")
    parser.add_argument("--transport", choices=TRANSPORTS, default="buffered")
    parser.add_argument("--protocol", choices=PROTOCOLS, default="binary")
    parser.add_argument(
        "--scanner-lease-seconds", type=_non_negative, default=60.0, help="idle time before a scanner expires"
    )
    parser.add_argument(
        "--compaction-interval-seconds",
        type=_non_negative,
        default=3600.0,
        help="how often written tables, and tables with a family TTL, drop excess versions and expired cells; "
        "reads hide them anyway, so this only reclaims space (0: only on a compact call)",
    )
    parser.add_argument(
        "--sync",
        choices=("normal", "full"),
        default="normal",
        help="normal survives a process kill; full also survives power loss, slower",
    )
    defaults = Limits()
    limits = parser.add_argument_group("limits", "what one client may ask; past a limit a call is answered "
                                       "with an error naming it and the connection stays open")
    limits.add_argument(
        "--max-rows-per-call",
        type=_positive_int,
        default=defaults.max_rows_per_call,
        help="rows of one scannerGetList, getRows* or mutateRows* call, and a scan's caching "
        f"(happybase's batch_size) (default {defaults.max_rows_per_call:,})",
    )
    limits.add_argument(
        "--max-mutate-bytes",
        type=_positive_int,
        default=defaults.max_mutate_bytes,
        help=f"row keys, columns and values of one mutateRow*/mutateRows* call (default {defaults.max_mutate_bytes:,}"
        " = 64 MiB)",
    )
    limits.add_argument(
        "--max-scanners-per-connection",
        type=_positive_int,
        default=defaults.max_scanners_per_connection,
        help=f"scanners one connection may have open (default {defaults.max_scanners_per_connection:,})",
    )
    limits.add_argument(
        "--max-connections",
        type=_positive_int,
        default=defaults.max_connections,
        help=f"client connections at once; one more is closed at once (default {defaults.max_connections})",
    )
    limits.add_argument(
        "--idle-timeout-seconds",
        type=_non_negative,
        default=defaults.idle_timeout_seconds,
        help="close a connection that sends nothing for this long (default 0: never, because happybase does "
        "not reconnect by itself: enable it only for clients that reopen a dropped connection)",
    )
    parser.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), default="INFO")
    args = parser.parse_args(argv)
    if args.scanner_lease_seconds <= 0:
        parser.error("--scanner-lease-seconds must be > 0")
    if args.data_dir.exists() and not args.data_dir.is_dir():
        parser.error(f"--data-dir {args.data_dir} exists and is not a directory")
    return args


def _compact_periodically(store: Store, interval: float, stop: threading.Event) -> None:
    while not stop.wait(interval):
        try:
            store.compact_dirty()
        except Exception:  # maintenance must never take the gateway down
            log.exception("background compaction failed")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logs.setup(args.log_level)
    try:
        store = Store(args.data_dir, sync_full=args.sync == "full")
    except (OSError, sqlite3.Error) as exc:
        print(f"hbase-gateway: cannot open data dir {args.data_dir}: {exc}", file=sys.stderr)
        return 2
    limits = Limits(
        max_rows_per_call=args.max_rows_per_call,
        max_mutate_bytes=args.max_mutate_bytes,
        max_scanners_per_connection=args.max_scanners_per_connection,
        max_connections=args.max_connections,
        idle_timeout_seconds=args.idle_timeout_seconds,
    )
    scanners = ScannerRegistry(args.scanner_lease_seconds, max_per_owner=limits.max_scanners_per_connection)
    handler = HBaseHandler(store, scanners, args.host, args.port, limits)
    server = GatewayServer(handler, args.host, args.port, args.transport, args.protocol, limits)
    try:
        host, port = server.bind()
    except OSError as exc:
        print(f"hbase-gateway: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        store.close()
        return 1
    handler.port = port
    if args.metrics_port:
        try:
            metrics.serve(args.host, args.metrics_port)
        except OSError as exc:
            print(f"hbase-gateway: cannot serve metrics on {args.host}:{args.metrics_port}: {exc}", file=sys.stderr)
            store.close()
            return 1

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signal.Signals(signum).name})
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop_maintenance = threading.Event()
    if args.compaction_interval_seconds > 0:
        threading.Thread(
            target=_compact_periodically,
            args=(store, args.compaction_interval_seconds, stop_maintenance),
            name="compactor",
            daemon=True,
        ).start()

    log.info(
        "listening",
        extra={
            "host": host,
            "port": port,
            "transport": args.transport,
            "protocol": args.protocol,
            "data_dir": str(args.data_dir),
        },
    )
    # Requests allocate many short-lived, acyclic containers (row tuples, TCell, dicts). With
    # CPython's default gen0 threshold of 700 the cyclic collector ran thousands of times per
    # scan and cost more than building the replies (measured: 4.2 -> 1.0 us/row for the Thrift
    # objects of a scan). Refcounting frees these objects anyway; collect cycles far less often.
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    print(f"hbase-gateway listening on {host}:{port}", flush=True)
    server.serve()
    stop_maintenance.set()
    store.close()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
