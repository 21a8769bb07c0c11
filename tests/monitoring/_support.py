"""Real processes and receivers for the monitor's tests: a scripted city on the bus, an HTTP webhook receiver, an
aiosmtpd SMTP server (the monitor itself runs as `deploy.processes.monitor.MonitorProcess`).

The city publishes what the simulator and the ingest job publish (``device.heartbeat`` with
cumulative counters, ``ingest.stats`` built with ``contracts.ingest_stats.stats_record``), but with
each device's fault chosen by the test: ``ok``, ``blurred`` (80 % unreadable), ``silent`` (nothing
at all) or ``flapping`` (blurred and ok by turns), so the expected alerts are known exactly.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from confluent_kafka import Producer

from contracts.deployment_map import Checkpoint, DeploymentMap, Device, District, Recognizer
from contracts.ingest_stats import BatchTally, stats_record
from contracts.records import CITY_TZ, format_time


def city_map(recognizers: dict[str, list[str]]) -> DeploymentMap:
    """One checkpoint per device, district by recogniser (``1101xx``), crossroad = device index."""
    districts, checkpoints, devices = [], [], []
    for r, (recognizer, ips) in enumerate(sorted(recognizers.items())):
        code = f"1101{r:02d}"
        districts.append(District(code, f"district {r}"))
        for n, ip in enumerate(ips):
            cp = f"{code}#{n}#0#0"
            checkpoints.append(Checkpoint(cp, code, n, "N", 30.0 + n / 100, 120.0 + r / 100, 2, ip, None))
            devices.append(Device(ip, cp, "vehicle", recognizer))
    return DeploymentMap(tuple(districts), tuple(checkpoints), tuple(devices),
                         tuple(Recognizer(k, tuple(v)) for k, v in sorted(recognizers.items())))


@dataclass
class ScriptedCity:
    """Devices (ip -> recogniser) publishing every ``tick_s``; ``modes`` may be changed while it runs."""

    bootstrap: str
    devices: dict[str, str]
    rate: int = 10
    tick_s: float = 0.5
    modes: dict[str, str] = field(default_factory=dict)
    produced: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ScriptedCity:
        self._producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 3})
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._batch = 0
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(10)

    def mode(self, ip: str, now: float) -> str:
        mode = self.modes.get(ip, "ok")
        if mode == "flapping":
            return "blurred" if int((now - self._started) / 1.5) % 2 else "ok"
        return mode

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def tick(self) -> None:
        now = time.monotonic()
        stamp = format_time(datetime.now(CITY_TZ))
        tally = BatchTally()
        for ip, recognizer in self.devices.items():
            mode = self.mode(ip, now)
            if mode == "silent":
                continue
            self.produced[ip] = self.produced.get(ip, 0) + self.rate
            counts = tally.device("capture.vehicle", ip, recognizer, f"cp-{ip}")
            bad = self.rate * 8 // 10 if mode == "blurred" else 0
            counts.valid += self.rate - bad
            counts.unrecognized += bad
            tally.latency["capture_to_ingest"][800] += self.rate
            beat = {"device_ip": ip, "checkpoint_id": f"cp-{ip}", "recognizer_ip": recognizer,
                    "topic": "capture.vehicle", "time": stamp, "status": "ok", "produced": self.produced[ip],
                    "unrecognized": 0}
            self._producer.produce("device.heartbeat", json.dumps(beat).encode(), ip.encode())
        self._batch += 1
        record = stats_record("test-ingest", self._batch, stamp, self.tick_s, 0.01, tally)
        self._producer.produce("ingest.stats", json.dumps(record).encode(), b"test-ingest")
        self._producer.poll(0)


class WebhookReceiver:
    """A real HTTP server that keeps every Alertmanager payload it is sent."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every alert of every payload, in order (``status`` firing/resolved to filter)."""
        return [a for p in list(self.received) for a in p["alerts"] if status is None or a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


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
