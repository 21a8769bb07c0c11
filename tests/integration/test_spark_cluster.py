"""Spark jobs on a Spark standalone cluster (issue 30): Spark's own master and two workers from the pyspark jars,
each worker in a mount namespace where this checkout (its code and its venv) is an empty directory, so an executor
has only Java, Spark and the base interpreter, and what the submission ships (the packed environment, the project's
code). The capture ingest's rows must equal what the simulator produced valid, with executors on both workers, also
when a worker is killed mid-stream; the video batch job runs its analysis there."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import happybase
import pytest

from contracts.processes import ROOT
from deploy.object_store import ObjectStore
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.ingest import ingest_job, simulate
from deploy.processes.spark_cluster import SPARK_HOME, SparkCluster, hidden
from spark_jobs import launch
from spark_jobs.launch import SparkSettings
from testkit.polling import poll
from tests.integration._ingest_support import count_rows, row_counts
from tests.integration.test_ingest_end_to_end import bus_record_ids, expected_counts, table_record_ids
from video import storage
from video.scene import street_scene

# A group of its own: its JVMs (master, workers, executors, driver) need not wait for the local Spark tests'.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark_cluster"), pytest.mark.timeout(900)]
JOB_DEADLINE_S = 600


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    root = tmp_path_factory.mktemp("spark")
    home = root / "spark-home"
    home.mkdir()
    with SparkCluster(root / "cluster", workers=2, cores=1, memory="1g", spark_home=home,
                      wrap=hidden([ROOT], [(SPARK_HOME, home)])) as cluster:
        yield cluster


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path / "hbase")
    yield gw
    gw.kill()


def test_the_workers_cannot_see_the_checkout(spark: SparkCluster) -> None:
    for index in range(spark.workers):
        pid = spark.worker(index).pid
        seen = subprocess.run(["nsenter", "-t", str(pid), "-m", "ls", "-A", str(ROOT)], capture_output=True,
                              text=True, check=True).stdout
        assert seen == "", f"worker {index} sees the checkout: {seen[:200]}"
        assert (ROOT / "pyproject.toml").exists()  # while this process does


def test_the_video_synopsis_batch_job_on_the_cluster(tmp_path: Path, spark: SparkCluster,
                                                     broker: BrokerProcess) -> None:
    """The video batch job: its analysis runs in the executors' Python (OpenCV from the shipped environment)."""
    with ObjectStore(tmp_path / "s3", port=0) as store:
        client = storage.connect(store.url, store.access_key, store.secret_key)
        scene = street_scene(seconds=8, n_objects=3, seed=7)
        video = storage.upload_video(client, scene.write(tmp_path / "street.mp4"), "cam-1",
                                     dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC))
        before = {index: set(spark.executor_dirs(index)) for index in range(spark.workers)}
        log = tmp_path / "job.log"
        with log.open("ab") as out:
            job = launch.submit(ROOT / "spark_jobs" / "video_synopsis.py", [
                "--video", video.url, "--task-id", "task-c", "--camera-id", "cam-1",
                "--start-time", "2024-05-01T08:00:00+00:00", "--bootstrap-server", broker.bootstrap,
                "--s3-endpoint", store.url, "--s3-credentials", str(store.credentials_file("video-jobs")),
            ], SparkSettings(master=spark.url), stdout=subprocess.PIPE, stderr=out)
            stdout, _ = job.proc.communicate(timeout=JOB_DEADLINE_S)
            assert job.wait(10) == 0, log.read_text()[-5000:]
    summary = json.loads([line for line in stdout.decode().splitlines() if line.startswith("{")][-1])
    assert summary["status"] == "done" and summary["objects"] >= 2, summary
    ran = [set(spark.executor_dirs(index)) - before[index] for index in range(spark.workers)]
    assert any(ran), "no executor of the cluster ran the job"


def test_the_capture_ingest_on_both_workers_then_one_killed_loses_and_duplicates_nothing(
        tmp_path: Path, spark: SparkCluster, broker: BrokerProcess, gateway: Gateway) -> None:
    """The streaming ingest runs an executor on each worker; SIGKILL of a worker (its executor dies with it) while
    it writes: Spark runs the lost tasks again on the other worker, and the writes are idempotent (a row's key is its
    record's), so every valid record the simulator produced is in HBase exactly once. Runs last: the cluster has
    one worker left."""
    summary = simulate(broker.bootstrap, tmp_path, "--count", "5000", "--rate", "20000", "--seed", "13",
                       "--failure-rate", "0.03")
    log = tmp_path / "job.log"
    before = {index: set(spark.executor_dirs(index)) for index in range(spark.workers)}
    job = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", log, "--trigger-ms", "100",
                     "--max-offsets-per-trigger", "500", "--no-stats", settings=SparkSettings(master=spark.url))
    conn = happybase.Connection("127.0.0.1", gateway.port, timeout=60_000)
    try:
        poll(lambda: count_rows(conn, "vehicle") > 0 or job.poll() is not None, JOB_DEADLINE_S, 0.3,
             "first rows in HBase")
        assert job.poll() is None, log.read_text()[-5000:]
        ran = {index: set(spark.executor_dirs(index)) - before[index] for index in range(spark.workers)}
        assert all(ran.values()), f"this job's executors per worker: {ran}"
        spark.worker(0).kill()
        spark.worker(0).wait()
        expected = expected_counts(summary)
        poll(lambda: row_counts(conn) == expected or job.poll() is not None, JOB_DEADLINE_S, 1.0,
             "every valid record in HBase after the worker's death")
        assert job.poll() is None, log.read_text()[-5000:]
        ids = table_record_ids(conn)
        assert len(ids) == len(set(ids)) == sum(summary["produced"].values())
        assert set(ids) == bus_record_ids(broker)
    finally:
        job.kill()
        conn.close()
