"""The monitor posting to a real Alertmanager (Debian's ``prometheus-alertmanager`` on free ports, no
clustering) that notifies a real webhook: a silent device becomes an Alertmanager alert with the
monitor's labels, kept alive by re-sends and resolved when the device is back; a silence made with
``amtool`` keeps the webhook quiet; an Alertmanager that is down does not hold up the monitor and
gets the still-firing alerts when it is back; the console's alerts page reads Alertmanager.

Real processes throughout: broker, HBase gateway, monitor, Alertmanager, amtool, console. A missing
Alertmanager binary fails (``make system-deps``), it never skips.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.console import Backing, password_of, start_console
from deploy.processes.gateway import start_gateway
from deploy.processes.monitor import MonitorProcess
from testkit.city import ScriptedCity, WebhookReceiver, city_map
from tests.monitoring._alertmanager import ALERTMANAGER, AMTOOL, AlertmanagerProcess, require
from tests.monitoring._support import wait_for, webhook_monitor_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

DEVICES = {f"10.1.0.{n}": "r1" for n in range(1, 7)}
SILENT, BLURRED, LATER = "10.1.0.1", "10.1.0.2", "10.1.0.3"
RESEND_S = 2.0


@pytest.fixture(scope="module")
def alertmanager_binaries() -> tuple[str, str]:
    """The Debian binaries; missing: the test fails saying to run ``make system-deps`` (never a skip)."""
    return require(ALERTMANAGER), require(AMTOOL)


@pytest.fixture
def stack(tmp_path: Path, alertmanager_binaries: tuple[str, str]) -> Iterator[dict[str, Any]]:
    amhook, direct = WebhookReceiver(), WebhookReceiver()
    am = AlertmanagerProcess(tmp_path / "am", amhook.url).start()
    broker = BrokerProcess(tmp_path / "bus").start()
    gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
    map_path = tmp_path / "deployment_map.json"
    city_map({"r1": list(DEVICES)}).save(map_path)
    metrics_port = free_port()
    config = tmp_path / "solution.toml"
    # the built-in engine keeps a direct webhook ("hook"); the Alertmanager receiver "ops" gets every alert
    config.write_text(webhook_monitor_config(broker.bootstrap, gateway.port, map_path, direct.url, metrics_port,
                                             keep_firing_for_s=1)
                      + f'[[monitoring.receivers]]\nname = "ops"\ntype = "alertmanager"\nurl = "{am.url}"\n'
                        f"timeout_s = 1\nresend_s = {RESEND_S}\n")
    monitor = MonitorProcess(config, tmp_path / "monitor.log")
    city = ScriptedCity(broker.bootstrap, DEVICES)
    try:
        yield {"am": am, "amhook": amhook, "direct": direct, "monitor": monitor, "city": city,
               "metrics_port": metrics_port, "backing": Backing(broker, gateway, tmp_path)}
    finally:
        monitor.kill()
        if hasattr(city, "_thread"):
            city.stop()
        am.stop()
        amhook.close()
        direct.close()
        gateway.kill()
        broker.stop()


def held(am: AlertmanagerProcess, alertname: str) -> dict[str, dict[str, Any]]:
    """Alertmanager's open alerts of ``alertname`` by device (nothing while it is down)."""
    try:
        return {a["labels"]["device_ip"]: a for a in am.alerts() if a["labels"]["alertname"] == alertname}
    except OSError:
        return {}


def notified(hook: WebhookReceiver, alertname: str, status: str = "firing") -> set[str]:
    return {a["labels"]["device_ip"] for a in hook.alerts(status) if a["labels"]["alertname"] == alertname}


def metric(port: int, name: str, receiver: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{receiver="{receiver}"}}'):
            return float(line.split()[-1])
    return 0.0


