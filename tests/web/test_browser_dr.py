"""The DR page in a real browser (chromium via Playwright) against ``python -m web`` with a real mirror between
two brokers, the image copier's metrics (its own CopierMetrics, served as it serves them) and a real drill's report
on disk. test_browser's watch applies: a console error, an uncaught
exception or a request leaving 127.0.0.1 fails the test. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from playwright.sync_api import expect

from contracts import active_site
from contracts.config import load
from contracts.ports import free_port
from contracts.processes import spawn
from deploy.dr_site import mirror_properties
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing
from deploy.processes.gateway import start_gateway
from dr_mirror.images import CopierMetrics
from dr_mirror.videos import VideoMetrics
from tests.web.test_browser import Browsing, Site, browser, browsing, until  # noqa: F401 - fixtures
from tests.web.test_dr_api import dr_console, serve_images

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("console_browser"), pytest.mark.timeout(1200)]
TOPIC = "capture.vehicle"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A primary broker with captures and a committed group, a DR broker, the mirror, a drill report, a console."""
    root = tmp_path_factory.mktemp("browser-dr")
    broker, dr = BrokerProcess(root / "broker").start(timeout=120), BrokerProcess(root / "dr-bus").start(timeout=120)
    gateway = mirror = console = images_server = None
    try:
        gateway = start_gateway(root / "hbase", log_dir=root)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        for i in range(500):
            producer.produce(TOPIC, f'{{"n": {i}}}'.encode(), str(i).encode())
        assert producer.flush(30) == 0
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "surveillance-loader"})
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 200)], asynchronous=False)
        consumer.close()
        metrics_port = free_port()
        # A real drill's report for the page, run while the mirror and the console start (it has sites of its own).
        with (root / "drill.log").open("wb") as drill_log:
            drill = spawn([sys.executable, "-m", "dr_mirror.drill", "--scenario", "mirror-crash", "--no-ingest",
                           "--seconds", "3", "--after", "2", "--outage", "2", "--report",
                           str(root / "drills" / "20261124T000000Z-mirror-crash")],
                          subprocess.DEVNULL, stderr=drill_log)
        (root / "mm2.properties").write_text(mirror_properties(broker.bootstrap, dr.bootstrap, load(), intervals_s=1))
        with (root / "mirror.log").open("wb") as log:
            mirror = spawn([sys.executable, "-m", "dr_mirror", "--config", str(root / "mm2.properties"),
                            "--metrics-port", str(metrics_port)], log)
        images = CopierMetrics()  # the DR image copier behind: 1234 records, 5.5 s; 4321 copied, 3 missing
        images.copied.inc(4321)
        images.skipped.labels("missing_at_source").inc(3)
        images.lag_records.set(1234)
        images.lag_seconds.set(5.5)
        footage = VideoMetrics(images.registry)  # and the footage: 2 segments waiting, 75 s behind; 120 copied
        footage.copied.inc(120)
        footage.pending.set(2)
        footage.lag_seconds.set(75)
        images_server = serve_images(images)
        # one mirror here: the page reads the lag of the mirror copying from the active site, and while the English
        # test's record names the DR site that is the mirror back, whose port this one stands at too
        console = dr_console(Backing(broker, gateway, root), dr, metrics_port, root,
                             images_port=images_server.server_address[1], reverse_port=metrics_port)
        assert drill.wait(600) == 0, (root / "drill.log").read_text(errors="replace")[-3000:]
        yield Site(console, {}, [], [])
    finally:
        if images_server is not None:
            images_server.shutdown()
        if console is not None:
            console.stop()
        if mirror is not None:
            mirror.terminate()
            mirror.wait(20)
        if gateway is not None:
            gateway.kill()
        dr.stop()
        broker.stop()


