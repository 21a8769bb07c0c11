"""The video page end to end in a real browser (Debian's chromium via Playwright): an operator picks a
recording, asks for its analysis, watches the task finish live, plays the synopsis and clicks an object,
which seeks the original video to the moment the object first shows.

Everything is real: ``python -m web`` on its own broker, HBase gateway and SeaweedFS, and the video
ingest job (``spark_jobs/video_ingest.py``, started as the deployment starts it), which launches the
synopsis batch job and loads the results the page reads. The page is watched as in test_browser: a
console error, an uncaught exception or a request off 127.0.0.1 fails the test. Screenshots go to
test-artifacts/screenshots/.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from contracts.records import CITY_TZ
from deploy.processes.video import IngestJob, VideoServices, start_ingest
from tests.web._video_support import VideoSite, load_task, start_video_site
from tests.web.test_browser import Browsing, browser, browsing_session, until  # noqa: F401 - the browser fixture
from video import storage
from web.services.video import rerun_id_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser"), pytest.mark.timeout(1800)]

CAMERA = "cam-e2e"
TASK_TIMEOUT_MS = 900_000
"""Spark starts a JVM for the streaming job and another for the batch job: minutes on a loaded machine."""


def record_seeks(page: Page) -> None:
    """Note where each seek of the original lands. The player plays on from the offset it seeks to, so its
    currentTime leaves the offset's neighbourhood within a fifth of a second: a poll of currentTime on a loaded
    machine missed it (CI). The position at the 'seeked' event is the one the seek reached."""
    page.evaluate("""() => {
        const v = document.querySelector('#original-player');
        v.addEventListener('seeked', () => { v.dataset.seekedAt = String(v.currentTime); });
    }""")


def until_seeked(page: Page, offset: float) -> None:
    """Wait until the original's last seek landed within 0.2 s of ``offset``."""
    until(page, f"Math.abs(Number(document.querySelector('#original-player').dataset.seekedAt) - {offset}) < 0.2")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoSite]:
    yield from start_video_site(tmp_path_factory.mktemp("video-browser"))


@pytest.fixture(scope="module")
def ingest(site: VideoSite) -> Iterator[IngestJob]:
    """The video ingest job on the console's own config (it names the same broker, gateway and store)."""
    services = VideoServices(site.store, site.console.backing.broker, site.console.backing.gateway,
                             site.console.config, site.root)
    job = start_ingest(services, "ingest", "--max-concurrent", "1")
    yield job
    job.job.stop()


@pytest.fixture(scope="module")
def recording(site: VideoSite) -> storage.StoredVideo:
    """A clip recorded ten minutes ago (so the page's default day and search window hold it)."""
    start = (dt.datetime.now(CITY_TZ) - dt.timedelta(minutes=10)).replace(microsecond=0)
    return site.record(CAMERA, start, seconds=6, seed=4, n_objects=3)


@pytest.fixture
def browsing(browser: Browser, site: VideoSite, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, site, tmp_path, height=1000, timeout_ms=30_000)


