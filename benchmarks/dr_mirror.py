"""The DR mirror (issue 14): throughput against plain produce, CPU of passthrough, lag at a steady rate.

Two broker processes on this machine (source and target), JSON-like capture records of ~300 bytes.
1. Throughput, per codec (none, zstd): confluent-kafka produces N records into the source (plain
   produce, the baseline), then `python -m dr_mirror` mirrors them; records/s and MB/s of both, and
   the mirror process's CPU seconds per MB mirrored (psutil).
2. CPU per MB in-process: rewriting batches for passthrough (header + CRC) against decompressing and
   recompressing them (what a client-based mirror such as MM2 does), on the same zstd batches.
3. Lag p99 at 5,000 records/s: a paced producer on the source, a consumer on the target; lag is
   target arrival time minus the record's create time. Target: p99 <= 1 s.
4. The drills' RPO and RTO (`python -m dr_mirror.drill`, each scenario once, with the ingest slice on
   both sites unless --drills-bus-only): records lost by the primary's death before the replay, the
   time to producers on DR, to the group reading on DR and to rows in DR HBase; the end-to-end loss.

    .venv/bin/python benchmarks/dr_mirror.py [--records N] [--seconds S] [--drills S,S|none] [--drills-bus-only]

Figures depend on the machine's load: report them with `uptime`'s load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import subprocess

import psutil
from confluent_kafka import Consumer, Producer, TopicPartition

from bus.protocol import compression
from bus.protocol import records as rb
from deploy.processes.broker import BrokerProcess
from deploy.processes.mirror import MirrorProcess
from dr_mirror import batches as bt
from testkit.mirror import create_topics, end_offsets, write_properties

PARTITIONS = 2


def _record(i: int) -> bytes:
    return json.dumps({"record_id": f"10.0.{i % 250}.{i % 7}-{i}", "checkpoint_id": f"110110#{i % 24}#0#0",
                       "capture_time": "2026-11-23T23:00:00.000+08:00", "plate_number": f"浙A{i % 99999:05d}",
                       "plate_color": "blue", "vehicle_color": "white", "vehicle_type": "SUV", "speed_kmh": i % 120,
                       "image_url": f"s3://captures/{i}.jpg"}, ensure_ascii=False).encode()


def _produce(bootstrap: str, topic: str, records: int, codec: str) -> tuple[float, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": codec,
                         "queue.buffering.max.messages": 2_000_000, "batch.size": 262_144})
    payloads = [_record(i) for i in range(1000)]
    size = 0
    start = time.perf_counter()
    for i in range(records):
        value = payloads[i % 1000]
        size += len(value)
        while True:
            try:
                producer.produce(topic, key=str(i % 24).encode(), value=value)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.perf_counter() - start, size


def _await(condition: Callable[[], bool], what: str, timeout: float = 300, step: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} in {timeout} s")
        time.sleep(step)


def _resumed(mirror: MirrorProcess, partitions: int) -> Callable[[], bool]:
    return lambda: mirror.logs().count("resumes at source offset") >= partitions


def throughput(source: BrokerProcess, target: BrokerProcess, work: Path, records: int, codec: str) -> dict:
    """The mirror is started first and stopped (so topic creation and start-up are out of the figure), the
    records are produced, and the clock runs from the restarted mirror's resumption to the last record."""
    topic = "capture.vehicle" if codec == "none" else "capture.face"
    create_topics(source.bootstrap, {topic: PARTITIONS})
    props = write_properties(work / f"mm2-{codec}.properties", source.bootstrap, target.bootstrap,
                             primary__dr_topics=topic.replace(".", "\\\\."))
    first = MirrorProcess(["--config", str(props)], work / f"mirror-{codec}-0.log").start()
    _await(_resumed(first, PARTITIONS), "start-up")
    first.stop()
    elapsed, size = _produce(source.bootstrap, topic, records, codec)
    expected = end_offsets(source.bootstrap, topic, PARTITIONS)
    mirror = MirrorProcess(["--config", str(props)], work / f"mirror-{codec}.log").start()
    try:
        proc = psutil.Process(mirror.proc.pid)  # type: ignore[union-attr]
        _await(_resumed(mirror, PARTITIONS), "resumption")
        start, cpu0 = time.perf_counter(), sum(proc.cpu_times()[:2])
        _await(lambda: end_offsets(target.bootstrap, topic, PARTITIONS) == expected, "catch-up", step=0.02)
        mirror_elapsed, cpu = time.perf_counter() - start, sum(proc.cpu_times()[:2]) - cpu0
    finally:
        mirror.stop()
    stored = sum(f.stat().st_size for p in range(PARTITIONS) for f in (target.data_dir / f"{topic}-{p}").glob("*.log"))
    return {"codec": codec, "records": records, "stored_MB": round(stored / 1e6, 1),
            "produce_records_s": round(records / elapsed), "produce_MB_s": round(size / elapsed / 1e6, 1),
            "mirror_records_s": round(records / mirror_elapsed), "mirror_MB_s": round(size / mirror_elapsed / 1e6, 1),
            "mirror_cpu_s_per_MB": round(cpu / (size / 1e6), 4)}


