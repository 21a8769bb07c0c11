"""The video synopsis Spark job end to end: video in SeaweedFS -> status and results on the bus (no HBase:
the video ingest job loads those, see tests/video/)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.video import read_topic
from spark_jobs import launch
from video import storage
from video.scene import street_scene

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ObjectStore, BrokerProcess]]:
    tmp = tmp_path_factory.mktemp("video-job")
    with ObjectStore(tmp / "s3", port=0) as store:
        broker = BrokerProcess(tmp / "bus").start()
        try:
            yield store, broker
        finally:
            broker.stop()


def _submit(store: ObjectStore, broker: BrokerProcess, url: str, task_id: str, log: Path) -> tuple[int, dict]:
    with log.open("ab") as out:
        job = launch.submit(ROOT / "spark_jobs" / "video_synopsis.py", [
            "--video", url, "--task-id", task_id, "--camera-id", "cam-1", "--start-time", "2024-05-01T08:00:00+00:00",
            "--bootstrap-server", broker.bootstrap,
            "--s3-endpoint", store.url, "--s3-credentials", str(store.credentials_file("video-jobs")),
        ], stdout=subprocess.PIPE, stderr=out)
        stdout, _ = job.proc.communicate(timeout=480)
        code = job.wait(10)
    lines = [line for line in stdout.decode().splitlines() if line.startswith("{")]
    assert lines, log.read_text()[-3000:]
    return code, json.loads(lines[-1])


@pytest.mark.timeout(1200)
def test_job_end_to_end_and_rerun_is_idempotent(services, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, broker = services
    client = storage.connect(store.url, store.access_key, store.secret_key)
    scene = street_scene(seconds=30, n_objects=6, seed=5)
    video = storage.upload_video(client, scene.write(tmp_path / "street.mp4"), "cam-1",
                                 dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC))
    code, summary = _submit(store, broker, video.url, "task-1", tmp_path / "job.log")
    assert code == 0, (tmp_path / "job.log").read_text()[-3000:]
    assert summary["status"] == "done" and summary["objects"] >= 5 and summary["segments"] >= 2
    assert set(summary["timings"]) == {"spark_start", "analysis", "render"}
    assert client.stat_object("synopsis", "task-1/synopsis.webm").content_type == "video/webm"
    index = json.loads(client.get_object("synopsis", "task-1/index.json").read())
    assert len(index["objects"]) == summary["objects"]

    records = read_topic(broker.bootstrap, "video.results", 5)
    assert len(records) == summary["objects"]
    assert {r["class"] for r in records} <= {"person", "vehicle", "other"}
    assert all(r["task_id"] == "task-1" and r["first_seen"].startswith("2024-05-01T08:00") for r in records)
    statuses = read_topic(broker.bootstrap, "video.status", 3)
    assert [s["state"] for s in statuses][-1] == "done" and statuses[-1]["objects"] == summary["objects"]
    motion = statuses[-1]["camera_motion"]  # the synthetic street is filmed by a fixed camera
    assert (motion["camera_motion"], motion["reliable"]) == ("none", True), motion["reason"]
    assert statuses[-1]["capped"] is False and statuses[-1]["synopsis_frames"] <= statuses[-1]["frames"]
    assert {s["stage"] for s in statuses if s["state"] == "running"} == {"analysis", "render"}

    code, again = _submit(store, broker, video.url, "task-1", tmp_path / "job.log")
    assert code == 0 and again["objects"] == summary["objects"]
    rerun = read_topic(broker.bootstrap, "video.results", 5)[len(records):]
    assert sorted(json.dumps(r, sort_keys=True) for r in rerun) == sorted(json.dumps(r, sort_keys=True)
                                                                          for r in records), "same records again"

    bad = storage.put_bytes(client, "videos", "cam-1/corrupt.mp4", b"not a video" * 100, "video/mp4")
    code, failed = _submit(store, broker, bad, "task-bad", tmp_path / "bad.log")
    assert code == 3 and failed["status"] == "failed"
    last = [s for s in read_topic(broker.bootstrap, "video.status", 3) if s["task_id"] == "task-bad"][-1]
    assert last["state"] == "failed" and last["error"]
