"""Malformed and foreign records on every topic the video ingest job reads are set aside, and it goes on.

Any producer may write to ``video.commands``, ``video.status`` and ``video.results``: a batch job run by hand
announces its own task with a ``queued`` status that carries no command (such a record once made the job
crash-loop from its checkpoint 54 times). One job run gets every bad kind on every topic, then good records;
the same job restarted with that batch next in its checkpoint replays it and still runs a later analysis; and
the loader alone (``--loader-only``, as at the DR site) gets the same on its own topics.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from contracts.topics import Topics
from contracts.video import cancel_record, encode, status_record, validate_command
from deploy.processes.video import IngestJob, VideoServices, start_ingest
from spark_jobs.video_scheduler import command_fields
from tests.support.bad_records import MALFORMED, lone_surrogate, nested, produce, wait_for
from tests.video._support import analyze, services, started_line  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(1200)]
TIMEOUT = 420.0
T0 = "2024-05-01T08:00:00.000+00:00"


def bad_statuses(prefix: str) -> list[bytes | None]:
    """``video.status`` values the loader cannot fold into a task row (each is skipped and counted)."""
    running = status_record(f"{prefix}-bad", "running", progress=0.5, time=T0)
    return [*MALFORMED.values(),
            encode({"task_id": f"{prefix}-bad"}),  # no state
            encode({**running, "time": "yesterday"}),
            encode({**running, "task_id": "a:b/c"}),  # a task id the row keys cannot hold
            encode({**running, "task_id": "x" * 40_000}),
            encode({**status_record(f"{prefix}-bad", "done", time=T0), "objects": "three"}),
            encode({**running, "timings": [1, 2]}),
            encode({**running, "attempt": -1}),
            encode({**running, "requested_at": 5}),
            encode({**running, "extra": nested(100)}),
            lone_surrogate(running, "error")]


def loaded_statuses(prefix: str) -> list[bytes | None]:
    """Foreign ``video.status`` values the loader does load: a ``queued`` without the command's fields, as a
    batch job run by hand publishes, and one whose command has options that are no JSON object (the job must
    take neither task over), and one with a field named like the row's state cell."""
    return [encode(status_record(f"{prefix}-foreign", "queued", stage="queue", time=T0)),
            queued(f"{prefix}-options", options="{not JSON"),
            encode({**status_record(f"{prefix}-odd", "running", time=T0), "status": "not the state"})]


def queued(task_id: str, **fields: Any) -> bytes:
    """A ``queued`` status as the job publishes it, with the command's fields (``fields`` replace them)."""
    command = validate_command(analyze(task_id, "s3://videos/cam-1/2024/05/01/080000_a.mp4"))
    return encode(status_record(task_id, "queued", stage="queue", time=T0, **{**command_fields(command), **fields}))


def bad_results(prefix: str) -> list[bytes | None]:
    result = {"task_id": f"{prefix}-bad", "object_id": 1, "camera_id": "cam-1", "first_seen": T0, "class": "person"}
    return [*MALFORMED.values(),
            encode({"task_id": f"{prefix}-bad", "object_id": 1}),  # no camera_id, no first_seen
            encode({**result, "object_id": "one"}),
            encode({**result, "task_id": 7}),
            encode({**result, "camera_id": "../cam"}),
            encode({**result, "first_seen": "2024-05-01T08:00:00"}),  # no offset
            encode({**result, "track": nested(100)}),
            lone_surrogate(result, "color")]


def feed_bad_records(services: VideoServices, prefix: str, status_topic: str, results_topic: str) -> int:  # noqa: F811
    """Every bad and foreign kind on the status and results topics; returns how many the loader must skip."""
    produce(services.broker.bootstrap, status_topic, [*bad_statuses(prefix), *loaded_statuses(prefix)], key=b"t")
    produce(services.broker.bootstrap, results_topic, bad_results(prefix), key=b"t")
    return len(bad_statuses(prefix)) + len(bad_results(prefix))


def check_loaded_as_announced(services: VideoServices, prefix: str) -> None:  # noqa: F811
    assert services.task(f"{prefix}-foreign")["status"] == services.task(f"{prefix}-options")["status"] == "queued"
    assert services.task(f"{prefix}-odd")["status"] == "running"
    assert not services.task(f"{prefix}-bad") and not services.objects(f"{prefix}-bad")


def batches(job: IngestJob, since: int = 0) -> list[dict[str, Any]]:
    """The job's per-batch lines, from character ``since`` of its log on."""
    lines = job.log.read_text(errors="replace")[since:].splitlines()
    return [json.loads(line) for line in lines if line.startswith('{"batch"')]


def total(job: IngestJob, counter: str) -> int:
    return sum(b.get(counter, 0) for b in batches(job))


