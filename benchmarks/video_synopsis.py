"""Video synopsis benchmark: analysis speed per core, Spark segment speed-up, synopsis quality.

1. frames/s on one core (OpenCV limited to one thread) at 640x360, decode included: target >= 100.
2. The Spark job on a 640x360 street video with ``local[1]`` and ``local[2]``: speed-up of the
   segment stage (the RDD over time segments), from the job's own timing (JVM start-up excluded).
3. An 8-hour-equivalent sparse scene (a 2 fps archive at 320x180), analysed and condensed:
   condensation ratio (target <= 0.05), collision rate (<= 5%) and tube recall (>= 0.9).
4. End to end through the bus: a command for a 10-minute 640x360 clip published to ``video.commands``
   -> the video ingest job -> the batch job -> the task's rows in HBase, with the breakdown (queue,
   Spark start, analysis, render, load) read from the task's own ``video.status`` timings, and the
   analysis speed per core against real time.

    .venv/bin/python benchmarks/video_synopsis.py [--skip-spark] [--skip-e2e] [--hours 8] [--e2e-minutes 10]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2

from deploy.object_store import ObjectStore
from spark_jobs import launch
from video import storage
from video.analyze import AnalysisConfig, VideoInfo, analyze_frames, analyze_video, finalize
from video.evaluate import score
from video.scene import sparse_scene, street_scene
from video.synopsis import collision_rate, schedule


def per_core_fps(tmp: Path, seconds: float) -> float:
    cv2.setNumThreads(1)
    path = street_scene(seconds=seconds, n_objects=12, seed=11).write(tmp / "street.mp4")
    began = time.perf_counter()
    info, _ = analyze_video(path)
    elapsed = time.perf_counter() - began
    cv2.setNumThreads(0)
    return info.frames / elapsed


def spark_speedup(tmp: Path, seconds: float) -> dict[str, float]:
    from deploy.processes.broker import BrokerProcess

    path = street_scene(seconds=seconds, n_objects=20, seed=12).write(tmp / "long.mp4")
    timings: dict[str, float] = {}
    with ObjectStore(tmp / "s3", port=0) as store:
        broker = BrokerProcess(tmp / "bus").start()
        try:
            client = storage.connect(store.url, store.access_key, store.secret_key)
            video = storage.upload_video(client, path, "bench", dt.datetime.now(dt.UTC))
            for cores in (1, 2):
                settings = launch.SparkSettings(master=f"local[{cores}]")
                with (tmp / f"job{cores}.log").open("wb") as log:
                    job = launch.submit(Path(launch.ROOT) / "spark_jobs" / "video_synopsis.py", [
                        "--video", video.url, "--task-id", f"bench-{cores}", "--segments", "4",
                        "--bootstrap-server", broker.bootstrap,
                        "--s3-endpoint", store.url, "--s3-credentials", str(store.credentials_file("video-jobs")),
                    ], settings, stdout=subprocess.PIPE, stderr=log)
                    out, _ = job.proc.communicate(timeout=900)
                    job.wait(10)
                summary = json.loads([line for line in out.decode().splitlines() if line.startswith("{")][-1])
                timings[f"local[{cores}]"] = summary["analysis_s"]
        finally:
            broker.stop()
    timings["speedup"] = timings["local[1]"] / timings["local[2]"]
    return timings


def end_to_end(tmp: Path, minutes: float) -> dict[str, float]:
    """Command published -> task done in HBase, through the real video ingest job (``local[2]``)."""
    from contracts.video import cancel_record, command_record
    from deploy.processes.video import START, start_ingest, video_services

    path = street_scene(seconds=60 * minutes, n_objects=max(8, round(4 * minutes)), seed=21).write(tmp / "e2e.mp4")
    with video_services(tmp / "e2e") as services:
        url = storage.upload_video(services.s3(), path, "bench", START).url
        job = start_ingest(services, "bench", "--max-concurrent", "1")
        try:
            # An operator's command meets a job that is already streaming: a cancel of a probe task goes
            # through first, so "queue" does not include the streaming query's own start-up (~15 s).
            services.publish(cancel_record("bench-probe", "benchmark"), key=b"bench-probe")
            services.wait_task("bench-probe", {"cancelled"}, 600, job)
            published = time.time()
            services.publish(command_record("bench-e2e", url, "bench", "benchmark"), key=b"bench")
            row = services.wait_task("bench-e2e", {"done", "failed"}, 3600, job)
            elapsed = time.time() - published
        finally:
            job.job.stop(60)
    if row["status"] != "done":
        raise RuntimeError(f"end-to-end task failed: {row.get('error')}")
    timings = json.loads(row["timings"])
    video_s = int(row["frames"]) / float(row["fps"])
    cores = 2  # local[2], the light local settings of spark_jobs/launch.py
    return {"total_s": elapsed, **{f"{k}_s": v for k, v in timings.items()}, "objects": int(row["objects"]),
            "video_s": video_s, "realtime_per_core": video_s / timings["analysis"] / cores}


def sparse_quality(hours: float) -> dict[str, float]:
    scene = sparse_scene(hours=hours)
    began = time.perf_counter()
    config = AnalysisConfig(keep_crops=False)
    tubes = analyze_frames(scene.iter_frames(), scene.fps, config)
    elapsed = time.perf_counter() - began
    tubes = finalize(tubes, VideoInfo(scene.fps, scene.frames, scene.width, scene.height))
    plan = schedule(tubes, scene.width, scene.height)
    result = score(tubes, scene)
    return {"objects": result.objects, "tubes": len(tubes), "recall": result.recall, "precision": result.precision,
            "condensation": plan.length / scene.frames, "collision_rate": collision_rate(tubes, plan),
            "analysis_fps": scene.frames / elapsed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the 640x360 speed test video")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--e2e-minutes", type=float, default=10.0, help="length of the end-to-end clip")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="video-bench-") as name:
        tmp = Path(name)
        fps = per_core_fps(tmp, args.seconds)
        print(f"analysis at 640x360, one core: {fps:.0f} frames/s (target >= 100)", flush=True)
        quality = sparse_quality(args.hours)
        print(f"{args.hours:g}-hour sparse scene: {quality['objects']} objects, {quality['tubes']} tubes, "
              f"recall {quality['recall']:.3f} (>= 0.9), precision {quality['precision']:.3f}, "
              f"condensation {quality['condensation']:.4f} (<= 0.05), "
              f"collision rate {quality['collision_rate']:.4f} (<= 0.05), "
              f"analysed at {quality['analysis_fps']:.0f} frames/s", flush=True)
        if not args.skip_spark:
            timings = spark_speedup(tmp, 4 * args.seconds)
            print(f"Spark segment stage: local[1] {timings['local[1]']:.1f} s, local[2] {timings['local[2]']:.1f} s, "
                  f"speed-up {timings['speedup']:.2f}x on 2 cores", flush=True)
        if not args.skip_e2e:
            e2e = end_to_end(tmp, args.e2e_minutes)
            stages = ", ".join(f"{k} {e2e[f'{k}_s']:.1f} s" for k in ("queue", "spark_start", "analysis", "render",
                                                                      "load"))
            print(f"end to end, {e2e['video_s'] / 60:.1f}-minute 640x360 clip, {e2e['objects']} objects: command -> "
                  f"rows in HBase {e2e['total_s']:.1f} s ({stages}); analysis {e2e['realtime_per_core']:.1f}x "
                  f"real time per core", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
