"""Spark batch job: one video in object storage -> tubes -> synopsis, thumbnails, bus records, HBase rows.

    spark-submit spark_jobs/video_synopsis.py --video s3://bucket/key [--task-id ID] [--camera-id C]
        --bootstrap-server B --hbase-host H --hbase-port P --s3-endpoint http://H:P
        --s3-access-key K --s3-secret-key S [--segments N] [--start-time ISO]

The video is cut into time segments, one RDD element each; every task fetches the video from S3
itself (executors share nothing with the driver) and returns its tubes; the driver stitches them
across borders, labels, schedules and renders. Keys everywhere are derived from the task id, so a
re-run rewrites the same objects and rows (bus records are at-least-once, keyed by task id; the
object id in the value tells duplicates apart). A bad video (missing, corrupt, unsupported codec)
is recorded on the task row as ``status=failed`` with the reason and the job exits with code 3,
without a traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from contracts.topics import Topics

EXIT_BAD_VIDEO = 3


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


def process_segment(job: tuple[S3Settings, str, str, int, int, float]) -> list:
    """Runs on an executor: tubes of frames [start, end)."""
    from video.analyze import analyze_segment

    settings, url, task_id, start, end, fps = job
    return analyze_segment(fetch(settings, url, task_id), start, end, fps)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="video_synopsis.py")
    parser.add_argument("--video", required=True, help="s3://bucket/key")
    parser.add_argument("--task-id", default=None)
    parser.add_argument("--camera-id", default="")
    parser.add_argument("--start-time", default=None, help="wall-clock time of the first frame (ISO-8601)")
    parser.add_argument("--bootstrap-server", required=True)
    parser.add_argument("--topic", default=Topics.video_results)
    parser.add_argument("--hbase-host", default="127.0.0.1")
    parser.add_argument("--hbase-port", type=int, default=9090)
    parser.add_argument("--s3-endpoint", required=True)
    parser.add_argument("--s3-access-key", required=True)
    parser.add_argument("--s3-secret-key", required=True)
    parser.add_argument("--segments", type=int, default=0, help="time segments (default: 2 per core)")
    return parser.parse_args(argv)


def run(args: argparse.Namespace, task_id: str, settings: S3Settings) -> dict:
    from pyspark.sql import SparkSession

    from video import storage
    from video.analyze import finalize, probe, segments, stitch
    from video.render import Timebase, background_from, index_json, render_synopsis, thumbnail
    from video.results import object_records
    from video.synopsis import collision_rate, schedule

    local = fetch(settings, args.video, task_id)
    info = probe(local)
    spark = SparkSession.builder.appName(f"video-synopsis-{task_id}").getOrCreate()
    sc = spark.sparkContext
    count = args.segments or max(1, 2 * sc.defaultParallelism)
    bounds = segments(info.frames, min(count, max(1, info.frames // 50)))
    jobs = [(settings, args.video, task_id, a, b, info.fps) for a, b in bounds]
    began = time.perf_counter()
    parts = sc.parallelize(jobs, len(jobs)).map(process_segment).collect()
    analysis_s = time.perf_counter() - began
    tubes = finalize(stitch(parts, [a for a, _ in bounds[1:]]), info)
    start = dt.datetime.fromisoformat(args.start_time) if args.start_time else dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    timebase = Timebase(start, info.fps)
    plan = schedule(tubes, info.width, info.height)
    client = settings.client()
    with tempfile.TemporaryDirectory() as tmp:
        out = render_synopsis(tubes, plan, background_from(local), timebase, Path(tmp) / "synopsis.webm")
        synopsis_url = storage.put_bytes(client, storage.SYNOPSIS_BUCKET, f"{task_id}/synopsis.webm",
                                         out.read_bytes(), "video/webm")
    thumbs = {t.tube_id: storage.put_bytes(client, storage.SYNOPSIS_BUCKET, f"{task_id}/thumbs/{t.tube_id:06d}.jpg",
                                           thumbnail(t), "image/jpeg") for t in tubes}
    index_url = storage.put_bytes(client, storage.SYNOPSIS_BUCKET, f"{task_id}/index.json",
                                  index_json(tubes, plan, timebase), "application/json")
    records = object_records(task_id, args.video, args.camera_id, tubes, plan, timebase, synopsis_url, thumbs)
    return {"records": records, "synopsis_url": synopsis_url, "index_url": index_url, "frames": info.frames,
            "synopsis_frames": plan.length, "segments": len(bounds), "collision_rate": collision_rate(tubes, plan),
            "analysis_s": round(analysis_s, 3)}


def publish(bootstrap: str, topic: str, task_id: str, records: list[dict]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    errors: list[str] = []
    for record in records:
        producer.produce(topic, key=task_id.encode(), value=json.dumps(record, ensure_ascii=False).encode(),
                         on_delivery=lambda err, _msg: errors.append(str(err)) if err else None)
    if producer.flush(30) or errors:
        raise RuntimeError(f"publishing to {topic} failed: {errors[:3] or 'flush timed out'}")


def write_rows(host: str, port: int, task_id: str, video_url: str, status: str, records: list[dict],
               **fields: object) -> None:
    import happybase

    from contracts.tables.video import (
        OBJECT_TABLE,
        TASK_TABLE,
        ensure_video_tables,
        object_row,
        object_row_key,
        task_row,
        task_row_key,
    )

    conn = happybase.Connection(host, port)
    try:
        ensure_video_tables(conn)
        with conn.table(OBJECT_TABLE).batch() as batch:
            for record in records:
                batch.put(object_row_key(task_id, record["object_id"]), object_row(record))
        conn.table(TASK_TABLE).put(task_row_key(task_id), task_row(task_id, video_url, status, **fields))
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    from video.analyze import VideoError
    from video.results import task_id_for

    args = parse_args(argv)
    task_id = args.task_id or task_id_for(args.video)
    settings = S3Settings(args.s3_endpoint, args.s3_access_key, args.s3_secret_key)
    finished = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    try:
        result = run(args, task_id, settings)
    except (VideoError, ValueError) as exc:
        return _fail(args, task_id, str(exc), finished)
    except Exception as exc:
        from minio.error import S3Error

        if isinstance(exc, S3Error):
            return _fail(args, task_id, f"cannot read {args.video}: {exc.code}", finished)
        raise
    finally:  # a re-run must fetch the object again (it may have been replaced)
        shutil.rmtree(cache_dir(task_id), ignore_errors=True)
    publish(args.bootstrap_server, args.topic, task_id, result["records"])
    write_rows(args.hbase_host, args.hbase_port, task_id, args.video, "done", result["records"],
               objects=len(result["records"]), synopsis_url=result["synopsis_url"], index_url=result["index_url"],
               frames=result["frames"], synopsis_frames=result["synopsis_frames"], error="", finished_at=finished)
    summary = {k: v for k, v in result.items() if k != "records"}
    print(json.dumps({"task_id": task_id, "status": "done", "objects": len(result["records"]), **summary}), flush=True)
    return 0


def _fail(args: argparse.Namespace, task_id: str, reason: str, finished: str) -> int:
    print(f"video task {task_id} failed: {reason}", file=sys.stderr, flush=True)
    write_rows(args.hbase_host, args.hbase_port, task_id, args.video, "failed", [], error=reason,
               finished_at=finished)
    print(json.dumps({"task_id": task_id, "status": "failed", "error": reason}), flush=True)
    return EXIT_BAD_VIDEO


if __name__ == "__main__":
    sys.exit(main())
