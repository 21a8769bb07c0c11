"""The monitor as a real process over a real broker and HBase gateway, notifying a real webhook
receiver, a real SMTP server (aiosmtpd) and a dead receiver, while a scripted city injects faults.

One incident script, checked step by step: exactly the right alerts fire with the right location;
one resolution after recovery; a failing recogniser is blamed and its devices' alerts inhibited; a
flapping device is one incident; the dead receiver is retried and counted without blocking the
others; after SIGKILL and restart nothing is sent again; every change is on the ``alerts`` topic
keyed by fingerprint; the series and device states are readable through ``monitoring.queries``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from contracts.ports import free_port
from contracts.processes import ROOT
from contracts.records import CITY_TZ
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.monitor import MonitorProcess
from monitoring import queries
from testkit.city import ScriptedCity, WebhookReceiver, city_map
from tests.monitoring._support import start_smtp, wait_for

R1 = {f"10.1.0.{n}": "r1" for n in range(1, 7)}  # blurred + flapping: 2 of 6, not the recogniser
R2 = {"10.2.0.1": "r2", "10.2.0.2": "r2", "10.2.0.3": "r2", "10.2.0.4": "r2"}
STRANGER = "10.9.9.9"  # reports through r2 but is missing from the map


def config_text(bootstrap: str, gateway: Gateway, map_path: Path, hook: str, smtp_port: int, metrics_port: int,
                dead_port: int) -> str:
    return f"""
