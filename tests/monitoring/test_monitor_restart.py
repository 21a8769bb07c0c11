"""A monitor killed with -9 and restarted, and a standby taking over from a killed active one, carry on where it
stopped: every device keeps its state (a silent one stays silent, from its last heartbeat or, never heard, from
when it was first expected), no alert is resolved or notified again, nothing new goes to the ``alerts`` topic.
The standby runs from the very same config on the same host, so its metrics port is taken: it serves /metrics
on the free port it logs. Then every topic the monitor reads is fed garbage, JSON of the wrong shape and records
with fields missing: each is set aside and counted by reason, and the good records sent after them still count;
damaged silence rows are left out while a good silence still mutes. Real broker, HBase gateway, monitor
processes and webhook receiver."""

from __future__ import annotations

import math
import re
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from contracts.ingest_stats import BatchTally, stats_record
from contracts.ports import free_port
from contracts.records import CITY_TZ, encode, format_time
from contracts.tables.monitoring import (
    HOUR_COLUMN,
    QUALITY,
    SERIES_TABLE,
    STATE_COLUMN,
    STATE_TABLE,
    series_key,
    state_cells,
    state_key,
)
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import start_gateway
from deploy.processes.monitor import MonitorProcess
from monitoring import queries
from monitoring.matchers import Matcher
from monitoring.series import decode
from monitoring.silences import new_silence, save_silence
from testkit.city import ScriptedCity, WebhookReceiver, city_map
from tests.monitoring._support import active, wait_for, webhook_monitor_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

NEVER_HEARD, WENT_SILENT, BLURRED = "10.3.0.1", "10.3.0.2", "10.3.0.3"
HEALTHY = ("10.3.0.4", "10.3.0.5", "10.3.0.6")
DEVICES = dict.fromkeys((NEVER_HEARD, WENT_SILENT, BLURRED, *HEALTHY), "r1")
MARKER = HEALTHY[0]
"""The audit's hand-made ``ingest.stats`` record gives it the only ``invalid`` records it ever has (3 of some 80
in a window: it stays healthy), so they prove that record was taken."""
EVALUATION_S, SILENT_AFTER_S, GROUP_WAIT_S, GROUP_INTERVAL_S = 0.5, 4, 0.5, 1
HEARTBEAT, STATS, DEADLETTER = "device.heartbeat", "ingest.stats", "capture.deadletter"


def config_text(bootstrap: str, hbase_port: int, map_path: Path, hook: str, metrics_port: int) -> str:
    """``keep_firing_for_s = 0``: an alert its rule misses for a single evaluation resolves at once, so a
    restart that forgets anything for a moment shows as a resolution and a second firing."""
    return webhook_monitor_config(bootstrap, hbase_port, map_path, hook, metrics_port, evaluation_s=EVALUATION_S,
                                  silent_after_s=SILENT_AFTER_S, group_wait_s=GROUP_WAIT_S,
                                  group_interval_s=GROUP_INTERVAL_S, keep_firing_for_s=0)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[dict[str, Any]]:
    broker = BrokerProcess(tmp_path / "bus").start()
    gateway = start_gateway(tmp_path / "hbase", log_dir=tmp_path)
    hook = WebhookReceiver()
    map_path = tmp_path / "map.json"
    city_map({"r1": list(DEVICES)}).save(map_path)
    config, port = tmp_path / "solution.toml", free_port()
    config.write_text(config_text(broker.bootstrap, gateway.port, map_path, hook.url, port))
    monitors = [MonitorProcess(config, tmp_path / f"monitor-{name}.log") for name in "ab"]
    city = ScriptedCity(broker.bootstrap, DEVICES)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3})
    alerts = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "test-alerts-watermark", "log_level": 3})
    try:
        yield {"hook": hook, "city": city, "monitors": monitors, "port": port, "conn": gateway.connect(),
               "map": map_path, "producer": producer, "alerts": alerts}
    finally:
        for monitor in monitors:
            monitor.kill()
        if hasattr(city, "_thread"):
            city.stop()
        alerts.close()
        hook.close()
        gateway.kill()
        broker.stop()


