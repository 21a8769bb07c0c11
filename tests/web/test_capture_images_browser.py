"""Capture images on the console's pages in a real browser (Debian's chromium via Playwright): a plate's trajectory
with a thumbnail per capture and the full JPEG in a capture's detail; live hits on the watchlist page with the
matched capture's thumbnail, and a cloned-plate hit with both sightings side by side.

Everything is real: ``python -m web`` on its own broker, HBase gateway and SeaweedFS; capture rows written by the
ingest writer; JPEGs drawn by the simulator's renderer and stored where the devices store them; hits produced on
``surveillance.hits`` in the contract's shape. The page is watched as in test_browser (console errors, uncaught
exceptions, requests off 127.0.0.1 fail the test). Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import io
import json
import shutil
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import Browser, expect

from contracts.records import IMAGE_ERROR, Kind, now_time
from contracts.surveillance import cloned_hit_id, hit_record
from contracts.topics import Topics
from ingest.city import build_city
from ingest.images import keys
from ingest.images.render import ImageSettings, Renderer
from testkit.web_data import StepClock, load, valid_records
from tests.web._video_support import VideoSite, start_video_site
from tests.web.test_browser import ARTIFACTS, Browsing, browser, browsing_session, until  # noqa: F401 - the browser fixture

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser"), pytest.mark.timeout(900)]

PLATE = "浙A9K3P7"
REASON = "case 2026-0728"
RENDERER = Renderer(seed=21, settings=ImageSettings())
TOPICS = Topics()
CITY = build_city(7, 12)
"""The console's map (``start_video_site``): captures at its checkpoints show on its map page."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VideoSite]:
    for running in start_video_site(tmp_path_factory.mktemp("capture-images-browser")):
        # the capture topics exist before a wall opens, as in a deployment (the simulator makes them)
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        for future in admin.create_topics([NewTopic(t, 2, 1) for t in (TOPICS.vehicle, TOPICS.face)]).values():
            future.result(30)
        yield running


@pytest.fixture(scope="module")
def trajectory(site: VideoSite) -> list[dict[str, Any]]:
    """Eight captures of one plate three minutes apart, their images in the store; the newest one's device sent none."""
    clock = StepClock(step=timedelta(minutes=3))
    pairs = [(kind, {**record, "plate_number": PLATE})
             for kind, record in valid_records(40, seed=21, clock=clock, city=CITY) if kind is Kind.VEHICLE][:8]
    kind, last = pairs[-1]
    pairs[-1] = (kind, {**last, "image_url": "", IMAGE_ERROR: "no_image"})
    load(site.hbase_port, pairs)
    for kind, record in pairs[:-1]:
        _store_image(site, kind, record)
    return [record for _, record in pairs]


def _store_image(site: VideoSite, kind: Kind, record: dict[str, Any]) -> None:
    """What a device does before publishing: its JPEG under the key its record names."""
    data = RENDERER.jpeg(kind, record) or b""
    site.s3().put_object(keys.BUCKET, keys.key_of(record["image_url"]), io.BytesIO(data), len(data),
                         content_type="image/jpeg")


def _snap_viewport(browsing: Browsing, name: str) -> None:
    """A screenshot of the window, not the full page: the map page is sized to the window (``vh``), so a full-page
    capture resizes it mid-shot and Chromium leaves parts unpainted."""
    path = browsing.shots / f"{name}.png"
    browsing.page.screenshot(path=str(path))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, ARTIFACTS / path.name)


@pytest.fixture
def browsing(browser: Browser, site: VideoSite, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, site, tmp_path, height=1000, timeout_ms=30_000)


def test_the_trajectory_shows_thumbnails_and_the_detail_its_jpeg(browsing: Browsing,
                                                                  trajectory: list[dict[str, Any]]) -> None:
    page = browsing.page
    browsing.watch.expected.append("status of 404")  # the list asks for the image-less capture's thumbnail too
    browsing.login("viewer")
    browsing.goto("/captures")
    page.fill("#plate", PLATE)
    page.fill("#reason", REASON)
    page.click("#plate-form button[type=submit]")
    expect(page.locator("#results tbody tr")).to_have_count(len(trajectory))
    expect(page.locator("#results figure.capture-image.thumb.loaded")).to_have_count(len(trajectory) - 1)
    expect(page.locator("#results figure.capture-image.missing")).to_have_count(1)
    widths = page.eval_on_selector_all("#results figure.loaded img", "imgs => imgs.map(i => i.naturalWidth)")
    assert set(widths) == {240}
    page.locator("#results tbody tr").first.click()
    detail = page.locator("#detail-image figure.capture-image.full")
    expect(detail).to_have_class("capture-image full loaded")
    assert page.eval_on_selector("#detail-image img", "i => [i.naturalWidth, i.naturalHeight]") == [640, 360]
    browsing.snap("capture-images-trajectory-detail-zh")
    # The capture whose device sent no image: the detail says why, without asking for it.
    page.locator(f'#results tbody tr[data-record-id="{trajectory[-1]["record_id"]}"]').click()
    expect(page.locator("#detail-image figcaption")).to_contain_text("no_image")
    assert page.locator("#detail-image img").count() == 0
    browsing.snap("capture-images-no-image-zh")