[bus]
bootstrap_servers = "{bootstrap}"
[hbase]
host = "127.0.0.1"
port = {gateway.port}
[map]
path = "{map_path}"
[topics]
partitions = 1
[monitoring]
evaluation_interval_s = 0.5
flush_interval_s = 0.5
metrics_port = {metrics_port}
[monitoring.health]
window_s = 4
silent_after_s = 3
recovery_s = 3
min_records = 5
ingest_delay_s = 0.5
[monitoring.route]
group_by = ["alertname", "district"]
group_wait_s = 1
group_interval_s = 2
repeat_interval_s = 3600
[monitoring.retry]
attempts = 2
initial_s = 0.2
[[monitoring.rules]]
name = "DeviceSilent"
kind = "device_silent"
threshold = 3
keep_firing_for_s = 10
severity = "critical"
[[monitoring.rules]]
name = "DeviceDegraded"
kind = "device_quality"
threshold = 0.2
for_s = 3
keep_firing_for_s = 10
[[monitoring.rules]]
name = "RecognizerDegraded"
kind = "recognizer_degraded"
threshold = 0.5
for_s = 0.5
keep_firing_for_s = 10
severity = "critical"
[[monitoring.receivers]]
name = "hook"
type = "webhook"
url = "{hook}"
[[monitoring.receivers]]
name = "mail"
type = "smtp"
host = "127.0.0.1"
port = {smtp_port}
from = "monitor@city.example"
to = ["oncall@city.example"]
[[monitoring.receivers]]
name = "dead"
type = "webhook"
url = "http://127.0.0.1:{dead_port}/nobody"
timeout_s = 1
"""


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict]:
    broker = BrokerProcess(tmp_path / "bus").start()
    gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
    hook = WebhookReceiver()
    smtp, mailbox = start_smtp(free_port())
    map_path = tmp_path / "map.json"
    city_map({"r1": list(R1), "r2": list(R2)}).save(map_path)
    config = tmp_path / "solution.toml"
    metrics_port = free_port()
    config.write_text(config_text(broker.bootstrap, gateway, map_path, hook.url, smtp.port, metrics_port,
                                  free_port()))
    city = ScriptedCity(broker.bootstrap, {**R1, **R2, STRANGER: "r2"})
    monitor = MonitorProcess(config, tmp_path / "monitor.log")
    try:
        yield {"broker": broker, "gateway": gateway, "hook": hook, "mailbox": mailbox, "city": city,
               "monitor": monitor, "metrics_port": metrics_port, "map": map_path}
    finally:
        monitor.kill()
        city.stop() if hasattr(city, "_thread") else None
        smtp.stop()
        hook.close()
        gateway.kill()
        broker.stop()


def firing_devices(hook: WebhookReceiver, alertname: str, status: str = "firing") -> list[str]:
    return [a["labels"].get("device_ip", a["labels"].get("recognizer_ip"))
            for a in hook.alerts(status) if a["labels"]["alertname"] == alertname]


def metric(port: int, name: str, receiver: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(f'{name}{{receiver="{receiver}"}}'):
            return float(line.split()[-1])
    return 0.0


def alert_events(bootstrap: str) -> list[tuple[str, dict]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "auto.offset.reset": "earliest",
                         "enable.partition.eof": True})
    consumer.subscribe(["alerts"])
    out, eof = [], False
    deadline = time.monotonic() + 20
    while not eof and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is None:
            continue
        if message.error():
            eof = True
            continue
        out.append((message.key().decode(), json.loads(message.value())))
    consumer.close()
    return out


def test_incidents_end_to_end(stack: dict) -> None:
    hook, city, monitor, mailbox = stack["hook"], stack["city"], stack["monitor"], stack["mailbox"]
    log = monitor.log
    blurred, silent, flapping = "10.1.0.1", "10.2.0.1", "10.1.0.2"
    city.modes.update({blurred: "blurred", silent: "silent", flapping: "flapping", STRANGER: "blurred"})
    city.start()
    monitor.start()

    # 1. exactly the right alerts, with their location
    wait_for(lambda: {blurred, STRANGER} <= set(firing_devices(hook, "DeviceDegraded"))
             and silent in firing_devices(hook, "DeviceSilent"), 60, "first alerts", log)
    time.sleep(3)
    degraded = firing_devices(hook, "DeviceDegraded")
    assert set(degraded) <= {blurred, STRANGER, flapping}, degraded
    assert firing_devices(hook, "DeviceSilent") == [silent]
    assert not firing_devices(hook, "RecognizerDegraded")
    by_device = {a["labels"]["device_ip"]: a for a in hook.alerts("firing") if "device_ip" in a["labels"]}
    assert by_device[blurred]["labels"] | {"severity": "warning"} == {
        "alertname": "DeviceDegraded", "severity": "warning", "kind": "device_quality", "device_ip": blurred,
        "recognizer_ip": "r1", "district": "110100", "checkpoint_id": "110100#0#0#0", "crossroad": "0"}
    assert by_device[STRANGER]["labels"]["district"] == "unknown"
    assert by_device[STRANGER]["labels"]["recognizer_ip"] == "r2"
    payload = hook.received[0]
    assert payload["version"] == "4" and payload["receiver"] == "hook" and payload["groupKey"].startswith("{}:{")
    wait_for(lambda: mailbox.messages, 20, "an e-mail", log)
    assert "oncall@city.example" in mailbox.messages[0] and "FIRING" in mailbox.messages[0]

    # 2. recovery: one resolution
    city.modes[blurred] = "ok"
    wait_for(lambda: blurred in firing_devices(hook, "DeviceDegraded", "resolved"), 40, "resolution", log)

    # 3. a failing recogniser: blamed once, its devices' alerts inhibited
    city.modes.update({"10.2.0.2": "blurred", "10.2.0.3": "blurred"})
    wait_for(lambda: firing_devices(hook, "RecognizerDegraded"), 40, "the recogniser alert", log)
    time.sleep(8)
    assert firing_devices(hook, "RecognizerDegraded") == ["r2"]
    assert not {"10.2.0.2", "10.2.0.3"} & set(firing_devices(hook, "DeviceDegraded"))

    # 4. the dead receiver was tried, failed, counted; the others were not held up
    assert metric(stack["metrics_port"], "monitor_notification_failures_total", "dead") >= 2
    assert metric(stack["metrics_port"], "monitor_notifications_total", "hook") >= 3

    # 5. kill -9 and restart: nothing already delivered is delivered again
    time.sleep(3)
    before = len(hook.received)
    monitor.kill()
    monitor.start()
    time.sleep(12)
    assert hook.received[before:] == [], json.dumps(hook.received, indent=1)

    # 6. the flapping device is (at most) one incident: one startsAt, never resolved
    incidents = {a["startsAt"] for a in hook.alerts() if a["labels"].get("device_ip") == flapping}
    assert len(incidents) <= 1, incidents
    assert firing_devices(hook, "DeviceDegraded", "resolved") == [blurred]

    # 7. the alerts topic: keyed by fingerprint, one firing and one resolved for the recovered device
    events = alert_events(stack["broker"].bootstrap)
    assert all(key == value["fingerprint"] for key, value in events)
    fp = by_device[blurred]["fingerprint"]
    assert Counter(v["status"] for k, v in events if k == fp) == {"firing": 1, "resolved": 1}

    # 8. the read side
    conn = stack["gateway"].connect()
    today = datetime.now(CITY_TZ).date()
    hour = datetime.now(CITY_TZ).hour
    latency = queries.latency_by_hour(conn, today)
    assert len(latency) == 24 and latency[hour]["count"] > 0 and 790 <= latency[hour]["p50_ms"] <= 810
    quality = queries.quality_by_hour(conn, today, device_ip=blurred)[hour]
    assert quality["produced"] > 0 and 0 < quality["valid"] < quality["produced"]
    states = {d["device_ip"]: d for d in queries.device_states(conn, stack["map"])}
    assert states[silent]["state"] == "silent" and states["10.2.0.2"]["state"] == "degraded"
    assert states[STRANGER]["location"]["district"] == "unknown"
    open_alerts = queries.alerts(conn, include_resolved=False)
    inhibited = [a for a in open_alerts if a["status"]["inhibitedBy"]]
    assert {a["labels"]["device_ip"] for a in inhibited} >= {"10.2.0.2", "10.2.0.3"}
    assert monitor.stop() == 0


def test_bad_rule_config_stops_start_up_naming_rule_and_field(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[[monitoring.rules]]\nname = "Slow"\nkind = "latency_p99"\nthreshold = "high"\n')
    done = subprocess.run([sys.executable, "-m", "monitoring", "--config", str(config)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "rule 'Slow'" in done.stderr and "'threshold'" in done.stderr
