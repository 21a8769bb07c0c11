"""`bus producer-perf-test`: Kafka's ProducerPerformance on our native producer.

Same flags and the same lines: every 5 s `N records sent, X records/sec (Y MB/sec), Z ms avg latency,
W ms max latency.` and at the end `N records sent, X records/sec (Y MB/sec), Z ms avg latency, W ms
max latency, a ms 50th, b ms 95th, c ms 99th, d ms 99.9th.` Latency is send() to acknowledgement, per
record, measured in the producer's callback (on its sender thread, as Java's runs on its I/O thread).
Payloads are random upper-case letters from a fixed seed, like Java's. `--bootstrap-server` is
accepted as a shortcut for `--producer-props bootstrap.servers=...`, and `--command-config` (Kafka 4.1's name) for
`--producer.config`.
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from typing import Any

from bus.tools._common import ToolError, add_connection_args, check_reachable, progress, run_guarded

REPORTING_INTERVAL_MS = 5000
# Byte -> 'A'..'Z', so random bytes become Java's `random.nextInt(26) + 65` payloads in one C call.
_LETTERS = bytes(65 + b % 26 for b in range(256))


def add_parser(sub: argparse._SubParsersAction, name: str) -> None:
    p = sub.add_parser(name, help="Measure producer throughput and latency (kafka-producer-perf-test).",
                       description="This tool is used to verify the producer performance.")
    p.add_argument("--topic", required=True, metavar="TOPIC", help="produce messages to this topic")
    p.add_argument("--num-records", type=int, required=True, metavar="NUM-RECORDS",
                   help="number of messages to produce")
    payload = p.add_mutually_exclusive_group(required=True)
    payload.add_argument("--record-size", type=int, metavar="RECORD-SIZE", help="message size in bytes")
    payload.add_argument("--payload-file", metavar="PAYLOAD-FILE",
                         help="file to read the message payloads from (UTF-8); one is picked at random per record")
    payload.add_argument("--payload-monotonic", action="store_true",
                         help="payload is a monotonically increasing integer")
    p.add_argument("--payload-delimiter", default="\\n", metavar="PAYLOAD-DELIMITER",
                   help="delimiter of payloads in --payload-file (default: \\n)")
    p.add_argument("--throughput", type=float, required=True, metavar="THROUGHPUT",
                   help="throttle maximum message throughput to *approximately* THROUGHPUT messages/sec. Set this "
                        "to -1 to disable throttling.")
    p.add_argument("--producer-props", nargs="+", metavar="PROP-NAME=PROP-VALUE",
                   help="producer configuration properties like bootstrap.servers,client.id etc. These configs take "
                        "precedence over those passed via --producer.config.")
    add_connection_args(p, required=False, config_help="producer config properties file.",
                        config_aliases=("--producer.config",))
    p.add_argument("--print-metrics", action="store_true", help="print out metrics at the end of the test.")
    p.add_argument("--warmup-records", type=int, default=0, metavar="WARMUP-RECORDS",
                   help="The number of records to treat as warmup; they are left out of an extra steady-state "
                        "summary line.")
    p.add_argument("--transactional-id", metavar="TRANSACTIONAL-ID", help="(not supported by the native producer)")
    p.add_argument("--transaction-duration-ms", type=int, metavar="TRANSACTION-DURATION",
                   help="(not supported by the native producer)")
    p.set_defaults(run=run, parser=p)


class Stats:
    """ProducerPerformance.Stats: totals, a 5 s window, and sampled latencies for the percentiles."""

    def __init__(self, num_records: int, steady_state: bool = False, out: Any = None) -> None:
        self.start = time.time()
        self.window_start = self.start
        self.sampling = max(1, num_records // min(num_records, 500_000))
        self.latencies: list[int] = []
        self.iteration = 0
        self.count = 0
        self.bytes = 0
        self.max_latency = 0
        self.total_latency = 0
        self.window_count = 0
        self.window_max = 0
        self.window_total = 0
        self.window_bytes = 0
        self.steady_state = steady_state
        self.suppress = False
        self.out = out or sys.stdout
        self.lock = threading.Lock()

    def record(self, latency: int, size: int, now: float) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total_latency += latency
            self.max_latency = max(self.max_latency, latency)
            self.window_count += 1
            self.window_bytes += size
            self.window_total += latency
            self.window_max = max(self.window_max, latency)
            if self.iteration % self.sampling == 0:
                self.latencies.append(latency)
            if (now - self.window_start) * 1000 >= REPORTING_INTERVAL_MS:
                if self.steady_state and self.count == self.window_count:
                    print("In steady state.", file=self.out, flush=True)
                if not self.suppress:
                    self.print_window()
                self.new_window()
            self.iteration += 1

    def print_window(self) -> None:
        elapsed = max((time.time() - self.window_start) * 1000, 1e-9)
        print(f"{self.window_count} records sent, {1000 * self.window_count / elapsed:.1f} records/sec "
              f"({1000 * self.window_bytes / elapsed / (1024 * 1024):.2f} MB/sec), "
              f"{self.window_total / max(self.window_count, 1):.1f} ms avg latency, {float(self.window_max):.1f} ms "
              "max latency.", file=self.out, flush=True)

    def new_window(self) -> None:
        self.window_start = time.time()
        self.window_count = self.window_max = self.window_total = self.window_bytes = 0

    def summary(self) -> str:
        elapsed = max((time.time() - self.start) * 1000, 1e-9)
        p50, p95, p99, p999 = percentiles(self.latencies, (0.5, 0.95, 0.99, 0.999))
        label = " steady state" if self.steady_state else ""
        return (f"{self.count}{label} records sent, {1000 * self.count / elapsed:f} records/sec "
                f"({1000 * self.bytes / elapsed / (1024 * 1024):.2f} MB/sec), "
                f"{self.total_latency / max(self.count, 1):.2f} ms avg latency, {float(self.max_latency):.2f} ms max "
                f"latency, {p50} ms 50th, {p95} ms 95th, {p99} ms 99th, {p999} ms 99.9th.")


def percentiles(samples: list[int], points: tuple[float, ...]) -> list[int]:
    """Java's nearest-rank-ish pick: the sorted sample at index int(p * n)."""
    ordered = sorted(samples)
    if not ordered:
        return [0 for _ in points]
    return [ordered[min(int(p * len(ordered)), len(ordered) - 1)] for p in points]


