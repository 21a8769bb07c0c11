"""The video ingest job (the book's 10.3.2): analysis commands -> synopsis batch jobs; their records -> HBase.

    spark-submit spark_jobs/video_ingest.py --config F [--checkpoint DIR] [--max-concurrent N]

(endpoints come from the solution config, flags override; :mod:`spark_jobs.launch` adds the local
Spark settings.) The job and its batch jobs reach the bus as ``--bus-principal`` (``video-ingest``), with
the client settings the config names (:mod:`contracts.bus_client`): a batch job gets ``--config``, never a
login. One streaming query reads ``video.commands``, ``video.status`` and ``video.results`` and tells them
apart by topic, with the book's two duties:

* commands (:mod:`spark_jobs.video_scheduler`): each new task's batch job (``video_synopsis.py``) is
  launched, at most N at once and the rest queued; a task id seen before never runs twice; ``cancel``
  stops a queued or running task; a batch job that dies is retried ``--max-attempts`` times in all,
  then the task fails with the reason; a malformed command fails its task (a deterministic id when it
  has none) and the job carries on;
* results and status (:mod:`spark_jobs.video_loader`): ``video_object``, its index and ``video_task``.

Any producer may write to these topics: a record that is not what its topic carries is skipped, and a
``queued`` status without the command (a batch job run by hand announces its own task so) is loaded but
not taken over; both are counted per batch with the reason on stderr, and never fail a micro-batch (whose
replay from the checkpoint would fail again, and again).

``--loader-only`` keeps the second duty alone: a DR site, which receives the mirrored data topics but
not the control topic ``video.commands``, rebuilds the tables without launching anything.

Each micro-batch is one ``collect`` onto the driver (commands and results are few and small); the
batch's records are loaded and its decisions published and flushed before ``foreachBatch`` returns,
so Spark checkpoints the offsets only after both, and a restarted job (even a fresh checkpoint, which
starts at the earliest offsets) replays onto the same rows and the same decisions. After a kill -9 the
next start kills the orphaned batch jobs and re-launches what was unfinished (taken from the task rows
and the replayed status records) once the first batch has replayed the bus.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from contracts import bus_client, s3_credentials
from contracts.config import Config, add_config_flag, preparse_config
from contracts.hbase import HBaseClient, HBaseSettingsError
from contracts.logs import add_log_flags
from contracts.logs import setup as setup_logs
from contracts.topics import Topics, partitions
from contracts.video import ANALYZE, TERMINAL, CommandError, VideoCommand, parse_command, task_id_of
from spark_jobs import launch
from spark_jobs.task_publisher import TaskPublisher
from spark_jobs.video_loader import VideoLoader, check_result, check_status
from spark_jobs.video_scheduler import Scheduler
from spark_jobs.video_synopsis import DEFAULT_MAX_DURATION_S

PRINCIPAL = "video-ingest"
TICK_S = 0.5
QUERY_RESTARTS = 12


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Config]:
    config = preparse_config(argv)
    video, topics, store = config.section("video"), Topics.from_config(config), config.section("object_storage")
    parser = argparse.ArgumentParser(prog="spark-submit spark_jobs/video_ingest.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_flag(parser)
    parser.add_argument("--bootstrap-server", default=config.get("bus", "bootstrap_servers", "127.0.0.1:9092"))
    parser.add_argument("--bus-principal", choices=bus_client.PRINCIPALS, default=PRINCIPAL,
                        help="the bus identity of the job and its batch jobs (its settings: [bus] "
                             "client_properties_dir)")
    parser.add_argument("--hbase-host", default=config.get("hbase", "host", "127.0.0.1"))
    parser.add_argument("--hbase-port", type=int, default=config.get("hbase", "port", 9090))
    parser.add_argument("--s3-endpoint", default=str(store.get("endpoint", "127.0.0.1:9000")))
    parser.add_argument("--s3-credentials", type=Path, default=None,
                        help="the video jobs' object-store key, an env file (make up: DATA/secrets/s3-video-jobs.env), "
                             "handed on to each batch job; default: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else "
                             "[object_storage] credentials_dir")
    parser.add_argument("--checkpoint", type=Path, default=Path(video.get("checkpoint", "data/spark/video_ingest")),
                        help="Spark checkpoint directory (offsets live here)")
    parser.add_argument("--jobs-dir", type=Path, default=None,
                        help="pid files of the running batch jobs and their logs (default: CHECKPOINT.jobs)")
    parser.add_argument("--max-concurrent", type=int, default=int(video.get("max_concurrent", 1)),
                        help="batch jobs at once; more tasks wait in the queue")
    parser.add_argument("--max-attempts", type=int, default=int(video.get("max_attempts", 2)),
                        help="launches of a task whose batch job dies, before it fails")
    parser.add_argument("--max-duration-s", type=float,
                        default=float(video.get("max_duration_s", DEFAULT_MAX_DURATION_S)),
                        help="longer videos fail without being analysed")
    parser.add_argument("--trigger-ms", type=int, default=int(video.get("trigger_ms", 500)))
    parser.add_argument("--loader-only", action="store_true",
                        help="load video.status/video.results only: no commands, no batch jobs (a DR site)")
    parser.add_argument("--commands-topic", default=topics.video_commands)
    parser.add_argument("--status-topic", default=topics.video_status)
    parser.add_argument("--results-topic", default=topics.video_results)
    add_log_flags(parser)
    args = parser.parse_args(argv)
    if args.max_concurrent < 1 or args.max_attempts < 1:
        parser.error("--max-concurrent and --max-attempts must be at least 1")
    args.jobs_dir = args.jobs_dir or Path(f"{args.checkpoint}.jobs")
    try:
        args.hbase = HBaseClient.from_config(config, host=args.hbase_host, port=args.hbase_port)
    except HBaseSettingsError as exc:
        parser.error(str(exc))
    if not args.loader_only:
        try:  # a batch job finds its key as this job does: refuse to start rather than fail every task
            s3_credentials.resolve(config, "video-jobs", args.s3_credentials)
        except s3_credentials.CredentialsError as exc:
            parser.error(str(exc))
    return args, config


def batch_launcher(args: argparse.Namespace, settings: launch.SparkSettings) -> Any:
    """The scheduler's launcher: ``spark-submit video_synopsis.py`` for one attempt, logging to the jobs dir."""

    def start(command: VideoCommand, attempt: int) -> launch.SparkJob:
        log = (args.jobs_dir / f"{command.task_id}.{attempt}.log").open("ab")
        with log:
            return launch.submit(launch.ROOT / "spark_jobs" / "video_synopsis.py", [
                "--video", command.video_url, "--task-id", command.task_id, "--camera-id", command.camera_id,
                "--bootstrap-server", args.bootstrap_server, "--bus-principal", args.bus_principal,
                "--status-topic", args.status_topic,
                "--results-topic", args.results_topic, "--s3-endpoint", args.s3_endpoint,
                *(["--s3-credentials", str(args.s3_credentials)] if args.s3_credentials else []),
                *(["--config", str(args.config)] if args.config else []),
                "--attempt", str(attempt), "--options", json.dumps(dict(command.options)),
                "--max-duration-s", str(args.max_duration_s), "--launched-at", f"{time.time():.3f}",
            ], settings, stdout=log, stderr=log)

    return start


