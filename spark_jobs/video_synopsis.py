"""Spark batch job: one video in object storage -> tubes -> synopsis and thumbnails, records on the bus.

    spark-submit spark_jobs/video_synopsis.py --video s3://bucket/key [--task-id ID] [--camera-id C]
        --bootstrap-server B --s3-endpoint http://H:P [--s3-credentials FILE] [--config F]
        [--attempt N] [--options JSON] [--max-duration-s S] [--launched-at EPOCH_S] [--segments N]
        [--start-time ISO] [--bus-principal P]

The video ingest job (:mod:`spark_jobs.video_ingest`) launches one per task. The video is cut into
time segments, one RDD element each; every task fetches the video from S3 itself (executors share
nothing with the driver) and returns its tubes and camera-motion counts; the driver stitches the tubes
across borders, labels, schedules (views split at camera cuts, never longer than the original) and
renders each view on its own background. The job writes no table: it publishes its progress to
``video.status`` (running, per stage, with the seconds each stage took) and one ``video.results``
record per object, then ``done`` with what the camera did (``camera_motion``: the
:func:`video.motion.verdict` of all segments' counts; a moving camera's result may miss objects) and
whether the synopsis reached the original's length (``capped``: objects then overlap more); the ingest
job's loader turns those into HBase rows, so a DR site receiving the mirrored topics rebuilds the same
tables. Keys everywhere derive from the task id, so a re-run rewrites the same objects and records
(at-least-once, keyed by task id; the object id in the value tells duplicates apart). A bad video
(missing, corrupt, unsupported codec, longer than the limit) publishes ``failed`` with the reason and
the job exits with code 3, without a traceback. The job reaches the bus as ``--bus-principal`` (``video-ingest``,
as the job that launches it), with the client settings the config names (:mod:`contracts.bus_client`): a login
is never on the command line.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contracts import bus_client, s3_credentials
from contracts.config import add_config_flag
from contracts.config import load as load_config
from contracts.topics import Topics
from contracts.video import DONE, FAILED, RUNNING, CommandError, validate_options
from spark_jobs.task_publisher import TaskPublisher

if TYPE_CHECKING:  # the engine (OpenCV) is imported where it runs
    from video.analyze import SegmentResult

PRINCIPAL = "video-ingest"
EXIT_BAD_VIDEO = 3
DEFAULT_MAX_DURATION_S = 4 * 3600.0
PROGRESS_EVERY_S = 1.0
# Share of a task's progress reached at the end of each stage (the rest of the way is the next stage).
ANALYSIS_FROM, RENDER_FROM = 0.05, 0.85


@dataclass(frozen=True)
class S3Settings:
    endpoint: str
    access_key: str
    secret_key: str

    def client(self):  # -> minio.Minio
        from video import storage

        return storage.connect(self.endpoint, self.access_key, self.secret_key)


def cache_dir(task_id: str) -> Path:
    """Where this machine keeps the task's copy of the video (removed when the task ends)."""
    return Path(tempfile.gettempdir()) / f"video-synopsis-{task_id}"


def fetch(settings: S3Settings, url: str, task_id: str) -> Path:
    """The video in a local file (once per process: segments of one executor share it)."""
    from video import storage

    local = cache_dir(task_id) / Path(storage.parse_s3_url(url)[1]).name
    if not local.exists():
        part = local.with_suffix(f"{local.suffix}.{os.getpid()}.part")  # workers may race: last rename wins
        storage.download(settings.client(), url, part)
        part.replace(local)
    return local


def process_segment(job: tuple[S3Settings, str, str, int, int, float]) -> SegmentResult:
    """Runs on an executor: tubes of frames [start, end) and what the camera did meanwhile."""
    from video.analyze import analyze_segment_motion

    settings, url, task_id, start, end, fps = job
    return analyze_segment_motion(fetch(settings, url, task_id), start, end, fps)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="video_synopsis.py")
    parser.add_argument("--video", required=True, help="s3://bucket/key")
    parser.add_argument("--task-id", default=None)
    parser.add_argument("--camera-id", default="")
    parser.add_argument("--start-time", default=None,
                        help="wall-clock time of the first frame (ISO-8601); default: the object's start-time metadata")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--bus-principal", choices=bus_client.PRINCIPALS, default=PRINCIPAL,
                        help="the bus identity the job publishes as (its settings: the config's [bus] "
                             "client_properties_dir)")
    parser.add_argument("--results-topic", default=Topics.video_results)
    parser.add_argument("--status-topic", default=Topics.video_status)
    parser.add_argument("--s3-endpoint", required=True)
    parser.add_argument("--s3-credentials", type=Path, default=None,
                        help="the video jobs' object-store key (an env file, contracts.s3_credentials); default: "
                             "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, else the config's credentials_dir")
    add_config_flag(parser)
    parser.add_argument("--segments", type=int, default=0, help="time segments (default: 2 per core)")
    parser.add_argument("--attempt", type=int, default=1, help="which attempt at the task this is (1 = first)")
    parser.add_argument("--options", default="{}", help="the command's options (JSON, contracts.video.OPTIONS)")
    parser.add_argument("--max-duration-s", type=float, default=DEFAULT_MAX_DURATION_S,
                        help="longer videos fail (analysis time grows with the length)")
    parser.add_argument("--launched-at", type=float, default=None,
                        help="epoch seconds the launcher started this job (Spark start-up is timed from it)")
    return parser.parse_args(argv)


