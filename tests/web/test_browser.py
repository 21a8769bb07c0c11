"""The console's pages in a real browser: Debian's chromium driven by Playwright, against ``python -m web``
with its own broker and HBase gateway, capture rows written by the ingest writer and a deployment map.

Every page a test opens is watched: a console error, an uncaught exception or a request to anything but
127.0.0.1 fails the test (the console runs on an isolated network: no CDN, no tile server). Each test
saves screenshots under its tmp_path and under ``test-artifacts/screenshots/`` for a reviewer.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

from contracts.processes import ROOT
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, ConsoleProcess, password_of, start_console
from deploy.processes.gateway import start_gateway
from ingest.city import build_city
from testkit.web_data import T0, as_plate, load, valid_records
from tests.web.conftest import ROLES
from tests.web.test_overview import stats

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser")]

CHROMIUM = "/usr/bin/chromium"
# Without the background-networking flags chromium tries to reach Google's hosts at start.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
PLATE = "浙A7B2C9"
TRAJECTORY_LENGTH = 30
HOSTILE_NAME = '<img src=x onerror="window.__xss=1">Shangcheng<script>window.__xss=2</script>'


@dataclass
class Site:
    console: ConsoleProcess
    city_map: dict[str, Any]
    trajectory: list[dict[str, Any]]
    """The plate's capture records, in time order."""
    checkpoint_records: list[dict[str, Any]]
    """Every record of the busiest checkpoint."""

    @property
    def url(self) -> str:
        return self.console.url


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A console on its own broker and gateway (its map has a district name full of markup), users of each role."""
    root = tmp_path_factory.mktemp("browser")
    broker = BrokerProcess(root / "broker").start()
    gateway = None
    console = None
    try:
        gateway = start_gateway(root / "hbase", log_dir=root)
        # The overview's topics exist before the console starts, as in a deployment (the ingest job makes them).
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        topics = Topics()
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in (topics.ingest_stats, topics.alerts)]).values():
            try:
                future.result(30)
            except TimeoutError:  # seen once in CI under load: keep what the broker said for the next time
                raise AssertionError(f"no topics made in 30 s; the broker's log:\n{broker.logs()[-6000:]}") from None
        city = build_city(7, 24)
        city_map = {"seed": 7, **city.deployment_map().to_json()}
        city_map["districts"][0]["name"] = HOSTILE_NAME
        (root / "deployment_map.json").write_text(json.dumps(city_map, ensure_ascii=False))
        pairs = list(valid_records(400, city=city))
        plated = as_plate(pairs[:TRAJECTORY_LENGTH * 2], PLATE)[:TRAJECTORY_LENGTH]
        others = [(kind, record) for kind, record in pairs
                  if record["record_id"] not in {r["record_id"] for _k, r in plated}]
        loaded = plated + others
        load(gateway.port, loaded)
        counts: dict[str, int] = {}
        for _kind, record in loaded:
            counts[record["checkpoint_id"]] = counts.get(record["checkpoint_id"], 0) + 1
        busiest = max(counts, key=lambda c: counts[c])
        # Lag sampled every 2 s (not 30) so the lag chart has points within the test.
        console = start_console(Backing(broker, gateway, root), lag_sample_interval_s=2)
        for role in ROLES:
            result = console.cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
            assert result.returncode == 0, result.stderr
        yield Site(console, city_map,
                   sorted((r for _k, r in plated), key=lambda r: r["capture_time"]),
                   [r for _k, r in loaded if r["checkpoint_id"] == busiest])
    finally:
        if console is not None:
            console.stop()
        if gateway is not None:
            gateway.kill()
        broker.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@dataclass
class Watch:
    """What a page did that it should not: console errors, uncaught exceptions, requests off this machine."""

    errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    """Substrings of console errors a test provokes on purpose (a 401 from a wrong password)."""

    def on_console(self, message: ConsoleMessage) -> None:
        if message.type == "error" and not any(e in message.text for e in self.expected):
            self.errors.append(f"{message.text} @ {message.location.get('url')}")

    def on_request(self, request: Request) -> None:
        if not request.url.startswith(("http://127.0.0.1:", "data:", "blob:")):
            self.outside.append(request.url)


def until(page: Page, expression: str, timeout: float = 30) -> None:
    """Poll a page expression until it is truthy. Playwright's wait_for_function polls with eval(), which the
    console's content-security policy (no 'unsafe-eval') refuses; evaluate() goes through the debugger."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"not true within {timeout} s: {expression}"
        time.sleep(0.2)