class Handler:
    """The ``foreachBatch`` body and the scheduler's clock."""

    def __init__(self, args: argparse.Namespace, scheduler: Scheduler | None, publisher: TaskPublisher) -> None:
        self.args, self.scheduler, self.publisher = args, scheduler, publisher
        self.batches = 0

    def connect(self) -> Any:
        return self.args.hbase.connect()

    def __call__(self, batch: Any, batch_id: int) -> None:
        """One micro-batch. Bad records are counted as ``skipped`` (not loaded) or ``set_aside`` (a status loaded,
        not taken over), see the module docstring; the job has no dead-letter topic: the log names each one's
        topic, partition and offset."""
        started = time.time()
        rows = sorted(batch.select("topic", "value", "partition", "offset").collect(),
                      key=lambda r: (r.topic, r.partition, r.offset))
        counts = {"commands": 0, "statuses": 0, "results": 0, "rejected": 0, "skipped": 0, "set_aside": 0}
        results, statuses, commands = [], [], []
        for row in rows:
            try:
                if row.topic == self.args.results_topic:
                    results.append(check_result(row.value))
                elif row.topic == self.args.status_topic:
                    statuses.append(check_status(row.value))
                elif row.topic == self.args.commands_topic:
                    commands.append(row.value)
            except Exception as exc:  # checking touches nothing but the record: whatever it raises is the record's
                set_aside(counts, "skipped", f"{row.topic}@{row.partition}:{row.offset}", exc)
        conn = self.connect()
        try:
            loader = VideoLoader(conn)
            loader.load_results(results)
            loader.load_statuses(statuses)
            counts["promoted"] = len(loader.promote_held(r["task_id"] for r in results))
            if self.scheduler is not None:
                for status in statuses:
                    try:
                        self.scheduler.observe(status)
                    except CommandError as exc:  # e.g. a queued status some other process published
                        set_aside(counts, "set_aside", f"task {status['task_id']} (not taken over)", exc)
                self._commands(self.scheduler, loader, commands, counts)
        finally:
            conn.close()
        snapshot = {}
        if self.scheduler is not None:
            self.scheduler.release()
            self.scheduler.tick()
            self.publisher.flush()
            snapshot = self.scheduler.snapshot()
        counts.update(results=len(results), statuses=len(statuses))
        self.batches += 1
        print(json.dumps({"batch": batch_id, **counts, **snapshot, "seconds": round(time.time() - started, 3)}),
              flush=True)

    @staticmethod
    def _commands(scheduler: Scheduler, loader: VideoLoader, raw_commands: list[bytes],
                  counts: dict[str, int]) -> None:
        parsed: list[VideoCommand | tuple[str, CommandError]] = []
        for raw in raw_commands:
            try:
                parsed.append(parse_command(raw))
            except CommandError as exc:
                parsed.append((task_id_of(raw), exc))
        ids = [p.task_id if isinstance(p, VideoCommand) else p[0] for p in parsed]
        stored = loader.stored_states(t for t in ids if not scheduler.knows(t))
        for item in parsed:
            counts["commands"] += 1
            if isinstance(item, tuple):
                task_id, error = item
                if task_id not in stored and scheduler.reject(task_id, str(error)):
                    counts["rejected"] += 1
            elif item.action == ANALYZE:
                if item.task_id not in stored:
                    scheduler.submit(item)
            elif stored.get(item.task_id) not in TERMINAL:
                scheduler.cancel(item)

    def clock(self, scheduler: Scheduler, stopping: threading.Event) -> threading.Thread:
        """Reaps and launches batch jobs between micro-batches too (a job ends while no record arrives)."""

        def run() -> None:
            while not stopping.wait(TICK_S):
                try:
                    scheduler.tick()
                    self.publisher.flush()
                except Exception as exc:  # keep ticking: the next batch or tick retries
                    print(f"video_ingest: tick failed: {exc}", file=sys.stderr, flush=True)

        thread = threading.Thread(target=run, name="video-scheduler", daemon=True)
        thread.start()
        return thread