class Progress:
    """Publishes ``running`` while the task advances: each stage's start, and during the analysis the
    share of segments done (polled from Spark's status tracker every second)."""

    def __init__(self, publisher: TaskPublisher, task_id: str, attempt: int, launched_at: float) -> None:
        self.publisher, self.task_id, self.attempt = publisher, task_id, attempt
        self.timings: dict[str, float] = {}
        self._mark = launched_at

    def lap(self, finished_stage: str) -> None:
        """Record the seconds ``finished_stage`` took (since the previous lap)."""
        now = time.time()
        self.timings[finished_stage] = round(now - self._mark, 3)
        self._mark = now

    def running(self, stage: str, progress: float) -> None:
        self.publisher.status(self.task_id, RUNNING, progress=progress, attempt=self.attempt, stage=stage,
                              timings=self.timings)

    def watch_analysis(self, sc: Any, done: threading.Event) -> threading.Thread:
        def poll() -> None:
            last = -1
            while not done.wait(PROGRESS_EVERY_S):
                tracker = sc.statusTracker()
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
                finished = sum(s.numCompletedTasks for s in stages if s)
                total = sum(s.numTasks for s in stages if s)
                if total and finished != last:
                    last = finished
                    self.running("analysis", ANALYSIS_FROM + (RENDER_FROM - ANALYSIS_FROM) * finished / total)

        thread = threading.Thread(target=poll, name="progress", daemon=True)
        thread.start()
        return thread


def start_time(args: argparse.Namespace, settings: S3Settings) -> dt.datetime:
    """The first frame's wall-clock time: the flag, else the object's ``start-time`` metadata, else the epoch."""
    from video import storage

    if args.start_time:
        return dt.datetime.fromisoformat(args.start_time)
    bucket, key = storage.parse_s3_url(args.video)
    stored = settings.client().stat_object(bucket, key).metadata or {}
    value = stored.get("x-amz-meta-start-time")
    return dt.datetime.fromisoformat(value) if value else dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def selected(tubes: list, options: dict[str, Any], fps: float) -> list:
    """The tubes the command asked for (``options.classes``, ``options.window`` in seconds)."""
    classes = options.get("classes")
    window = options.get("window")
    return [t for t in tubes if (classes is None or t.cls in classes)
            and (window is None or (t.first / fps < window[1] and t.last / fps >= window[0]))]


