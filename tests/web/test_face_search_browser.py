"""The face search page in a real browser (Debian's chromium via Playwright) against ``python -m web``.

Everything is real: the console on its own broker, HBase gateway and SeaweedFS (``start_video_site``). A person seen
a dozen times among strangers is written as the ingest job writes faces (HBase's ``face`` table), their JPEGs stored
where the devices store them, and published on the face topic, where the console's face index follows them (it
built its index at start, before these existed). The page is watched as in test_browser (console errors, uncaught
exceptions, requests off 127.0.0.1 fail the test). Screenshots (zh and en) go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
from playwright.sync_api import Browser, expect

from contracts.records import CITY_TZ, Kind, encode
from contracts.topics import Topics
from ingest.city import build_city
from ingest.images import keys
from ingest.images.render import ImageSettings, Renderer
from testkit.faces import Planted, load_faces, plant
from tests.web._video_support import VideoSite, start_video_site
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED
from tests.web.test_browser import Browsing, browser, browsing_session  # noqa: F401 - fixtures
from tests.web.test_face_search import REASON, send

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]
RENDERER = Renderer(seed=29, settings=ImageSettings())
TOPICS = Topics()
SIGHTINGS = 12


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoSite]:
    yield from start_video_site(tmp_path_factory.mktemp("face-search-browser"))


@pytest.fixture(scope="module")
def seen(site: VideoSite) -> Planted:
    """One person seen ``SIGHTINGS`` times over two days among 48 strangers: in HBase, their JPEGs in the store,
    and on the bus."""
    now = datetime.now(CITY_TZ).replace(microsecond=0)
    data = plant(60, now - timedelta(days=2), timedelta(days=2) - timedelta(hours=1),
                 build_city(MAP_SEED, MAP_CHECKPOINTS), seed=29, people=1, sightings=SIGHTINGS, prefix="fb")
    load_faces(site.hbase_port, data.records, every_table=True)  # the capture search finds them too
    store = site.s3()
    for record in data.records:
        if record["image_url"]:
            jpeg = RENDERER.jpeg(Kind.FACE, record) or b""
            store.put_object(keys.BUCKET, keys.key_of(record["image_url"]), io.BytesIO(jpeg), len(jpeg),
                             content_type="image/jpeg")
    send(site.bootstrap, TOPICS.face, [encode(r) for r in data.records], [r["checkpoint_id"] for r in data.records])
    last = data.records[-1]["record_id"]
    viewer = site.console.client("viewer")
    deadline = time.monotonic() + 30
    body = {"capture": last, "from": data.records[0]["capture_time"], "to": now.isoformat(), "reason": REASON}
    while viewer.post("/api/v1/captures/faces/similar", json=body).status_code != 200:
        assert time.monotonic() < deadline, "the console's face index did not pick the faces up from the bus"
        time.sleep(0.3)
    return data


@pytest.fixture
def browsing(browser: Browser, site: VideoSite, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, site, tmp_path, height=1000)


def matches(seen: Planted) -> int:
    """How many faces reach the page's default 0.8 with the person's clearest sighting (numpy, exact)."""
    query = seen.vectors[seen.people[0][0]]
    return int(np.count_nonzero(seen.vectors @ query >= 0.8))


def test_search_this_face_lists_the_sightings_maps_them_and_an_operator_watches_one(browsing: Browsing,
                                                                                    seen: Planted) -> None:
    page = browsing.page
    query = seen.records[seen.people[0][0]]
    browsing.login("operator")
    browsing.goto(f"/faces?capture={query['record_id']}")
    expect(page.locator("#capture")).to_have_value(query["record_id"])
    expect(page.locator("#reason-error")).to_be_visible()  # a link carries no reason: this user gives theirs
    expect(page.locator("#index-state")).to_have_class("badge live")
    page.fill("#reason", REASON)
    page.click("#face-form button[type=submit]")
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(matches(seen))
    expect(rows.first).to_have_attribute("data-record-id", query["record_id"])
    expect(rows.first.locator("td").nth(1)).to_have_text("1.000")
    assert page.locator("path.trajectory-line").count() == 1
    expect(page.locator("#results figure.capture-image.thumb.loaded")).to_have_count(matches(seen))
    browsing.snap("faces-search-zh")
    first = rows.first.locator("button.watch-face")
    first.click()
    expect(rows.first.locator("a.watch-added")).to_be_visible()
    watch_link = rows.first.locator("a.watch-added").get_attribute("href") or ""
    # The watchlist shows the face watch with a link back to this search.
    browsing.goto(watch_link)
    link = page.locator(f'a.face-search-link[href="/faces?capture={query["record_id"]}"]').first
    expect(link).to_be_visible()
    browsing.snap("faces-watchlist-link-zh")


def test_the_page_in_english_for_a_viewer_filters_by_district(browsing: Browsing, seen: Planted) -> None:
    page = browsing.page
    page.context.add_cookies([{"name": "lang", "value": "en", "url": browsing.site.url}])
    query = seen.records[seen.people[0][0]]
    district = query["checkpoint_id"].split("#")[0]
    browsing.login("viewer")
    browsing.goto("/faces")
    expect(page.locator('.nav a[data-page="faces"]')).to_have_attribute("aria-current", "page")
    page.fill("#capture", query["record_id"])
    page.select_option("#district", district)
    page.fill("#from", seen.records[0]["capture_time"][:19])
    page.fill("#reason", REASON)
    page.click("#face-form button[type=submit]")
    rows = page.locator("#results tbody tr")
    expect(rows.first).to_have_attribute("data-record-id", query["record_id"])
    assert page.locator("#results button.watch-face").count() == 0  # watching is an operator's
    checkpoints = page.eval_on_selector_all("#results tbody tr", "rows => rows.map(r => r.dataset.checkpoint)")
    assert checkpoints and all(c.startswith(f"{district}#") for c in checkpoints)
    expect(page.locator("#results-heading")).to_contain_text("matching")
    browsing.snap("faces-search-en")
    # The capture search's detail of a face capture links here with the capture filled in.
    at = datetime.fromisoformat(query["capture_time"])
    browsing.goto("/captures?" + urlencode({"checkpoint": query["checkpoint_id"],
                                            "start": (at - timedelta(seconds=1)).isoformat(),
                                            "end": (at + timedelta(seconds=1)).isoformat()}))
    page.locator(f'#results tbody tr[data-record-id="{query["record_id"]}"]').click()
    expect(page.locator("#search-this-face")).to_have_attribute("href", f"/faces?capture={query['record_id']}")
