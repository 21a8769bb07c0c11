"""Faulty cameras in the camera simulator (issue 28): the fault modes from ``[[cameras.camera]] fault`` and
``--fault CAMERA=MODE``, what each one uploads, and bad names refused with exit status 2. The footage each fault
produces is judged in ``tests/monitoring/test_video_quality.py``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import cv2
import pytest

from contracts.config import load as load_config
from deploy.object_store import ObjectStore
from tests.video._support_media import run_module, store, store_flags
from video.cameras import BLACK, FROZEN, OFFLINE, OK, TRUNCATED, Camera, SegmentSettings, cameras_from, parse_faults
from video.cameras import write_segment as render
from video.storage import list_videos

__all__ = ["store"]  # the fixture, imported for pytest


def _config(tmp_path: Path, cameras: str) -> Path:
    config = tmp_path / "solution.toml"
    config.write_text(f'[map]\npath = "{tmp_path / "no-map.json"}"\n\n[cameras]\n{cameras}')
    return config


def test_faults_come_from_the_config_and_the_flags_win(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, '[[cameras.camera]]\nid = "cam-a"\nlighting = "day"\nfault = "frozen"\n'
                                           '[[cameras.camera]]\nid = "cam-b"\nlighting = "night"\n'
                                           '[[cameras.camera]]\nid = "cam-c"\nfault = "stopped"\n'))
    assert [(c.camera_id, c.fault) for c in cameras_from(config)] == [("cam-a", FROZEN), ("cam-b", OK),
                                                                       ("cam-c", OFFLINE)]  # an alias
    flags = parse_faults(["cam-b=black", "cam-a=ok", "cam-c=undecodable"])
    assert [(c.camera_id, c.fault) for c in cameras_from(config, flags)] == [("cam-a", OK), ("cam-b", BLACK),
                                                                              ("cam-c", TRUNCATED)]


@pytest.mark.parametrize(("cameras", "flags", "message"), [
    ('[[cameras.camera]]\nid = "cam-a"\nfault = "melted"\n', [], "fault 'melted' is not one of"),
    ('[[cameras.camera]]\nid = "cam-a"\n', ["cam-a=melted"], "fault 'melted' is not one of"),
    ('[[cameras.camera]]\nid = "cam-a"\n', ["cam-a"], "should be CAMERA=MODE"),
    ('[[cameras.camera]]\nid = "cam-a"\n', ["cam-z=black"], "'cam-z', which is none of the cameras"),
])
def test_bad_faults_exit_2_saying_why(store: ObjectStore, tmp_path: Path, cameras: str, flags: list[str],
                                      message: str) -> None:
    fault_flags = [arg for flag in flags for arg in ("--fault", flag)]
    done = run_module("video.cameras", "--config", str(_config(tmp_path, cameras)), *store_flags(store), "--once",
                      "--no-real-clip", *fault_flags)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr, done.stderr


def test_an_offline_camera_uploads_nothing_and_a_truncated_one_a_segment_cut_short(store: ObjectStore,
                                                                                   tmp_path: Path) -> None:
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-f-ok"\nlighting = "rain"\n'
                               '[[cameras.camera]]\nid = "cam-f-off"\nlighting = "day"\nfault = "offline"\n'
                               '[[cameras.camera]]\nid = "cam-f-cut"\nlighting = "day"\n')
    done = run_module("video.cameras", "--config", str(config), *store_flags(store), "--once", "--no-real-clip",
                      "--segment-s", "2", "--fps", "5", "--size", "160x96", "--fault", "cam-f-cut=truncated")
    assert done.returncode == 0, done.stderr
    assert "camera cam-f-off is faulty: offline" in done.stderr
    assert list(list_videos(store.client(), "cam-f-off")) == []
    (good,) = list_videos(store.client(), "cam-f-ok")
    (cut,) = list_videos(store.client(), "cam-f-cut")
    assert 0 < cut.size < good.size


def test_each_fault_changes_only_the_pictures(tmp_path: Path) -> None:
    start = dt.datetime(2026, 5, 1, 12, tzinfo=dt.UTC)
    settings = SegmentSettings(2, 5, 160, 96)
    counts = {}
    for fault in (OK, FROZEN, BLACK, "blurred", TRUNCATED):
        path = render(Camera("cam-x", "day", fault), start, settings, tmp_path / f"{fault}.webm")
        capture = cv2.VideoCapture(str(path))
        promised = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
        decoded = 0
        while capture.grab():
            decoded += 1
        capture.release()
        counts[fault] = (promised, decoded)
    assert all(counts[f] == (10, 10) for f in (OK, FROZEN, BLACK, "blurred")), counts
    assert counts[TRUNCATED][0] == 10 and counts[TRUNCATED][1] < 9, counts