@dataclass
class Browsing:
    page: Page
    watch: Watch
    site: Site
    shots: Path

    def goto(self, path: str) -> None:
        self.page.goto(self.site.url + path)

    def login(self, role: str, password: str | None = None) -> None:
        self.goto("/login")
        self.page.fill("#username", role)
        self.page.fill("#password", password or password_of(role))
        self.page.click("#login-form button[type=submit]")
        self.page.wait_for_url(self.site.url + "/")

    def snap(self, name: str) -> None:
        """A full-page screenshot under the test's tmp_path and test-artifacts/screenshots/."""
        self.page.wait_for_load_state("networkidle")
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, ARTIFACTS / path.name)


def browsing_session(browser: Browser, site: Any, tmp_path: Path, height: int = 900, timeout_ms: int = 20_000,
                     **context: Any) -> Iterator[Browsing]:
    """A Chinese-locale page in Shanghai time on ``site`` (anything with a ``url``) that records what it requests
    and logs; afterwards nothing may have left 127.0.0.1, nor an error reached the browser's console. The body of
    every browser test module's ``browsing`` fixture (``yield from``)."""
    browser_context = browser.new_context(viewport={"width": 1440, "height": height}, locale="zh-CN",
                                          timezone_id="Asia/Shanghai", **context)
    page = browser_context.new_page()
    watch = Watch()
    page.on("console", watch.on_console)
    page.on("pageerror", lambda exc: watch.errors.append(f"uncaught: {exc}"))
    page.on("request", watch.on_request)
    page.set_default_timeout(timeout_ms)
    yield Browsing(page, watch, site, tmp_path)
    browser_context.close()
    assert watch.outside == [], "requests left 127.0.0.1"
    assert watch.errors == [], "errors in the browser console"


@pytest.fixture
def browsing(browser: Browser, site: Site, tmp_path: Path) -> Iterator[Browsing]:
    yield from browsing_session(browser, site, tmp_path)


def produce(site: Site, topic: str, value: dict[str, Any], key: bytes) -> None:
    producer = Producer({"bootstrap.servers": site.console.backing.broker.bootstrap})
    producer.produce(topic, json.dumps(value).encode(), key=key)
    assert producer.flush(15) == 0


def test_login_then_overview_shows_live_ingest_figures(browsing: Browsing) -> None:
    page = browsing.page
    browsing.goto("/")
    page.wait_for_url("**/login?next=%2F")
    expect(page.locator("h1")).to_have_text("登录运维控制台")
    browsing.snap("login-zh")
    browsing.login("operator")
    expect(page.locator("#live-state")).to_have_class("badge live")
    expect(page.locator("#health-table tbody tr")).to_have_count(3)
    # A batch record from the ingest job's topic: the page hears of it over SSE and re-reads the overview.
    # (815 and 2,351 ms are the top of their HdrHistogram buckets, so they come back exactly.)
    produce(browsing.site, "ingest.stats", stats("ingest-browser-test", 1, 6170, 6144, {815: 3085, 2351: 3085},
                                                 invalid=7, unrecognized=19, window_s=5.0),
            key=b"ingest-browser-test")
    expect(page.locator("#fig-latency_p99")).to_have_text("2,351", timeout=15_000)
    expect(page.locator("#fig-latency_p50")).to_have_text("815")
    expect(page.locator("#fig-rejected_invalid")).not_to_have_text("—")
    expect(page.locator("#no-stats")).to_be_hidden()
    expect(page.locator("#throughput-chart canvas")).to_have_count(1)
    browsing.snap("overview-zh")