class Throttler:
    """ThroughputThrottler: sleep whenever we are ahead of `target` records/sec."""

    def __init__(self, target: float, start: float) -> None:
        self.target = target
        self.start = start

    def throttle(self, sent: int, now: float) -> None:
        if self.target <= 0:
            return
        ahead = sent / self.target - (now - self.start)
        if ahead > 0.002:
            time.sleep(ahead)


def producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    from bus.config.properties import PropertiesError, load_properties

    if not args.producer_props and not args.command_config and not args.bootstrap_server:
        raise ToolError("Either --producer-props or --producer.config must be specified.")
    conf: dict[str, Any] = {"client.id": "perf-producer-client", "socket.connection.setup.timeout.ms": 5000}
    if args.command_config:
        try:
            conf.update(load_properties(args.command_config))
        except (OSError, PropertiesError) as exc:
            raise ToolError(f"Cannot read --producer.config {args.command_config}: {exc}") from None
    if args.bootstrap_server:
        conf["bootstrap.servers"] = args.bootstrap_server
    for prop in args.producer_props or ():
        pieces = prop.split("=")
        if len(pieces) != 2:
            raise ToolError(f"Invalid property: {prop}")
        conf[pieces[0]] = pieces[1]
    if not conf.get("bootstrap.servers"):
        raise ToolError("bootstrap.servers must be given (--producer-props bootstrap.servers=HOST:PORT or "
                        "--bootstrap-server)")
    if args.transactional_id or args.transaction_duration_ms is not None or conf.get("transactional.id"):
        raise ToolError("Transactions are not supported by the native producer yet (--transactional-id, "
                        "--transaction-duration-ms, transactional.id)")
    return conf


