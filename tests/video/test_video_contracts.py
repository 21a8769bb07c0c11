"""contracts.video: what the console and the video ingest job both accept and refuse."""

from __future__ import annotations

import json

import pytest

from contracts.video import (
    CommandError,
    cancel_record,
    command_record,
    encode,
    fallback_task_id,
    parse_command,
    parse_status,
    status_record,
    task_id_of,
)

GOOD = {"task_id": "t-1", "action": "analyze", "video_url": "s3://videos/cam-1/2024/05/01/080000_a.mp4",
        "camera_id": "cam-1", "requested_by": "alice", "requested_at": "2024-05-01T08:00:00.000+08:00",
        "options": {"classes": ["vehicle", "person", "person"], "window": [0, 60]}}


def test_good_command_round_trips() -> None:
    command = parse_command(encode(GOOD))
    assert command.bucket == "videos" and command.key == "cam-1/2024/05/01/080000_a.mp4"
    assert command.options == {"classes": ["person", "vehicle"], "window": [0.0, 60.0]}
    assert parse_command(encode(command.record())) == command


def test_action_defaults_to_analyze_and_cancel_needs_no_video() -> None:
    assert parse_command(encode({k: v for k, v in GOOD.items() if k != "action"})).action == "analyze"
    cancel = parse_command(encode(cancel_record("t-1", "bob")))
    assert cancel.action == "cancel" and cancel.video_url == ""


@pytest.mark.parametrize(("change", "field"), [
    ({"task_id": None}, "task_id"), ({"task_id": "a/b"}, "task_id"), ({"task_id": "a:b"}, "task_id"),
    ({"task_id": 7}, "task_id"), ({"action": "delete"}, "action"), ({"video_url": "http://x/y"}, "video_url"),
    ({"video_url": "s3://videos/"}, "video_url"), ({"video_url": "s3://A_B/k"}, "video_url"),
    ({"camera_id": ""}, "camera_id"), ({"camera_id": "a/b"}, "camera_id"), ({"requested_by": None}, "requested_by"),
    ({"requested_at": "yesterday"}, "requested_at"), ({"requested_at": "2024-05-01T08:00:00"}, "requested_at"),
    ({"options": []}, "options"), ({"options": {"colour": "red"}}, "options.colour"),
    ({"options": {"classes": ["dog"]}}, "options.classes"), ({"options": {"window": [5, 1]}}, "options.window"),
])
def test_each_bad_field_is_named(change: dict, field: str) -> None:
    record = {**GOOD, **change}
    record = {k: v for k, v in record.items() if v is not None}
    with pytest.raises(CommandError) as caught:
        parse_command(encode(record))
    assert caught.value.field == field and caught.value.reason


@pytest.mark.parametrize("raw", [None, b"", b"\xff\xfe", b"[1,2]", b'"text"', b"{"])
def test_undecodable_values_fail_on_value_with_a_stable_task_id(raw: bytes | None) -> None:
    with pytest.raises(CommandError) as caught:
        parse_command(raw)
    assert caught.value.field == "value"
    assert task_id_of(raw) == fallback_task_id(raw) == fallback_task_id(raw)


def test_task_id_of_uses_the_commands_own_id_when_usable() -> None:
    assert task_id_of(encode({**GOOD, "camera_id": 5})) == "t-1"
    bad = encode({**GOOD, "task_id": "no/slash"})
    assert task_id_of(bad) == fallback_task_id(bad) != fallback_task_id(encode(GOOD))


def test_command_record_builds_a_valid_command_and_refuses_a_bad_one() -> None:
    record = command_record("t-2", GOOD["video_url"], "cam-1", "alice")
    assert parse_command(encode(record)).task_id == "t-2"
    with pytest.raises(CommandError):
        command_record("t-2", "s3://videos", "cam-1", "alice")


def test_status_records() -> None:
    done = status_record("t-1", "done", attempt=1, stage="load", timings={"queue": 0.5, "analysis": 3.25},
                         objects=4)
    assert done["progress"] == 1.0 and done["objects"] == 4 and done["timings"]["analysis"] == 3.25
    assert parse_status(json.dumps(done).encode())["state"] == "done"
    for bad in ({"state": "paused"}, {"state": "running", "progress": 1.5}, {"state": "running", "stage": "x"},
                {"state": "running", "timings": {"nap": 1}}):
        with pytest.raises(ValueError):
            status_record("t-1", **bad)
    with pytest.raises(ValueError):
        parse_status(b'{"task_id": "t", "state": "x"}')