def test_login_form_reports_wrong_password_and_throttling(browsing: Browsing) -> None:
    page = browsing.page
    browsing.watch.expected += ["status of 401", "status of 429"]
    browsing.goto("/login")
    page.fill("#username", "mallory")
    messages = []
    for _ in range(6):
        page.fill("#password", "not-the-password")
        page.click("#login-form button[type=submit]")
        expect(page.locator("#login-error")).to_be_visible()
        expect(page.locator("#login-form button[type=submit]")).to_be_enabled()
        messages.append(page.locator("#login-error").inner_text())
    assert messages[0] == "用户名或密码错误。"
    assert messages[-1].startswith("登录失败次数过多"), messages
    browsing.snap("login-throttled-zh")


def test_plate_search_lists_the_trajectory_in_time_order_and_draws_it(browsing: Browsing) -> None:
    page = browsing.page
    browsing.login("viewer")
    browsing.goto("/captures")
    page.fill("#plate", PLATE)
    page.fill("#reason", "case 2026-0042")  # a search by plate is audited with its reason
    page.click("#plate-form button[type=submit]")
    rows = page.locator("#results tbody tr")
    expect(rows).to_have_count(TRAJECTORY_LENGTH)
    times = [cells[1] for cells in table_texts(page, "#results")]
    expected = [r["capture_time"] for r in browsing.site.trajectory]
    assert times == [local_time(t) for t in expected]
    assert {cells[3] for cells in table_texts(page, "#results")} == {PLATE}
    # Drawn: one path through the stops, numbered labels at each distinct checkpoint.
    expect(page.locator("path.trajectory-line")).to_have_count(1)
    stops = {(r["checkpoint_id"]) for r in browsing.site.trajectory}
    expect(page.locator(".trajectory-stop")).to_have_count(len(stops))
    first = page.locator(".trajectory-stop span").all_inner_texts()
    assert any(text.split(",")[0] == "1" for text in first)
    # One record's detail: every field plus the ingest time and latency.
    rows.nth(0).click()
    expect(page.locator("#detail")).to_be_visible()
    expect(page.locator("#detail-id")).to_have_text(browsing.site.trajectory[0]["record_id"])
    expect(page.locator("#detail-fields")).to_contain_text("1500 毫秒")
    browsing.snap("captures-plate-zh")


