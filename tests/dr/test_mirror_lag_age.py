"""The mirror's lag in time (``dr_mirror_partition_lag_seconds``): what losing the primary now would cost. While
records wait, it is the age of the newest record the DR site holds of the partition; 0 when none wait."""

from __future__ import annotations

import math
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from contracts.ports import free_port
from deploy.processes.mirror import MirrorProcess
from dr_mirror.lag import parse_lag, rpo_now
from testkit.mirror import create_topics, end_offsets, write_properties
from tests.dr._support import wait_until

METRICS_HOST = "127.0.0.2"
"""The address the mirror's /metrics binds (``--metrics-host``): another than the default, as a host's own."""


def lag(port: int) -> dict[str, dict[int, float]]:
    """``records`` and ``seconds`` per partition of ``alerts``, from the mirror's /metrics (none while it starts)."""
    out: dict[str, dict[int, float]] = {"records": {}, "seconds": {}}
    try:
        text = urllib.request.urlopen(f"http://{METRICS_HOST}:{port}/metrics", timeout=10).read().decode()
    except urllib.error.URLError:
        return out
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("topic") == "alerts":
                kind = {"dr_mirror_partition_lag_records": "records",
                        "dr_mirror_partition_lag_seconds": "seconds"}.get(sample.name)
                if kind:
                    out[kind][int(sample.labels["partition"])] = sample.value
    return out


def produce(bootstrap: str, count: int) -> float:
    """``count`` records on partition 0 of ``alerts``, acknowledged; returns the time the last was sent."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(count):
        producer.produce("alerts", value=f"a-{i}".encode(), partition=0)
    sent = time.time()
    assert producer.flush(10) == 0
    return sent


def test_the_lag_in_seconds_is_the_age_of_what_the_dr_site_holds_while_records_wait(make_broker,
                                                                                     tmp_path: Path) -> None:
    source, target = make_broker(name="source"), make_broker(name="target")
    create_topics(source.bootstrap, {"alerts": 2})
    port = free_port()
    props = write_properties(tmp_path / "mm2.properties", source.bootstrap, target.bootstrap)
    mirror = MirrorProcess(["--config", str(props), "--metrics-port", str(port), "--metrics-host", METRICS_HOST],
                           tmp_path / "mirror.log").start()
    try:
        mirrored_at = produce(source.bootstrap, 20)
        wait_until(lambda: end_offsets(target.bootstrap, "alerts", 2) == [20, 0], 60, "the first records",
                   mirror.logs)
        wait_until(lambda: lag(port)["records"] == {0: 0, 1: 0}, 30, "no lag", mirror.logs)
        assert lag(port)["seconds"] == {0: 0.0, 1: 0.0}  # nothing waits: nothing would be lost

        assert target.proc is not None
        target.proc.send_signal(signal.SIGSTOP)  # the DR site stops taking records
        try:
            produce(source.bootstrap, 10)
            wait_until(lambda: lag(port)["records"].get(0) == 10, 30, "10 records waiting", mirror.logs)
            time.sleep(2)
            now = lag(port)
            age = time.time() - mirrored_at
            # The DR site holds partition 0 up to the first 20 records: losing the primary now loses what was
            # written since, the newest of those 20 being about `age` seconds old.
            assert age - 1.5 <= now["seconds"][0] <= age + 0.5, (now, age)
            assert now["seconds"][1] == 0.0 and now["records"][1] == 0
        finally:
            target.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: lag(port)["records"] == {0: 0, 1: 0}, 60, "caught up", mirror.logs)
        assert lag(port)["seconds"] == {0: 0.0, 1: 0.0}
    finally:
        assert mirror.stop() == 0, mirror.logs()[-3000:]

    # Restarted, the mirror reads the newest timestamp the DR site holds (ListOffsets MAX_TIMESTAMP): the age is
    # known before it mirrors anything.
    mirror = MirrorProcess(["--config", str(props), "--metrics-port", str(port), "--metrics-host", METRICS_HOST],
                           tmp_path / "mirror.log")
    assert target.proc is not None
    target.proc.send_signal(signal.SIGSTOP)
    try:
        produce(source.bootstrap, 5)
        target.proc.send_signal(signal.SIGCONT)
        mirror.start()
        wait_until(lambda: not math.isnan(lag(port)["seconds"].get(0, math.nan)), 30, "the age", mirror.logs)
    finally:
        target.proc.send_signal(signal.SIGCONT)
        assert mirror.stop() == 0, mirror.logs()[-3000:]


def test_the_rpo_now_is_every_waiting_record_and_the_oldest_partitions_age() -> None:
    """What the DR page says losing the primary now would cost, from the mirror's exposition text: a NaN age
    (nothing of that partition mirrored yet) makes the span unknown, never a made-up number."""
    text = "\n".join([
        'dr_mirror_partition_lag_records{partition="0",topic="a"} 10.0',
        'dr_mirror_partition_lag_seconds{partition="0",topic="a"} 4.25',
        'dr_mirror_partition_lag_records{partition="1",topic="a"} 3.0',
        'dr_mirror_partition_lag_seconds{partition="1",topic="a"} 9.5',
        'dr_mirror_partition_lag_records{partition="0",topic="b"} 0.0',
        'dr_mirror_partition_lag_seconds{partition="0",topic="b"} 0.0', ""])
    partitions = parse_lag(text)
    assert [(p["topic"], p["partition"], p["lag"], p["lag_seconds"]) for p in partitions] == [
        ("a", 0, 10, 4.25), ("a", 1, 3, 9.5), ("b", 0, 0, 0.0)]
    assert rpo_now(partitions) == {"records": 13, "seconds": 9.5}
    unknown = parse_lag(text.replace("9.5", "NaN"))
    assert unknown[1]["lag_seconds"] is None and rpo_now(unknown) == {"records": 13, "seconds": None}
    assert rpo_now(parse_lag(text.replace("10.0", "0.0").replace("3.0", "0.0"))) == {"records": 0, "seconds": 0.0}
