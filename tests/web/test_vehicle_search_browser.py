"""The capture page's multi-condition vehicle search in a real browser (Debian's chromium via Playwright) against the
session console: the form, the results with their attributes, their checkpoints marked on the map, the histogram
of the pages fetched, and a short page (scan budget spent) that Next continues. In Chinese and in English.

The page is watched as in test_browser (console errors, uncaught exceptions, requests off 127.0.0.1 fail the test).
Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from contracts.records import Kind
from deploy.processes.console import ConsoleProcess
from testkit.web_data import T0, StepClock, load, valid_records
from tests.web.test_browser import Browsing, browser, browsing_session, until  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow]
START = T0 + timedelta(days=260)
"""A day no other test writes: the searches see these captures only."""
CAPTURES = 6000
STEP = timedelta(seconds=2)


@pytest.fixture(scope="module")
def written(console: ConsoleProcess) -> list[dict[str, Any]]:
    pairs = list(valid_records(CAPTURES, seed=61, clock=StepClock(START, STEP), face_share=0.0))
    load(console.backing.gateway.port, pairs)
    return [record for kind, record in pairs if kind is Kind.VEHICLE]


@pytest.fixture
def browsing(browser: Browser, console: ConsoleProcess, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, console, tmp_path)


def search(browsing: Browsing, **fields: str) -> None:
    """Fill the vehicle form afresh (city-local times) and submit it."""
    page = browsing.page
    form = page.locator("#vehicle-form")
    form.evaluate("(f) => f.reset()")
    page.fill("#vs-from", START.strftime("%Y-%m-%dT%H:%M:%S"))
    page.fill("#vs-to", (START + CAPTURES * STEP).strftime("%Y-%m-%dT%H:%M:%S"))
    for name, value in fields.items():
        target = form.locator(f'[name="{name}"]')
        if name in ("district", "direction"):
            target.select_option(value)
        else:
            target.fill(value)
    form.locator("button[type=submit]").click()


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_vehicle_search_lists_maps_and_charts_the_matches(browsing: Browsing, written: list[dict[str, Any]],
                                                          lang: str) -> None:
    page = browsing.page
    if lang == "en":
        page.context.add_cookies([{"name": "lang", "value": "en", "url": browsing.site.url}])
    browsing.login("viewer")
    browsing.goto("/captures")
    expect(page.locator("#vs-district option")).to_have_count(7)  # "any" and the map's six districts
    district = written[0]["checkpoint_id"].split("#")[0]
    search(browsing, district=district, vehicle_color="white", reason="case 2026-0029", limit="20")
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(20)
    expect(rows.first.locator("td.vehicle-attributes")).to_contain_text("white")
    expect(page.locator("#vs-histogram")).to_be_visible()
    expect(page.locator("#vs-histogram-chart rect")).to_have_count(20)  # 200 minutes in 10-minute bars
    page.click("#next-page")
    expect(page.locator("#page-no")).to_contain_text("2")
    until(page, "document.querySelector('#vs-histogram-title').textContent.includes('40')")
    highlighted = page.evaluate("[...document.querySelectorAll('#map path.leaflet-interactive')]"
                                ".filter((p) => p.getAttribute('d') && p.getAttribute('d').includes('a12,12')).length")
    assert highlighted >= 1  # the hits' checkpoints are drawn larger on the map
    browsing.snap(f"vehicle-search-{lang}")
    if lang == "zh":
        # A rare colour in every district: the first page stops at its scan budget, Next carries on.
        search(browsing, vehicle_color="yellow", reason="case 2026-0029", limit="100")
        expect(page.locator("#results-partial")).to_be_visible()
        expect(page.locator("#next-page")).to_be_enabled()
        browsing.snap("vehicle-search-partial-zh")