def test_checkpoint_search_pages_through_a_time_range(browsing: Browsing) -> None:
    page = browsing.page
    records = browsing.site.checkpoint_records
    checkpoint = records[0]["checkpoint_id"]
    browsing.login("viewer")
    start = T0.strftime("%Y-%m-%dT%H:%M:%S")
    end = T0.replace(hour=T0.hour + 2).strftime("%Y-%m-%dT%H:%M:%S")
    per_page = max(2, len(records) // 2)
    query = urlencode({"checkpoint": checkpoint, "start": f"{start}+08:00", "end": f"{end}+08:00", "limit": per_page})
    browsing.goto(f"/captures?{query}")
    expect(page.locator("#results tbody tr")).to_have_count(per_page)
    expect(page.locator("#next-page")).to_be_enabled()
    seen = [cells[1] for cells in table_texts(page, "#results")]
    page.click("#next-page")
    expect(page.locator("#page-no")).to_have_text("第 2 页")
    page.wait_for_load_state("networkidle")
    seen += [cells[1] for cells in table_texts(page, "#results")]
    if len(records) > 2 * per_page:
        page.click("#next-page")
        page.wait_for_load_state("networkidle")
        seen += [cells[1] for cells in table_texts(page, "#results")]
    assert sorted(seen) == sorted(local_time(r["capture_time"]) for r in records)
    browsing.snap("captures-checkpoint-zh")


def test_map_draws_the_deployment_and_a_checkpoint_panel_escapes_names(browsing: Browsing) -> None:
    page = browsing.page
    city_map = browsing.site.city_map
    browsing.login("viewer")
    browsing.goto("/map")
    expect(page.locator("#map path.leaflet-interactive")).to_have_count(len(city_map["checkpoints"]))
    expect(page.locator(".district-label")).to_have_count(len(city_map["districts"]))
    # The hostile district name is shown as text, and none of its markup ran.
    expect(page.locator("#district-list")).to_contain_text(HOSTILE_NAME)
    expect(page.locator(".district-label", has_text="<script>")).to_have_count(1)
    assert page.evaluate("window.__xss") is None
    assert page.locator("#map img[src=x], #district-list img").count() == 0
    browsing.snap("map-zh")
    # Click a checkpoint: its devices and latest captures.
    target = city_map["checkpoints"][0]
    page.locator(f'path[data-checkpoint="{target["checkpoint_id"]}"]').dispatch_event("click")
    expect(page.locator("#cp-id")).to_have_text(target["checkpoint_id"])
    devices = [d for d in city_map["devices"] if d["checkpoint_id"] == target["checkpoint_id"]]
    expect(page.locator("#cp-devices tbody tr")).to_have_count(len(devices))
    expect(page.locator("#cp-captures tbody tr").first).not_to_have_text("加载中…")
    # The click zooms the map in: wait for Leaflet's zoom animation to end, or the picture is mid-scale.
    until(page, "!document.querySelector('#map').classList.contains('leaflet-zoom-anim')")
    page.wait_for_timeout(300)
    browsing.snap("map-checkpoint-zh")


def test_language_switch_persists_across_reloads(browsing: Browsing) -> None:
    page = browsing.page
    browsing.login("viewer")
    expect(page.locator('.nav a[data-page="overview"]')).to_have_text("总览")
    page.click('.lang-switch a[data-lang="en"]')
    expect(page.locator('.nav a[data-page="overview"]')).to_have_text("Overview")
    page.reload()
    expect(page.locator('.nav a[data-page="overview"]')).to_have_text("Overview")
    expect(page.locator("html")).to_have_attribute("lang", "en")
    browsing.goto("/map")
    expect(page.locator("h1")).to_have_text("Map")
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    assert cookies["lang"] == "en"
    browsing.snap("overview-en")
    page.click('.lang-switch a[data-lang="zh"]')
    expect(page.locator("h1")).to_have_text("部署地图")


def test_viewer_sees_no_admin_actions_and_the_api_refuses_them(browsing: Browsing) -> None:
    page = browsing.page
    browsing.watch.expected += ["status of 403"]
    browsing.login("viewer")
    nav = page.locator(".nav a").all_inner_texts()
    assert nav == ["总览", "部署地图", "抓拍查询", "以脸搜脸", "数据总线", "监控", "告警", "布控", "实时统计", "视频",
                   "容灾"]
    expect(page.locator("#current-role")).to_have_text("只读用户")
    browsing.goto("/bus")
    expect(page.locator("#topics tbody tr").first).to_be_visible()
    assert page.locator("#create-topic, #reset-offsets, .delete-topic, .admin-only").count() == 0
    browsing.snap("bus-viewer-zh")
    for path in ("/users", "/audit"):
        response = page.goto(browsing.site.url + path)
        assert response is not None and response.status == 403
        expect(page.locator("h1")).to_contain_text("403")
    browsing.snap("forbidden-zh")
    # Forged from the viewer's own session: the API refuses every admin command.
    statuses = page.evaluate("""async () => {
        const h = {"X-Requested-With": "console", "Content-Type": "application/json"};
        const calls = [
          fetch("/api/v1/bus/topics", {method: "POST", headers: h, body: JSON.stringify({name: "x", partitions: 1})}),
          fetch("/api/v1/bus/topics/ingest.stats", {method: "DELETE", headers: h}),
          fetch("/api/v1/bus/groups/g/reset-offsets",
                {method: "POST", headers: h, body: JSON.stringify({to: "earliest"})}),
          fetch("/api/v1/users", {method: "POST", headers: h,
                                   body: JSON.stringify({username: "eve", password: "eve-password-1", role: "admin"})}),
          fetch("/api/v1/users/admin", {method: "DELETE", headers: h}),
          fetch("/api/v1/audit"),
        ];
        return (await Promise.all(calls)).map((r) => r.status);
    }""")
    assert statuses == [403] * 6


def test_admin_pages_render_and_admin_actions_work(browsing: Browsing) -> None:
    page = browsing.page
    browsing.login("admin")
    nav = page.locator(".nav a").all_inner_texts()
    assert nav == ["总览", "部署地图", "抓拍查询", "以脸搜脸", "数据总线", "监控", "告警", "布控", "实时统计", "视频",
                   "容灾", "证据", "审计日志", "用户管理"]
    browsing.goto("/bus")
    page.fill('#create-topic input[name="name"]', "browser.created")
    page.fill('#create-topic input[name="partitions"]', "3")
    page.click("#create-topic button[type=submit]")
    row = page.locator('#topics tbody tr[data-topic="browser.created"]')
    expect(row).to_be_visible()
    produce(browsing.site, "browser.created", {"plate": PLATE, "nested": {"a": [1, 2]}}, key=b"k1")
    row.click()
    expect(page.locator("#topic-partitions tbody tr")).to_have_count(3)
    page.click("#messages-form button[type=submit]")
    expect(page.locator("#messages pre.json")).to_contain_text('"nested": {\n    "a": [')
    # A consumer group that committed offset 0 everywhere and left: lag per partition, its history, a reset.
    commit_offsets(browsing.site, "browser-group", "browser.created", {0: 0, 1: 0, 2: 0})
    browsing.goto("/bus")
    page.locator('#groups tbody tr[data-group="browser-group"]').click()
    lag = page.locator("#group-lag tbody tr")
    expect(lag).to_have_count(3)
    assert [cells[4] for cells in table_texts(page, "#group-lag")] == ["0", "1", "0"]
    deadline = time.monotonic() + 30
    while page.locator("#lag-chart canvas").count() == 0 and time.monotonic() < deadline:
        page.wait_for_timeout(2000)
        page.locator('#groups tbody tr[data-group="browser-group"]').click()
    expect(page.locator("#lag-chart canvas")).to_have_count(1)
    browsing.snap("bus-admin-zh")
    page.select_option("#reset-to", "latest")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#reset-offsets button[type=submit]")
    expect(page.locator("#group-lag tbody tr").nth(1).locator("td").nth(4)).to_have_text("0")
    after = table_texts(page, "#group-lag")
    assert [(cells[2], cells[4]) for cells in after] == [(cells[3], "0") for cells in after]
    browsing.goto("/users")
    expect(page.locator('#users tbody tr[data-username="viewer"]')).to_be_visible()
    browsing.snap("users-zh")
    browsing.goto("/audit")
    expect(page.locator("#audit tbody")).to_contain_text("browser.created")
    browsing.snap("audit-zh")


def test_every_page_renders_without_errors_in_english(browsing: Browsing) -> None:
    page = browsing.page
    page.context.add_cookies([{"name": "lang", "value": "en", "url": browsing.site.url}])
    browsing.login("admin")
    for path, name in (("/", "overview"), ("/map", "map"), ("/captures", "captures"), ("/bus", "bus"),
                       ("/monitoring", "monitoring"), ("/alerts", "alerts"), ("/audit", "audit"), ("/users", "users")):
        browsing.goto(path)
        expect(page.locator(f'.nav a[data-page="{name}"]')).to_have_attribute("aria-current", "page")
        browsing.snap(f"{name}-en")
    page.click("#logout")
    page.wait_for_url("**/login")
    browsing.goto("/map")
    page.wait_for_url("**/login?next=%2Fmap")


def commit_offsets(site: Site, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit offsets for ``group`` the way a consumer does, then leave: an inactive group with lag."""
    consumer = Consumer({"bootstrap.servers": site.console.backing.broker.bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def table_texts(page: Page, selector: str) -> list[list[str]]:
    return page.eval_on_selector_all(f"{selector} tbody tr",
                                     "rows => rows.map(r => [...r.cells].map(c => c.textContent))")


def local_time(iso: str) -> str:
    """A capture time as the pages show it: city time, ``YYYY-MM-DD HH:MM:SS``."""
    from datetime import datetime

    from contracts.records import CITY_TZ

    return datetime.fromisoformat(iso).astimezone(CITY_TZ).strftime("%Y-%m-%d %H:%M:%S")