def test_live_hits_show_the_capture_and_a_cloned_pair_both_sightings(site: VideoSite, browsing: Browsing,
                                                                     trajectory: list[dict[str, Any]]) -> None:
    page = browsing.page
    browsing.login("viewer")
    browsing.goto("/watchlist")
    first, second = trajectory[0], trajectory[3]
    location = {"district": "330102", "crossroad": 1, "lat": 30.25, "lon": 120.17}
    plate_hit = hit_record(hit_id=f"watch|w-img|{first['record_id']}", watch_id="w-img", kind="plate", match="exact",
                           record_id=first["record_id"], checkpoint_id=first["checkpoint_id"],
                           capture_time=first["capture_time"], score=1.0, location=location, detected_at=now_time(),
                           plate=PLATE)
    sightings = [{"record_id": r["record_id"], "checkpoint_id": r["checkpoint_id"], "capture_time": r["capture_time"],
                  "location": location} for r in (first, second)]
    cloned = hit_record(hit_id=cloned_hit_id(first["record_id"], second["record_id"]), watch_id=None,
                        kind="cloned_plate", record_id=second["record_id"], checkpoint_id=second["checkpoint_id"],
                        capture_time=second["capture_time"], score=3.2, location=location, detected_at=now_time(),
                        plate=PLATE, sightings=sightings, speed_kmh=380.0, distance_km=19.0)
    producer = Producer({"bootstrap.servers": site.bootstrap})
    for key, hit in ((b"w-img", plate_hit), (PLATE.encode(), cloned)):
        producer.produce(TOPICS.surveillance_hits, json.dumps(hit).encode(), key=key)
    assert producer.flush(15) == 0
    rows = page.locator("#live-hits tbody tr")
    expect(rows).to_have_count(2, timeout=20_000)  # the hub finds a new topic within 5 s
    pair = page.locator(f'#live-hits tr[data-hit="{cloned["hit_id"]}"] .image-pair figure.loaded')
    expect(pair).to_have_count(2)
    expect(page.locator(f'#live-hits tr[data-hit="{plate_hit["hit_id"]}"] figure.loaded')).to_have_count(1)
    until(page, "[...document.querySelectorAll('#live-hits img')].every(i => i.complete && i.naturalWidth === 240)")
    browsing.snap("capture-images-hits-zh")


def test_the_map_panel_shows_thumbnails_and_a_live_image_wall(site: VideoSite, browsing: Browsing,
                                                                trajectory: list[dict[str, Any]]) -> None:
    page = browsing.page
    checkpoint = trajectory[0]["checkpoint_id"]
    stored = sum(1 for r in trajectory[:-1] if r["checkpoint_id"] == checkpoint)
    browsing.login("viewer")
    browsing.goto(f"/map?checkpoint={quote(checkpoint)}")
    expect(page.locator("#cp-id")).to_have_text(checkpoint)
    expect(page.locator("#cp-captures figure.capture-image.loaded")).to_have_count(stored)
    expect(page.locator("#cp-wall-state")).to_have_class("badge live")
    time.sleep(2)  # the follower takes the partitions' ends a moment after the stream opens
    # Captures arrive at this checkpoint (and another): the wall shows this one's, newest first, as they come.
    live = [(kind, {**record, "record_id": f"{record['device_ip']}-live{i}", "capture_time": now_time()})
            for i, (kind, record) in enumerate(valid_records(60, seed=23, city=CITY))][:40]
    here = [(k, r) for k, r in live if r["checkpoint_id"] == checkpoint][:4]
    elsewhere = [(k, r) for k, r in live if r["checkpoint_id"] != checkpoint][:4]
    assert here, "the generator put no capture at this checkpoint"
    for kind, record in here + elsewhere:
        record["image_url"] = keys.url(keys.object_key(kind, record["checkpoint_id"], record["record_id"],
                                                       record["capture_time"]))
        _store_image(site, kind, record)
    load(site.hbase_port, here + elsewhere)  # what the ingest job writes a moment after the bus has them
    producer = Producer({"bootstrap.servers": site.bootstrap})
    for kind, record in here + elsewhere:
        producer.produce(TOPICS.of_kind(kind), json.dumps(record, ensure_ascii=False).encode(),
                         key=record["checkpoint_id"].encode())
    assert producer.flush(15) == 0
    cells = page.locator("#cp-wall .wall-cell")
    expect(cells).to_have_count(len(here), timeout=20_000)
    expect(page.locator("#cp-wall figure.loaded")).to_have_count(len(here))
    shown = cells.evaluate_all("cells => cells.map(c => c.dataset.recordId)")
    assert shown == [r["record_id"] for _, r in reversed(here)]  # newest first
    # Opening the checkpoint zoomed the map in: wait for Leaflet's zoom animation to end, or the picture is mid-scale.
    until(page, "!document.querySelector('#map').classList.contains('leaflet-zoom-anim')")
    until(page, "[...document.querySelectorAll('#map-panel img')].every(i => i.complete)")
    page.wait_for_timeout(2000)  # a loaded machine's raster threads lag: give every tile time to be painted
    _snap_viewport(browsing, "capture-images-map-wall-zh")
    entries = site.console.audit(lambda found: bool(found), action="captures.live", user="viewer")
    assert entries[0]["target"] == checkpoint
