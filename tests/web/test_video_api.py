"""``/api/v1/video`` against a real console, broker, HBase gateway and object store.

Recordings are real WebM / mp4v clips in SeaweedFS; commands are read back from ``video.commands`` and
checked with the job's own parser; task and object rows are written with ``contracts.tables.video``'s
layouts, as the video ingest job's loader writes them.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import cv2
import pytest

from contracts import video as contract
from contracts.records import CITY_TZ
from tests.web._video_support import TOPICS, VideoSite, load_task, read_topic, video_site
from video import storage
from web.services.video import rerun_id_for

__all__ = ["video_site"]  # the fixture, imported for pytest

pytestmark = pytest.mark.slow

# 23:30 city time on 1 May is 15:30 UTC: the key's UTC day and the city day agree; 00:30 on 2 May city
# time is 16:30 UTC on 1 May: same UTC day, next city day.
LATE = dt.datetime(2024, 5, 1, 23, 30, tzinfo=CITY_TZ)
AFTER_MIDNIGHT = dt.datetime(2024, 5, 2, 0, 30, tzinfo=CITY_TZ)


@pytest.fixture(scope="module")
def clips(video_site: VideoSite) -> dict[str, storage.StoredVideo]:
    return {
        "late": video_site.record("cam-a", LATE, seed=1),
        "night": video_site.record("cam-a", AFTER_MIDNIGHT, seed=2),
        "mp4v": video_site.record("cam-b", LATE, seed=3, fourcc="mp4v", suffix=".mp4"),
    }


def test_before_any_task_was_loaded_lists_are_empty(video_site: VideoSite) -> None:
    """No video table exists until the job's loader makes them: empty answers, not errors (runs first)."""
    viewer = video_site.console.client("viewer")
    assert viewer.get("/api/v1/video/tasks").json() == []
    assert viewer.get("/api/v1/video/tasks/t-none").status_code == 404
    window = {"camera": "cam-a", "start": "2024-05-01T00:00:00+08:00", "end": "2024-05-03T00:00:00+08:00"}
    assert viewer.get("/api/v1/video/objects", params=window).json() == []


def test_cameras_days_and_videos_by_city_day(video_site: VideoSite, clips: dict[str, Any]) -> None:
    viewer = video_site.console.client("viewer")
    assert viewer.get("/api/v1/video/cameras").json() == ["cam-a", "cam-b"]
    assert viewer.get("/api/v1/video/cameras/cam-a/days").json() == [
        {"day": "2024-05-02", "videos": 1}, {"day": "2024-05-01", "videos": 1}]
    listed = viewer.get("/api/v1/video/cameras/cam-a/videos", params={"day": "2024-05-02"}).json()
    assert [v["url"] for v in listed] == [clips["night"].url]
    assert dt.datetime.fromisoformat(listed[0]["start_time"]) == AFTER_MIDNIGHT
    assert listed[0]["start_time"].endswith("+08:00") and listed[0]["name"] == "cam-a-2-VP80.webm"
    assert listed[0]["size"] == clips["night"].size
    assert viewer.get("/api/v1/video/cameras/nobody/days").json() == []
    bad = viewer.get("/api/v1/video/cameras/a:b/days")
    assert bad.status_code == 422
    assert video_site.console.client(None).get("/api/v1/video/cameras").status_code == 401


