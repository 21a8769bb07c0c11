"""Synopsis scheduling (condensation vs collisions) and rendering (WebM, thumbnails, index)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from video.render import Timebase, background_from, index_json, render_synopsis, thumbnail
from video.scene import sparse_scene, street_scene
from video.synopsis import collision_rate, schedule
from video.track import Tube

T0 = dt.datetime(2024, 5, 1, 8, 0, tzinfo=dt.UTC)


def truth_tubes(scene) -> list[Tube]:  # type: ignore[no-untyped-def]
    """Ground-truth tubes straight from the generator (scheduling is tested apart from detection)."""
    tubes = []
    for obj in scene.visible_objects():
        tube = Tube(obj.object_id)
        for frame in range(obj.first_frame, min(obj.last_frame + 1, scene.frames)):
            if (box := obj.box(frame)) is not None:
                tube.add(frame, box)
        if tube.frames:
            tubes.append(tube)
    return tubes


def test_sparse_day_condenses_without_collisions() -> None:
    scene = sparse_scene(hours=8, objects_per_hour=15, seed=8)
    tubes = truth_tubes(scene)
    plan = schedule(tubes, scene.width, scene.height)
    assert set(plan.placements) == {t.tube_id for t in tubes}, "every object is shown"
    assert plan.length / scene.frames <= 0.05
    assert collision_rate(tubes, plan) <= 0.05


def test_chronological_order_is_kept_within_a_lane() -> None:
    scene = street_scene(seconds=40, n_objects=9, seed=3)
    tubes = truth_tubes(scene)
    plan = schedule(tubes, scene.width, scene.height)
    assert plan.length < scene.frames
    assert collision_rate(tubes, plan) <= 0.05
    for tube in tubes:  # a tube is never moved later than where it was
        assert plan.placements[tube.tube_id].start <= tube.first


def test_collision_rate_counts_overlap() -> None:
    a, b = Tube(0), Tube(1)
    for f in range(10):
        a.add(f, (0, 0, 10, 10))
        b.add(100 + f, (5, 0, 10, 10))
    from video.synopsis import Placement, Schedule

    together = Schedule({0: Placement(0, 0, 0), 1: Placement(1, 100, 0)}, 10)
    assert collision_rate([a, b], together) == pytest.approx(0.5)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from video.analyze import analyze_video

    path = street_scene(seconds=30, n_objects=6, seed=5).write(tmp_path_factory.mktemp("s") / "s.mp4")
    info, tubes = analyze_video(path)
    return path, info, tubes


def test_render_webm_thumbnails_and_index(analysed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, info, tubes = analysed
    plan = schedule(tubes, info.width, info.height)
    timebase = Timebase(T0, info.fps)
    out = render_synopsis(tubes, plan, background_from(path), timebase, tmp_path / "synopsis.webm")
    capture = cv2.VideoCapture(str(out))
    assert int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) == plan.length
    ok, frame = capture.read()
    assert ok and frame.shape == (info.height, info.width, 3)
    assert out.read_bytes()[:4] == b"\x1a\x45\xdf\xa3", "a Matroska/WebM file"
    jpeg = thumbnail(tubes[0])
    assert cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR) is not None
    doc = json.loads(index_json(tubes, plan, timebase))
    assert len(doc["objects"]) == len(tubes)
    first = doc["objects"][0]
    assert dt.datetime.fromisoformat(first["first_seen"]) == T0 + dt.timedelta(seconds=tubes[0].first / info.fps)
    assert 0 <= first["synopsis_time"] <= plan.length / info.fps