def samples(port: int, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of one metric on the monitor's /metrics: its labels and value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return [(s.labels, s.value) for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == name]


def evaluations(port: int) -> float:
    return sum(value for _, value in samples(port, "monitor_evaluations_total"))


def flushed(port: int) -> float:
    return sum(value for _, value in samples(port, "monitor_series_flushes_total"))


def malformed(port: int) -> dict[tuple[str, str], float]:
    """Records set aside, by (topic, reason)."""
    return {(labels["topic"], labels.get("reason", "")): value
            for labels, value in samples(port, "monitor_records_malformed_total")}


def states(stack: dict[str, Any]) -> dict[str, tuple[str, float | None]]:
    """What the console shows of each device: its state and since when."""
    return {d["device_ip"]: (d["state"], d["since"]) for d in queries.device_states(stack["conn"], stack["map"])}


def series(stack: dict[str, Any], scope: str, at: datetime) -> Counter[str]:
    """The quality counts of one scope in the hour of ``at``, as the monitor flushed them."""
    hour = int(at.timestamp() // 3600 * 3600)
    cells = stack["conn"].table(SERIES_TABLE).row(series_key(QUALITY, f"scope={scope}", hour), columns=[HOUR_COLUMN])
    return decode(QUALITY, cells[HOUR_COLUMN]) if cells else Counter()  # type: ignore[return-value]


def silenced_by(stack: dict[str, Any], device_ip: str) -> list[str]:
    return next(a["status"]["silencedBy"] for a in queries.alerts(stack["conn"], include_resolved=False)
                if a["labels"]["device_ip"] == device_ip)


def open_alerts(stack: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {a["fingerprint"]: (a["labels"]["device_ip"], a["startsAt"])
            for a in queries.alerts(stack["conn"], include_resolved=False)}


def alert_events(stack: dict[str, Any]) -> int:
    """How many changes were ever published on the ``alerts`` topic (its end offset)."""
    return int(stack["alerts"].get_watermark_offsets(TopicPartition("alerts", 0), timeout=10)[1])


def firing(stack: dict[str, Any]) -> Counter[tuple[str, str]]:
    return Counter((a["labels"]["alertname"], a["labels"]["device_ip"]) for a in stack["hook"].alerts("firing"))


@dataclass(frozen=True)
class Snapshot:
    """What a restart or a takeover must leave as it was."""

    sent: int
    states: dict[str, tuple[str, float | None]]
    alerts: dict[str, tuple[str, str]]
    events: int

    @classmethod
    def of(cls, stack: dict[str, Any]) -> Snapshot:
        return cls(len(stack["hook"].received), states(stack), open_alerts(stack), alert_events(stack))


def carries_on(stack: dict[str, Any], monitor: MonitorProcess, port: int, log_from: int, before: Snapshot) -> None:
    """From the moment ``monitor`` caught up with its input, for as many evaluations as the silent rule needs to
    find a silence anew and the route to notify it (what a forgotten silence would have resolved and fired again
    meanwhile), check at every step that nothing is notified and every device keeps its state and since."""
    wait_for(lambda: "caught up" in monitor.log()[log_from:], 60, "the monitor catching up", monitor.log)
    start = evaluations(port)
    needed = math.ceil((SILENT_AFTER_S + GROUP_WAIT_S + 2 * GROUP_INTERVAL_S) / EVALUATION_S)

    def unchanged_for_long_enough() -> bool:
        assert stack["hook"].received[before.sent:] == [], stack["hook"].received[before.sent:]
        assert states(stack) == before.states
        return evaluations(port) >= start + needed

    wait_for(unchanged_for_long_enough, 60, f"{needed} evaluations", monitor.log)
    assert open_alerts(stack) == before.alerts
    assert alert_events(stack) == before.events


def test_restart_and_takeover_change_nothing_then_bad_records_are_set_aside(stack: dict[str, Any]) -> None:
    city, (a, b), port = stack["city"], stack["monitors"], stack["port"]
    city.modes.update({NEVER_HEARD: "silent", BLURRED: "blurred", WENT_SILENT: "blurred"})
    city.start()
    a.start()
    wait_for(lambda: ("DeviceDegraded", WENT_SILENT) in firing(stack), 60, "the blurred devices notified", a.log)
    city.modes[WENT_SILENT] = "silent"  # with its bad share held: silent, not degraded, is what it is now
    expected = {NEVER_HEARD: "silent", WENT_SILENT: "silent", BLURRED: "degraded", **dict.fromkeys(HEALTHY, "healthy")}
    notified = Counter({("DeviceSilent", NEVER_HEARD): 1, ("DeviceSilent", WENT_SILENT): 1,
                        ("DeviceDegraded", BLURRED): 1, ("DeviceDegraded", WENT_SILENT): 1})
    wait_for(lambda: {ip: s for ip, (s, _) in states(stack).items()} == expected and firing(stack) == notified
             and stack["hook"].alerts("resolved"), 60, "the silent and degraded devices notified", a.log)
    assert [x["labels"]["device_ip"] for x in stack["hook"].alerts("resolved")] == [WENT_SILENT]
    before = Snapshot.of(stack)
    assert len(before.alerts) == 3 and before.events == 5  # 4 fired, 1 resolved

    # 1. kill -9 and restart the same process
    a.kill()
    log_from = len(a.log())
    a.start()
    wait_for(lambda: active(port) == 1, 60, "the restarted monitor active", a.log)
    # A standby from the same command line and config: its metrics port is taken, so it serves another one.
    b.start()
    carries_on(stack, a, port, log_from, before)
    found = wait_for(lambda: re.search(r"serving /metrics on port (\d+) instead", b.log()), 30,
                     "the standby's metrics port", b.log)
    port_b = int(found.group(1))
    assert port_b != port

    # 2. the standby takes over from the active one killed with -9
    wait_for(lambda: "standby" in b.log() and active(port_b) == 0 and active(port) == 1, 30,
             "both serving /metrics, one active and one standing by", b.log)
    a.kill()
    wait_for(lambda: active(port_b) == 1, 60, "the standby taking over", b.log)
    carries_on(stack, b, port_b, 0, before)

    # 3. on every topic the monitor reads: garbage, the wrong JSON shapes, a record with fields missing
    producer, now = stack["producer"], datetime.now(CITY_TZ)
    beat = {"device_ip": NEVER_HEARD, "checkpoint_id": f"cp-{NEVER_HEARD}", "recognizer_ip": "r1",
            "topic": "capture.vehicle", "time": format_time(now), "status": "ok", "produced": 5, "unrecognized": 0}
    tally = BatchTally()
    tally.device("capture.vehicle", MARKER, "r1", f"cp-{MARKER}").invalid = 3
    stats = stats_record("audit", 1, format_time(now), 1, 0.01, tally)
    letter = {"topic": "capture.vehicle", "partition": 0, "offset": 3, "reason": "not JSON", "key": None,
              "value_base64": "eA==", "failed_at": format_time(now)}
    shapes = [b"\xff\x00{not json", b"[1, 2]", b"42", None, b'{"hello": "world"}']
    bad = {HEARTBEAT: [*shapes, encode({k: v for k, v in beat.items() if k not in ("time", "produced")}),
                       encode({**beat, "time": format_time(now + timedelta(days=1))})],
           STATS: [*shapes, encode({k: v for k, v in stats.items() if k != "time"}),
                   encode({**stats, "devices": [{**stats["devices"][0], "device_ip": {"ip": MARKER}}]})],
           DEADLETTER: [*shapes, encode({k: v for k, v in letter.items() if k != "reason"})]}
    stamp_ms = int(now.timestamp() * 1000)
    for topic, values in bad.items():
        for value in values:
            producer.produce(topic, value, timestamp=stamp_ms)
    assert producer.flush(10) == 0
    counted = {(topic, reason): n for topic in bad for reason, n in (("undecodable", 1), ("not_object", 3))}
    counted |= {(HEARTBEAT, "invalid"): 2, (HEARTBEAT, "future"): 1, (STATS, "invalid"): 3, (DEADLETTER, "invalid"): 2}
    wait_for(lambda: malformed(port_b) == counted, 30, "every bad record counted by topic and reason", b.log)
    flushes = flushed(port_b)
    wait_for(lambda: flushed(port_b) >= flushes + 2, 30, "what they did written to HBase (if anything)", b.log)
    assert states(stack)[NEVER_HEARD] == before.states[NEVER_HEARD]  # neither the future beat nor the fieldless
    assert series(stack, "city", now)["deadletter"] == 0
    assert series(stack, f"device={MARKER}", now)["invalid"] == 0

    # Silences are rows the console writes: a damaged one is left out, and the others still mute.
    silence = new_silence([Matcher("alertname", "DeviceDegraded"), Matcher("device_ip", BLURRED)], now.timestamp(),
                          now.timestamp() + 3600, "audit", "a good silence beside two damaged ones")
    save_silence(stack["conn"], silence)
    stack["conn"].table(STATE_TABLE).put(state_key("silence", "broken"), {STATE_COLUMN: b"{not json"})
    stack["conn"].table(STATE_TABLE).put(state_key("silence", "shapeless"), state_cells({"id": "shapeless"}))
    wait_for(lambda: samples(port_b, "monitor_silences_malformed") == [({}, 2.0)]
             and silenced_by(stack, BLURRED) == [silence.id], 30, "the good silence muting, the bad left out", b.log)

    # ... and the good records after them are taken: a heartbeat revives the device, the counts move.
    producer.produce(DEADLETTER, encode(letter), timestamp=stamp_ms)
    producer.produce(STATS, encode(stats), b"audit")
    assert producer.flush(10) == 0
    city.modes[NEVER_HEARD] = "ok"
    wait_for(lambda: states(stack)[NEVER_HEARD][0] in ("recovering", "healthy")
             and series(stack, "city", now)["deadletter"] == 1
             and series(stack, f"device={MARKER}", now)["invalid"] == 3, 30, "the good records taken", b.log)
    wait_for(lambda: ("DeviceSilent", NEVER_HEARD) in {(x["labels"]["alertname"], x["labels"]["device_ip"])
                                                        for x in stack["hook"].alerts("resolved")},
             30, "the revived device's alert resolved", b.log)
    assert firing(stack) == notified
    assert malformed(port_b) == counted

