"""Spark jobs on a Spark standalone cluster (issue 30): Spark's own master and two workers from the pyspark jars,
each worker in a mount namespace where this checkout (its code and its venv) is an empty directory, so an executor
has only Java, Spark and the base interpreter, and what the submission ships (the packed environment, the project's
code). The capture ingest's rows must equal what the simulator produced valid, with executors on both workers, also
when a worker is killed mid-stream and when the driver is killed and started again; the video batch job runs its
analysis there, and a task whose executor dies runs again on a new one."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import happybase
import psutil
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


def test_the_master_serves_no_unauthenticated_rest_submissions(spark: SparkCluster) -> None:
    """Spark 4.1+ starts a REST submission server (6066) with the master unless told not to: anyone who reaches it
    runs a driver of their choosing. The master listens on its cluster port and its UI only."""
    master = psutil.Process(spark.procs[0].pid)
    jvms = [master, *master.children(recursive=True)]  # spark-class execs or forks the JVM
    listening = {conn.laddr.port for proc in jvms for conn in proc.net_connections("tcp")
                 if conn.status == psutil.CONN_LISTEN}
    assert listening == {spark.port, spark.webui_port}, listening
    assert "REST server" not in (spark.data_dir / "master.log").read_text()


TINY_JOB = """from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("tiny").getOrCreate()
print(spark.sparkContext.parallelize([1, 2], 2).map(lambda x: x + 1).collect())
"""


def test_a_worker_host_without_the_interpreter_fails_the_job_naming_what_it_lacks(tmp_path: Path) -> None:
    """The shipped environment runs on the base interpreter it was packed with, at the same path (venv-pack's
    limit). A worker host without it fails the job's first Python task with a message saying which interpreter it
    lacks and where, instead of Spark's 'Cannot run program "./.venv/bin/python": error=2' about a file that is
    there."""
    home = tmp_path / "spark-home"
    home.mkdir()
    script = tmp_path / "tiny.py"
    script.write_text(TINY_JOB)
    base = Path(sys.base_prefix)
    with SparkCluster(tmp_path / "cluster", workers=1, cores=1, memory="1g", spark_home=home,
                      wrap=hidden([ROOT, base], [(SPARK_HOME, home)])) as cluster, \
            (tmp_path / "job.log").open("wb") as log:
        job = launch.submit(script, [], SparkSettings(master=cluster.url, conf={"spark.task.maxFailures": "1"}),
                            stdout=log, stderr=log)
        try:
            assert job.wait(JOB_DEADLINE_S) != 0
        finally:
            job.kill()
    said = (tmp_path / "job.log").read_text()
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"this executor's host lacks Python {version} at {base}/bin/python{version}" in said, said[-5000:]


def running_executor(app_dirs: set[Path]) -> psutil.Process | None:
    """The executor JVM of one of ``app_dirs``' applications that has started its Python worker, i.e. runs a task
    of the job's (one segment: its only task)."""
    apps = {path.parent.name for path in app_dirs}
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline and apps & set(cmdline):
            with contextlib.suppress(psutil.NoSuchProcess):
                if any("python" in child.name() for child in proc.children(recursive=True)):
                    return proc
    return None


def test_the_video_synopsis_batch_job_on_the_cluster_runs_a_task_again_when_its_executor_dies(
        tmp_path: Path, spark: SparkCluster, broker: BrokerProcess) -> None:
    """The video batch job: its analysis runs in the executors' Python (OpenCV from the shipped environment). The
    executor running the analysis is SIGKILLed mid-task: its worker starts another one, the task runs again there
    (``spark.task.maxFailures``), and the job's result is whole."""
    with ObjectStore(tmp_path / "s3", port=0) as store:
        client = storage.connect(store.url, store.access_key, store.secret_key)
        scene = street_scene(seconds=8, n_objects=3, seed=7)
        video = storage.upload_video(client, scene.write(tmp_path / "street.mp4"), "cam-1",
                                     dt.datetime(2024, 5, 1, 8, tzinfo=dt.UTC))
        before = {index: set(spark.executor_dirs(index)) for index in range(spark.workers)}
        log = tmp_path / "job.log"
        with log.open("ab") as out:
            job = launch.submit(ROOT / "spark_jobs" / "video_synopsis.py", [
                "--video", video.url, "--task-id", "task-c", "--camera-id", "cam-1", "--segments", "1",
                "--start-time", "2024-05-01T08:00:00+00:00", "--bootstrap-server", broker.bootstrap,
                "--s3-endpoint", store.url, "--s3-credentials", str(store.credentials_file("video-jobs")),
            ], SparkSettings(master=spark.url), stdout=subprocess.PIPE, stderr=out)
            try:
                found: list[psutil.Process] = []

                def analysing() -> bool:
                    ours = set().union(*(set(spark.executor_dirs(i)) - before[i] for i in range(spark.workers)))
                    executor = running_executor(ours) if ours else None
                    found.extend([executor] if executor else [])
                    return bool(found) or job.poll() is not None

                poll(analysing, JOB_DEADLINE_S, 0.1, "an executor running the analysis")
                assert found, log.read_text()[-5000:]
                found[0].kill()
                stdout, _ = job.proc.communicate(timeout=JOB_DEADLINE_S)
                assert job.wait(10) == 0, log.read_text()[-5000:]
            finally:
                job.kill()
    summary = json.loads([line for line in stdout.decode().splitlines() if line.startswith("{")][-1])
    assert summary["status"] == "done" and summary["objects"] >= 2, summary
    # The stage's only task was lost with its executor, and the job still ended done: it ran again.
    assert "Lost task 0.0 in stage 0.0" in log.read_text(), log.read_text()[-5000:]


