"""Monitor benchmark: detection delay (fault injected -> webhook notified) and CPU per 1,000 devices.

Starts a broker, an HBase gateway, a webhook receiver and ``python -m monitoring`` with the shipped
``[monitoring]`` rules, route and health settings (only endpoints and the receiver are replaced), and
a scripted city of ``--devices`` devices publishing heartbeats and ``ingest.stats`` every second.
Each trial makes one healthy device silent and another blurred, and records the time until the
webhook receives their DeviceSilent / DeviceDegraded alert; then the faults are cleared and the next
trial picks other devices. Prints p50/p99 per fault and the monitor's CPU seconds per wall second,
scaled per 1,000 devices, with the load average. (Ingest throughput with and without
``ingest.stats``: ``benchmarks/ingest_stats_cost.py``.)

    .venv/bin/python benchmarks/monitoring.py [--devices 1000] [--trials 5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import tomllib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil

from contracts.config import DEFAULT_PATH
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.processes.monitor import MonitorProcess
from testkit.city import ScriptedCity, WebhookReceiver, city_map


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def shipped_monitoring_toml() -> str:
    """The ``[monitoring...]`` part of the shipped solution.toml, receivers left out (added below)."""
    lines, keep = [], False
    for line in DEFAULT_PATH.read_text().splitlines():
        if line.startswith("["):
            keep = line.startswith(("[monitoring", "[[monitoring")) and "receivers]]" not in line
        if keep:
            lines.append(line)
    return "\n".join(lines).replace("metrics_port = 9310", "metrics_port = 0")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--recognizers", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=120.0, help="give up a trial after this many seconds")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-monitoring-"))
    broker = BrokerProcess(root / "bus").start()
    gateway = start_gateway(root / "hbase", log_dir=root)
    hook = WebhookReceiver()
    ips = [f"10.{n // 250}.{n % 250 // 50}.{n % 50 + 1}" for n in range(args.devices)]
    recognizers = {f"192.168.0.{r + 1}": ips[r::args.recognizers] for r in range(args.recognizers)}
    by_ip = {ip: r for r, members in recognizers.items() for ip in members}
    map_path = root / "map.json"
    city_map(recognizers).save(map_path)
    config = root / "solution.toml"
    config.write_text(f'[bus]\nbootstrap_servers = "{broker.bootstrap}"\n[hbase]\nhost = "127.0.0.1"\n'
                      f'port = {gateway.port}\n[map]\npath = "{map_path}"\n[topics]\npartitions = 1\n'
                      f"{shipped_monitoring_toml()}\n"
                      f'[[monitoring.receivers]]\nname = "bench"\ntype = "webhook"\nurl = "{hook.url}"\n')
    settings = tomllib.loads(config.read_text())["monitoring"]
    city = ScriptedCity(broker.bootstrap, by_ip, rate=2, tick_s=1.0).start()
    monitor = MonitorProcess(config, root / "monitor.log").start()
    delays: dict[str, list[float]] = {"DeviceSilent": [], "DeviceDegraded": []}
    try:
        time.sleep(settings["health"]["window_s"] * 2)  # let the monitor learn the fleet
        process = psutil.Process(monitor.proc.pid)  # type: ignore[union-attr]
        cpu0, wall0 = sum(process.cpu_times()[:2]), time.monotonic()
        for trial in range(args.trials):
            silent_ip, blurred_ip = ips[2 * trial], ips[2 * trial + 1]
            seen = len(hook.received)
            injected = time.monotonic()
            city.modes.update({silent_ip: "silent", blurred_ip: "blurred"})
            wanted = {"DeviceSilent": silent_ip, "DeviceDegraded": blurred_ip}
            found: dict[str, float] = {}
            while len(found) < 2 and time.monotonic() - injected < args.timeout:
                for payload in hook.received[seen:]:
                    for alert in payload["alerts"]:
                        name = alert["labels"]["alertname"]
                        if alert["status"] == "firing" and wanted.get(name) == alert["labels"].get("device_ip"):
                            found.setdefault(name, time.monotonic() - injected)
                time.sleep(0.2)
            for name, delay in found.items():
                delays[name].append(delay)
            print(f"trial {trial + 1}: {json.dumps({k: round(v, 1) for k, v in found.items()})}", flush=True)
            city.modes.pop(silent_ip)
            city.modes.pop(blurred_ip)
        cpu = (sum(process.cpu_times()[:2]) - cpu0) / (time.monotonic() - wall0)
        result = {"devices": args.devices, "trials": args.trials,
                  "evaluation_interval_s": settings["evaluation_interval_s"],
                  **{f"{name}_p50_s": round(percentile(v, 50), 1) for name, v in delays.items() if v},
                  **{f"{name}_p99_s": round(percentile(v, 99), 1) for name, v in delays.items() if v},
                  "missed": {name: args.trials - len(v) for name, v in delays.items()},
                  "monitor_cpu_per_1000_devices": round(cpu * 1000 / args.devices, 3),
                  "load_average": [round(x, 2) for x in os.getloadavg()]}
        print(json.dumps(result))
    finally:
        monitor.stop()
        city.stop()
        hook.close()
        gateway.kill()
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
