"""Two monitor processes started by mistake: one evaluates, the other waits; kill -9 the active one and the
standby takes over within a bounded time without re-sending what was already sent; an active frozen past
its lock session is fenced (it stops without writing, exit 3). Real broker, gateway, processes, webhook."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.processes.monitor import MonitorProcess
from testkit.city import ScriptedCity, WebhookReceiver, city_map
from tests.monitoring._support import active, firing, tear_down, wait_for, webhook_monitor_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

DEVICES = {"10.1.0.1": "r1", "10.1.0.2": "r1", "10.1.0.3": "r1", "10.1.0.4": "r1"}
SESSION_S = 6  # the broker's group.min.session.timeout.ms


def config_text(bootstrap: str, hbase_port: int, map_path: Path, hook: str, metrics_port: int) -> str:
    return webhook_monitor_config(bootstrap, hbase_port, map_path, hook, metrics_port, lock_session_s=SESSION_S)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict]:
    broker = BrokerProcess(tmp_path / "bus").start()
    gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
    hook = WebhookReceiver()
    city_map({"r1": list(DEVICES)}).save(tmp_path / "map.json")
    ports, monitors = [free_port(), free_port()], []
    for name, port in zip("ab", ports, strict=True):
        config = tmp_path / f"{name}.toml"
        config.write_text(config_text(broker.bootstrap, gateway.port, tmp_path / "map.json", hook.url, port))
        monitors.append(MonitorProcess(config, tmp_path / f"monitor-{name}.log"))
    city = ScriptedCity(broker.bootstrap, DEVICES)
    try:
        yield {"hook": hook, "city": city, "monitors": monitors, "ports": ports}
    finally:
        for monitor in monitors:
            if monitor.proc is not None and monitor.proc.poll() is None:
                monitor.proc.send_signal(signal.SIGCONT)
            monitor.kill()
        tear_down(city, hook, gateway, broker)


def test_second_instance_waits_takes_over_after_kill_9_and_sends_nothing_twice(stack: dict) -> None:
    hook, city, (a, b), (port_a, port_b) = stack["hook"], stack["city"], stack["monitors"], stack["ports"]
    logs = lambda: f"--- a ---\n{a.log()[-3000:]}\n--- b ---\n{b.log()[-3000:]}"  # noqa: E731
    city.modes["10.1.0.1"] = "silent"
    city.start()
    a.start()
    wait_for(lambda: active(port_a) == 1, 90, "instance a active", logs)
    b.start()
    wait_for(lambda: active(port_b) == 0 and "standby" in b.log(), 90, "instance b standing by", logs)

    # Only the active one evaluates: the silent device is notified once, not twice.
    wait_for(lambda: firing(hook, "10.1.0.1"), 60, "the silent device's alert", logs)
    time.sleep(4)
    assert len(firing(hook, "10.1.0.1")) == 1, hook.received
    assert active(port_b) == 0 and "monitor running" not in b.log()

    # kill -9 the active: the standby takes over within the session plus a rebalance, and sends nothing twice.
    sent = len(hook.received)
    a.kill()
    killed = time.monotonic()
    wait_for(lambda: active(port_b) == 1, 60, "instance b taking over", logs)
    takeover = time.monotonic() - killed
    assert takeover <= SESSION_S + 15, takeover
    time.sleep(5)
    assert hook.received[sent:] == [], hook.received[sent:]

    # The new active evaluates: a new fault is notified (once).
    city.modes["10.1.0.2"] = "blurred"
    wait_for(lambda: [x for x in hook.alerts("firing") if x["labels"].get("device_ip") == "10.1.0.2"], 60,
             "the blurred device's alert from instance b", logs)
    assert len(firing(hook, "10.1.0.1")) == 1, hook.received

    # The old one restarted is now the standby.
    a.start()
    wait_for(lambda: active(port_a) == 0 and a.log().count("standby") >= 1, 90, "instance a standing by", logs)

    # Fencing: b frozen past its session loses the lock to a, and stops without writing once it thaws.
    assert b.proc is not None
    b.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: active(port_a) == 1, 60, "instance a taking over from frozen b", logs)
    finally:
        b.proc.send_signal(signal.SIGCONT)
    assert b.proc.wait(60) == 3, logs()
    assert "lost the single-monitor lock" in b.log()
    assert len(firing(hook, "10.1.0.1")) == 1, hook.received
