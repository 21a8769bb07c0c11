"""Streaming ingest of vehicle and face captures from the bus into HBase (the book's 10.3.1).

    .venv/bin/spark-submit spark_jobs/ingest_captures.py --bootstrap-server B --hbase-host H \
        --hbase-port P --checkpoint DIR [--trigger-ms N] [--once] [--config F] [--bus-principal P]

(:mod:`spark_jobs.launch` adds the light local settings.) The job reaches the bus as ``--bus-principal``
(``capture-ingest``; the DR site's loader runs it as another): its client settings, login included, come
from the config (:mod:`contracts.bus_client`), never from the command line. Each micro-batch is read from
``capture.vehicle`` and ``capture.face`` by the bus source, and handled by ``foreachBatch`` with a
single action: every task validates its records, stamps ``ingest_time`` and writes to HBase with
deterministic row keys (:mod:`spark_jobs.capture_writer`). Spark records the batch's end offsets in
the checkpoint only after that action returns, so offsets advance only after the rows are written,
and a crash replays the same offset range onto the same row keys: no loss, no duplicate rows.

``--once`` (availableNow) loads what is on the bus now, then exits 0. Otherwise the job runs until
SIGTERM/SIGINT, printing one JSON line per batch and keeping ``--status-file`` up to date.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from contracts import bus_client
from contracts.active_site import Gate
from contracts.config import Config, add_config_flag, preparse_config
from contracts.hbase import HBaseClient, HBaseSettingsError
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.retention import Retention
from contracts.topics import Topics
from ingest.producer import BusSettings, open_producer
from spark_jobs.capture_writer import RESULT_SCHEMA, WriterSettings, process_partition, summarize, warm_up
from spark_jobs.ingest_status import IngestStatus, StatsPublisher

PRINCIPAL = "capture-ingest"
QUERY_RESTARTS = 3
"""Failed query starts in a row after which the job gives up and exits 1 (see :func:`run_restarting`)."""


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Config]:
    config = preparse_config(argv)
    ingest, topics = config.section("ingest"), Topics.from_config(config)
    parser = argparse.ArgumentParser(prog="spark-submit spark_jobs/ingest_captures.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    parser.add_argument("--bootstrap-server", default=config.get("bus", "bootstrap_servers", "127.0.0.1:9092"))
    parser.add_argument("--bus-principal", choices=bus_client.PRINCIPALS, default=PRINCIPAL,
                        help="the bus identity the job's clients use (its settings: [bus] client_properties_dir)")
    parser.add_argument("--hbase-host", default=config.get("hbase", "host", "127.0.0.1"))
    parser.add_argument("--hbase-port", type=int, default=config.get("hbase", "port", 9090))
    parser.add_argument("--checkpoint", type=Path, default=Path(ingest.get("checkpoint", "data/spark/ingest_captures")),
                        help="Spark checkpoint directory (offsets live here)")
    parser.add_argument("--trigger-ms", type=int, default=int(ingest.get("trigger_ms", 500)),
                        help="micro-batch interval; 0 starts the next batch as soon as one ends")
    parser.add_argument("--once", action="store_true", help="load what is on the bus now, then exit 0")
    parser.add_argument("--max-offsets-per-trigger", type=int,
                        default=int(ingest.get("max_offsets_per_trigger", 50_000)))
    parser.add_argument("--starting-offsets", default=str(ingest.get("starting_offsets", "earliest")),
                        help="where a new checkpoint starts: earliest, latest or JSON")
    parser.add_argument("--fail-on-data-loss", choices=("true", "false"),
                        default=str(ingest.get("fail_on_data_loss", "true")).lower())
    parser.add_argument("--source-format", default=str(ingest.get("source_format", "bus")),
                        help='"bus" (Python Data Source) or "kafka" (Spark\'s connector, where on the classpath)')
    parser.add_argument("--vehicle-topic", default=topics.vehicle)
    parser.add_argument("--face-topic", default=topics.face)
    parser.add_argument("--deadletter-topic", default=topics.deadletter)
    parser.add_argument("--stats-topic", default=topics.ingest_stats,
                        help="one record per micro-batch: counts per device, latency per stage")
    parser.add_argument("--no-stats", dest="publish_stats", action="store_false",
                        default=bool(ingest.get("publish_stats", True)),
                        help="publish no ingest.stats (to measure what publishing costs; the monitor goes blind)")
    parser.add_argument("--job-id", default=str(ingest.get("job_id", "ingest_captures")),
                        help="key of this job's ingest.stats records (several jobs can share the topic)")
    parser.add_argument("--tasks", type=int, default=int(ingest.get("tasks", 0)),
                        help="tasks per micro-batch (default: the cores Spark has, e.g. 2 for local[2])")
    parser.add_argument("--status-file", type=Path, default=None, help="JSON status kept up to date per batch")
    parser.add_argument("--retention-days", type=positive_days, default=Retention.from_config(config).captures_days,
                        help="how long captures are kept: the TTL of the tables the job creates ([retention] "
                             "captures_days, 90)")
    add_log_flags(parser)
    args = parser.parse_args(argv)
    try:
        args.hbase = HBaseClient.from_config(config, host=args.hbase_host, port=args.hbase_port)
    except HBaseSettingsError as exc:
        parser.error(str(exc))
    return args, config


def positive_days(text: str) -> float:
    """A number of days > 0 (argparse names the flag when it is not)."""
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if not days > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0 days, not {text}")
    return days


def writer_settings(args: argparse.Namespace, bus: BusSettings | None = None) -> WriterSettings:
    """What the tasks get; ``bus``: the job's librdkafka settings (without: PLAINTEXT to ``--bootstrap-server``)."""
    return WriterSettings(
        hbase=args.hbase,
        bus=args.bootstrap_server if bus is None else bus,
        topic_kinds={args.vehicle_topic: "vehicle", args.face_topic: "face"},
        deadletter_topic=args.deadletter_topic,
    )