def waiting(job: IngestJob, condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    wait_for(condition, what, timeout, job.log, lambda: job.proc.poll() is None)


def rewind(checkpoint: Path, batch: int) -> None:
    """Make ``batch`` the checkpoint's next micro-batch, as if the job had died running it: Spark logs a batch's
    offsets before running it and commits it after, so a restart re-runs a logged batch without a commit."""
    for log, first in (("offsets", batch + 1), ("commits", batch)):
        for entry in (checkpoint / log).iterdir():
            number = entry.name.lstrip(".").removesuffix(".crc")
            if number.isdigit() and int(number) >= first:
                entry.unlink()


def test_bad_records_on_every_topic_are_set_aside_also_when_replayed_after_a_restart(
        services: VideoServices) -> None:  # noqa: F811
    topics = Topics()
    url = services.upload_scene("after-bad.mp4", seconds=6, n_objects=1, seed=3)
    # Its error names the option: over the 1,000,000 bytes a status record may have, unless cut.
    huge_option = {**analyze("t-huge-option", url), "options": {"o" * 1_040_000: 1}}
    bad_commands = [*MALFORMED.values(), encode({"task_id": "t-no-fields"}), encode(huge_option),
                    encode({**analyze("t-endless", url), "options": {"window": [0, 10**400]}})]

    job = start_ingest(services, "bad", "--max-concurrent", "1")
    try:
        produce(services.broker.bootstrap, topics.video_commands, bad_commands)
        skipped = feed_bad_records(services, "t", topics.video_status, topics.video_results)
        waiting(job, lambda: total(job, "skipped") >= skipped and total(job, "set_aside") >= 2
                and total(job, "rejected") >= len(bad_commands), "every bad record counted")
        assert (total(job, "skipped"), total(job, "set_aside"), total(job, "rejected")) == (
            skipped, 2, len(bad_commands))
        log = job.log.read_text(errors="replace")
        assert log.count(f"skipped {topics.video_status}@") == len(bad_statuses("t"))
        assert log.count(f"skipped {topics.video_results}@") == len(bad_results("t"))
        assert "set_aside task t-foreign (not taken over): CommandError: requested_by: missing" in log
        assert "set_aside task t-options (not taken over): CommandError: options: must be an object" in log
        failed = services.wait_task("t-huge-option", {"failed"}, 60, job)
        assert failed["error"].startswith("bad command: options.ooo") and len(failed["error"]) < 1100
        assert services.task("t-endless")["error"].startswith("bad command: options.window")
        # A good command after the bad records is carried out.
        services.publish(cancel_record("t-cancel-after-bad", "tester"))
        assert services.wait_task("t-cancel-after-bad", {"cancelled"}, 60, job)["error"] == "cancelled by tester"
        check_loaded_as_announced(services, "t")
        assert not job.batch_logs("t-foreign") and not job.batch_logs("t-options"), "foreign tasks are not run"
        first = next(b for b in batches(job) if b["set_aside"])
        restarted_at = len(job.log.read_text(errors="replace"))
    finally:
        job.job.stop(60)

    rewind(services.tmp / "bad-checkpoint", first["batch"])
    job = start_ingest(services, "bad", "--max-concurrent", "1")
    try:
        log = job.log.read_text(errors="replace")[restarted_at:]
        assert started_line(job)["set_aside"] == 3, "the unfinished rows of foreign tasks are not taken over either"
        assert "set_aside task t-options (not taken over): CommandError: options: not JSON" in log
        waiting(job, lambda: any(b["batch"] == first["batch"] for b in batches(job, restarted_at)),
                f"batch {first['batch']} replayed")
        again = next(b for b in batches(job, restarted_at) if b["batch"] == first["batch"])
        assert (again["skipped"], again["set_aside"]) == (first["skipped"], first["set_aside"]), (first, again)
        # A later analysis runs to the end.
        services.publish(analyze("t-after-restart", url))
        row = services.wait_task("t-after-restart", {"done", "failed"}, TIMEOUT, job)
        assert row["status"] == "done", row
        assert len(services.objects("t-after-restart")) == int(row["objects"]) >= 1
        assert services.task("t-foreign")["status"] == "queued" and not job.batch_logs("t-foreign")
    finally:
        job.job.stop(60)


def test_the_loader_alone_sets_bad_records_aside(services: VideoServices) -> None:  # noqa: F811
    """``--loader-only`` (the DR site), on topics of its own."""
    status_topic, results_topic = "dr.video.status", "dr.video.results"
    job = start_ingest(services, "loader", "--loader-only", "--status-topic", status_topic,
                       "--results-topic", results_topic)
    try:
        skipped = feed_bad_records(services, "dr", status_topic, results_topic)
        waiting(job, lambda: total(job, "skipped") >= skipped, "every bad record counted")
        assert total(job, "skipped") == skipped and total(job, "set_aside") == 0

        # Good records after the bad ones: a task's statuses and its two objects.
        produce(services.broker.bootstrap, results_topic, [
            encode({"task_id": "dr-good", "object_id": n, "camera_id": "cam-1", "first_seen": T0, "class": "vehicle"})
            for n in (1, 2)], key=b"dr-good")
        produce(services.broker.bootstrap, status_topic, [
            queued("dr-good"),
            encode(status_record("dr-good", "running", progress=0.5, time=T0)),
            encode(status_record("dr-good", "done", time=T0, objects=2))], key=b"dr-good")
        waiting(job, lambda: services.task("dr-good").get("status") == "done", "task dr-good done")
        assert len(services.objects("dr-good")) == len(services.index_rows("dr-good")) == 2
        assert "dr-good" in services.listed_tasks()
        check_loaded_as_announced(services, "dr")
    finally:
        job.job.stop(60)
