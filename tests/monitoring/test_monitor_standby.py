"""The DR site's monitor stands by: it takes no lock and notifies nothing until the active-site record names its
site, then evaluates; when the record names the other site again it stops (state flushed, lock left) and waits, and
promoted once more it resumes from that state without sending anything twice. Real broker, gateway, process,
webhook."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from contracts import active_site
from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.processes.monitor import MonitorProcess
from testkit.city import ScriptedCity, WebhookReceiver, city_map
from tests.monitoring._support import active, firing, tear_down, wait_for, webhook_monitor_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

DEVICES = {"10.1.0.1": "r1", "10.1.0.2": "r1", "10.1.0.3": "r1"}
STANDING_BY = "standing by: site dr is not the active one"


def test_a_standing_by_monitor_notifies_nothing_until_promoted_and_stands_down_again(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "bus").start()
    gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
    hook = WebhookReceiver()
    city = ScriptedCity(broker.bootstrap, DEVICES)
    data = tmp_path / "make-up-data"

    def switch(site: str) -> None:
        active_site.write(data, active_site.ActiveSite(site, dt.datetime.now(dt.UTC), "test"))

    switch("primary")
    city_map({"r1": list(DEVICES)}).save(tmp_path / "map.json")
    port = free_port()
    config = tmp_path / "dr.toml"
    config.write_text(webhook_monitor_config(broker.bootstrap, gateway.port, tmp_path / "map.json", hook.url, port)
                      + f'\n[site]\nname = "dr"\nrecord = "{active_site.path(data)}"\n')
    monitor = MonitorProcess(config, tmp_path / "monitor.log")
    try:
        city.modes["10.1.0.1"] = "silent"
        city.start()
        monitor.start()
        wait_for(lambda: STANDING_BY in monitor.log(), 60, "the monitor standing by", monitor.log)
        time.sleep(8)  # the silent device is silent past silent_after_s: an active monitor would have notified
        assert hook.received == [] and "monitor running" not in monitor.log(), monitor.log()[-3000:]
        assert active(port) == 0

        switch("dr")
        wait_for(lambda: active(port) == 1, 60, "the monitor taking the lock", monitor.log)
        wait_for(lambda: firing(hook, "10.1.0.1"), 60, "the silent device's alert", monitor.log)

        switch("primary")
        wait_for(lambda: monitor.log().count(STANDING_BY) == 2, 60, "the monitor standing by again", monitor.log)
        assert active(port) == 0 and "this monitor stops evaluating and waits" in monitor.log()
        sent = len(hook.received)
        city.modes["10.1.0.2"] = "silent"
        time.sleep(8)
        assert hook.received[sent:] == [], hook.received[sent:]

        # Promoted again, it resumes from the state it flushed: the first alert is not sent twice, the new fault is.
        switch("dr")
        wait_for(lambda: firing(hook, "10.1.0.2"), 60, "the second silent device's alert", monitor.log)
        time.sleep(3)
        assert len(firing(hook, "10.1.0.1")) == 1, hook.received
        assert monitor.stop() == 0, monitor.log()[-3000:]
    finally:
        monitor.kill()
        tear_down(city, hook, gateway, broker)