def cpu_per_mb(records: int) -> dict:
    batches = []
    for start in range(0, records, 500):
        recs = [(start + i, 0, b"k", _record(start + i)) for i in range(500)]
        batches.append(rb.build_batch(recs, base_offset=start, compression=compression.ZSTD, producer_id=1,
                                      producer_epoch=0, base_sequence=start))
    infos = [rb.scan_batches(b)[0] for b in batches]
    raw_mb = sum(len(_record(i)) for i in range(records)) / 1e6
    t0 = time.process_time()
    for data, info in zip(batches, infos, strict=True):
        bt.passthrough(data, info, 9, 0, info.base_offset)
    passthrough = time.process_time() - t0
    t0 = time.process_time()
    for data, info in zip(batches, infos, strict=True):
        rb.build_batch(list(rb.iter_records(data, info)), base_offset=info.base_offset, compression=info.compression,
                       producer_id=9, producer_epoch=0, base_sequence=info.base_offset)
    recompress = time.process_time() - t0
    return {"passthrough_cpu_ms_per_MB": round(passthrough / raw_mb * 1000, 2),
            "decompress_recompress_cpu_ms_per_MB": round(recompress / raw_mb * 1000, 2),
            "ratio": round(recompress / max(passthrough, 1e-9), 1)}


def lag_p99(source: BrokerProcess, target: BrokerProcess, work: Path, seconds: float, rate: int = 5000) -> dict:
    topic = "device.heartbeat"
    create_topics(source.bootstrap, {topic: PARTITIONS})
    props = write_properties(work / "mm2-lag.properties", source.bootstrap, target.bootstrap,
                             primary__dr_topics=topic.replace(".", "\\\\."))
    mirror = MirrorProcess(["--config", str(props)], work / "mirror-lag.log").start()
    lags: list[float] = []
    done = threading.Event()

    def consume() -> None:
        consumer = Consumer({"bootstrap.servers": target.bootstrap, "group.id": "lag-probe",
                             "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10})
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        while not done.is_set():
            for msg in consumer.consume(1000, 0.1):
                if not msg.error():
                    lags.append(time.time() - msg.timestamp()[1] / 1000)
        consumer.close()

    try:
        _await(_resumed(mirror, PARTITIONS), "start-up", step=0.1)
        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        producer = Producer({"bootstrap.servers": source.bootstrap, "linger.ms": 5})
        value = _record(1)
        start = time.perf_counter()
        sent = 0
        while time.perf_counter() - start < seconds:
            due = int((time.perf_counter() - start) * rate)
            while sent < due:
                producer.produce(topic, value=value)
                sent += 1
            producer.poll(0)
            time.sleep(0.002)
        producer.flush(30)
        deadline = time.monotonic() + 30
        while len(lags) < sent and time.monotonic() < deadline:
            time.sleep(0.1)
        done.set()
        reader.join(10)
    finally:
        mirror.stop()
    lags.sort()
    p = (lambda q: round(lags[min(len(lags) - 1, int(q * len(lags)))], 3)) if lags else (lambda q: None)
    return {"rate_records_s": rate, "seconds": seconds, "sent": sent, "received": len(lags),
            "lag_p50_s": p(0.50), "lag_p99_s": p(0.99), "lag_max_s": lags[-1] if lags else None,
            "lag_mean_s": round(statistics.fmean(lags), 3) if lags else None, "target_p99_s": 1.0}


DRILL_FIGURES = ("rpo_records", "rpo_span_s", "rto_producers_s", "rto_consumers_s", "rto_rows_s",
                 "behind_at_restart_records", "catch_up_s", "copy_back_s", "devices_held_s", "lost_in_dr_topics",
                 "missing_in_dr_hbase", "missing_in_primary_hbase", "missing_at_dr", "duplicates_in_dr_topics",
                 "max_mirror_lag_records")


def drill(scenario: str, work: Path, bus_only: bool) -> dict:
    """One drill run by its own CLI (it starts its own sites); its RPO/RTO figures."""
    report = work / f"drill-{scenario}"
    subprocess.run([sys.executable, "-m", "dr_mirror.drill", "--scenario", scenario, "--report", str(report),
                    *(["--no-ingest"] if bus_only else [])], cwd=Path(__file__).resolve().parents[1],
                   capture_output=True, check=True, timeout=1800)
    figures = json.loads((report / "drill.json").read_text())
    return {"drill": scenario, "ingest": not bus_only, **{k: figures[k] for k in DRILL_FIGURES if k in figures}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--drills", default="primary-loss,mirror-crash,failback",
                        help="drill scenarios to run after the mirror figures (none: skip)")
    parser.add_argument("--drills-bus-only", action="store_true", help="drills without the ingest slice")
    parser.add_argument("--skip-mirror", action="store_true", help="only the drills")
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}")
    with tempfile.TemporaryDirectory(prefix="dr-bench-") as tmp:
        work = Path(tmp)
        source = BrokerProcess(work / "source").start()
        target = BrokerProcess(work / "target").start()
        try:
            if not args.skip_mirror:
                for codec in ("none", "zstd"):
                    print(json.dumps(throughput(source, target, work, args.records, codec)))
                print(json.dumps(cpu_per_mb(min(args.records, 50_000))))
                print(json.dumps(lag_p99(source, target, work, args.seconds)))
        finally:
            source.stop()
            target.stop()
        for scenario in [s for s in args.drills.split(",") if s and s != "none"]:
            print(json.dumps(drill(scenario, work, args.drills_bus_only)), flush=True)
    print(f"load average: {os.getloadavg()}")


if __name__ == "__main__":
    main()