def prepare_sinks(args: argparse.Namespace, bus: BusSettings, site: Gate | None = None) -> None:
    """Create the HBase tables and the dead-letter and stats topics if missing (the job's outputs; with a ``site``,
    also the site's own copies it publishes to while standing by)."""
    from contracts.retention import ttl_seconds
    from contracts.tables.captures import ensure_capture_tables

    args.hbase.check()  # a transport or protocol the server does not speak: an error naming the settings
    conn = args.hbase.connect()
    try:
        ensure_capture_tables(conn, ttl_seconds(args.retention_days))
    finally:
        conn.close()
    outputs = (args.deadletter_topic, args.stats_topic)
    open_producer(bus).ensure_topics({topic: 1 for topic in (*outputs, *(site.own(t) for t in outputs if site))})


def source(spark: Any, args: argparse.Namespace, bus_options: dict[str, str]) -> Any:
    """The captures as a stream; ``bus_options``: the job's bus settings as Spark's ``kafka.*`` options."""
    from spark_jobs.kafka_source import BusKafkaDataSource

    if args.source_format == "bus":
        spark.dataSource.register(BusKafkaDataSource)
    return (spark.readStream.format(args.source_format)
            .options(**bus_options)
            .option("subscribe", f"{args.vehicle_topic},{args.face_topic}")
            .option("startingOffsets", args.starting_offsets)
            .option("failOnDataLoss", args.fail_on_data_loss)
            .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
            .load())


def batch_handler(settings: WriterSettings, status: IngestStatus, stats: StatsPublisher | None, tasks: int,
                  site: Gate | None = None) -> Any:
    """The foreachBatch body: one action (collect of the per-task tallies) per micro-batch.

    ``tasks`` caps the tasks per batch (coalesce, no shuffle: a task reads several topic-partition
    ranges in turn): with more tasks than cores each batch only pays more per-task overhead. ``site`` (``[site]``):
    while the job's site stands by, each batch publishes its stats and dead letters to the site's own copies
    (``primary.ingest.stats``): there the mirror is the one writer of the mirrored topics. The job goes on loading
    either way, so the site's HBase stays current for the failback.
    """

    def handle(batch: Any, batch_id: int) -> None:
        started = time.time()
        if tasks > 0:
            batch = batch.coalesce(tasks)
        now = settings if site is None else dataclasses.replace(
            settings, deadletter_topic=site.local(settings.deadletter_topic))
        rows = batch.mapInArrow(functools.partial(process_partition, settings=now), RESULT_SCHEMA).collect()
        tally = summarize(row.tally for row in rows)
        seconds = time.time() - started
        if stats is not None:
            stats.publish(batch_id, tally, seconds, None if site is None else site.local(stats.topic))
        line = status.record(batch_id, tally, seconds)
        if line is not None:
            print(json.dumps(line), flush=True)

    return handle


