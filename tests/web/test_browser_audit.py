"""Why a plate was searched or a video exported, end to end in a real browser (chromium via Playwright) against
``python -m web``.

An operator's plate search does not go out without a reason (the field says why); with one, it does, and the
admin finds it on the audit page by action and plate, the reason shown as the text it was (markup and all, never
rendered), and in the CSV export the page's link downloads with the same filters. On the video page the recording
shown is exported (downloaded) with a reason, which the trail keeps.

Uses test_browser's site (its own broker, gateway and console; users of each role; a plate's trajectory) and its
watch: a console error, an uncaught exception or a request leaving 127.0.0.1 fails the test; the video test has
the video console of _video_support (with its object store). Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Browser, Request, expect

from contracts.records import CITY_TZ
from tests.web._video_support import VideoSite, video_site  # noqa: F401 - fixture
from tests.web.test_browser import (  # noqa: F401 - fixtures
    PLATE,
    TRAJECTORY_LENGTH,
    Browsing,
    Site,
    browser,
    browsing,
    browsing_session,
    site,
    until,
)
from web.routers.audit import CSV_COLUMNS

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]

REASON = "case <b>42</b>"
"""Markup a user typed as a reason: the audit page must show these characters, not a bold 42."""


def test_a_plate_search_needs_a_reason_and_the_audit_page_shows_and_exports_it(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    searches: list[str] = []

    def on_request(request: Request) -> None:
        if urlsplit(request.url).path == "/api/v1/captures":
            searches.append(request.url)

    page.on("request", on_request)
    browsing.login("operator")
    browsing.goto("/captures")
    expect(page.locator("#reason")).to_have_attribute("maxlength", "200")

    # No reason: the browser keeps the form back, the reason field is flagged and says why.
    page.fill("#plate", PLATE)
    page.click("#plate-form button[type=submit]")
    expect(page.locator("#reason")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#reason-error")).to_be_visible()
    expect(page.locator("#reason-error")).to_contain_text("事由")
    assert page.eval_on_selector("#reason", "e => e.validity.valid") is False
    page.wait_for_timeout(500)
    assert searches == []
    expect(page.locator("#results tbody tr")).to_have_count(0)
    browsing.snap("captures-reason-required-zh")

    # With a reason: the search goes out carrying it, the flag goes away, the trajectory is listed.
    page.fill("#reason", REASON)
    expect(page.locator("#reason")).not_to_have_attribute("aria-invalid", "true")
    expect(page.locator("#reason-error")).to_be_hidden()
    page.click("#plate-form button[type=submit]")
    expect(page.locator("#results tbody tr")).to_have_count(TRAJECTORY_LENGTH)
    assert len(searches) == 1
    asked = parse_qs(urlsplit(searches[0]).query)
    assert asked["plate"] == [PLATE] and asked["reason"] == [REASON]
    assert "reason" not in page.url  # a link to the search carries no reason: whoever opens it gives their own
    browsing.snap("captures-reason-zh")

    page.click("#logout")
    page.wait_for_url("**/login")
    browsing.login("admin")
    browsing.goto("/audit")
    page.select_option("#filter-action", "captures.search")
    page.fill("#filter-q", PLATE)
    page.press("#filter-q", "Enter")
    page.wait_for_url("**/audit?action=captures.search&q=*")
    # The event reaches the page through the bus and the audit loader: reload (the filters stay) until it shows.
    entry = page.locator('#audit tbody tr[data-action="captures.search"][data-user="operator"]')
    deadline = time.monotonic() + 30
    while entry.count() == 0:
        assert time.monotonic() < deadline, "the operator's search never reached the audit page"
        page.wait_for_timeout(1000)
        page.reload()
        expect(page.locator("#filter-action")).to_have_value("captures.search")
    expect(page.locator("#filter-q")).to_have_value(PLATE)
    rows = page.locator("#audit tbody tr")
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.action)")) == {"captures.search"}
    cells = entry.first.locator("td")
    expect(cells).to_have_count(9)
    expect(cells.nth(2)).to_have_text("操作员")
    expect(cells.nth(3)).to_have_text("按车牌查询抓拍")
    expect(cells.nth(4)).to_have_text(PLATE)
    expect(cells.nth(5)).to_have_text(REASON)  # the characters typed, as text
    expect(cells.nth(6)).to_have_text("127.0.0.1")
    expect(cells.nth(7)).to_have_text("成功")
    expect(cells.nth(8)).to_contain_text(f'"plate":"{PLATE}"')
    expect(page.locator("#audit tbody b")).to_have_count(0)  # nothing of it became markup
    browsing.snap("audit-filtered-zh")

    # The export carries the page's filters and holds the same entry.
    link = page.locator("#export-csv")
    exported = parse_qs(urlsplit(link.get_attribute("href") or "").query)
    assert exported == {"action": ["captures.search"], "q": [PLATE]}
    with page.expect_download() as download_info:
        link.click()
    download = download_info.value
    assert download.suggested_filename == "audit.csv"
    with open(download.path(), encoding="utf-8", newline="") as f:
        table = list(csv.reader(io.StringIO(f.read())))
    assert tuple(table[0]) == CSV_COLUMNS
    found = [dict(zip(CSV_COLUMNS, row, strict=True)) for row in table[1:]]
    assert {row["action"] for row in found} == {"captures.search"}
    mine = [row for row in found if row["user"] == "operator" and row["reason"] == REASON]
    assert mine, found
    assert mine[0]["role"] == "operator" and mine[0]["target"] == PLATE and PLATE in mine[0]["query"]


@pytest.fixture
def video_browsing(browser: Browser, video_site: VideoSite, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, video_site, tmp_path, height=1000, timeout_ms=30_000, accept_downloads=True)


def test_the_video_shown_is_exported_with_a_reason(video_browsing: Browsing, video_site: VideoSite) -> None:  # noqa: F811
    page = video_browsing.page
    start = (dt.datetime.now(CITY_TZ) - dt.timedelta(minutes=10)).replace(microsecond=0)
    recording = video_site.record("cam-export", start, seconds=3, seed=9, n_objects=1)
    video_browsing.login("viewer")
    video_browsing.goto("/video")
    expect(page.locator("#export-video")).to_be_disabled()  # nothing shown yet
    page.select_option("#camera", "cam-export")
    row = page.locator(f'#videos-table tr[data-url="{recording.url}"]')
    row.locator(".play-button").click()
    until(page, "document.querySelector('#original-player').readyState >= 1")
    expect(page.locator("#export-video")).to_be_enabled()

    # No reason: nothing is downloaded, the form keeps it back.
    page.click("#export-video")
    assert page.eval_on_selector("#export-reason", "e => e.validity.valueMissing") is True
    expect(page.locator("#export-state")).to_be_hidden()

    page.fill("#export-reason", REASON)
    with page.expect_download() as download_info:
        page.click("#export-video")
    download = download_info.value
    assert download.failure() is None
    assert Path(download.path()).stat().st_size == recording.size
    assert download.suggested_filename.endswith(".webm")
    expect(page.locator("#export-state")).to_contain_text("已开始导出")
    video_browsing.snap("video-export-zh")
    entries = video_site.console.audit(lambda found: bool(found), action="video.export", user="viewer")
    assert entries[0]["target"] == recording.url and entries[0]["reason"] == REASON
