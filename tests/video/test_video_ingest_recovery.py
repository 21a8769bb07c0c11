"""The video ingest job survives crashes: its own kill -9 mid-task, and batch jobs that die.

After a kill -9 of the ingest job, its batch job runs on as an orphan; the restarted job kills it,
re-launches the task and the task completes once (one ``done``, rows equal to the objects found). A
batch job killed under a running job is retried, and after ``--max-attempts`` deaths the task fails
with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from deploy.processes.video import VideoServices, start_ingest
from tests.video._support import analyze, group_alive, services, started_line  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(2400)]
TIMEOUT = 600.0


def _running_pid(services: VideoServices, jobs_dir, task_id: str, stage: str, attempt: int) -> int:  # noqa: F811
    """The batch job's process group once the task has reached ``stage`` in ``attempt``."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        row = services.task(task_id)
        pid_file = jobs_dir / f"{task_id}.json"
        if row.get("stage") == stage and row.get("attempt") == str(attempt) and pid_file.exists():
            return int(json.loads(pid_file.read_text())["pid"])
        time.sleep(0.3)
    raise AssertionError(f"{task_id} never reached {stage} in attempt {attempt}: {services.task(task_id)}")


def test_kill_9_of_the_ingest_job_mid_task(services: VideoServices) -> None:  # noqa: F811
    job = start_ingest(services, "crash", "--max-concurrent", "1", "--max-attempts", "2")
    try:
        url = services.upload_scene("long.mp4", seconds=40, n_objects=6, seed=7)
        services.publish(analyze("t-crash", url))
        orphan = _running_pid(services, job.jobs_dir, "t-crash", "analysis", 1)
        job.job.kill()  # kill -9 of the whole ingest job; its batch job has its own session and runs on
        assert group_alive(orphan)
        job = start_ingest(services, "crash", "--max-concurrent", "1", "--max-attempts", "2")
        assert started_line(job)["orphans_killed"] == ["t-crash"]
        # SIGKILL is delivered at once, but on a loaded machine the killed processes can take a moment to exit.
        deadline = time.monotonic() + 10
        while group_alive(orphan) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_alive(orphan), "the restarted job killed the orphaned batch job"
        row = services.wait_task("t-crash", {"done", "failed"}, TIMEOUT, job)
        assert row["status"] == "done", row
        # the loader holds a `done` until the task's objects are in HBase (they travel on another topic)
        assert len(services.objects("t-crash")) == int(row["objects"])
        assert len(services.index_rows("t-crash")) == int(row["objects"])
        states = [s["state"] for s in services.statuses("t-crash")]
        assert states.count("done") == 1 and states.count("failed") == 0, states
        assert len(job.batch_logs("t-crash")) == 1, "re-launched as the same attempt (appending to its log)"
    finally:
        job.job.stop(60)


def test_a_dying_batch_job_is_retried_then_the_task_fails(services: VideoServices) -> None:  # noqa: F811
    job = start_ingest(services, "retry", "--max-concurrent", "1", "--max-attempts", "2")
    try:
        url = services.upload_scene("retry.mp4", seconds=40, n_objects=4, seed=9, minute=30)
        services.publish(analyze("t-dies", url))
        for attempt in (1, 2):
            os.killpg(_running_pid(services, job.jobs_dir, "t-dies", "analysis", attempt), signal.SIGKILL)
        row = services.wait_task("t-dies", {"done", "failed"}, TIMEOUT, job)
        assert row["status"] == "failed" and "gave up after 2 attempts" in row["error"], row
        assert "died" in row["error"] and row["attempt"] == "2"
        assert [s["state"] for s in services.statuses("t-dies")].count("queued") == 2, "queued, then re-queued once"
        assert len(job.batch_logs("t-dies")) == 2
        assert job.proc.poll() is None, "the ingest job keeps running"
    finally:
        job.job.stop(60)
