"""The monitor over the REAL pipeline: broker, HBase gateway, the Spark ingest job (spark-submit
``spark_jobs/ingest_captures.py``), the monitor process and a webhook receiver, all real processes.

The city publishes only what devices publish (captures and heartbeats); every ``ingest.stats`` record
the monitor judges comes from the ingest job. Faults: a blurred device (unrecognised plates), a silent
device, a latency spike (captures stamped a minute in the past), the ingest job frozen with SIGSTOP
while captures keep flowing, and a consumer group that stops committing. Each must raise exactly its
own alert, with its labels and location, and resolve once after recovery.

Slow (one Spark start, ~20-60 s on the shared machine), kept on the spark xdist group.
"""

from __future__ import annotations

import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from contracts.deployment_map import DeploymentMap
from contracts.ingest_stats import parse_stats
from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess
from deploy.processes.gateway import Gateway, start_gateway
from deploy.processes.ingest import ingest_job
from deploy.processes.monitor import MonitorProcess
from ingest.producer import open_producer
from spark_jobs.launch import SparkJob
from testkit.city import WebhookReceiver, city_map
from tests.integration._ingest_support import read_all
from tests.monitoring._capture_city import TOPIC, CaptureCity
from tests.monitoring._support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("spark"), pytest.mark.timeout(1500)]

R1, R2 = "10.0.1.1", "10.0.2.1"
BLURRED, SILENT = "10.1.0.1", "10.2.0.1"
RECOGNIZERS = {R1: ["10.1.0.1", "10.1.0.2", "10.1.0.3"], R2: ["10.2.0.1", "10.2.0.2", "10.2.0.3"]}
LAGGARD = "laggard"


def config_text(bootstrap: str, gateway: Gateway, map_path: Path, hook: str, metrics_port: int) -> str:
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
window_s = 6
silent_after_s = 4
recovery_s = 3
min_records = 5
ingest_delay_s = 3
[monitoring.route]
group_by = ["alertname", "district"]
group_wait_s = 0.5
group_interval_s = 1
repeat_interval_s = 3600
[[monitoring.rules]]
name = "DeviceSilent"
kind = "device_silent"
threshold = 4
keep_firing_for_s = 3
severity = "critical"
[[monitoring.rules]]
name = "DeviceDegraded"
kind = "device_quality"
threshold = 0.2
for_s = 1
keep_firing_for_s = 3
[[monitoring.rules]]
name = "RecognizerDegraded"
kind = "recognizer_degraded"
threshold = 0.5
for_s = 1
keep_firing_for_s = 3
severity = "critical"
[[monitoring.rules]]
name = "IngestLatencyHigh"
kind = "latency_p99"
stage = "capture_to_ingest"
threshold = 20000
keep_firing_for_s = 2
[[monitoring.rules]]
name = "IngestStalled"
kind = "ingest_stalled"
threshold = 15
severity = "critical"
[[monitoring.rules]]
name = "CapturesLagging"
kind = "consumer_lag"
group = "{LAGGARD}"
threshold = 300
for_s = 1
[[monitoring.receivers]]
name = "hook"
type = "webhook"
url = "{hook}"
"""


class Pipeline:
    """Everything the tests share: started once per module (one Spark start)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.broker = BrokerProcess(tmp / "bus").start()
        self.gateway = start_gateway(tmp / "hbase", log_dir=tmp)
        self.hook = WebhookReceiver()
        self.deployment: DeploymentMap = city_map(RECOGNIZERS)
        self.deployment.save(tmp / "map.json")
        self.metrics_port = free_port()
        config = tmp / "solution.toml"
        config.write_text(config_text(self.broker.bootstrap, self.gateway, tmp / "map.json", self.hook.url,
                                      self.metrics_port))
        open_producer(self.broker.bootstrap).ensure_topics({TOPIC: 1, "capture.face": 1, "device.heartbeat": 1,
                                                          "ingest.stats": 1})
        # A small rate: Spark takes minutes to start on the loaded machine, and its first batch reads that backlog.
        self.city = CaptureCity(self.broker.bootstrap, self.deployment, rate=2)
        self.monitor = MonitorProcess(config, tmp / "monitor.log")
        self.job: SparkJob | None = None

    def start(self) -> None:
        self.city.start()
        self.job = ingest_job(self.broker.bootstrap, self.gateway.port, self.tmp / "ckpt", self.tmp / "job.log",
                              "--trigger-ms", "500")
        # The first batches read what was produced while Spark started (a minute late): the monitor starts
        # once the job has caught up and that backlog has left the latency window.
        wait_for(lambda: self.job_alive() and self.caught_up(), 600, "the ingest job caught up", self.logs)
        time.sleep(7)
        self.monitor.start()
        wait_for(lambda: "caught up with" in self.monitor.log(), 120, "the monitor reading live", self.logs)
        time.sleep(12)  # two health windows of a healthy city: the baseline the tests start from
        assert self.devices("healthy") == 6, self.logs()

    def caught_up(self) -> bool:
        stats = [parse_stats(value) for _, value in read_all(self.broker.bootstrap, "ingest.stats")]
        latest = stats[-1].latency.get("capture_to_ingest") if stats else None
        return latest is not None and latest.count > 0 and (latest.percentile(99) or 0) < 10_000

    def job_alive(self) -> bool:
        assert self.job is not None
        assert self.job.poll() is None, self.logs()
        return True

    def logs(self) -> str:
        job = (self.tmp / "job.log").read_text(errors="replace")[-3000:] if (self.tmp / "job.log").exists() else ""
        monitor = self.monitor.log()[-4000:] if self.monitor.log_path.exists() else "(not started)"
        return f"{monitor}\n--- ingest job ---\n{job}"

    def devices(self, state: str) -> float:
        return metric(self.metrics_port, f'monitor_devices{{state="{state}"}}')

    def close(self) -> None:
        self.monitor.kill()
        if self.job is not None:
            self.job._signal(signal.SIGCONT)
            self.job.kill()
        if hasattr(self.city, "_thread"):
            self.city.stop()
        self.hook.close()
        self.gateway.kill()
        self.broker.stop()