def set_aside(counts: dict[str, int], counter: str, what: str, reason: Exception) -> None:
    """Count a record the job does not act on, and say which and why (stderr, with the job's other logs)."""
    counts[counter] += 1
    print(f"video_ingest: {counter} {what}: {type(reason).__name__}: {reason}", file=sys.stderr, flush=True)


def prepare(args: argparse.Namespace, config: Config, bus: dict[str, str], loader_conn: Any) -> None:
    """Create the topics the job reads and the tables it writes, if missing (``bus``: the job's librdkafka settings)."""
    from contracts.tables.video import ensure_video_tables
    from ingest.producer import open_producer

    ensure_video_tables(loader_conn)
    count = partitions(config)
    # A DR site's loader (--loader-only) reads topics the mirror makes there: the mirror is their only maker and
    # writer, so the loader never creates them (its source picks each up once it exists).
    if not args.loader_only:
        open_producer(bus).ensure_topics({args.status_topic: count, args.results_topic: count,
                                          args.commands_topic: 1})


def start_query(spark: Any, args: argparse.Namespace, bus_options: dict[str, str], handler: Handler) -> Any:
    """The query; ``bus_options``: the job's bus settings as Spark's ``kafka.*`` options."""
    from spark_jobs.kafka_source import BusKafkaDataSource

    spark.dataSource.register(BusKafkaDataSource)
    frame = (spark.readStream.format("bus")
             .options(**bus_options)
             .option("subscribe", ",".join(([] if args.loader_only else [args.commands_topic])
                                           + [args.status_topic, args.results_topic]))
             .option("startingOffsets", "earliest")
             .load())
    return (frame.writeStream.queryName("video_ingest")
            .option("checkpointLocation", str(args.checkpoint))
            .foreachBatch(handler)
            .trigger(processingTime=f"{max(1, args.trigger_ms)} milliseconds")
            .start())