def run(args: argparse.Namespace, task_id: str, settings: S3Settings, progress: Progress,
        options: dict[str, Any]) -> dict:
    from pyspark.sql import SparkSession

    from video import storage
    from video.analyze import VideoError, finalize, probe, segments, stitch
    from video.motion import MotionStats, verdict
    from video.render import Timebase, backgrounds_for, index_json, render_synopsis, thumbnail
    from video.results import object_records
    from video.synopsis import collision_rate, schedule

    local = fetch(settings, args.video, task_id)
    info = probe(local)
    if info.frames / info.fps > args.max_duration_s:
        raise VideoError(f"video is {info.frames / info.fps:.0f} s long, the limit is {args.max_duration_s:.0f} s")
    spark = SparkSession.builder.appName(f"video-synopsis-{task_id}").getOrCreate()
    sc = spark.sparkContext
    progress.lap("spark_start")
    progress.running("analysis", ANALYSIS_FROM)
    count = args.segments or max(1, 2 * sc.defaultParallelism)
    bounds = segments(info.frames, min(count, max(1, info.frames // 50)))
    jobs = [(settings, args.video, task_id, a, b, info.fps) for a, b in bounds]
    analysed = threading.Event()
    watcher = progress.watch_analysis(sc, analysed)
    try:
        parts = sc.parallelize(jobs, len(jobs)).map(process_segment).collect()
    finally:
        analysed.set()
        watcher.join()
    motion = functools.reduce(MotionStats.merge, (p.motion for p in parts), MotionStats())
    tubes = selected(finalize(stitch([p.tubes for p in parts], [a for a, _ in bounds[1:]]), info), options, info.fps)
    progress.lap("analysis")
    progress.running("render", RENDER_FROM)
    timebase = Timebase(start_time(args, settings), info.fps)
    plan = schedule(tubes, info.width, info.height, max_length=info.frames, cuts=motion.cuts)
    client = settings.client()
    with tempfile.TemporaryDirectory() as tmp:
        out = render_synopsis(tubes, plan, backgrounds_for(local, plan), timebase, Path(tmp) / "synopsis.webm")
        synopsis_url = storage.put_bytes(client, storage.SYNOPSIS_BUCKET, f"{task_id}/{out.name}",
                                         out.read_bytes(), content_type(out))
    thumbs = {t.tube_id: storage.put_bytes(client, storage.SYNOPSIS_BUCKET, f"{task_id}/thumbs/{t.tube_id:06d}.jpg",
                                           thumbnail(t), "image/jpeg") for t in tubes}
    index_url = storage.put_bytes(client, storage.SYNOPSIS_BUCKET, f"{task_id}/index.json",
                                  index_json(tubes, plan, timebase), "application/json")
    records = object_records(task_id, args.video, args.camera_id, tubes, plan, timebase, synopsis_url, thumbs)
    progress.lap("render")
    return {"records": records, "synopsis_url": synopsis_url, "index_url": index_url, "frames": info.frames,
            "fps": info.fps, "synopsis_frames": plan.length, "segments": len(bounds),
            "collision_rate": collision_rate(tubes, plan), "analysis_s": progress.timings["analysis"],
            "camera_motion": verdict(motion, info.fps).as_dict(), "capped": plan.capped}


def content_type(path: Path) -> str:
    """The synopsis' MIME type from the file the renderer wrote (WebM for browsers, else what it is)."""
    import mimetypes

    return {".webm": "video/webm", ".mkv": "video/x-matroska"}.get(path.suffix) or (
        mimetypes.guess_type(path.name)[0] or "application/octet-stream")


def main(argv: list[str] | None = None) -> int:
    from video.analyze import VideoError
    from video.results import task_id_for

    args = parse_args(argv)
    task_id = args.task_id or task_id_for(args.video)
    config = load_config(args.config)
    publisher = TaskPublisher(bus_client.librdkafka(config, args.bus_principal, args.bootstrap_server),
                              args.status_topic, args.results_topic, f"video-synopsis-{task_id}")
    progress = Progress(publisher, task_id, args.attempt, args.launched_at or time.time())
    try:
        key = s3_credentials.resolve(config, "video-jobs", args.s3_credentials)
    except (s3_credentials.CredentialsError, OSError) as exc:
        return _fail(publisher, progress, task_id, str(exc))
    settings = S3Settings(args.s3_endpoint, key.access_key, key.secret_key)
    try:
        options = validate_options(json.loads(args.options))
        result = run(args, task_id, settings, progress, options)
    except (VideoError, ValueError, CommandError) as exc:
        return _fail(publisher, progress, task_id, str(exc))
    except Exception as exc:
        from minio.error import S3Error

        if isinstance(exc, S3Error):
            return _fail(publisher, progress, task_id, f"cannot read {args.video}: {exc.code}")
        raise
    finally:  # a re-run must fetch the object again (it may have been replaced)
        shutil.rmtree(cache_dir(task_id), ignore_errors=True)
    publisher.results(task_id, result["records"])
    publisher.flush()  # the results are on the bus before done says so (the loader relies on it)
    summary = {k: v for k, v in result.items() if k != "records"}
    publisher.status(task_id, DONE, attempt=args.attempt, stage="render", timings=progress.timings,
                     objects=len(result["records"]), **summary)
    publisher.flush()
    print(json.dumps({"task_id": task_id, "status": DONE, "objects": len(result["records"]), **summary,
                      "timings": progress.timings}), flush=True)
    return 0


def _fail(publisher: TaskPublisher, progress: Progress, task_id: str, reason: str) -> int:
    print(f"video task {task_id} failed: {reason}", file=sys.stderr, flush=True)
    publisher.status(task_id, FAILED, error=reason, attempt=progress.attempt, timings=progress.timings)
    publisher.flush()
    print(json.dumps({"task_id": task_id, "status": FAILED, "error": reason}), flush=True)
    return EXIT_BAD_VIDEO


if __name__ == "__main__":
    sys.exit(main())
