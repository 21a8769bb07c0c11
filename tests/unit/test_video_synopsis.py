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


def _crowd(count: int, span: int, gap: int) -> list[Tube]:
    """``count`` big objects, one every ``gap`` frames, all on the same spot: they cannot share time."""
    tubes = []
    for i in range(count):
        tube = Tube(i)
        for f in range(i * gap, i * gap + span):
            tube.add(f, (100, 100, 300, 150))
        tubes.append(tube)
    return tubes


def test_synopsis_is_never_longer_than_its_original_and_says_when_it_was_capped() -> None:
    tubes = _crowd(count=10, span=100, gap=20)  # the original is 280 frames; side by side they need 1000
    plan = schedule(tubes, 640, 360, max_length=280)
    assert plan.length <= 280
    assert plan.capped
    assert set(plan.placements) == {t.tube_id for t in tubes}, "every object is still shown"
    assert collision_rate(tubes, plan) > 0.05  # the honest price: they overlap
    default = schedule(tubes, 640, 360)  # no limit given: the end of the last object is the limit
    assert default.length <= max(t.last for t in tubes) + 1
    roomy = schedule(_crowd(count=3, span=100, gap=200), 640, 360, max_length=500)
    assert not roomy.capped and collision_rate(_crowd(3, 100, 200), roomy) == 0


def test_views_split_by_camera_cuts_follow_each_other() -> None:
    """Objects of two shots are condensed per shot, so a synopsis frame never mixes two views."""
    tubes = [*_crowd(count=2, span=50, gap=60), Tube(2), Tube(3)]
    for f in range(300, 340):
        tubes[2].add(f, (0, 0, 50, 50))
        tubes[3].add(f + 10, (400, 200, 50, 50))
    plan = schedule(tubes, 640, 360, max_length=400, cuts=[250])
    assert [(v.first, v.last) for v in plan.views] == [(0, 249), (250, 399)]
    first, second = plan.views
    for tube in tubes:
        start = plan.placements[tube.tube_id].start
        view = first if tube.first < 250 else second
        assert view.start <= start and start + tube.span <= view.end
    assert plan.length == second.end <= 400
    assert plan.placements[3].start - plan.placements[2].start == 0  # apart in space: shown together


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
