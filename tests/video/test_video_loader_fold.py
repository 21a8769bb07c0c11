"""How a task row folds its status records: replays, duplicates and late records are harmless."""

from __future__ import annotations

import json

from contracts.records import parse_time
from contracts.tables.video import index_matches, index_row_key, index_scan_range, object_row
from contracts.video import status_record
from spark_jobs.video_loader import HELD, fold

T0 = "2024-05-01T08:00:00.000+00:00"


def _cells(cells: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode()[2:]: v.decode() for k, v in cells.items()}


def test_statuses_fold_in_order_and_timings_merge() -> None:
    queued = status_record("t", "queued", stage="queue", time=T0, camera_id="cam-1", video_url="s3://videos/k")
    running = status_record("t", "running", stage="spark_start", attempt=1, timings={"queue": 1.5}, time=T0)
    done = status_record("t", "done", attempt=1, timings={"spark_start": 7, "analysis": 3, "render": 2}, time=T0,
                         objects=4)
    now = parse_time(T0).timestamp() + 0.25
    row = _cells(fold({}, [queued, running, done], now, loaded=4))
    assert row["status"] == "done" and row["objects"] == "4" and row["camera_id"] == "cam-1"
    assert json.loads(row["timings"]) == {"queue": 1.5, "spark_start": 7, "analysis": 3, "render": 2, "load": 0.25}


def test_done_keeps_the_camera_verdict_and_the_cap_as_json() -> None:
    verdict = {"camera_motion": "moving", "reliable": False, "reason": "the camera moved 1 time(s)"}
    done = status_record("t", "done", time=T0, objects=2, camera_motion=verdict, capped=True)
    row = _cells(fold({}, [done], parse_time(T0).timestamp(), loaded=2))
    assert json.loads(row["camera_motion"]) == verdict and json.loads(row["capped"]) is True


def test_a_terminal_task_stays_terminal() -> None:
    current = {b"t:status": b"cancelled", b"t:timings": b"{}"}
    late = [status_record("t", "running", progress=0.5, time=T0), status_record("t", "done", time=T0)]
    assert fold(current, late, 0.0, loaded=0) == {}
    replay = fold({}, [status_record("t", "failed", error="bad", time=T0), *late], 0.0, loaded=0)
    assert _cells(replay)["status"] == "failed" and _cells(replay)["error"] == "bad"


def test_done_waits_for_its_objects() -> None:
    running = status_record("t", "running", progress=0.9, time=T0)
    done = status_record("t", "done", time=T0, objects=3)
    held = fold({}, [running, done], 0.0, loaded=2)
    assert _cells(held)["status"] == "running" and json.loads(held[HELD])["objects"] == 3
    assert _cells(fold({}, [running, done], 0.0, loaded=3))["status"] == "done"
    assert HELD not in fold({}, [status_record("t", "done", time=T0, objects=0)], 0.0, loaded=0)


def test_index_keys_sort_newest_first_within_a_camera_and_time_range() -> None:
    def record(oid: int, first_seen: str) -> dict:
        return {"task_id": "t", "object_id": oid, "camera_id": "cam-1", "first_seen": first_seen,
                "class": "person", "color": "red"}

    early, late = record(1, "2024-05-01T08:00:00.000+00:00"), record(2, "2024-05-01T09:00:00.000+00:00")
    assert index_row_key(late) < index_row_key(early)
    since = round(parse_time("2024-05-01T08:30:00+00:00").timestamp() * 1000)
    until = round(parse_time("2024-05-01T09:30:00+00:00").timestamp() * 1000)
    start, stop = index_scan_range("cam-1", since, until)
    assert start <= index_row_key(late) < stop and not start <= index_row_key(early) < stop
    assert index_matches(object_row(late), "person", "red") and not index_matches(object_row(late), "vehicle")
