"""``python -m video.cameras`` as a real process writing into a real object store (SeaweedFS)."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np

from contracts import active_site
from contracts.processes import spawn
from contracts.s3_credentials import Credentials, write_file
from deploy.object_store import ObjectStore, free_port_pair
from tests.video._support_media import ROOT, run_module, store, store_flags
from video.storage import list_videos

__all__ = ["store"]  # the fixture, imported for pytest


def _config(tmp_path: Path, cameras: str) -> Path:
    config = tmp_path / "solution.toml"
    config.write_text(f'[map]\npath = "{tmp_path / "no-map.json"}"\n\n[cameras]\n{cameras}')
    return config


def _frames(store: ObjectStore, key: str, tmp_path: Path) -> list[np.ndarray]:
    local = tmp_path / Path(key).name
    store.client().fget_object("videos", key, str(local))
    capture = cv2.VideoCapture(str(local))
    frames = []
    while (got := capture.read())[0]:
        frames.append(got[1])
    capture.release()
    return frames


def test_once_writes_one_webm_segment_per_camera_and_the_real_clip(store: ObjectStore, tmp_path: Path) -> None:
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-day"\nlighting = "day"\n'
                               '[[cameras.camera]]\nid = "cam-night"\nlighting = "night"\n')
    began = dt.datetime.now(dt.UTC)
    done = run_module("video.cameras", "--config", str(config), *store_flags(store), "--once", "--segment-s", "4",
                      "--fps", "10", "--size", "320x180", timeout=240)
    finished = dt.datetime.now(dt.UTC)
    assert done.returncode == 0, done.stderr
    brightness = {}
    for camera in ("cam-day", "cam-night"):
        (video,) = list_videos(store.client(), camera)
        assert video.key.endswith("_segment.webm")
        assert began - dt.timedelta(seconds=5) <= video.start_time <= finished - dt.timedelta(seconds=4)  # just ended
        assert store.client().stat_object("videos", video.key).content_type == "video/webm"
        frames = _frames(store, video.key, tmp_path)
        assert len(frames) == 40 and frames[0].shape == (180, 320, 3)
        brightness[camera] = float(np.mean(frames[0]))
    assert brightness["cam-night"] < 0.5 * brightness["cam-day"], brightness
    (bikes,) = list_videos(store.client(), "cam-bikes")
    assert store.client().stat_object("videos", bikes.key).content_type == "video/webm"
    assert len(_frames(store, bikes.key, tmp_path)) == 250
    again = run_module("video.cameras", "--config", str(config), *store_flags(store), "--once", "--segment-s", "4",
                       "--fps", "10", "--size", "320x180", timeout=240)
    assert again.returncode == 0, again.stderr
    assert len(list(list_videos(store.client(), "cam-bikes"))) == 1  # once a day, not once a run


def test_runs_on_a_schedule_and_stops_on_sigterm(store: ObjectStore, tmp_path: Path) -> None:
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-sched"\nlighting = "rain"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = spawn([sys.executable, "-m", "video.cameras", "--config", str(config), *store_flags(store),
                   "--segment-s", "2", "--fps", "5", "--size", "160x96", "--no-real-clip"],
                  subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(list(list_videos(store.client(), "cam-sched"))) < 3:
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out.decode()[-2000:]
    starts = [v.start_time for v in list_videos(store.client(), "cam-sched")]
    assert len(starts) >= 3, out.decode()[-2000:]
    assert all(b - a == dt.timedelta(seconds=2) for a, b in itertools.pairwise(starts))  # back to back


def test_bad_lighting_in_the_config_exits_2(store: ObjectStore, tmp_path: Path) -> None:
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-x"\nlighting = "sunset"\n')
    done = run_module("video.cameras", "--config", str(config), *store_flags(store), "--once")
    assert done.returncode == 2
    assert "sunset" in done.stderr


def test_waits_for_a_store_that_starts_later(tmp_path: Path) -> None:
    """make up starts the simulator and the store together: it must wait, not exit (which stops make up)."""
    port = free_port_pair()
    late = ObjectStore(tmp_path / "late-s3", port=port)  # its keys are made before it starts, as make up does
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-late"\nlighting = "dusk"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = spawn([sys.executable, "-m", "video.cameras", "--config", str(config), "--endpoint",
                  f"127.0.0.1:{port}", "--s3-credentials", str(late.credentials_file("cameras")), "--once",
                  "--no-real-clip", "--segment-s", "2", "--fps", "5", "--size", "160x96", "--wait-s", "120"],
                 subprocess.PIPE, env=env)
    try:
        time.sleep(3)
        assert proc.poll() is None, proc.communicate()[0].decode()[-2000:]
        with late:
            out, _ = proc.communicate(timeout=150)
            assert proc.returncode == 0, out.decode()[-2000:]
            assert len(list(list_videos(late.client(), "cam-late"))) == 1
    finally:
        if proc.poll() is None:
            proc.kill()


def test_unreachable_store_without_waiting_exits_3(tmp_path: Path) -> None:
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-x"\nlighting = "day"\n')
    key = tmp_path / "s3-cameras.env"
    write_file(key, Credentials("cameras-x", "secret-x"))
    done = run_module("video.cameras", "--config", str(config), "--endpoint", f"127.0.0.1:{free_port_pair()}",
                      "--s3-credentials", str(key), "--once")
    assert done.returncode == 3
    assert "unreachable" in done.stderr


def test_without_a_key_or_with_a_key_open_to_others_it_exits_2_saying_why(tmp_path: Path) -> None:
    config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-x"\nlighting = "day"\n')
    env_free = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    done = subprocess.run([sys.executable, "-m", "video.cameras", "--config", str(config), "--once"], cwd=ROOT,
                          env={**env_free, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "no object-store key for cameras" in done.stderr
    key = tmp_path / "s3-cameras.env"
    write_file(key, Credentials("cameras-x", "secret-x"))
    key.chmod(0o644)
    done = run_module("video.cameras", "--config", str(config), "--s3-credentials", str(key), "--once")
    assert done.returncode == 2 and "open to other users" in done.stderr


def test_footage_goes_to_the_store_of_the_site_that_runs_the_business(store: ObjectStore, tmp_path: Path) -> None:
    """With ``[site]`` and a key at the DR site's store, a segment is stored where the active-site record says when
    it is stored (the primary's store is the session's ``store``)."""
    with ObjectStore(tmp_path / "dr-s3", port=0) as dr:
        config = _config(tmp_path, '[[cameras.camera]]\nid = "cam-site"\nlighting = "day"\n')
        config.write_text(config.read_text() + f'\n[site]\nrecord = "{active_site.path(tmp_path)}"\n'
                                               f'[dr]\ns3_endpoint = "{dr.endpoint}"\n')
        flags = (*store_flags(store), "--dr-s3-credentials", str(dr.credentials_file("cameras")), "--once",
                 "--no-real-clip", "--segment-s", "2", "--fps", "5", "--size", "160x96")
        for site, expected in (("dr", (0, 1)), ("primary", (1, 1))):
            active_site.write(tmp_path, active_site.ActiveSite(site, dt.datetime.now(dt.UTC), "test"))
            done = run_module("video.cameras", "--config", str(config), *flags, timeout=240)
            assert done.returncode == 0, done.stderr
            assert "following the active site" in done.stderr
            at = (len(list(list_videos(store.client(), "cam-site"))), len(list(list_videos(dr.client(), "cam-site"))))
            assert at == expected, (site, at)