def test_dr_page_shows_lag_checkpoints_and_a_drill_report(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    browsing.login("viewer")
    browsing.goto("/dr")
    expect(page.locator("nav a[data-page=dr]")).to_have_class("active")
    rows = page.locator("#lag-table tbody tr")
    expect(rows.filter(has_text=TOPIC)).to_have_count(1, timeout=60_000)  # auto-created: one partition
    expect(page.locator("#lag-total")).to_have_text("落后 0 条", timeout=60_000)
    expect(page.locator("#rpo-now")).to_have_text("此刻失去主站点不会丢失数据：容灾站点已有全部记录")  # the RPO now
    expect(page.locator("#active-site")).to_have_text("当前运行业务的站点：主站点")  # no switchover recorded yet
    expect(rows.filter(has_text=TOPIC).locator("td").nth(3)).to_have_text("0")  # its lag in seconds
    expect(page.locator("#checkpoints-table tbody tr").filter(has_text="surveillance-loader")).to_have_count(
        1, timeout=60_000)
    expect(page.locator("#checkpoints-table tbody tr").filter(has_text="surveillance-loader")).to_contain_text("200")
    expect(page.locator("#lag-chart canvas")).to_have_count(1)
    expect(page.locator("#images-lag")).to_have_text("落后 1,234 条，5.5 秒")
    expect(page.locator("#images-table tbody td")).to_have_text(["1,234", "5.5", "4,321", "3", "0", "2", "75", "120"])
    expect(page.locator("#drill-form")).to_have_count(0)  # starting a drill is for admins
    drills = page.locator("#drills-table tbody tr")
    expect(drills).to_have_count(1)
    expect(drills.first).to_contain_text("镜像崩溃")
    drills.first.locator("a").click()
    expect(page.locator("#drill-panel")).to_be_visible()
    expect(page.locator("#drill-md")).to_contain_text("# DR drill: mirror-crash")
    until(page, "document.querySelector('#drill-chart').naturalWidth > 0")
    browsing.snap("dr-zh")


def test_dr_page_for_an_admin_in_english(browsing: Browsing) -> None:  # noqa: F811
    page = browsing.page
    browsing.login("admin")
    root = browsing.site.console.data_dir.parent  # make up's data dir, as the console sees it
    since = dt.datetime.now(dt.UTC).replace(microsecond=0)
    last = {"planned": True, "from": "primary", "records_lost": 0, "drained_s": 3.0, "switch_s": 6.1}
    active_site.write(root, active_site.ActiveSite("dr", since, "switchover: planned maintenance", None, last))
    try:
        browsing.goto("/lang/en?next=/dr")
        expect(page.locator("h1")).to_have_text("Disaster recovery")
        badge = page.locator("#active-site")
        expect(badge).to_contain_text("Active site: the DR site, since ")
        expect(badge).to_have_attribute("title", "switchover: planned maintenance")
        expect(badge).to_have_class("badge down")
        expect(page.locator("#last-switchover")).to_have_text(
            "Last switchover: planned, from the primary; 0 records lost; drained in 3 s, switched in 6.1 s")
        browsing.snap("dr-active-site-en")
    finally:
        active_site.path(root).unlink()
    expect(page.locator("#images-panel h2")).to_contain_text("Capture images and footage at the DR site")
    expect(page.locator("#images-lag")).to_have_text("1,234 records, 5.5 s behind")
    page.locator("#images-panel").screenshot(path=str(browsing.shots / "dr-images-en.png"))
    browsing.snap("dr-images-page-en")
    # the switchover panel: a reason, a confirmation; this console's data directory is no make up, so the command
    # refuses (exit 2) and the page says so with what the command said
    page.locator("#switchover-reason").fill("planned maintenance")
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.locator("#switchover-start").click()
    expect(page.locator("#switchover-state")).to_contain_text("Switchover to the DR site refused, nothing changed "
                                                              "(exit code 2):", timeout=60_000)
    expect(page.locator("#switchover-said")).to_contain_text("solution.toml not found")
    assert asked and asked[0].startswith("Move the business to the DR site?"), asked
    page.locator("#switchover-panel").screenshot(path=str(browsing.shots / "dr-switchover-en.png"))
    expect(page.locator("#drill-form")).to_be_visible()
    expect(page.locator("#drill-scenario option")).to_have_count(3)
    expect(page.locator("#drills-table tbody tr")).to_have_count(1)
    page.locator("#drills-table tbody tr a").first.click()
    until(page, "document.querySelector('#drill-chart').naturalWidth > 0")
    browsing.snap("dr-en")
