"""The watchlist and statistics pages in a real browser against ``python -m web``, the real hit loader and bus.

Uses test_browser's site (broker, gateway, console, capture rows, a map with a hostile district name) and
its watch: a console error, an uncaught exception or a request leaving 127.0.0.1 fails the test. What the
surveillance service would publish (hits, replies, statistic results) is produced in the contract's own
shapes (``contracts.surveillance``); the hit loader is the real process, so hits reach the page's
trajectory through HBase as they do in a deployment. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import expect

from contracts.processes import spawn
from contracts.records import CITY_TZ, now_time
from contracts.surveillance import hit_record, reply_record, watch_hit_id
from contracts.topics import Topics
from tests.web.test_browser import (  # noqa: F401 - fixtures
    PLATE,
    Browsing,
    Site,
    browser,
    browsing,
    produce,
    site,
    until,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]
TOPICS = Topics()


@pytest.fixture(scope="module")
def loader(site: Site) -> Iterator[subprocess.Popen[bytes]]:  # noqa: F811
    log = site.console.backing.root / "surveillance-loader.log"
    proc = spawn([sys.executable, "-m", "surveillance.loader", "--config", str(site.console.config)], log)
    yield proc
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)


def hits_for(site: Site, watch_id: str, n: int) -> list[dict[str, Any]]:  # noqa: F811
    """What the watch stage publishes for ``n`` sightings of the watched plate along the map's checkpoints."""
    checkpoints = site.city_map["checkpoints"]
    base = datetime.now(CITY_TZ) - timedelta(minutes=n)
    out = []
    for i in range(n):
        cp = checkpoints[(i * 5) % len(checkpoints)]
        record_id = f"10.9.9.9-{i}"
        out.append(hit_record(hit_id=watch_hit_id(watch_id, record_id), watch_id=watch_id, kind="plate",
                              match="exact" if i % 3 else "fuzzy", record_id=record_id,
                              checkpoint_id=cp["checkpoint_id"],
                              capture_time=(base + timedelta(minutes=i)).isoformat(timespec="milliseconds"),
                              score=1.0, location={"district": cp["district"], "crossroad": cp["crossroad"],
                                                   "lat": cp["lat"], "lon": cp["lon"]},
                              detected_at=now_time(), plate=PLATE))
    return out


def test_watch_a_plate_from_its_capture_then_hits_arrive_live_with_the_trajectory(
        browsing: Browsing, loader: subprocess.Popen[bytes]) -> None:  # noqa: F811
    page, here = browsing.page, browsing.site
    browsing.login("operator")
    browsing.goto(f"/captures?plate={PLATE}")  # the plate filled in; the search waits for a reason
    expect(page.locator("#plate")).to_have_value(PLATE)
    page.fill("#reason", "case 2026-0042")
    page.click("#plate-form button[type=submit]")
    page.locator("#results tbody tr").first.click()
    page.click("#watch-this")
    link = page.locator("#detail-actions a")
    expect(link).to_contain_text("已布控")
    link.click()
    page.wait_for_url("**/watchlist?watch=*")
    watch_id = page.url.split("watch=", 1)[1]
    row = page.locator(f'#watch-table tr[data-watch="{watch_id}"]')
    expect(row).to_have_attribute("data-status", "pending")
    expect(row).to_contain_text(PLATE)
    # The service accepts it, then finds the car at six checkpoints: live rows, banner, trajectory.
    produce(here, TOPICS.surveillance_replies, reply_record(watch_id, "watch", "accepted", "", now_time(), "test"),
            watch_id.encode())
    expect(row).to_have_attribute("data-status", "accepted", timeout=15_000)  # the hub finds a new topic within 5 s
    hits = hits_for(here, watch_id, 7)
    for hit in hits[:6]:
        produce(here, TOPICS.surveillance_hits, hit, watch_id.encode())
    expect(page.locator("#live-hits tbody tr")).to_have_count(6, timeout=15_000)
    expect(page.locator("#hit-banner")).to_be_visible()
    expect(page.locator("#hit-banner")).to_contain_text(PLATE)
    expect(page.locator("#hit-table tbody tr")).to_have_count(6, timeout=30_000)  # through the loader and HBase
    expect(row.locator(".hit-count")).to_have_text("6")
    expect(page.locator("#map path.trajectory-line")).to_have_count(1)
    assert page.locator("#hit-table tbody tr").first.get_attribute("data-hit") == hits[0]["hit_id"]  # oldest first
    until(page, "!document.querySelector('#map').classList.contains('leaflet-zoom-anim')")
    browsing.snap("watchlist-zh")
    # A replayed hit (the service after kill -9: same id) is shown once; after a reload the list comes from HBase.
    for hit in (hits[0], hits[6]):
        produce(here, TOPICS.surveillance_hits, hit, watch_id.encode())
    expect(page.locator("#hit-table tbody tr")).to_have_count(7, timeout=30_000)
    # Live rows come over SSE, the table above from HBase: on a loaded machine either may be first.
    expect(page.locator("#live-hits tbody tr")).to_have_count(7, timeout=15_000)
    # The loader writes a hit's by-watch row (the table above) and its by-time row (what a reloaded page lists)
    # in separate batches: reload once the by-time table has the newest hit too.
    viewer = here.console.client("viewer")
    deadline = time.monotonic() + 30
    while len(viewer.get("/api/v1/hits", params={"limit": 30}).json()) < 7 and time.monotonic() < deadline:
        time.sleep(0.3)
    page.reload()
    expect(page.locator("#live-hits tbody tr")).to_have_count(7)
    expect(page.locator("#live-hits tbody tr").first).to_have_attribute("data-hit", hits[6]["hit_id"])
    # A bad command is refused naming the field, and nothing is added.
    browsing.watch.expected.append("422 (Unprocessable Entity)")
    count = page.locator("#watch-table tbody tr").count()
    page.fill('#plate-watch-form input[name="plate"]', "ABC")
    page.click("#plate-watch-form button[type=submit]")
    expect(page.locator("#sv-error")).to_contain_text("plate")
    expect(page.locator("#watch-table tbody tr")).to_have_count(count)
    # Removal: the row goes.
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button.danger").click()
    expect(row).to_have_count(0)