def seconds(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def test_alert_in_alertmanager_resolves_and_amtool_silence_keeps_webhook_quiet(stack: dict[str, Any]) -> None:
    am, amhook, city, monitor = stack["am"], stack["amhook"], stack["city"], stack["monitor"]
    log = monitor.log
    city.modes[SILENT] = "silent"
    city.start()
    monitor.start()

    # 1. a silent device: an Alertmanager alert with the monitor's labels, notified by Alertmanager
    alert = wait_for(lambda: held(am, "DeviceSilent").get(SILENT), 60, "DeviceSilent in Alertmanager", log)
    assert alert["labels"] == {"alertname": "DeviceSilent", "severity": "warning", "kind": "device_silent",
                               "device_ip": SILENT, "recognizer_ip": "r1", "district": "110100",
                               "checkpoint_id": f"110100#{0}#0#0", "crossroad": "0"}
    assert alert["status"] == {"state": "active", "silencedBy": [], "inhibitedBy": []}
    assert alert["receivers"] == [{"name": "hook"}] and "summary" in alert["annotations"]
    ends = seconds(alert["endsAt"])
    assert time.time() < ends <= time.time() + 4 * RESEND_S + 2  # now + 4 x resend delay
    wait_for(lambda: SILENT in notified(amhook, "DeviceSilent"), 20, "Alertmanager's webhook notification", log)

    # 2. re-sent every resend_s: Alertmanager's endsAt moves ahead, startsAt stays
    time.sleep(RESEND_S * 2)
    again = held(am, "DeviceSilent")[SILENT]
    assert seconds(again["endsAt"]) > ends and again["startsAt"] == alert["startsAt"]

    # 3. the console's alerts page reads Alertmanager, with the authorization it always had
    console = start_console(stack["backing"], alertmanager_url=stack["am"].url)
    try:
        for role in ("viewer", "operator"):
            made = console.cli("users", "add", role, "--role", role, stdin=password_of(role) + "\n")
            assert made.returncode == 0, made.stderr
        assert httpx.get(f"{console.url}/api/v1/alerts", timeout=10).status_code == 401
        shown = {a["fingerprint"]: a for a in console.client("viewer").get("/api/v1/alerts").json()}
        assert alert["fingerprint"] in shown, shown
        row = shown[alert["fingerprint"]]
        assert row["labels"] == alert["labels"] and row["startsAt"] == alert["startsAt"]
        assert row["status"]["state"] == "active" and row["ack"] is None
        assert console.client("viewer").post(f"/api/v1/alerts/{alert['fingerprint']}/ack").status_code == 403
        taken = console.client("operator").post(f"/api/v1/alerts/{alert['fingerprint']}/ack")
        assert taken.status_code == 200 and taken.json()["ack"]["by"] == "operator", taken.text
    finally:
        console.stop()

    # 4. an amtool silence on DeviceDegraded: Alertmanager holds the alert suppressed, its webhook hears nothing
    silence_id = am.amtool("silence", "add", "alertname=DeviceDegraded", "--author=test", "--comment=known blur",
                           "--duration=1h").strip()
    assert len(silence_id) == 36, silence_id
    city.modes[BLURRED] = "blurred"
    degraded = wait_for(lambda: held(am, "DeviceDegraded").get(BLURRED), 60, "DeviceDegraded in Alertmanager", log)
    assert degraded["status"]["state"] == "suppressed" and degraded["status"]["silencedBy"] == [silence_id]
    time.sleep(4)  # group_wait 0.5 s, group_interval 1 s: a notification would have gone by now
    assert notified(amhook, "DeviceDegraded") == set()
    assert BLURRED in notified(stack["direct"], "DeviceDegraded")  # the built-in engine's own receiver did hear it

    # 5. the device is back: resolved in Alertmanager (no longer held), and its webhook told so once
    city.modes[SILENT] = "ok"
    wait_for(lambda: SILENT not in held(am, "DeviceSilent"), 60, "the resolution in Alertmanager", log)
    wait_for(lambda: SILENT in notified(amhook, "DeviceSilent", "resolved"), 20, "the resolved notification", log)
    time.sleep(2)
    assert [a["status"] for a in amhook.alerts() if a["labels"]["device_ip"] == SILENT].count("resolved") == 1
    assert monitor.stop() == 0


def test_alertmanager_down_does_not_hold_up_the_monitor_and_gets_firing_alerts_back(stack: dict[str, Any]) -> None:
    am, city, monitor, port = stack["am"], stack["city"], stack["monitor"], stack["metrics_port"]
    log = monitor.log
    city.modes[SILENT] = "silent"
    city.start()
    monitor.start()
    wait_for(lambda: SILENT in held(am, "DeviceSilent"), 60, "DeviceSilent in Alertmanager", log)
    assert metric(port, "monitor_alertmanager_up", "ops") == 1

    # Alertmanager stops (its alerts are in memory: gone). The monitor goes on: a new fault reaches the built-in
    # receiver at its usual pace, and the unreachable Alertmanager is counted, shown and logged.
    am.stop()
    failures = metric(port, "monitor_notification_failures_total", "ops")
    city.modes[LATER] = "silent"
    wait_for(lambda: LATER in notified(stack["direct"], "DeviceSilent"), 30, "the built-in receiver", log)
    wait_for(lambda: metric(port, "monitor_notification_failures_total", "ops") > failures + 2, 20,
             "failed posts counted", log)
    assert metric(port, "monitor_alertmanager_up", "ops") == 0
    assert metric(port, "monitor_alertmanager_unsent_alerts", "ops") >= 1
    assert "alertmanager ops at" in log() and "unreachable" in log()
    assert log().count("unreachable") == 1  # logged when it went, not every evaluation

    # back on the same port: both still-firing alerts arrive (the old one and the one raised meanwhile)
    am.start()
    wait_for(lambda: {SILENT, LATER} <= set(held(am, "DeviceSilent")), 30, "the firing alerts re-sent", log)
    wait_for(lambda: "reachable again" in log(), 10, "the recovery logged", log)
    assert metric(port, "monitor_alertmanager_up", "ops") == 1
    wait_for(lambda: {SILENT, LATER} <= notified(stack["amhook"], "DeviceSilent"), 20, "Alertmanager notifying", log)
    assert monitor.stop() == 0
