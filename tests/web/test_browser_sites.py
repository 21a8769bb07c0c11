"""The console following the active site, in a real browser (chromium via Playwright): two consoles, the primary's and
the DR site's (`web/site.py`), on one broker and HBase gateway (so the same users and sessions; the accounts' journey
between two sites' HBase is tests/web/test_console_sites.py's and tests/dr/test_dr_site.py's), and the active-site
record a switchover writes.

An operator logged in at the primary console who opens a page of the standing-by DR console is sent back to the
primary's; the DR page stays, read-only, with its banner. When the record names the DR site, the page open at the
primary console shows the banner and moves to the DR console on its own, where the same session goes on.
Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from contracts import active_site
from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, ConsoleProcess, password_of, start_console
from deploy.processes.gateway import start_gateway
from ingest.city import build_city
from tests.web.conftest import MAP_CHECKPOINTS, MAP_SEED, ROLES
from tests.web.test_browser import Browsing, browser, browsing_session  # noqa: F401 - fixtures

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser"), pytest.mark.timeout(600)]


@dataclass
class Sites:
    primary: ConsoleProcess
    dr: ConsoleProcess
    root: Path

    @property
    def url(self) -> str:
        return self.primary.url

    def switch(self, active: str) -> None:
        record = active_site.ActiveSite(active, dt.datetime.now(dt.UTC), "browser test")
        active_site.write(self.root, record)


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sites]:
    root = tmp_path_factory.mktemp("browser-sites")
    build_city(MAP_SEED, MAP_CHECKPOINTS).save(root / "deployment_map.json")
    broker = BrokerProcess(root / "broker").start()
    consoles: list[ConsoleProcess] = []
    gateway = None
    try:
        gateway = start_gateway(root / "hbase", log_dir=root)
        backing = Backing(broker, gateway, root)
        ports = {"primary": free_port(), "dr": free_port()}
        urls = {name: f"http://127.0.0.1:{port}" for name, port in ports.items()}
        active_site.write(root, active_site.ActiveSite("primary", dt.datetime.now(dt.UTC), "browser test"))
        for name in ("primary", "dr"):
            consoles.append(start_console(backing, port=ports[name], url=urls[name], site={
                "name": name, "record": str(active_site.path(root)), "consoles": urls}))
        for role in ROLES:
            result = consoles[0].cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
            assert result.returncode == 0, result.stderr
        yield Sites(consoles[0], consoles[1], root)
    finally:
        for console in consoles:
            console.stop()
        if gateway is not None:
            gateway.kill()
        broker.stop()


@pytest.fixture
def browsing(browser: Browser, sites: Sites, tmp_path: Path) -> Iterator[Browsing]:  # noqa: F811
    yield from browsing_session(browser, sites, tmp_path)


def test_operators_follow_the_active_site_and_a_standing_by_console_says_so(browsing: Browsing, sites: Sites) -> None:
    page = browsing.page
    browsing.watch.expected += ["status of 503"]  # the DR page's mirror, copier and drills: none run here
    browsing.login("operator")
    expect(page.locator("#site-banner")).to_have_count(0)  # the primary acts: no banner

    page.goto(sites.dr.url + "/captures")  # a page of the standing-by DR console: sent to the primary's
    page.wait_for_url(sites.primary.url + "/captures")
    page.goto(sites.dr.url + "/dr")  # its DR page stays (an admin runs switchovers from either site), read-only
    banner = page.locator("#site-banner")
    expect(banner).to_contain_text("只读")
    expect(banner).to_contain_text("灾备站点的控制台")
    expect(page.locator("#site-go")).to_have_attribute("href", sites.primary.url + "/dr")
    browsing.snap("site-dr-standing-by")

    page.goto(sites.primary.url + "/")
    expect(page.locator("#current-user")).to_have_text("operator")
    sites.switch("dr")  # the switchover's last step: the record names the DR site
    expect(banner).to_contain_text("业务运行在灾备站点", timeout=15_000)
    browsing.snap("site-primary-standing-by")
    page.wait_for_url(sites.dr.url + "/", timeout=15_000)  # moved on its own, the same session
    expect(page.locator("#current-user")).to_have_text("operator")
    expect(page.locator("#site-banner")).to_have_count(0)
    browsing.snap("site-dr-acting")
    sites.switch("primary")