def test_media_whole_and_ranges(video_site: VideoSite, clips: dict[str, Any]) -> None:
    viewer = video_site.console.client("viewer")
    url = clips["late"].url
    body = video_site.s3().get_object(*storage.parse_s3_url(url)).read()
    whole = viewer.get("/api/v1/video/media", params={"url": url})
    assert whole.status_code == 200 and whole.content == body
    assert whole.headers["content-type"] == "video/webm" and whole.headers["accept-ranges"] == "bytes"
    part = viewer.get("/api/v1/video/media", params={"url": url}, headers={"Range": "bytes=100-1099"})
    assert part.status_code == 206 and part.content == body[100:1100]
    assert part.headers["content-range"] == f"bytes 100-1099/{len(body)}"
    tail = viewer.get("/api/v1/video/media", params={"url": url}, headers={"Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.content == body[-10:]
    beyond = viewer.get("/api/v1/video/media", params={"url": url}, headers={"Range": f"bytes={len(body)}-"})
    assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{len(body)}"
    missing = viewer.get("/api/v1/video/media", params={"url": "s3://videos/cam-a/2024/05/01/000000_none.webm"})
    assert missing.status_code == 404
    elsewhere = viewer.get("/api/v1/video/media", params={"url": "s3://secrets/key"})
    assert elsewhere.status_code == 422 and elsewhere.json()["detail"][0]["loc"] == ["query", "url"]


def test_webm_plays_as_is_mp4v_is_transcoded_once_and_garbage_fails(video_site: VideoSite,
                                                                    clips: dict[str, Any]) -> None:
    viewer = video_site.console.client("viewer")
    ready = viewer.get("/api/v1/video/playable", params={"url": clips["late"].url}).json()
    assert ready == {"state": "ready", "media_url": clips["late"].url, "error": None}
    url = clips["mp4v"].url
    first = viewer.get("/api/v1/video/playable", params={"url": url}).json()
    assert first["state"] == "transcoding"
    deadline = time.monotonic() + 90
    while (answer := viewer.get("/api/v1/video/playable", params={"url": url}).json())["state"] == "transcoding":
        assert time.monotonic() < deadline, "transcode did not finish"
        time.sleep(0.5)
    assert answer["state"] == "ready" and answer["media_url"].startswith("s3://synopsis/transcoded/videos/cam-b/")
    copy = video_site.root / "copy.webm"
    storage.download(video_site.s3(), answer["media_url"], copy)
    capture = cv2.VideoCapture(str(copy))
    fourcc = int(capture.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little").decode()
    frames = 0
    while capture.read()[0]:
        frames += 1
    capture.release()
    assert fourcc == "VP80" and frames == 4 * 25
    media = viewer.get("/api/v1/video/media", params={"url": answer["media_url"]})
    assert media.status_code == 200 and media.headers["content-type"] == "video/webm"
    # Not a video: the transcode fails with a reason the page shows.
    path = video_site.root / "not-a-video.mp4"
    path.write_bytes(b"this is not a video" * 100)
    garbage = storage.upload_video(video_site.s3(), path, "cam-b", LATE + dt.timedelta(minutes=5)).url
    deadline = time.monotonic() + 60
    while (answer := viewer.get("/api/v1/video/playable", params={"url": garbage}).json())["state"] == "transcoding":
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert answer["state"] == "failed" and "video" in answer["error"]


def _commands(video_site: VideoSite) -> list[tuple[bytes | None, dict[str, Any]]]:
    return read_topic(video_site.bootstrap, TOPICS.video_commands)


def test_analyze_publishes_the_validated_command_audited(video_site: VideoSite, clips: dict[str, Any]) -> None:
    operator = video_site.console.client("operator")
    before = len(_commands(video_site))
    answer = operator.post("/api/v1/video/tasks", json={"video_url": clips["late"].url,
                                                         "options": {"classes": ["vehicle", "person"]}})
    assert answer.status_code == 202, answer.text
    command = answer.json()
    published = _commands(video_site)
    assert len(published) == before + 1
    key, value = published[-1]
    assert key == b"cam-a" and value == command
    parsed = contract.parse_command(contract.encode(value))  # what the job will accept
    assert parsed.action == "analyze" and parsed.camera_id == "cam-a" and parsed.requested_by == "operator"
    assert parsed.options == {"classes": ["person", "vehicle"]}
    # Asking again names the same task (the job runs it once).
    again = operator.post("/api/v1/video/tasks", json={"video_url": clips["late"].url,
                                                        "options": {"classes": ["person", "vehicle"]}})
    assert again.json()["task_id"] == command["task_id"]
    mine = [e for e in video_site.console.audit(action="video.analyze", q=clips["late"].url)
            if e["target"] == clips["late"].url]
    assert mine and mine[0]["user"] == "operator" and mine[0]["outcome"] == "ok"


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"video_url": "http://example/x.webm"}, 422, "video_url"),
    ({"video_url": "s3://secrets/cam-a/x.webm"}, 422, "video_url"),
    ({"video_url": "s3://videos/cam-a/2024/05/01/000000_missing.webm"}, 404, None),
    ({"video_url": "LATE", "options": {"classes": ["dog"]}}, 422, "options.classes"),
    ({"video_url": "LATE", "options": {"speed": 2}}, 422, "options.speed"),
    ({"video_url": "LATE", "camera_id": "a/b"}, 422, "camera_id"),
    ({"video_url": "LATE", "extra": 1}, 422, "extra"),
])
def test_bad_commands_are_refused_and_nothing_is_published(video_site: VideoSite, clips: dict[str, Any],
                                                           body: dict[str, Any], status: int,
                                                           field: str | None) -> None:
    operator = video_site.console.client("operator")
    before = len(_commands(video_site))
    if body["video_url"] == "LATE":
        body = {**body, "video_url": clips["late"].url}
    answer = operator.post("/api/v1/video/tasks", json=body)
    assert answer.status_code == status, answer.text
    if field is not None:
        assert answer.json()["detail"][0]["loc"][-1] == field
    assert len(_commands(video_site)) == before