def test_request_analysis_watch_it_finish_play_synopsis_click_object(browsing: Browsing, ingest: IngestJob,
                                                                     recording: storage.StoredVideo) -> None:
    page = browsing.page
    browsing.login("operator")
    browsing.goto("/video")
    expect(page.locator("#live-state")).to_have_class("badge live")
    expect(page.locator("#camera")).to_have_value(CAMERA)
    row = page.locator(f'#videos-table tr[data-url="{recording.url}"]')
    expect(row).to_be_visible()
    # The original plays through the console (WebM as uploaded).
    row.locator(".play-button").click()
    original = page.locator("#original-player")
    expect(original).to_have_attribute("data-url", recording.url)
    until(page, "document.querySelector('#original-player').readyState >= 1")
    # Ask for the analysis: the task appears and goes to done live (SSE), with no reload.
    row.locator(".analyze-button").click()
    task_row = page.locator("#tasks-table tbody tr.selected")
    expect(task_row).to_have_count(1)
    task_id = task_row.get_attribute("data-task")
    assert task_id
    try:
        expect(page.locator(f'#tasks-table tr[data-task="{task_id}"]')).to_have_attribute(
            "data-state", "done", timeout=TASK_TIMEOUT_MS)
    except AssertionError as exc:
        batch = "".join(p.read_text(errors="replace")[-3000:] for p in ingest.batch_logs(task_id))
        raise AssertionError(f"{exc}\n--- ingest job ---\n{ingest.log_tail()}\n--- batch ---\n{batch}") from None
    browsing.snap("video-task-done-zh")
    # The bus tells of "done" before the loader has written the task row; the panel follows the row.
    panel = page.locator("#task-panel")
    expect(panel).to_have_attribute("data-state", "done", timeout=180_000)
    thumbs = page.locator("#task-objects .thumb")
    expect(thumbs.first).to_be_visible()
    found = thumbs.count()
    assert found >= 1, ingest.log_tail()
    expect(page.locator("#objects-count")).to_have_text(str(found))
    # The synopsis plays (it is a WebM Chromium decodes, served with ranges).
    synopsis = page.locator("#synopsis-player")
    until(page, "document.querySelector('#synopsis-player').readyState >= 2", 60)
    assert synopsis.evaluate("v => v.duration") > 0
    synopsis.evaluate("v => v.play()")
    until(page, "document.querySelector('#synopsis-player').currentTime > 0.3")
    browsing.snap("video-synopsis-playing-zh")
    # A thumbnail click pauses the synopsis on that object and seeks the original to its first frame.
    objects = page.evaluate(f"fetch('/api/v1/video/tasks/{task_id}/objects').then(r => r.json())")
    first = objects[0]
    record_seeks(page)
    thumbs.first.click()
    expect(original).to_have_attribute("data-url", first["video_url"])
    until_seeked(page, first["offset_s"])
    # The overlay draws the object with its original time; a click on its box seeks the original to it.
    until(page, "JSON.parse(document.querySelector('#synopsis-overlay').dataset.boxes || '[]').length > 0")
    boxes = json.loads(page.locator("#synopsis-overlay").get_attribute("data-boxes") or "[]")
    target = next((b for b in boxes if b["object_id"] == first["object_id"]), boxes[0])
    chosen = next(o for o in objects if o["object_id"] == target["object_id"])
    original.evaluate("v => { v.pause(); v.currentTime = 0; }")
    until_seeked(page, 0)
    page.locator("#synopsis-overlay").click(position={"x": target["x"] + target["w"] / 2,
                                                      "y": target["y"] + target["h"] / 2})
    until_seeked(page, chosen["offset_s"])
    clock = page.locator("#original-clock").inner_text()
    first_seen_city = dt.datetime.fromisoformat(chosen["first_seen"]).astimezone(CITY_TZ)
    assert clock.startswith(first_seen_city.strftime("%Y-%m-%d %H:%M")), clock
    browsing.snap("video-object-clicked-zh")
    # Object search finds what the job indexed, with thumbnails.
    page.select_option("#search-class", chosen["class"])
    page.click("#search-form button[type=submit]")
    hits = page.locator("#search-results .thumb")
    expect(hits.first).to_be_visible()
    assert hits.count() == sum(1 for o in objects if o["class"] == chosen["class"])
    until(page, "[...document.querySelectorAll('#search-results img')].every(i => i.complete && "
                           "i.naturalWidth > 0)")
    browsing.snap("video-search-zh")


def test_viewer_plays_but_may_not_command_in_english(browsing: Browsing, recording: storage.StoredVideo) -> None:
    page = browsing.page
    page.context.add_cookies([{"name": "lang", "value": "en", "url": browsing.site.url}])
    browsing.login("viewer")
    browsing.goto("/video")
    expect(page.locator("h1")).to_have_text("Video")
    expect(page.locator("#live-state")).to_have_class("badge live")
    row = page.locator(f'#videos-table tr[data-url="{recording.url}"]')
    expect(row.locator(".play-button")).to_have_text("Play")
    expect(page.locator(".analyze-button")).to_have_count(0)
    expect(page.locator(".cancel-button")).to_have_count(0)
    row.locator(".play-button").click()
    until(page, "document.querySelector('#original-player').readyState >= 1")
    browsing.snap("video-viewer-en")


def test_a_failed_task_runs_again_from_its_row(browsing: Browsing, site: VideoSite, ingest: IngestJob,
                                               tmp_path: Path) -> None:
    """"Run again" on a failed task asks for a new task (same video and options) that the job runs and, the
    upload being no video at all, fails again with a reason the page shows."""
    broken = tmp_path / "broken.webm"
    broken.write_bytes(b"this upload is not a video" * 100)
    start = (dt.datetime.now(CITY_TZ) - dt.timedelta(minutes=20)).replace(microsecond=0)
    video = storage.upload_video(site.s3(), broken, CAMERA, start)
    load_task(site, "t-broken", video, "failed", [], error="the batch job died")
    page = browsing.page
    browsing.login("operator")
    browsing.goto("/video")
    failed = page.locator('#tasks-table tr[data-task="t-broken"]')
    expect(failed).to_have_attribute("data-state", "failed")
    failed.locator(".rerun-button").click()
    again = page.locator(f'#tasks-table tr[data-task="{rerun_id_for("t-broken")}"]')
    expect(again).to_have_class("selected")
    expect(again).to_have_attribute("data-state", "failed", timeout=TASK_TIMEOUT_MS)
    expect(again.locator(".error")).not_to_be_empty()
    expect(again.locator(".rerun-button")).to_be_visible()
    # The bus tells of "failed" before the loader has written the task row; the panel follows the row.
    expect(page.locator("#task-panel")).to_have_attribute("data-state", "failed", timeout=180_000)
    browsing.snap("video-task-rerun-failed-zh")