def merged_counts(*summaries: dict) -> dict[str, int]:
    total: Counter[str] = Counter()
    for summary in summaries:
        total.update(expected_counts(summary))
    return dict(total)


def test_the_capture_ingest_survives_a_worker_kill_and_a_driver_restart(
        tmp_path: Path, spark: SparkCluster, broker: BrokerProcess, gateway: Gateway) -> None:
    """The streaming ingest runs an executor on each worker; SIGKILL of a worker (its executor dies with it) while
    it writes: Spark runs the lost tasks again on the other worker, and the writes are idempotent (a row's key is its
    record's), so every valid record the simulator produced is in HBase exactly once. Then a second backlog arrives
    and the driver (spark-submit and its Python) is SIGKILLed while it works through it; started again on the same
    checkpoint, it resumes where the checkpoint says, not at the topics' start. Runs last: the cluster has one
    worker left."""
    first = simulate(broker.bootstrap, tmp_path, "--count", "3000", "--rate", "20000", "--seed", "13",
                     "--failure-rate", "0.03")
    args = ("--trigger-ms", "100", "--max-offsets-per-trigger", "400", "--no-stats")
    settings = SparkSettings(master=spark.url)
    before = {index: set(spark.executor_dirs(index)) for index in range(spark.workers)}
    job = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", tmp_path / "job.log", *args,
                     settings=settings)
    conn = happybase.Connection("127.0.0.1", gateway.port, timeout=60_000)
    try:
        poll(lambda: count_rows(conn, "vehicle") > 0 or job.poll() is not None, JOB_DEADLINE_S, 0.3,
             "first rows in HBase")
        assert job.poll() is None, (tmp_path / "job.log").read_text()[-5000:]
        ran = {index: set(spark.executor_dirs(index)) - before[index] for index in range(spark.workers)}
        assert all(ran.values()), f"this job's executors per worker: {ran}"
        spark.worker(0).kill()
        spark.worker(0).wait()
        poll(lambda: row_counts(conn) == expected_counts(first) or job.poll() is not None, JOB_DEADLINE_S, 1.0,
             "every valid record in HBase after the worker's death")
        assert job.poll() is None, (tmp_path / "job.log").read_text()[-5000:]

        second = simulate(broker.bootstrap, tmp_path, "--count", "1500", "--rate", "20000", "--seed", "14",
                          "--failure-rate", "0.03", "--first-sequence", "1000000")  # record ids of its own
        written = sum(row_counts(conn).values())
        poll(lambda: sum(row_counts(conn).values()) > written or job.poll() is not None, JOB_DEADLINE_S, 0.2,
             "the second backlog's first rows")
        job.kill()
        restarted = ingest_job(broker.bootstrap, gateway.port, tmp_path / "ckpt", tmp_path / "restarted.log", *args,
                               settings=settings)
        try:
            expected = merged_counts(first, second)
            poll(lambda: row_counts(conn) == expected or restarted.poll() is not None, JOB_DEADLINE_S, 1.0,
                 "every valid record in HBase after the driver's restart")
            assert restarted.poll() is None, (tmp_path / "restarted.log").read_text()[-5000:]
        finally:
            restarted.kill()
        total = sum(first["produced"].values()) + sum(second["produced"].values())
        ids = table_record_ids(conn)
        assert len(ids) == len(set(ids)) == total
        assert set(ids) == bus_record_ids(broker)
        reread = sum(json.loads(line)["records"] for line in (tmp_path / "restarted.log").read_text().splitlines()
                     if line.startswith('{"batch"'))
        assert reread <= sum(second["produced"].values()), f"the restarted driver read {reread}: not resumed"
    finally:
        job.kill()
        conn.close()
