"""The monitoring and alerts pages in a real browser (chromium via Playwright) against ``python -m web``,
over monitoring rows written by the monitor's own writers; alert changes arrive over the real bus and SSE.

Uses test_browser's site (its own broker, gateway and console; a map with a hostile district name) and
its watch: a console error, an uncaught exception or a request leaving 127.0.0.1 fails the test.
Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka import Producer
from playwright.sync_api import expect

from contracts.hbase import HBaseClient
from contracts.topics import Topics
from monitoring.alerts import FIRING, Alert
from monitoring.config import Rule
from monitoring.rules import summary_annotations
from monitoring.store import Store
from tests.web._monitoring_support import DAY, Monitored, write_monitoring
from tests.web.test_browser import Browsing, Site, browser, browsing, site, until  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]


@pytest.fixture(scope="module")
def monitored(site: Site) -> Monitored:  # noqa: F811 - the fixture imported above
    return write_monitoring(site.console.backing.gateway.port, site.console.map_path)


def fire(site: Site, alert: Alert) -> None:  # noqa: F811
    """What the monitor does when an alert fires: persist it, then publish it on the alerts topic."""
    store = Store(HBaseClient(port=site.console.backing.gateway.port))
    try:
        store.put_states("alert", [(alert.fp, {**alert.to_json(), "published": alert.status, "muting": None})])
    finally:
        store.close()
    producer = Producer({"bootstrap.servers": site.console.backing.broker.bootstrap})
    producer.produce(Topics().alerts, json.dumps(alert.event()).encode(), key=alert.fp.encode())
    assert producer.flush(15) == 0


def test_monitoring_page_draws_the_day_health_table_and_map(browsing: Browsing, monitored: Monitored) -> None:  # noqa: F811
    page = browsing.page
    browsing.login("viewer")
    browsing.goto(f"/monitoring?day={DAY.isoformat()}")
    expect(page.locator("#latency-chart canvas")).to_have_count(1)
    expect(page.locator("#quality-chart canvas")).to_have_count(1)
    # Unhealthy devices only by default: the silent one first, then the degraded one.
    rows = page.locator("#health-table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-device", monitored.silent)
    expect(rows.nth(1)).to_have_attribute("data-state", "degraded")
    expect(rows.nth(1)).to_contain_text("30 %")
    expect(rows.nth(1)).to_contain_text("记录 · 抓拍图像")  # why: its records and its capture images
    # The map marks them: a larger ringed marker per unhealthy checkpoint.
    expect(page.locator('#map path[data-state="degraded"]')).to_have_count(1)
    expect(page.locator('#map path[data-state="silent"]')).to_have_count(1)
    until(page, "!document.querySelector('#map').classList.contains('leaflet-zoom-anim')")
    browsing.snap("monitoring-zh")
    # A click on the degraded device's checkpoint shows its history: its facts and its own quality curve.
    page.locator('#map path[data-state="degraded"]').dispatch_event("click")
    expect(page.locator("#dev-ip")).to_have_text(monitored.degraded)
    expect(page.locator("#dev-facts")).to_contain_text("降级")
    expect(page.locator("#dev-facts")).to_contain_text("60 %")  # its share of bad capture images
    expect(page.locator("#quality-scope")).to_contain_text(monitored.degraded)
    assert f"device_ip={monitored.degraded}" in page.url
    page.select_option("#mon-stage", "capture_to_bus")
    expect(page.locator("#latency-stage")).to_have_text("采集 → 总线")
    browsing.snap("monitoring-device-zh")
    # All devices, and the city again.
    page.uncheck("#unhealthy-only")
    expect(rows).to_have_count(len(browsing.site.city_map["devices"]))
    page.click("#dev-clear")
    expect(page.locator("#device-panel")).to_be_hidden()
    expect(page.locator("#quality-scope")).to_have_text("全市")


def test_alerts_page_live_acknowledge_and_silence(browsing: Browsing, monitored: Monitored) -> None:  # noqa: F811
    page = browsing.page
    browsing.login("operator")
    browsing.goto("/alerts")
    expect(page.locator("#live-state")).to_have_class("badge live")
    first = page.locator(f'#alerts-table tr[data-fingerprint="{monitored.firing_fp}"]')
    expect(first).to_contain_text("DeviceDegraded")
    expect(first).to_contain_text(monitored.degraded)
    expect(page.locator("#silence-form")).to_have_count(0)  # silences are the admin's
    first.locator(".ack-button").click()
    expect(first).to_contain_text("operator")
    expect(first.locator(".ack-button")).to_have_count(0)
    # A new alert fires: the page hears of it over SSE, no reload.
    now = time.time()
    rule = Rule("RecognizerDegraded", "recognizer_degraded", 0.5, severity="critical")
    english = f"recognition server {monitored.recognizer}: 3 of its 4 devices degraded or silent"
    recognizer = Alert(rule.name, {"alertname": rule.name, "severity": "critical", "kind": rule.kind,
                                   "recognizer_ip": monitored.recognizer},
                       summary_annotations(rule, english, english, recognizer_ip=monitored.recognizer, bad=3, total=4),
                       FIRING, now, now, fired_at=now)
    fire(browsing.site, recognizer)
    live = page.locator(f'#alerts-table tr[data-fingerprint="{recognizer.fp}"]')
    expect(live).to_contain_text(monitored.recognizer, timeout=15_000)
    # The summary in the page's language, from the catalog key and parameters the monitor adds.
    expect(live).to_contain_text(f"识别服务器 {monitored.recognizer}：其 4 台设备中 3 台降级或无心跳")
    expect(live).not_to_contain_text("recognition server")
    expect(live.locator(".ack-button")).to_have_count(1)
    browsing.snap("alerts-operator-zh")


def test_viewer_cannot_acknowledge_admin_silences(browsing: Browsing, monitored: Monitored) -> None:  # noqa: F811
    page = browsing.page
    browsing.login("viewer")
    browsing.goto("/alerts")
    expect(page.locator("#alerts-table tbody tr").first).not_to_have_text("没有告警")
    expect(page.locator(".ack-button")).to_have_count(0)
    expect(page.locator("#silence-form")).to_have_count(0)
    page.click("#logout")
    page.wait_for_url("**/login")
    page.context.add_cookies([{"name": "lang", "value": "en", "url": browsing.site.url}])
    browsing.login("admin")
    browsing.goto("/alerts")
    row = page.locator(f'#alerts-table tr[data-fingerprint="{monitored.firing_fp}"]')
    row.locator(".silence-button").click()  # prefilled from the alert's labels
    expect(page.locator('#matcher-rows input[name="m_value"]').nth(1)).to_have_value(monitored.degraded)
    page.fill('#silence-form input[name="comment"]', "camera being replaced")
    page.click("#silence-form button[type=submit]")
    silence = page.locator("#silences-table tbody tr", has_text="camera being replaced")
    expect(silence).to_contain_text(f'device_ip="{monitored.degraded}"')
    expect(silence).to_contain_text("active")
    expect(silence).to_contain_text("admin")
    browsing.snap("alerts-admin-en")
    page.once("dialog", lambda dialog: dialog.accept())
    silence.locator("button.danger").click()
    expect(silence).to_contain_text("expired")
    browsing.goto(f"/monitoring?day={DAY.isoformat()}")
    expect(page.locator("#health-table tbody tr")).to_have_count(2)
    browsing.snap("monitoring-day-en")
