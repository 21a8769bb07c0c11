"""The video synopsis Spark job end to end: video in SeaweedFS -> results on the bus -> rows in HBase."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import happybase
import pytest
from confluent_kafka import Consumer

from contracts.tables.video import OBJECT_TABLE, TASK_TABLE, task_row_key
from deploy.object_store import ObjectStore
from spark_jobs import launch
from tests.hbase.conftest import Gateway, start_gateway
from tests.support.broker_process import BrokerProcess
from video import storage
from video.scene import street_scene

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark")]


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ObjectStore, BrokerProcess, Gateway]]:
    tmp = tmp_path_factory.mktemp("video-job")
    with ObjectStore(tmp / "s3", port=0) as store:
        broker = BrokerProcess(tmp / "bus").start()
        gateway = start_gateway(tmp / "hbase")
        try:
            yield store, broker, gateway
        finally:
            gateway.kill()
            broker.stop()


def _submit(store: ObjectStore, broker: BrokerProcess, gateway: Gateway, url: str, task_id: str,
            log: Path) -> tuple[int, dict]:
    with log.open("ab") as out:
        job = launch.submit(ROOT / "spark_jobs" / "video_synopsis.py", [
            "--video", url, "--task-id", task_id, "--camera-id", "cam-1", "--start-time", "2024-05-01T08:00:00+00:00",
            "--bootstrap-server", broker.bootstrap, "--hbase-host", "127.0.0.1", "--hbase-port", str(gateway.port),
            "--s3-endpoint", store.url, "--s3-access-key", store.access_key, "--s3-secret-key", store.secret_key,
        ], stdout=subprocess.PIPE, stderr=out)
        stdout, _ = job.proc.communicate(timeout=240)
        code = job.wait(10)
    lines = [line for line in stdout.decode().splitlines() if line.startswith("{")]
    assert lines, log.read_text()[-3000:]
    return code, json.loads(lines[-1])


def test_job_end_to_end_and_rerun_is_idempotent(services, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, broker, gateway = services
    client = storage.connect(store.url, store.access_key, store.secret_key)
    scene = street_scene(seconds=30, n_objects=6, seed=5)
    video = storage.upload_video(client, scene.write(tmp_path / "street.mp4"), "cam-1",
                                 dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC))
    code, summary = _submit(store, broker, gateway, video.url, "task-1", tmp_path / "job.log")
    assert code == 0, (tmp_path / "job.log").read_text()[-3000:]
    assert summary["status"] == "done" and summary["objects"] >= 5 and summary["segments"] >= 2
    assert client.stat_object("synopsis", "task-1/synopsis.webm").size > 0
    index = json.loads(client.get_object("synopsis", "task-1/index.json").read())
    assert len(index["objects"]) == summary["objects"]

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t", "auto.offset.reset": "earliest"})
    consumer.subscribe(["video.results"])
    records = []
    for _ in range(60):
        msg = consumer.poll(1.0)
        if msg is not None and not msg.error():
            records.append(json.loads(msg.value()))
        if len(records) >= summary["objects"]:
            break
    consumer.close()
    assert len(records) == summary["objects"]
    assert {r["class"] for r in records} <= {"person", "vehicle", "other"}
    assert all(r["task_id"] == "task-1" and r["first_seen"].startswith("2024-05-01T08:00") for r in records)

    conn = happybase.Connection("127.0.0.1", gateway.port)
    rows = dict(conn.table(OBJECT_TABLE).scan())
    assert len(rows) == summary["objects"]
    assert conn.table(TASK_TABLE).row(task_row_key("task-1"))[b"t:status"] == b"done"

    code, again = _submit(store, broker, gateway, video.url, "task-1", tmp_path / "job.log")
    assert code == 0 and again["objects"] == summary["objects"]
    assert len(dict(conn.table(OBJECT_TABLE).scan())) == summary["objects"], "re-run rewrites the same rows"

    bad = storage.put_bytes(client, "videos", "cam-1/corrupt.mp4", b"not a video" * 100, "video/mp4")
    code, failed = _submit(store, broker, gateway, bad, "task-bad", tmp_path / "bad.log")
    assert code == 3 and failed["status"] == "failed"
    row = conn.table(TASK_TABLE).row(task_row_key("task-bad"))
    assert row[b"t:status"] == b"failed" and row[b"t:error"]
    conn.close()