def test_watch_a_face_capture_from_the_form(browsing: Browsing) -> None:  # noqa: F811
    page, here = browsing.page, browsing.site
    face = next(r for r in here.checkpoint_records if "feature" in r)
    browsing.login("operator")
    browsing.goto(f"/watchlist?capture={face['record_id']}")
    expect(page.locator('#face-watch-form input[name="capture"]')).to_have_value(face["record_id"])
    page.fill('#face-watch-form input[name="threshold"]', "0.9")
    page.click("#face-watch-form button[type=submit]")
    row = page.locator("#watch-table tr.selected")
    expect(row).to_contain_text(face["record_id"])
    expect(row).to_have_attribute("data-status", "pending")


def test_viewer_sees_the_watchlist_without_commands(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    browsing.login("viewer")
    browsing.goto("/watchlist")
    expect(page.locator("#watch-table")).to_be_visible()
    expect(page.locator("#plate-watch-form")).to_have_count(0)
    expect(page.locator("#watch-table button")).to_have_count(0)
    browsing.goto("/stats")
    expect(page.locator("#stat-form")).to_have_count(0)


def test_start_a_statistic_and_watch_its_chart_move(browsing: Browsing) -> None:  # noqa: F811
    page, here = browsing.page, browsing.site
    browsing.login("operator")
    browsing.goto("/stats")
    page.select_option('#stat-form select[name="measure"]', "vehicle_count")
    page.select_option('#stat-form select[name="group_by"]', "district")
    page.fill('#stat-form input[name="window_s"]', "60")
    page.click("#stat-form button[type=submit]")
    page.wait_for_url("**/stats?stat=*")
    stat_id = page.url.split("stat=", 1)[1]
    expect(page.locator(f'#stat-table tr[data-stat="{stat_id}"]')).to_have_attribute("data-status", "pending")
    produce(here, TOPICS.surveillance_replies, reply_record(stat_id, "stat", "accepted", "", now_time(), "test"),
            stat_id.encode())
    expect(page.locator(f'#stat-table tr[data-stat="{stat_id}"]')).to_have_attribute("data-status", "accepted",
                                                                                      timeout=15_000)
    districts = sorted({c["district"] for c in here.city_map["checkpoints"]})[:3]
    start = datetime.now(CITY_TZ).replace(second=0, microsecond=0) - timedelta(minutes=5)
    for w in range(5):
        window_start, window_end = start + timedelta(minutes=w), start + timedelta(minutes=w + 1)
        for g, district in enumerate(districts):
            value = {"stat_id": stat_id, "window_start": window_start.isoformat(timespec="milliseconds"),
                     "window_end": window_end.isoformat(timespec="milliseconds"), "group": district,
                     "value": 10 * (g + 1) + w, "final": w < 4}
            produce(here, TOPICS.surveillance_stats, value, stat_id.encode())
    # The hub looks for new topics every 5 s: the first result may take that long.
    expect(page.locator("#latest-table tbody tr")).to_have_count(3, timeout=15_000)
    expect(page.locator("#stat-chart canvas")).to_have_count(1)
    expect(page.locator(f'#latest-table tr[data-group="{districts[2]}"]')).to_contain_text("34", timeout=15_000)
    expect(page.locator("#chart-note")).to_contain_text("5 个窗口")
    browsing.snap("stats-zh")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'#stat-table tr[data-stat="{stat_id}"] button.danger').click()
    expect(page.locator(f'#stat-table tr[data-stat="{stat_id}"]')).to_have_count(0)


def test_pages_render_in_english(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    page.context.add_cookies([{"name": "lang", "value": "en", "url": browsing.site.url}])
    browsing.login("operator")
    for path, name in (("/watchlist", "watchlist"), ("/stats", "stats")):
        browsing.goto(path)
        expect(page.locator(f'.nav a[data-page="{name}"]')).to_have_attribute("aria-current", "page")
        browsing.snap(f"{name}-en")