def test_viewer_may_not_command(video_site: VideoSite, clips: dict[str, Any]) -> None:
    viewer = video_site.console.client("viewer")
    assert viewer.post("/api/v1/video/tasks", json={"video_url": clips["late"].url}).status_code == 403
    assert viewer.post("/api/v1/video/tasks/abc/cancel").status_code == 403


def _object(task_id: str, video: storage.StoredVideo, object_id: int, cls: str, color: str,
            offset_s: float) -> dict[str, Any]:
    first = video.start_time + dt.timedelta(seconds=offset_s)
    return {"task_id": task_id, "video_url": video.url, "camera_id": video.camera_id, "object_id": object_id,
            "class": cls, "color": color, "first_seen": first.isoformat(timespec="milliseconds"),
            "last_seen": (first + dt.timedelta(seconds=1.5)).isoformat(timespec="milliseconds"),
            "track": [[0.0, 10, 20, 30, 40], [1.5, 50, 20, 30, 40]],
            "thumbnail_url": f"s3://synopsis/{task_id}/thumbs/{object_id:06d}.jpg",
            "synopsis_url": f"s3://synopsis/{task_id}/synopsis.webm", "synopsis_time": 0.4 * object_id}


def test_tasks_objects_and_search(video_site: VideoSite, clips: dict[str, Any]) -> None:
    late, night = clips["late"], clips["night"]
    objects = [_object("t-late", late, 1, "person", "red", 0.5), _object("t-late", late, 2, "vehicle", "white", 2.0)]
    load_task(video_site, "t-late", late, "done", objects, objects=2, progress=1.0,
          synopsis_url="s3://synopsis/t-late/synopsis.webm", timings={"queue": 0.1, "analysis": 2.5})
    load_task(video_site, "t-night", night, "running", [], progress=0.4, stage="analysis")
    viewer = video_site.console.client("viewer")
    listed = viewer.get("/api/v1/video/tasks").json()
    assert {t["task_id"]: t["status"] for t in listed}.items() >= {"t-late": "done", "t-night": "running"}.items()
    task = viewer.get("/api/v1/video/tasks/t-late").json()
    assert task["objects"] == 2 and task["timings"] == {"queue": 0.1, "analysis": 2.5} and task["progress"] == 1.0
    assert viewer.get("/api/v1/video/tasks/nope").status_code == 404
    found = viewer.get("/api/v1/video/tasks/t-late/objects").json()
    assert [(o["object_id"], o["class"], o["offset_s"], o["duration_s"]) for o in found] == [
        (1, "person", 0.5, 1.5), (2, "vehicle", 2.0, 1.5)]
    # Search: camera + time range, then class and colour.
    window = {"camera": "cam-a", "start": (LATE - dt.timedelta(hours=1)).isoformat(),
              "end": (LATE + dt.timedelta(hours=1)).isoformat()}
    assert [o["object_id"] for o in viewer.get("/api/v1/video/objects", params=window).json()] == [2, 1]
    assert [o["object_id"] for o in viewer.get("/api/v1/video/objects",
                                               params={**window, "class": "person"}).json()] == [1]
    assert viewer.get("/api/v1/video/objects", params={**window, "color": "white"}).json()[0]["object_id"] == 2
    narrow = {**window, "start": (LATE + dt.timedelta(seconds=1)).isoformat()}
    assert [o["object_id"] for o in viewer.get("/api/v1/video/objects", params=narrow).json()] == [2]
    assert viewer.get("/api/v1/video/objects", params={**window, "camera": "cam-b"}).json() == []
    backwards = viewer.get("/api/v1/video/objects", params={**window, "end": window["start"]})
    assert backwards.status_code == 422 and backwards.json()["detail"][0]["loc"] == ["query", "end"]
    naive = viewer.get("/api/v1/video/objects", params={**window, "start": "2024-05-01T12:00:00"})
    assert naive.status_code == 422


