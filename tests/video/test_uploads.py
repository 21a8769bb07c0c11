"""``python -m video upload`` as a real process against a real object store (SeaweedFS)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from contracts.ports import free_port
from contracts.s3_credentials import Credentials, write_file
from deploy.object_store import ObjectStore
from tests.video._support_media import run_module, store, store_flags
from video.scene import street_scene

__all__ = ["store"]  # the fixture, imported for pytest


def _noise_avi(path: Path, frames: int) -> Path:
    """An MJPG video of random noise: barely compressible, so a few frames exceed one 5 MiB part."""
    rng = np.random.default_rng(1)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 25, (640, 360))
    for _ in range(frames):
        writer.write(rng.integers(0, 256, (360, 640, 3), dtype=np.uint8))
    writer.release()
    return path


def _keys(store: ObjectStore, prefix: str) -> list[str]:
    return sorted(o.object_name or "" for o in store.client().list_objects("videos", prefix=prefix, recursive=True))


def test_uploads_consecutive_segments_with_keys_content_type_and_metadata(store: ObjectStore, tmp_path: Path) -> None:
    first = street_scene(seconds=2, n_objects=1, seed=1).write(tmp_path / "a.webm", fourcc="VP80")
    second = street_scene(seconds=3, n_objects=1, seed=2).write(tmp_path / "b.mp4")
    done = run_module("video", "upload", *store_flags(store), "--camera", "cam-up-1", "--start",
                      "2026-03-04T05:06:07+00:00", str(first), str(second))
    assert done.returncode == 0, done.stderr
    keys = ["cam-up-1/2026/03/04/050607_a.webm", "cam-up-1/2026/03/04/050609_b.mp4"]  # b starts 2 s later
    assert done.stdout.split() == [f"s3://videos/{key}" for key in keys]
    assert _keys(store, "cam-up-1/") == keys
    client = store.client()
    webm, mp4 = (client.stat_object("videos", key) for key in keys)
    assert (webm.content_type, mp4.content_type) == ("video/webm", "video/mp4")
    assert webm.size == first.stat().st_size
    metadata = {k.lower(): v for k, v in webm.metadata.items()}
    assert metadata["x-amz-meta-camera-id"] == "cam-up-1"
    assert dt.datetime.fromisoformat(metadata["x-amz-meta-start-time"]) == dt.datetime(2026, 3, 4, 5, 6, 7,
                                                                                        tzinfo=dt.UTC)


def test_large_file_goes_up_in_parts(store: ObjectStore, tmp_path: Path) -> None:
    video = _noise_avi(tmp_path / "big.avi", 40)
    assert video.stat().st_size > 6 * 2**20
    done = run_module("video", "upload", *store_flags(store), "--camera", "cam-up-2", "--part-size", "5",
                      "--start", "2026-03-04T00:00:00", str(video))
    assert done.returncode == 0, done.stderr
    info = store.client().stat_object("videos", "cam-up-2/2026/03/04/000000_big.avi")
    assert info.size == video.stat().st_size
    assert info.content_type == "video/x-msvideo"
    assert info.etag and info.etag.endswith(f"-{-(-video.stat().st_size // (5 * 2**20))}"), info.etag  # S3 multipart
    got = store.client().get_object("videos", "cam-up-2/2026/03/04/000000_big.avi").read()
    assert got == video.read_bytes()


@pytest.mark.parametrize("case", ["missing-file", "bad-camera", "not-a-video", "part-too-small"])
def test_bad_input_exits_2_and_uploads_nothing(store: ObjectStore, tmp_path: Path, case: str) -> None:
    good = street_scene(seconds=1, n_objects=1).write(tmp_path / "good.mp4")
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\x00\x00\x00\x18ftypmp42" + b"garbage" * 500)
    camera, files, extra, message = {
        "missing-file": ("cam-bad", [good, tmp_path / "nope.mp4"], [], "no such file"),
        "bad-camera": ("cam/../x", [good], [], "bad camera id"),
        "not-a-video": ("cam-bad", [good, junk], [], "junk.mp4"),
        "part-too-small": ("cam-bad", [good], ["--part-size", "1"], "5 MiB"),
    }[case]
    done = run_module("video", "upload", *store_flags(store), "--camera", camera, *extra, *map(str, files))
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert done.stdout == ""
    assert _keys(store, "cam-bad/") == []


def test_unreachable_store_exits_3_quickly(tmp_path: Path) -> None:
    good = street_scene(seconds=1, n_objects=1).write(tmp_path / "good.mp4")
    began = time.monotonic()
    done = run_module("video", "upload", "--endpoint", f"127.0.0.1:{free_port()}", "--camera", "cam-1", str(good))
    assert done.returncode == 3, done.stderr
    assert "unreachable" in done.stderr
    assert time.monotonic() - began < 60


def test_wrong_credentials_exit_3_with_the_stores_reason(store: ObjectStore, tmp_path: Path) -> None:
    good = street_scene(seconds=1, n_objects=1).write(tmp_path / "good.mp4")
    wrong = tmp_path / "wrong.env"
    write_file(wrong, Credentials("nobody", "wrong"))
    done = run_module("video", "upload", "--endpoint", store.url, "--s3-credentials", str(wrong),
                      "--camera", "cam-1", str(good))
    assert done.returncode == 3, done.stderr
    assert "refused" in done.stderr
