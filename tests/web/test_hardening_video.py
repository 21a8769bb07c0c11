"""The console hardened, video part (issue 27, item 7): ``/api/v1/video/media`` never serves an object as a
page of the console, and transcodes are bounded (``[console] max_transcodes`` at once, per user too, 429 with
``Retry-After`` beyond). A real console, broker, HBase gateway and object store (SeaweedFS).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from contracts.records import CITY_TZ
from tests.web._video_support import VideoSite, start_video_site
from tests.web.test_browser import Browsing, Watch, browser, until  # noqa: F401 - the browser fixture
from video import storage

pytestmark = pytest.mark.slow

START = dt.datetime(2024, 6, 1, 10, 0, tzinfo=CITY_TZ)
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478"
                    "9c6360000002000154a24f5d0000000049454e44ae426082")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoSite]:
    yield from start_video_site(tmp_path_factory.mktemp("hardened-video"), max_transcodes=2,
                                max_transcodes_per_user=1)


def media(client: httpx.Client, url: str, **headers: str) -> httpx.Response:
    return client.get("/api/v1/video/media", params={"url": url}, headers=headers)


def test_media_serves_only_video_and_images_as_themselves(site: VideoSite) -> None:
    viewer = site.console.client("viewer")
    s3 = site.s3()
    hostile = {
        "page.html": (b"<html><script>alert(document.cookie)</script></html>", "text/html"),
        "drawing.svg": (b'<svg xmlns="http://www.w3.org/2000/svg"><script>alert(1)</script></svg>', "image/svg+xml"),
        "code.js": (b"alert(1)", "application/javascript"),
        "page.xhtml": (b"<html xmlns='http://www.w3.org/1999/xhtml'/>", "application/xhtml+xml"),
        "nothing-said": (b"<script>alert(1)</script>", "application/octet-stream"),
    }
    for name, (data, content_type) in hostile.items():
        url = storage.put_bytes(s3, storage.VIDEOS_BUCKET, f"cam-h/2024/06/01/{name}", data, content_type)
        for response in (media(viewer, url), media(viewer, url, Range="bytes=0-5")):
            assert response.status_code in (200, 206), (name, response.text)
            assert response.headers["content-type"] == "application/octet-stream", name
            assert response.headers["content-disposition"] == "attachment", name
            assert response.headers["x-content-type-options"] == "nosniff", name
            assert "sandbox" in response.headers["content-security-policy"], name
            assert "default-src 'none'" in response.headers["content-security-policy"], name
        assert media(viewer, url).content == data
        outside = media(viewer, url, Range=f"bytes={len(data) + 10}-")
        assert outside.status_code == 416 and outside.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in outside.headers["content-security-policy"]
    clip = site.record("cam-h", START, seconds=1, seed=5)
    image = storage.put_bytes(s3, storage.VIDEOS_BUCKET, "cam-h/2024/06/01/dot.png", PNG, "image/png")
    for url, content_type in ((clip.url, "video/webm"), (image, "image/png")):
        response = media(viewer, url)
        assert response.status_code == 200 and response.headers["content-type"] == content_type
        assert "content-disposition" not in response.headers
        assert response.headers["x-content-type-options"] == "nosniff"
        assert "sandbox" in response.headers["content-security-policy"]


def playable(client: httpx.Client, url: str) -> httpx.Response:
    return client.get("/api/v1/video/playable", params={"url": url})


def wait_ready(client: httpx.Client, url: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while (answer := playable(client, url)).status_code != 200 or answer.json()["state"] == "transcoding":
        assert answer.status_code in (200, 429), answer.text
        assert time.monotonic() < deadline, "transcode did not finish"
        time.sleep(0.5)
    assert answer.json()["state"] == "ready", answer.text


def test_transcodes_are_bounded_in_all_and_per_user(site: VideoSite, tmp_path: Path) -> None:
    # mp4v is not a browser codec: asking where to play it starts a transcode. 12 s clips take seconds each.
    a, b, c = (site.record("cam-t", START + dt.timedelta(minutes=n), seconds=12, seed=10 + n, fourcc="mp4v",
                           suffix=".mp4").url for n in range(3))
    viewer, operator, admin = (site.console.client(role) for role in ("viewer", "operator", "admin"))
    assert playable(viewer, a).json()["state"] == "transcoding"
    # One running transcode is the viewer's limit: a second one is refused, asking about the first is not.
    refused = playable(viewer, b)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0, refused.text
    assert "at most 1" in refused.json()["detail"]
    assert playable(viewer, a).json()["state"] == "transcoding"
    # Another user may start one: then two run, the console's limit, and a third user is refused too.
    assert playable(operator, b).json()["state"] == "transcoding"
    full = playable(admin, c)
    assert full.status_code == 429 and "at most 2" in full.json()["detail"], full.text
    # Finished transcodes free their places.
    wait_ready(viewer, a)
    wait_ready(operator, b)
    assert playable(admin, c).json()["state"] == "transcoding"
    wait_ready(admin, c)


def test_the_video_page_waits_out_a_busy_transcoder(site: VideoSite, browser: Browser,  # noqa: F811
                                                   tmp_path: Path) -> None:
    """A 429 from /playable is no error on the page: it says so, waits Retry-After and asks again until it plays."""
    start = (dt.datetime.now(CITY_TZ) - dt.timedelta(minutes=30)).replace(microsecond=0)  # today's list holds it
    busy, wanted = (site.record("cam-busy", start + dt.timedelta(minutes=n), seconds=12, seed=20 + n,
                                fourcc="mp4v", suffix=".mp4").url for n in range(2))
    viewer = site.console.client("viewer")
    context = browser.new_context(viewport={"width": 1440, "height": 1000}, locale="en-US",
                                  timezone_id="Asia/Shanghai")
    page = context.new_page()
    watch = Watch(expected=["status of 429"])  # the browser logs the refused request itself
    page.on("console", watch.on_console)
    page.on("pageerror", lambda exc: watch.errors.append(f"uncaught: {exc}"))
    page.on("request", watch.on_request)
    page.set_default_timeout(30_000)
    browsing = Browsing(page, watch, site, tmp_path)  # type: ignore[arg-type]  # needs only .url of its site
    try:
        page.context.add_cookies([{"name": "lang", "value": "en", "url": site.url}])
        browsing.login("viewer")
        browsing.goto("/video")
        expect(page.locator('#camera option[value="cam-busy"]')).to_have_count(1)
        page.select_option("#camera", "cam-busy")
        row = page.locator(f'#videos-table tr[data-url="{wanted}"]')
        expect(row.locator(".play-button")).to_be_visible()
        assert playable(viewer, busy).json()["state"] == "transcoding"  # the viewer's one transcode
        row.locator(".play-button").click()
        expect(page.locator("#original-name")).to_contain_text("Too many videos are being transcoded")
        browsing.snap("video-transcodes-busy-en")
        expect(page.locator("#video-error")).to_be_hidden()
        until(page, "document.querySelector('#original-player').readyState >= 1", timeout=240)
        browsing.snap("video-played-after-busy-en")
    finally:
        context.close()
    assert watch.outside == [], "requests left 127.0.0.1"
    assert watch.errors == [], "errors in the browser console"
