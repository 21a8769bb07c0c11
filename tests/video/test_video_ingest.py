"""The video ingest job end to end, against real processes: bus, HBase gateway, SeaweedFS, Spark local.

One ingest job (``--max-concurrent 2``) serves the whole module; tests use their own task ids.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator

import pytest

from contracts.records import parse_time
from contracts.video import cancel_record, fallback_task_id
from deploy.processes.video import IngestJob, VideoServices, start_ingest
from tests.video._support import analyze, services  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(1800)]
TIMEOUT = 420.0


@pytest.fixture(scope="module")
def ingest(services: VideoServices) -> Iterator[IngestJob]:  # noqa: F811
    job = start_ingest(services, "ingest", "--max-concurrent", "2", "--max-attempts", "2")
    try:
        yield job
    finally:
        job.job.stop(60)


def test_command_to_rows_and_duplicate_runs_once(services: VideoServices, ingest: IngestJob) -> None:  # noqa: F811
    url = services.upload_scene("street.mp4", seconds=12, n_objects=4, seed=5)
    services.publish(analyze("t-main", url))
    row = services.wait_task("t-main", {"done", "failed"}, TIMEOUT, ingest)
    assert row["status"] == "done", row
    objects = int(row["objects"])
    assert objects >= 2
    assert len(services.objects("t-main")) == objects, "one video_object row per object found"
    assert len(services.index_rows("t-main")) == objects, "one index row per object found"
    assert "t-main" in services.listed_tasks()
    assert row["camera_id"] == "cam-1" and row["video_url"] == url and row["synopsis_url"].startswith("s3://synopsis/")
    timings = json.loads(row["timings"])
    assert set(timings) == {"queue", "spark_start", "analysis", "render", "load"}, timings

    states = [s["state"] for s in services.statuses("t-main")]
    assert states[0] == "queued" and states[-1] == "done" and "running" in states
    assert states.count("done") == 1 and states.count("queued") == 1
    progress = [s["progress"] for s in services.statuses("t-main") if s["state"] == "running"]
    assert progress == sorted(progress), "progress only moves forward"

    services.publish(analyze("t-main", url))  # the same task again: nothing runs
    time.sleep(4)
    assert len(ingest.batch_logs("t-main")) == 1
    assert [s["state"] for s in services.statuses("t-main")].count("queued") == 1
    assert len(services.objects("t-main")) == objects


def test_malformed_commands_fail_their_tasks_and_the_job_goes_on(services: VideoServices,  # noqa: F811
                                                                 ingest: IngestJob) -> None:
    url = services.upload_scene("small.mp4", seconds=6, n_objects=1, seed=2)
    good = analyze("t-after-bad", url)
    bad_values = [b"not json", b"[1]", b'{"task_id": "t-bad-1"}',
                  json.dumps({**good, "task_id": "t-bad-2", "video_url": "http://x/y"}).encode(),
                  json.dumps({**good, "task_id": "t-bad-3", "options": {"classes": ["dog"]}}).encode()]
    services.publish(*bad_values, good)
    for value, task_id in zip(bad_values, [fallback_task_id(bad_values[0]), fallback_task_id(bad_values[1]),
                                           "t-bad-1", "t-bad-2", "t-bad-3"], strict=True):
        row = services.wait_task(task_id, {"failed"}, 60, ingest)
        assert row["error"].startswith("bad command: "), (value, row)
    assert "video_url" in services.task("t-bad-2")["error"]
    assert "options.classes" in services.task("t-bad-3")["error"]
    assert services.wait_task("t-after-bad", {"done", "failed"}, TIMEOUT, ingest)["status"] == "done"
    assert not ingest.batch_logs("t-bad-1"), "nothing launched for a bad command"


def test_corrupt_and_missing_videos_fail_cleanly_without_retry(services: VideoServices,  # noqa: F811
                                                               ingest: IngestJob) -> None:
    from video import storage

    bad = storage.put_bytes(services.s3(), "videos", "cam-1/2024/05/01/090000_corrupt.mp4", b"not a video" * 500,
                            "video/mp4")
    services.publish(analyze("t-corrupt", bad), analyze("t-missing", "s3://videos/cam-1/2024/05/01/nothing.mp4"))
    for task_id in ("t-corrupt", "t-missing"):
        row = services.wait_task(task_id, {"done", "failed"}, TIMEOUT, ingest)
        assert row["status"] == "failed" and row["error"], row
        assert len(ingest.batch_logs(task_id)) == 1, "a bad video is not retried"
    assert "cannot read" in services.task("t-missing")["error"]


def test_three_tasks_respect_the_limit_and_cancel_queued_and_running(services: VideoServices,  # noqa: F811
                                                                     ingest: IngestJob) -> None:
    urls = [services.upload_scene(f"c{i}.mp4", seconds=8, n_objects=2, seed=10 + i, minute=10 + i) for i in range(5)]
    services.publish(*(analyze(f"t-c{i}", url) for i, url in enumerate(urls)))
    # t-c0 and t-c1 take the two slots; t-c3 waits in the queue, so it can be cancelled before it starts.
    services.publish(cancel_record("t-c3", "tester"))
    services.wait_task("t-c4", {"running"}, TIMEOUT, ingest)
    services.publish(cancel_record("t-c4", "tester"))
    for i in (0, 1, 2):
        assert services.wait_task(f"t-c{i}", {"done", "failed"}, TIMEOUT, ingest)["status"] == "done"
    for i in (3, 4):
        row = services.wait_task(f"t-c{i}", {"cancelled", "done", "failed"}, TIMEOUT, ingest)
        assert row["status"] == "cancelled" and "tester" in row["error"], row
    assert not ingest.batch_logs("t-c3"), "a cancelled queued task never starts"
    assert len(ingest.batch_logs("t-c4")) == 1 and not ingest.pid_file("t-c4").exists()

    spans = []
    for i in range(5):
        records = services.statuses(f"t-c{i}")
        launched = [parse_time(s["time"]) for s in records if s["state"] == "running" and s["stage"] == "spark_start"]
        ended = [parse_time(s["time"]) for s in records if s["state"] in ("done", "cancelled")]
        if launched:
            spans.append((launched[0], ended[-1]))
    moments = sorted(itertools.chain.from_iterable(spans))
    peak = max(sum(1 for a, b in spans if a <= t < b) for t in moments)
    assert peak <= 2, spans
