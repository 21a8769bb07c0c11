"""A ``done`` that reaches the loader before its task's results (they travel on another topic) waits for
them in HBase, through a real gateway, and survives a restart of the loader."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import happybase
import pytest

from contracts.tables.video import TASK_TABLE, ensure_video_tables, task_row_key
from contracts.video import status_record
from deploy.processes.gateway import start_gateway
from spark_jobs.video_loader import HELD, VideoLoader

T0 = "2024-05-01T08:00:00.000+00:00"


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[happybase.Connection]:
    gateway = start_gateway(tmp_path / "hbase")
    conn = gateway.connect()
    try:
        ensure_video_tables(conn)
        yield conn
    finally:
        conn.close()
        gateway.terminate()


def _result(object_id: int) -> dict:
    return {"task_id": "t-held", "object_id": object_id, "camera_id": "cam-1", "first_seen": T0,
            "class": "person", "color": "red"}


def _row(conn: happybase.Connection) -> dict[bytes, bytes]:
    return conn.table(TASK_TABLE).row(task_row_key("t-held"))


def test_done_before_its_results_is_held_until_the_last_object_is_loaded(connection: happybase.Connection) -> None:
    loader = VideoLoader(connection)
    loader.load_statuses([status_record("t-held", "running", progress=0.9, time=T0),
                          status_record("t-held", "done", time=T0, objects=3)])
    assert _row(connection)[b"t:status"] == b"running" and HELD in _row(connection)
    assert loader.unfinished() == [], "a held task's analysis is over: a restarted job must not re-run it"

    loader.load_results([_result(1), _result(2)])
    assert loader.promote_held(["t-held"]) == []
    assert _row(connection)[b"t:status"] == b"running"

    restarted = VideoLoader(connection)  # the hold is in HBase: a new job promotes it
    restarted.load_results([_result(3)])
    assert restarted.promote_held(["t-held"]) == ["t-held"]
    row = _row(connection)
    assert row[b"t:status"] == b"done" and row[b"t:objects"] == b"3" and HELD not in row
    assert restarted.promote_held(["t-held"]) == []


def test_done_with_its_results_in_one_micro_batch_is_done_at_once(connection: happybase.Connection) -> None:
    loader = VideoLoader(connection)
    loader.load_results([_result(1), _result(2)])
    loader.load_statuses([status_record("t-held", "done", time=T0, objects=2)])
    assert _row(connection)[b"t:status"] == b"done" and HELD not in _row(connection)
