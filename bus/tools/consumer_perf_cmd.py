"""`bus consumer-perf-test`: Kafka's ConsumerPerformance on our native consumer.

Prints Kafka's header `start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg,
nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec` and one line of values
(or, with `--show-detailed-stats`, one line per `--reporting-interval`). Rebalance time is measured
with a rebalance listener, as Java's ConsumerPerfRebListener does, and left out of the fetch rates.
"""

from __future__ import annotations

import argparse
import datetime
import random
import re
import time
from typing import Any

from bus.tools._common import (
    ToolError,
    add_connection_args,
    check_reachable,
    load_client_config,
    progress,
    run_guarded,
)

DEFAULT_DATE_FORMAT = "yyyy-MM-dd HH:mm:ss:SSS"


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Measure consumer throughput (kafka-consumer-perf-test).",
                       description="This tool is used to verify the consumer performance.")
    add_connection_args(p, config_help="Consumer config properties file.", config_aliases=("--consumer.config",))
    p.add_argument("--topic", help="The topic to consume from.")
    p.add_argument("--include", metavar="REGEX",
                   help="Regular expression specifying list of topics to include for consumption.")
    p.add_argument("--group", default=f"perf-consumer-{random.randrange(100_000)}", metavar="GID",
                   help="The group id to consume on (default: perf-consumer-<random>).")
    p.add_argument("--messages", type=int, required=True, metavar="COUNT",
                   help="REQUIRED: The number of messages to consume.")
    p.add_argument("--fetch-size", type=int, default=1024 * 1024, metavar="SIZE",
                   help="The amount of data to fetch in a single request (max.partition.fetch.bytes).")
    p.add_argument("--from-latest", action="store_true",
                   help="If the consumer does not already have an established offset to consume from, start with "
                        "the latest message present in the log rather than the earliest message.")
    p.add_argument("--socket-buffer-size", type=int, default=2 * 1024 * 1024, metavar="SIZE",
                   help="The size of the tcp RECV size (accepted for compatibility).")
    p.add_argument("--print-metrics", action="store_true", help="Print out the metrics.")
    p.add_argument("--show-detailed-stats", action="store_true",
                   help="If set, stats are reported for each reporting interval as configured by reporting-interval")
    p.add_argument("--timeout", type=int, default=10_000, metavar="MS",
                   help="The maximum allowed time in milliseconds between returned records (default: 10000).")
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS",
                   help="Interval in milliseconds at which to print progress info (default: 5000).")
    p.add_argument("--date-format", default=DEFAULT_DATE_FORMAT, metavar="FORMAT",
                   help="The date format to use for formatting the time field, a java.text.SimpleDateFormat "
                        f"pattern (default: {DEFAULT_DATE_FORMAT}).")
    p.add_argument("--hide-header", action="store_true", help="If set, skips printing the header for the stats.")
    p.set_defaults(run=run, parser=p)


_JAVA_TOKENS = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"),
                ("ss", "%S"), ("SSS", "<ms>"), ("EEE", "%a"), ("Z", "%z"), ("a", "%p")]


def java_date_formatter(pattern: str) -> Any:
    """A SimpleDateFormat pattern (the common letters) as a function of epoch milliseconds."""
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "'":
            end = pattern.find("'", i + 1)
            end = len(pattern) if end == -1 else end
            parts.append(pattern[i + 1:end].replace("%", "%%") or "'")
            i = end + 1
            continue
        for token, replacement in _JAVA_TOKENS:
            if pattern.startswith(token, i):
                parts.append(replacement)
                i += len(token)
                break
        else:
            if pattern[i].isalpha():
                raise ToolError(f"Unsupported letter '{pattern[i]}' in --date-format {pattern}")
            parts.append(pattern[i].replace("%", "%%"))
            i += 1
    fmt = "".join(parts)

    def format_ms(ms: float) -> str:
        moment = datetime.datetime.fromtimestamp(ms / 1000).astimezone()
        return moment.strftime(fmt).replace("<ms>", f"{int(ms) % 1000:03d}")

    return format_ms


def header(detailed: bool) -> str:
    extra = ", rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    if detailed:
        return f"time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}"
    return f"start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec{extra}"


def summary_line(fmt: Any, start_ms: float, end_ms: float, total_bytes: int, total_messages: int,
                 join_ms: float) -> str:
    """The final values line, with Java's %.4f formatting."""
    elapsed = max((end_ms - start_ms) / 1000, 1e-9)
    fetch_ms = (end_ms - start_ms) - join_ms
    mb = total_bytes / (1024 * 1024)
    fetch_s = fetch_ms / 1000
    fetch_mb_rate = mb / fetch_s if fetch_s > 0 else 0.0
    fetch_msg_rate = total_messages / fetch_s if fetch_s > 0 else 0.0
    return (f"{fmt(start_ms)}, {fmt(end_ms)}, {mb:.4f}, {mb / elapsed:.4f}, {total_messages}, "
            f"{total_messages / elapsed:.4f}, {int(join_ms)}, {int(fetch_ms)}, {fetch_mb_rate:.4f}, "
            f"{fetch_msg_rate:.4f}")