def read_payloads(path: str | None, delimiter: str) -> list[bytes]:
    if path is None:
        return []
    delimiter = "\n" if delimiter == "\\n" else delimiter
    try:
        text = open(path, encoding="utf-8").read()  # noqa: SIM115
    except OSError as exc:
        raise ToolError(f"File does not exist or empty file provided: {exc}") from None
    payloads = [p.encode() for p in text.split(delimiter) if p]
    if not payloads:
        raise ToolError("File does not exist or empty file provided.")
    print(f"Number of messages read: {len(payloads)}")
    return payloads


def run(args: argparse.Namespace) -> int:
    return run_guarded("producer performance", lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    from bus.client.errors import KafkaError
    from bus.client.producer import KafkaProducer

    if args.num_records <= 0:
        raise ToolError("--num-records should be greater than zero")
    if args.warmup_records >= args.num_records:
        raise ToolError("The value for --warmup-records must be strictly fewer than the number of records in the "
                        "test, --num-records.")
    if args.record_size is not None and args.record_size <= 0:
        raise ToolError("--record-size should be greater than zero")
    conf = producer_settings(args)
    payloads = read_payloads(args.payload_file, args.payload_delimiter)
    check_reachable(conf)
    try:
        producer = KafkaProducer(conf)
    except KafkaError as exc:
        raise ToolError(f"Invalid producer configuration: {exc}") from None
    if args.warmup_records > 0:
        print(f"Warmup first {args.warmup_records} records. Steady state results will print after the complete test "
              "summary.", flush=True)
    rng = random.Random(0)
    stats = Stats(args.num_records)
    steady_stats: Stats | None = None
    failures: list[Exception] = []

    def completion(start: float, size: int, steady_at_send: Stats | None) -> Any:
        """The record's callback; like Java's PerfCallback it keeps the steady-state stats of its send time."""

        def callback(_metadata: Any, exc: Exception | None) -> None:
            if exc is not None:
                failures.append(exc)
                if len(failures) <= 10:
                    print(f"Error: {exc}", file=sys.stderr)
                return
            now = time.time()
            latency = int((now - start) * 1000)
            stats.record(latency, size, now)
            if steady_at_send is not None:
                steady_at_send.record(latency, size, now)

        return callback

    throttler = Throttler(args.throughput, time.monotonic())
    topic = args.topic
    try:
        with progress("producing", total=args.num_records) as bar:
            for i in range(args.num_records):
                if payloads:
                    payload = payloads[rng.randrange(len(payloads))]
                elif args.payload_monotonic:
                    payload = str(i).encode()
                else:
                    payload = rng.randbytes(args.record_size).translate(_LETTERS)
                if args.warmup_records and i == args.warmup_records:
                    steady_stats = Stats(args.num_records - args.warmup_records, steady_state=True)
                    stats.suppress = True
                producer.send(topic, value=payload, callback=completion(time.time(), len(payload), steady_stats))
                if args.throughput > 0:
                    throttler.throttle(i + 1, time.monotonic())
                if i % 1000 == 0:
                    bar.update(i)
            bar.update(args.num_records)
        if args.print_metrics:
            producer.flush()
    finally:
        producer.close()
    print(stats.summary(), flush=True)
    if steady_stats is not None:
        print(steady_stats.summary(), flush=True)
    if args.print_metrics:
        metrics = producer.metrics()
        width = max(len(k) for k in metrics)
        print(f"\n{'Metric Name':<{width + 20}} Value")
        for key, value in sorted(metrics.items()):
            print(f"{'producer-metrics:' + key:<{width + 20}} : {value}")
    if failures:
        print(f"{len(failures)} records failed", file=sys.stderr)
        return 1
    return 0
