"""Evidence locks end to end in a real browser (chromium via Playwright) against ``python -m web``.

An operator opens a capture on the capture page and locks it as evidence: the dialog will not send without a
reason (the field says why), sends with one, and says so; locking it again says it is locked already. The lock is
listed on /evidence (the reason shown as the text typed, markup and all), and opening it shows the record as it was
locked; an operator gets no unlock button. An admin unlocks it (after a confirmation) and it leaves the list. A
viewer has no /evidence (the forbidden page, no nav link) and no lock button on the capture page.

Uses test_browser's site (its own broker, gateway and console; users of each role; a plate's trajectory) and its
watch: a console error, an uncaught exception or a request leaving 127.0.0.1 fails the test. Screenshots go to
test-artifacts/screenshots/.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Dialog, expect

from contracts.records import CITY_TZ
from tests.web._video_support import VideoSite, video_site  # noqa: F401 - fixture
from tests.web.test_browser import (  # noqa: F401 - fixtures
    PLATE,
    TRAJECTORY_LENGTH,
    Browsing,
    browser,
    browsing,
    browsing_session,
    site,
    until,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]

REASON = "case <b>2026-0142</b>"
"""Markup typed as a reason: it must be shown as these characters, never as a bold number."""


def open_first_capture(browsing: Browsing) -> str:  # noqa: F811
    """Search the plate's trajectory (with a reason) and open its first record's detail; its record id."""
    page = browsing.page
    browsing.goto("/captures")
    page.fill("#plate", PLATE)
    page.fill("#reason", "evidence test")
    page.click("#plate-form button[type=submit]")
    expect(page.locator("#results tbody tr")).to_have_count(TRAJECTORY_LENGTH)
    row = page.locator("#results tbody tr").first
    record_id = row.get_attribute("data-record-id")
    assert record_id
    row.click()
    expect(page.locator("#detail-fields dd").first).to_be_visible()
    expect(page.locator("#detail-id")).to_have_text(record_id)
    return record_id


def test_an_operator_locks_a_capture_and_an_admin_unlocks_it(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    browsing.watch.expected += ["status of 409"]  # the second lock of the same capture, on purpose
    browsing.login("operator")
    assert "证据" in page.locator(".nav a").all_inner_texts()
    record_id = open_first_capture(browsing)

    # The dialog keeps an empty reason back and says why.
    page.click("#lock-capture")
    dialog = page.locator("#lock-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#lock-what")).to_contain_text(record_id)
    page.click("#lock-submit")
    expect(page.locator("#lock-reason")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#lock-reason-error")).to_contain_text("事由")
    expect(dialog).to_be_visible()
    page.fill("#lock-reason", REASON)
    expect(page.locator("#lock-reason-error")).to_be_hidden()
    browsing.snap("evidence-lock-dialog-zh")
    page.click("#lock-submit")
    expect(dialog).to_be_hidden()
    outcome = page.locator("#detail-actions .lock-outcome")
    expect(outcome).to_contain_text(f"已锁定为证据（{REASON}）")
    expect(outcome).to_have_class("lock-outcome ok")
    expect(page.locator("#detail-actions b")).to_have_count(0)
    browsing.snap("evidence-locked-capture-zh")

    # Locking it again: already locked (409), said as such.
    page.click("#lock-capture")
    page.fill("#lock-reason", "again")
    page.click("#lock-submit")
    expect(outcome).to_contain_text("该条目已锁定为证据")

    # /evidence lists it, newest first, the reason as text; opening it shows the record as locked.
    browsing.goto("/evidence")
    expect(page.locator("h1")).to_have_text("证据")
    row = page.locator(f'#evidence-table tbody tr[data-kind="capture"][data-id="{record_id}"]')
    expect(row).to_have_count(1)
    expect(page.locator("#evidence-table tbody tr").first).to_have_attribute("data-id", record_id)
    cells = row.locator("td")
    expect(cells.nth(0)).to_have_text("抓拍")
    expect(cells.nth(2)).to_have_text(REASON)
    expect(cells.nth(3)).to_have_text("operator")
    expect(page.locator("#evidence-table tbody b")).to_have_count(0)
    row.click()
    expect(page.locator("#evidence-detail")).to_be_visible()
    expect(page.locator("#lock-fields")).to_contain_text(REASON)
    expect(page.locator("#record-fields")).to_contain_text(record_id)
    expect(page.locator("#record-fields")).to_contain_text(PLATE)
    expect(page.locator("#unlock")).to_have_count(0)  # operators do not unlock
    browsing.snap("evidence-page-operator-zh")

    # An admin unlocks it, after a confirmation.
    page.click("#logout")
    page.wait_for_url("**/login")
    browsing.login("admin")
    browsing.goto("/evidence")
    row.click()
    expect(page.locator("#unlock")).to_be_visible()
    browsing.snap("evidence-page-admin-zh")
    asked: list[str] = []

    def on_dialog(confirm: Dialog) -> None:
        asked.append(confirm.message)
        confirm.accept()

    page.once("dialog", on_dialog)
    page.click("#unlock")
    expect(page.locator("#evidence-state")).to_contain_text("已解锁")
    assert asked and record_id in asked[0]
    expect(row).to_have_count(0)
    expect(page.locator("#evidence-detail")).to_be_hidden()
    browsing.snap("evidence-unlocked-zh")


def test_a_viewer_has_no_evidence_page_and_no_lock_button(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    browsing.watch.expected += ["status of 403"]
    browsing.login("viewer")
    assert "证据" not in page.locator(".nav a").all_inner_texts()
    response = page.goto(browsing.site.url + "/evidence")
    assert response is not None and response.status == 403
    expect(page.locator("h1")).to_contain_text("403")
    open_first_capture(browsing)
    expect(page.locator("#detail-actions")).to_be_attached()
    assert page.locator("#lock-capture, .lock-evidence, #lock-dialog").count() == 0


@pytest.fixture
def video_browsing(browser: Browser, video_site: VideoSite, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, video_site, tmp_path, height=1000, timeout_ms=30_000)


def test_an_operator_locks_a_video_and_it_plays_from_the_evidence_copy(video_browsing: Browsing,
                                                                      video_site: VideoSite) -> None:  # noqa: F811
    page = video_browsing.page
    start = (dt.datetime.now(CITY_TZ) - dt.timedelta(minutes=20)).replace(microsecond=0)
    recording = video_site.record("cam-evidence", start, seconds=2, seed=11)
    key = recording.url.removeprefix("s3://videos/")
    video_browsing.login("operator")
    video_browsing.goto("/video")
    page.select_option("#camera", "cam-evidence")
    row = page.locator(f'#videos-table tr[data-url="{recording.url}"]')
    row.locator(".lock-evidence").click()
    expect(page.locator("#lock-dialog")).to_be_visible()
    page.fill("#lock-reason", "case 2026-0777")
    page.click("#lock-submit")
    expect(row.locator(".lock-outcome")).to_contain_text("已锁定为证据")
    # The table drawn again (a refresh, or a second load racing the first) keeps the outcome on the new row.
    row.evaluate("r => { r.dataset.drawn = 'before'; }")
    page.click("#refresh-videos")
    redrawn = page.locator(f'#videos-table tr[data-url="{recording.url}"]:not([data-drawn])')
    expect(redrawn.locator(".lock-outcome")).to_contain_text("已锁定为证据")
    video_browsing.snap("evidence-video-locked-zh")

    video_browsing.goto("/evidence")
    locked = page.locator(f'#evidence-table tbody tr[data-kind="video"][data-id="{key}"]')
    locked.click()
    expect(page.locator("#record-fields")).to_contain_text("cam-evidence")
    player = page.locator("#evidence-video")
    expect(player).to_have_attribute("src", f"/api/v1/evidence/video/{key}/media")
    until(page, "document.querySelector('#evidence-video').readyState >= 1")
    video_browsing.snap("evidence-video-page-zh")