def main(argv: list[str] | None = None) -> int:
    args, config = parse_args(argv)
    setup_logs("video-ingest", args.log_format, args.log_level)  # the driver's Python logs (Spark's own: log4j)
    from pyspark.sql import SparkSession

    from spark_jobs.ingest_captures import run_restarting
    from spark_jobs.kafka_source import bus_settings

    bus_options = bus_client.spark_options(config, args.bus_principal, args.bootstrap_server)
    bus = bus_settings(bus_options)
    publisher = TaskPublisher(bus, args.status_topic, args.results_topic, "video-ingest")
    scheduler = None if args.loader_only else Scheduler(
        publisher, batch_launcher(args, launch.SparkSettings.from_config(config.section("spark"))), args.jobs_dir,
        args.max_concurrent, args.max_attempts)
    handler = Handler(args, scheduler, publisher)
    conn = handler.connect()
    report: dict[str, Any] = {"started": True, "loader_only": args.loader_only}
    try:
        prepare(args, config, bus, conn)
        if scheduler is not None:
            report["orphans_killed"] = scheduler.kill_orphans()
            counts = {"set_aside": 0}
            for row in VideoLoader(conn).unfinished():
                try:
                    scheduler.adopt(row)
                except CommandError as exc:  # a row without a usable command is left as it is
                    set_aside(counts, "set_aside", f"task {row.get('task_id')} (not taken over)", exc)
            report.update(scheduler.snapshot(), **counts)
    finally:
        conn.close()
    print(json.dumps(report), flush=True)
    spark = SparkSession.builder.appName("video_ingest").getOrCreate()
    stopping = threading.Event()
    if scheduler is not None:
        handler.clock(scheduler, stopping)
    # E.g. a Python worker that could not connect back within Spark's fixed 10 s on a loaded machine: the
    # checkpoint holds the place, so the same query resumes where it failed.
    failure = run_restarting(lambda: start_query(spark, args, bus_options, handler), lambda: handler.batches,
                             QUERY_RESTARTS, "video_ingest")
    stopping.set()
    if scheduler is not None:
        scheduler.stop()
    with contextlib.suppress(Exception):
        spark.stop()
    if failure is not None:
        print(f"video_ingest failed: {failure}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
