"""The statistics page's lane view in a real browser (Debian's chromium via Playwright) against ``python -m web``.

Uses the session console (its broker, gateway and deployment map) and test_browser's watched pages: a console error,
an uncaught exception or a request leaving 127.0.0.1 fails the test. What the surveillance service would publish
(its reply, the lane results) is produced in the contract's shapes. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from playwright.sync_api import Browser, expect

from contracts.deployment_map import DeploymentMap
from contracts.records import CITY_TZ, now_time
from contracts.surveillance import lane_group, reply_record
from contracts.topics import Topics
from deploy.processes.console import ConsoleProcess
from tests.web.test_browser import Browsing, browser, browsing_session  # noqa: F401 - fixtures
from tests.web.test_watchlist_api import read_topic

pytestmark = [pytest.mark.slow]
TOPICS = Topics()
WINDOWS = 6


@pytest.fixture
def browsing(browser: Browser, console: ConsoleProcess, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, console, tmp_path)


def send(console: ConsoleProcess, topic: str, values: list[dict[str, Any]], key: str) -> None:
    producer = Producer({"bootstrap.servers": console.backing.broker.bootstrap})
    for value in values:
        producer.produce(topic, json.dumps(value).encode(), key=key.encode())
    assert producer.flush(15) == 0


def lane_results(stat_id: str, checkpoint: str, lanes: list[int], busy: int) -> list[dict[str, Any]]:
    """``WINDOWS`` one-minute windows up to now, one value per lane (the last window still open)."""
    start = datetime.now(CITY_TZ).replace(second=0, microsecond=0) - timedelta(minutes=WINDOWS - 1)
    out = []
    for w in range(WINDOWS):
        window_start, window_end = start + timedelta(minutes=w), start + timedelta(minutes=w + 1)
        for lane in lanes:
            value = busy * lane + 3 * w
            out.append({"stat_id": stat_id, "window_start": window_start.isoformat(timespec="milliseconds"),
                        "window_end": window_end.isoformat(timespec="milliseconds"),
                        "group": lane_group(checkpoint, lane), "value": value, "count": value,
                        "final": w < WINDOWS - 1, "late_records": 0})
    return out


def accept(browsing: Browsing, console: ConsoleProcess, stat_id: str) -> None:
    send(console, TOPICS.surveillance_replies, [reply_record(stat_id, "stat", "accepted", "", now_time(), "test")],
         stat_id)
    expect(browsing.page.locator(f'#stat-table tr[data-stat="{stat_id}"]')).to_have_attribute(
        "data-status", "accepted", timeout=15_000)


def test_a_checkpoints_lanes_side_by_side_with_an_idle_lane_at_zero(browsing: Browsing,
                                                                     console: ConsoleProcess) -> None:
    page = browsing.page
    checkpoints = DeploymentMap.load(console.map_path).checkpoints
    widest = max(checkpoints, key=lambda c: (c.lanes, c.checkpoint_id))
    assert widest.lanes >= 3
    browsing.login("operator")
    browsing.goto("/stats")
    expect(page.locator("#st-checkpoint")).to_be_hidden()
    page.select_option('#stat-form select[name="group_by"]', "lane")
    expect(page.locator("#st-checkpoint")).to_be_visible()
    page.select_option('#stat-form select[name="checkpoint"]', widest.checkpoint_id)
    page.select_option('#stat-form select[name="measure"]', "vehicle_count")
    page.fill('#stat-form input[name="window_s"]', "60")
    page.click("#stat-form button[type=submit]")
    page.wait_for_url("**/stats?stat=*")
    stat_id = page.url.split("stat=", 1)[1]
    published = dict(read_topic(console.backing.broker.bootstrap, TOPICS.control_stats))[stat_id]
    assert published["group_by"] == "lane" and published["filter"] == {"checkpoint_id": widest.checkpoint_id}
    accept(browsing, console, stat_id)

    # The last lane had no capture at all: the service publishes nothing for it, the page draws it at 0.
    busy_lanes = list(range(1, widest.lanes))
    send(console, TOPICS.surveillance_stats, lane_results(stat_id, widest.checkpoint_id, busy_lanes, 10), stat_id)
    expect(page.locator("#lane-view")).to_be_visible()
    bars = page.locator("#lane-bars rect[data-lane]")
    expect(bars).to_have_count(WINDOWS * widest.lanes, timeout=15_000)   # the hub finds new topics every 5 s
    expect(page.locator("#lane-checkpoint")).to_have_value(widest.checkpoint_id)
    expect(page.locator("#lane-legend li")).to_have_count(widest.lanes)
    idle = page.locator(f'#lane-bars rect[data-lane="{widest.lanes}"]')
    assert {idle.nth(i).get_attribute("data-value") for i in range(WINDOWS)} == {"0"}
    newest = busy_lanes[-1]
    expect(page.locator(f'#lane-bars rect[data-lane="{newest}"][data-final="false"]')).to_have_count(1)
    top = page.locator(f'#lane-bars rect[data-lane="{newest}"]').last
    expect(top).to_have_attribute("data-value", str(10 * newest + 3 * (WINDOWS - 1)))
    expect(page.locator("#latest-table tbody tr")).to_have_count(len(busy_lanes))
    expect(page.locator("#latest-table tbody tr").first).to_contain_text("车道 1")
    expect(page.locator("#stat-chart canvas")).to_have_count(1)
    browsing.snap("stats-lanes-zh")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator(f'#stat-table tr[data-stat="{stat_id}"] button.danger').click()
    expect(page.locator(f'#stat-table tr[data-stat="{stat_id}"]')).to_have_count(0)


def test_a_city_wide_lane_statistic_picks_the_checkpoint_to_draw(browsing: Browsing,
                                                                 console: ConsoleProcess) -> None:
    page = browsing.page
    page.context.add_cookies([{"name": "lang", "value": "en", "url": console.url}])
    checkpoints = sorted(DeploymentMap.load(console.map_path).checkpoints, key=lambda c: (c.lanes, c.checkpoint_id))
    narrow, wide = checkpoints[0], checkpoints[-1]
    assert narrow.lanes < wide.lanes
    operator = console.client("operator")
    started = operator.post("/api/v1/stats", json={"measure": "vehicle_count", "group_by": "lane", "window_s": 60})
    assert started.status_code == 201, started.text
    stat_id = started.json()["stat_id"]
    send(console, TOPICS.surveillance_stats,
         lane_results(stat_id, wide.checkpoint_id, list(range(1, wide.lanes + 1)), 20)
         + lane_results(stat_id, narrow.checkpoint_id, list(range(1, narrow.lanes + 1)), 2), stat_id)
    browsing.login("viewer")
    browsing.goto(f"/stats?stat={stat_id}")
    accept(browsing, console, stat_id)
    bars = page.locator("#lane-bars rect[data-lane]")
    # The busiest checkpoint is drawn first; the picker offers both and redraws with the other's lanes.
    expect(page.locator("#lane-checkpoint")).to_have_value(wide.checkpoint_id, timeout=15_000)
    expect(bars).to_have_count(WINDOWS * wide.lanes)
    expect(page.locator("#lane-checkpoint option")).to_have_count(2)
    page.select_option("#lane-checkpoint", narrow.checkpoint_id)
    expect(bars).to_have_count(WINDOWS * narrow.lanes)
    expect(page.locator("#latest-table tbody tr")).to_have_count(narrow.lanes)
    expect(page.locator("#latest-table tbody tr").first).to_contain_text("Lane 1")
    browsing.snap("stats-lanes-en")
    assert operator.delete(f"/api/v1/stats/{stat_id}").status_code == 200