def test_cancel_publishes_for_an_open_task_only(video_site: VideoSite, clips: dict[str, Any]) -> None:
    load_task(video_site, "t-cancel", clips["night"], "queued", [])
    load_task(video_site, "t-over", clips["night"], "done", [])
    operator = video_site.console.client("operator")
    answer = operator.post("/api/v1/video/tasks/t-cancel/cancel")
    assert answer.status_code == 202, answer.text
    key, value = _commands(video_site)[-1]
    assert key == b"cam-a" and value["action"] == "cancel" and value["task_id"] == "t-cancel"
    assert contract.parse_command(contract.encode(value)).action == "cancel"
    over = operator.post("/api/v1/video/tasks/t-over/cancel")
    assert over.status_code == 422 and "already done" in over.text
    assert operator.post("/api/v1/video/tasks/unknown/cancel").status_code == 404


def test_a_failed_task_runs_again_as_a_new_task(video_site: VideoSite, clips: dict[str, Any]) -> None:
    night = clips["night"]
    load_task(video_site, "t-failed", night, "failed", [], error="cannot read the video: store unavailable",
          options={"classes": ["person"]})
    load_task(video_site, "t-running", night, "running", [])
    operator = video_site.console.client("operator")
    answer = operator.post("/api/v1/video/tasks/t-failed/rerun")
    assert answer.status_code == 202, answer.text
    again = answer.json()
    assert again["task_id"] == rerun_id_for("t-failed") != "t-failed"
    assert (again["video_url"], again["camera_id"], again["options"]) == (night.url, "cam-a", {"classes": ["person"]})
    key, value = _commands(video_site)[-1]
    assert key == b"cam-a" and value["action"] == "analyze" and value["task_id"] == again["task_id"]
    assert contract.parse_command(contract.encode(value)).options == {"classes": ["person"]}
    # Asking twice names the same new task (the job runs a task id once).
    assert operator.post("/api/v1/video/tasks/t-failed/rerun").json()["task_id"] == again["task_id"]
    running = operator.post("/api/v1/video/tasks/t-running/rerun")
    assert running.status_code == 422 and "only a failed or cancelled task" in running.text
    assert operator.post("/api/v1/video/tasks/unknown/rerun").status_code == 404
    assert video_site.console.client("viewer").post("/api/v1/video/tasks/t-failed/rerun").status_code == 403
