"""Receivers and helpers for the monitor's tests: an aiosmtpd SMTP server, a deadline wait, a monitor config judging
devices within seconds (the monitor itself runs as `deploy.processes.monitor.MonitorProcess`; the scripted city and
the webhook receiver are `testkit.city`'s).
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

from testkit.city import ScriptedCity, WebhookReceiver


class Mailbox:
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(envelope.content.decode(errors="replace"))
        return "250 Message accepted for delivery"

    def __init__(self) -> None:
        self.messages: list[str] = []


def start_smtp(port: int) -> tuple[Controller, Mailbox]:
    box = Mailbox()
    controller = Controller(box, hostname="127.0.0.1", port=port)
    controller.start()
    return controller, box


def active(port: int) -> float | None:
    """``monitor_active`` of the instance serving /metrics on ``port`` (None: not answering yet)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith("monitor_active ")), None)


def tear_down(city: ScriptedCity, hook: WebhookReceiver, gateway: Any, broker: Any) -> None:
    """Stop what a monitor test started around its monitors (which the caller stops first)."""
    if hasattr(city, "_thread"):
        city.stop()
    hook.close()
    gateway.kill()
    broker.stop()


def firing(hook: WebhookReceiver, device: str) -> list[dict]:
    """The firing alerts the webhook received about ``device``."""
    return [a for a in hook.alerts("firing") if a["labels"].get("device_ip") == device]


def wait_for(check: Callable[[], Any], timeout: float, what: str, log: Callable[[], str] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f"\n--- monitor log ---\n{log()[-4000:]}" if log else ""))


def webhook_monitor_config(bootstrap: str, hbase_port: int, map_path: Path, hook: str, metrics_port: int, *,
                           evaluation_s: float = 0.5, silent_after_s: float = 3, group_wait_s: float = 0.5,
                           group_interval_s: float = 1, keep_firing_for_s: float = 600,
                           lock_session_s: float = 6) -> str:
    """A monitor config judging devices within seconds (DeviceSilent, DeviceDegraded) and notifying one webhook,
    each alert grouped per device. ``lock_session_s`` 6: the broker's ``group.min.session.timeout.ms``."""
    return f"""
[bus]
bootstrap_servers = "{bootstrap}"
[hbase]
host = "127.0.0.1"
port = {hbase_port}
[map]
path = "{map_path}"
[topics]
partitions = 1
[monitoring]
evaluation_interval_s = {evaluation_s}
flush_interval_s = 0.5
metrics_port = {metrics_port}
lock_session_s = {lock_session_s}
[monitoring.health]
window_s = 4
silent_after_s = {silent_after_s}
recovery_s = 3
min_records = 5
ingest_delay_s = 0.5
[monitoring.route]
group_by = ["alertname", "device_ip"]
group_wait_s = {group_wait_s}
group_interval_s = {group_interval_s}
repeat_interval_s = 3600
[[monitoring.rules]]
name = "DeviceSilent"
kind = "device_silent"
threshold = {silent_after_s}
keep_firing_for_s = {keep_firing_for_s}
[[monitoring.rules]]
name = "DeviceDegraded"
kind = "device_quality"
threshold = 0.2
for_s = 1
keep_firing_for_s = {keep_firing_for_s}
[[monitoring.receivers]]
name = "hook"
type = "webhook"
url = "{hook}"
"""