def progress_line(fmt: Any, bytes_read: int, last_bytes: int, messages: int, last_messages: int, start_ms: float,
                  end_ms: float, join_ms: float) -> str:
    elapsed = max(end_ms - start_ms, 1e-9)
    total_mb = bytes_read / (1024 * 1024)
    interval_mb = (bytes_read - last_bytes) / (1024 * 1024)
    fetch_ms = end_ms - start_ms - join_ms
    fetch_mb = 0.0 if fetch_ms <= 0 else 1000 * interval_mb / fetch_ms
    fetch_msgs = 0.0 if fetch_ms <= 0 else 1000 * (messages - last_messages) / fetch_ms
    return (f"{fmt(end_ms)}, 0, {total_mb:.4f}, {1000 * interval_mb / elapsed:.4f}, {messages}, "
            f"{(messages - last_messages) / elapsed * 1000:.4f}, {int(join_ms)}, {int(fetch_ms)}, {fetch_mb:.4f}, "
            f"{fetch_msgs:.4f}")


def run(args: argparse.Namespace) -> int:
    return run_guarded("consumer performance", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from bus.client.consumer import ConsumerRebalanceListener, KafkaConsumer
    from bus.client.errors import KafkaError

    if bool(args.topic) == bool(args.include):
        raise ToolError("Exactly one of the following arguments is required: --topic, --include")
    if args.messages <= 0:
        raise ToolError("--messages should be greater than zero")
    fmt = java_date_formatter(args.date_format)
    conf = load_client_config(args, {"client.id": "perf-consumer-client"})
    conf.update({"group.id": args.group, "max.partition.fetch.bytes": args.fetch_size,
                 "auto.offset.reset": "latest" if args.from_latest else "earliest"})
    conf.setdefault("check.crcs", "false")
    check_reachable(conf)
    try:
        consumer = KafkaConsumer(conf)
    except KafkaError as exc:
        raise ToolError(f"Invalid consumer configuration: {exc}") from None

    class Listener(ConsumerRebalanceListener):
        """ConsumerPerfRebListener: time from losing all partitions (or starting) to getting some."""

        def __init__(self) -> None:
            self.join_ms = 0.0
            self.round_ms = 0.0
            self.join_start = time.time() * 1000
            self.assigned: set[Any] = set()

        def on_partitions_revoked(self, revoked: set[Any]) -> None:
            self.assigned -= set(revoked)
            if not self.assigned:
                self.join_start = time.time() * 1000

        def on_partitions_assigned(self, assigned: set[Any]) -> None:
            if not self.assigned:
                elapsed = time.time() * 1000 - self.join_start
                self.join_ms += elapsed
                self.round_ms += elapsed
            self.assigned |= set(assigned)

    if not args.hide_header:
        print(header(args.show_detailed_stats), flush=True)
    listener = Listener()
    start_ms = time.time() * 1000
    messages = bytes_read = last_messages = last_bytes = 0
    try:
        if args.topic:
            consumer.subscribe([args.topic], listener=listener)
        else:
            try:
                consumer.subscribe(re.compile(args.include), listener=listener)
            except re.error as exc:
                raise ToolError(f"Invalid --include regular expression '{args.include}': {exc}") from None
        now = last_report = last_consumed = time.time() * 1000
        with progress("consuming", total=args.messages) as bar:
            while messages < args.messages and now - last_consumed <= args.timeout:
                records = consumer.poll(0.1)
                now = time.time() * 1000
                if records:
                    last_consumed = now
                for record in records:
                    messages += 1
                    if record.key is not None:
                        bytes_read += len(record.key)
                    if record.value is not None:
                        bytes_read += len(record.value)
                    if now - last_report >= args.reporting_interval:
                        if args.show_detailed_stats:
                            print(progress_line(fmt, bytes_read, last_bytes, messages, last_messages, last_report,
                                                now, listener.round_ms), flush=True)
                        listener.round_ms = 0.0
                        last_report, last_messages, last_bytes = now, messages, bytes_read
                bar.update(messages)
        end_ms = time.time() * 1000
        if messages < args.messages:
            print(f"WARNING: Exiting before consuming the expected number of messages: timeout ({args.timeout} ms) "
                  "exceeded. You can use the --timeout option to increase the timeout.", flush=True)
        metrics = consumer.metrics() if args.print_metrics else None
    finally:
        consumer.close()
    if not args.show_detailed_stats:
        print(summary_line(fmt, start_ms, end_ms, bytes_read, messages, listener.join_ms), flush=True)
    if metrics:
        width = max(len(k) for k in metrics)
        print(f"\n{'Metric Name':<{width + 20}} Value")
        for key, value in sorted(metrics.items()):
            print(f"{'consumer-fetch-manager-metrics:' + key:<{width + 20}} : {value}")
    return 0  # too few messages within --timeout is a warning, as in Kafka, not a failure
