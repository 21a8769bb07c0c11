"""`bus broker [server.properties] [--override key=value ...]`, like kafka-server-start.sh."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import signal
import sys
import threading
import traceback

from bus.config.broker import BrokerConfig, load_broker_config
from bus.config.definitions import ConfigError
from bus.config.properties import PropertiesError, load_properties, parse_override
from bus.logging_setup import setup_logging


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Run a broker (combined broker+controller by default).",
                       description="Run a Kafka-compatible broker. With no file: a single-node combined "
                                   "broker+controller on 127.0.0.1:9092.")
    p.add_argument("properties", nargs="?", help="a Kafka server.properties file")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="override a property from the file (repeatable)")
    p.add_argument("--log-format", choices=("json", "text"), default="json", help="log line format on stderr")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format)
    try:
        props = load_properties(args.properties) if args.properties else {}
        for item in args.override:
            key, value = parse_override(item)
            props[key] = value
        config = load_broker_config(props)
    except (PropertiesError, ConfigError) as exc:
        print(f"bus broker: configuration error: {exc}", file=sys.stderr)
        return 2
    if config.unknown:
        logging.getLogger("bus.broker").warning(
            "These configurations were supplied but are not used: %s", ", ".join(config.unknown))
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    try:
        return asyncio.run(_serve(config))
    except ConfigError as exc:
        print(f"bus broker: configuration error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"bus broker: cannot start: {exc}", file=sys.stderr)
        return 1


async def _serve(config: BrokerConfig) -> int:
    """Run until SIGTERM/SIGINT. The handlers go in before the broker is built: a signal that arrives while
    it starts (its port may already be open) then shuts it down cleanly after start instead of killing it."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    from bus.broker.broker import Broker

    broker = Broker(config)
    await broker.start()
    bound = ", ".join(f"{name}://{host}:{port}" for name, (host, port) in broker.network.bound.items())
    print(f"bus broker {config.node_id} started (cluster {broker.cluster_id}) listening on {bound}", flush=True)
    await stop.wait()
    loop.call_later(SLOW_SHUTDOWN_REPORT_S, _report_slow_shutdown, loop)
    await broker.stop()
    return 0


SLOW_SHUTDOWN_REPORT_S = 20.0


def _report_slow_shutdown(loop: asyncio.AbstractEventLoop) -> None:
    """Log where every unfinished task waits, again every SLOW_SHUTDOWN_REPORT_S while the shutdown lasts.

    A broker hung once after its controlled shutdown under CI's load and was SIGKILLed with nothing in its log to
    say which await never returned; asyncio.run's own cancellation of leftover tasks is covered too, since this
    timer stays on the loop until it closes."""
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    stacks = io.StringIO()
    for task in tasks:
        task.print_stack(limit=8, file=stacks)
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    for ident, frame in sys._current_frames().items():  # the loop's default executor is joined at the end too
        if ident != threading.get_ident():
            stacks.write(f"thread {names.get(ident, ident)}:\n{''.join(traceback.format_stack(frame, limit=8))}")
    logging.getLogger("bus.broker").warning("shutdown still running after SIGTERM; %d unfinished tasks:\n%s",
                                            len(tasks), stacks.getvalue())
    loop.call_later(SLOW_SHUTDOWN_REPORT_S, _report_slow_shutdown, loop)