def warm_workers(spark: Any, settings: WriterSettings) -> int:
    """One no-op task per core before the query starts (see ``warm_up``); returns the core count."""
    cores = spark.sparkContext.defaultParallelism
    spark.range(0, cores, numPartitions=cores).mapInArrow(
        functools.partial(warm_up, settings=settings), "id long").collect()
    return cores


def start_query(spark: Any, args: argparse.Namespace, bus_options: dict[str, str], settings: WriterSettings,
                status: IngestStatus, stats: StatsPublisher | None, tasks: int, site: Gate | None = None) -> Any:
    writer = (source(spark, args, bus_options).writeStream
              .queryName("ingest_captures")
              .option("checkpointLocation", str(args.checkpoint))
              .foreachBatch(batch_handler(settings, status, stats, tasks, site)))
    if args.once:
        writer = writer.trigger(availableNow=True)
    elif args.trigger_ms > 0:
        writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
    query = writer.start()
    status.query_started()
    return query


def run_until_stopped(query: Any) -> Exception | None:
    """Wait for the query; SIGTERM/SIGINT only set a flag, and the query is stopped between batches
    from here (raising inside foreachBatch would hang it). Returns the query's failure, if any."""
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(True))
    while not query.awaitTermination(1):
        if stopping:
            with contextlib.suppress(Exception):  # the JVM may be shutting down too (SIGTERM to the group)
                query.stop()
            return None
    return query.exception()


def run_restarting(start: Callable[[], Any], batches: Callable[[], int],
                   limit: int = QUERY_RESTARTS, name: str = "ingest_captures") -> Exception | None:
    """Run the query until stopped, starting it again from its checkpoint in this session when it fails.

    On a loaded machine the Python process that plans the bus source for the query misses Spark's fixed 10 s
    connect-back (``PythonWorkerFactory.createSimpleWorker``, not configurable) and the query dies before its
    first batch; a new query in the same session costs seconds (the JVM stays up), and the checkpoint plus
    deterministic row keys make the replay harmless. Only failures in a row count against ``limit`` (a query
    that got ``batches`` through was working). Returns the last failure when it gives up.
    """
    from pyspark.errors import StreamingQueryException

    failures = 0
    while True:
        before = batches()
        try:
            failure = run_until_stopped(start())
        except StreamingQueryException as exc:  # awaitTermination raises a failed query's error
            failure = exc
        if failure is None:
            return None
        failures = 1 if batches() > before else failures + 1
        print(f"{name}: query failed ({failures} in a row, limit {limit + 1}): {str(failure)[:300]}",
              file=sys.stderr, flush=True)
        if failures > limit:
            return failure
        time.sleep(min(30.0, 2.0 * failures))


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    setup_logs("capture-ingest", args.log_format, args.log_level)  # the driver's Python logs (Spark's own: log4j)
    from pyspark.sql import SparkSession

    from spark_jobs.kafka_source import bus_settings

    bus_options = bus_client.spark_options(config, args.bus_principal, args.bootstrap_server)
    bus = bus_settings(bus_options)
    site = Gate.from_config(config)
    prepare_sinks(args, bus, site)
    spark = SparkSession.builder.appName("ingest_captures").getOrCreate()
    settings = writer_settings(args, bus)
    cores = warm_workers(spark, settings)
    status = IngestStatus(args.status_file)
    stats = StatsPublisher(open_producer(bus, {"client.id": "ingest-stats", "acks": "1"}),
                           args.stats_topic, args.job_id) if args.publish_stats else None
    failure = run_restarting(lambda: start_query(spark, args, bus_options, settings, status, stats,
                                                 args.tasks or cores, site),
                             lambda: status.batches)
    if stats is not None:
        stats.close()
    print(json.dumps({"final": status.totals(), "stats_not_delivered": stats.failures if stats else 0}), flush=True)
    with contextlib.suppress(Exception):
        spark.stop()
    if failure is not None:
        print(f"ingest_captures failed: {failure}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