def metric(port: int, series: str) -> float:
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    except OSError:
        return -1.0
    return next((float(line.split()[-1]) for line in text.splitlines() if line.startswith(series + " ")), 0.0)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    p = Pipeline(tmp_path_factory.mktemp("pipeline"))
    try:
        p.start()
        yield p
    finally:
        p.close()


def alerts(hook: WebhookReceiver, status: str, alertname: str) -> list[dict]:
    return [a for a in hook.alerts(status) if a["labels"]["alertname"] == alertname]


def names(hook: WebhookReceiver, status: str, since: int = 0) -> list[str]:
    return sorted({a["labels"]["alertname"] for p in hook.received[since:] for a in p["alerts"]
                   if a["status"] == status})


def test_blurred_silent_and_latency_spike_raise_exactly_their_alerts_and_resolve_once(pipeline: Pipeline) -> None:
    hook, city, logs = pipeline.hook, pipeline.city, pipeline.logs
    assert hook.received == [], hook.received  # a healthy city notifies nothing
    city.modes.update({BLURRED: "blurred", SILENT: "silent"})
    city.lag_s = 60.0
    wait_for(lambda: alerts(hook, "firing", "DeviceDegraded") and alerts(hook, "firing", "DeviceSilent")
             and alerts(hook, "firing", "IngestLatencyHigh"), 120, "the three alerts", logs)
    time.sleep(5)  # anything else that would wrongly fire has had time to
    assert names(hook, "firing") == ["DeviceDegraded", "DeviceSilent", "IngestLatencyHigh"], hook.received
    (degraded,) = alerts(hook, "firing", "DeviceDegraded")
    assert degraded["labels"] == {"alertname": "DeviceDegraded", "severity": "warning", "kind": "device_quality",
                                  "device_ip": BLURRED, "recognizer_ip": R1, "district": "110100",
                                  "checkpoint_id": "110100#0#0#0", "crossroad": "0"}
    assert float(degraded["annotations"]["value"]) >= 0.2  # unreadable share, as the ingest job counted it
    (silent,) = alerts(hook, "firing", "DeviceSilent")
    assert silent["labels"] == {"alertname": "DeviceSilent", "severity": "critical", "kind": "device_silent",
                                "device_ip": SILENT, "recognizer_ip": R2, "district": "110101",
                                "checkpoint_id": "110101#0#0#0", "crossroad": "0"}
    (latency,) = alerts(hook, "firing", "IngestLatencyHigh")
    assert latency["labels"]["stage"] == "capture_to_ingest" and int(latency["annotations"]["value"]) >= 55_000

    city.modes.clear()
    city.lag_s = 0.0
    wait_for(lambda: len(names(hook, "resolved")) == 3, 120, "the three resolutions", logs)
    time.sleep(6)
    for name in ("DeviceDegraded", "DeviceSilent", "IngestLatencyHigh"):
        assert len(alerts(hook, "resolved", name)) == 1, (name, hook.received)
        assert len({a["startsAt"] for a in alerts(hook, "firing", name)}) == 1, (name, hook.received)
    assert names(hook, "firing") == ["DeviceDegraded", "DeviceSilent", "IngestLatencyHigh"], hook.received


