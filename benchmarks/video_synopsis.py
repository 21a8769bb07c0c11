"""Video synopsis benchmark: analysis speed per core, Spark segment speed-up, synopsis quality.

1. frames/s on one core (OpenCV limited to one thread) at 640x360, decode included: target >= 100.
2. The Spark job on a 640x360 street video with ``local[1]`` and ``local[2]``: speed-up of the
   segment stage (the RDD over time segments), from the job's own timing (JVM start-up excluded).
3. An 8-hour-equivalent sparse scene (a 2 fps archive at 320x180), analysed and condensed:
   condensation ratio (target <= 0.05), collision rate (<= 5%) and tube recall (>= 0.9).

    .venv/bin/python benchmarks/video_synopsis.py [--skip-spark] [--hours 8]
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
    from tests.hbase.conftest import start_gateway
    from tests.support.broker_process import BrokerProcess

    path = street_scene(seconds=seconds, n_objects=20, seed=12).write(tmp / "long.mp4")
    timings: dict[str, float] = {}
    with ObjectStore(tmp / "s3", port=0) as store:
        broker = BrokerProcess(tmp / "bus").start()
        gateway = start_gateway(tmp / "hbase", "--log-level", "WARNING")
        try:
            client = storage.connect(store.url, store.access_key, store.secret_key)
            video = storage.upload_video(client, path, "bench", dt.datetime.now(dt.UTC))
            for cores in (1, 2):
                settings = launch.SparkSettings(master=f"local[{cores}]")
                with (tmp / f"job{cores}.log").open("wb") as log:
                    job = launch.submit(Path(launch.ROOT) / "spark_jobs" / "video_synopsis.py", [
                        "--video", video.url, "--task-id", f"bench-{cores}", "--segments", "4",
                        "--bootstrap-server", broker.bootstrap, "--hbase-port", str(gateway.port),
                        "--s3-endpoint", store.url, "--s3-access-key", store.access_key,
                        "--s3-secret-key", store.secret_key], settings, stdout=subprocess.PIPE, stderr=log)
                    out, _ = job.proc.communicate(timeout=900)
                    job.wait(10)
                summary = json.loads([line for line in out.decode().splitlines() if line.startswith("{")][-1])
                timings[f"local[{cores}]"] = summary["analysis_s"]
        finally:
            gateway.kill()
            broker.stop()
    timings["speedup"] = timings["local[1]"] / timings["local[2]"]
    return timings


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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