def test_ingest_stalled_and_consumer_lag(pipeline: Pipeline) -> None:
    hook, job, logs, bootstrap = pipeline.hook, pipeline.job, pipeline.logs, pipeline.broker.bootstrap
    assert job is not None
    wait_for(lambda: pipeline.devices("healthy") + pipeline.devices("recovering") == 6, 60, "a healthy city", logs)
    before = len(hook.received)

    # The ingest job frozen (its whole process group) while captures keep flowing: one ingest alert,
    # no device blamed for records merely not read yet.
    job._signal(signal.SIGSTOP)
    try:
        wait_for(lambda: alerts(hook, "firing", "IngestStalled"), 60, "IngestStalled", logs)
    finally:
        job._signal(signal.SIGCONT)
    stalled = alerts(hook, "firing", "IngestStalled")[0]
    assert set(stalled["labels"]) == {"alertname", "severity", "kind"}
    wait_for(lambda: alerts(hook, "resolved", "IngestStalled"), 120, "IngestStalled resolved", logs)
    time.sleep(4)
    fired = set(names(hook, "firing", before))
    assert "IngestStalled" in fired and not fired & {"DeviceDegraded", "DeviceSilent", "RecognizerDegraded"}, \
        hook.received[before:]
    assert len(alerts(hook, "resolved", "IngestStalled")) == 1

    # A consumer group that commits once and then stops: its lag grows past the threshold.
    laggard = Consumer({"bootstrap.servers": bootstrap, "group.id": LAGGARD, "enable.auto.commit": False,
                        "log_level": 3})
    try:
        end = laggard.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
        laggard.commit(offsets=[TopicPartition(TOPIC, 0, end)], asynchronous=False)
        wait_for(lambda: alerts(hook, "firing", "CapturesLagging"), 60, "CapturesLagging", logs)
        (lagging,) = alerts(hook, "firing", "CapturesLagging")
        assert lagging["labels"]["group"] == LAGGARD and int(lagging["annotations"]["value"]) > 300

        # ... and catches up, committing as it goes: one resolution.
        stop = threading.Event()
        keeper = threading.Thread(target=keep_up, args=(bootstrap, stop), daemon=True)
        keeper.start()
        try:
            wait_for(lambda: alerts(hook, "resolved", "CapturesLagging"), 60, "CapturesLagging resolved", logs)
            time.sleep(3)
        finally:
            stop.set()
            keeper.join(15)
        assert len(alerts(hook, "resolved", "CapturesLagging")) == 1
        assert len(alerts(hook, "firing", "CapturesLagging")) == 1
    finally:
        laggard.close()


def keep_up(bootstrap: str, stop: threading.Event) -> None:
    """The laggard group consuming and committing after every poll (a real group member)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": LAGGARD, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([TOPIC])
    try:
        while not stop.is_set():
            if consumer.consume(2000, 0.5):
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
