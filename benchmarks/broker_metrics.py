"""What the broker's Prometheus metrics (Kafka's names, `bus/broker/kafka_metrics.py`) cost (issue 32).

1. Broker CPU (utime + stime of its process) per single-record produce request, paced by one confluent-kafka
   producer (linger.ms=0, acks=1, the same pacing as `broker_requests.py`), with the metrics endpoint on and
   scraped every second (as Prometheus would, at a tight interval) against the same broker build with the
   endpoint off, each in a fresh broker, alternating `--rounds` times. Target: on / off <= 1.05.
2. The time to scrape `/metrics` of a broker holding 1,000 partitions (one topic, a consumer group's
   committed offsets on all of them, so the lag family has 1,000 series): median and worst of 20 scrapes.

    .venv/bin/python benchmarks/broker_metrics.py [--rate 5000] [--seconds 8] [--rounds 2]

Print `uptime` with the figures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker_requests import TOPIC, _measured, _paced_produce

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess

PARTITIONS = 1000


def _scrape(port: int) -> float:
    """Seconds one scrape of /metrics takes (the whole body read)."""
    started = time.perf_counter()
    urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read()
    return time.perf_counter() - started


def cpu_per_produce(args: argparse.Namespace, metrics_on: bool) -> float:
    """CPU microseconds per produce request of a fresh broker, its metrics endpoint on (and scraped each second)
    or off."""
    from testkit.clients import create_topic

    port = free_port()
    overrides = {"num.partitions": "1", "log.cleaner.enable": "false"}
    if metrics_on:
        overrides["bus.metrics.listener"] = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides).start()
        stop = threading.Event()

        def scrape_every_second() -> None:
            while not stop.wait(1.0):
                _scrape(port)

        scraper = threading.Thread(target=scrape_every_second, daemon=True)
        try:
            create_topic(broker.bootstrap, TOPIC)
            time.sleep(5)  # past the start-up schema preload, whose CPU is not a produce's
            if metrics_on:
                scraper.start()
            cpu, (_records, requests) = _measured(broker.proc.pid, _paced_produce,  # type: ignore[union-attr]
                                                  broker.bootstrap, args.rate, args.seconds)
        finally:
            stop.set()
            broker.stop()
    return cpu / max(requests, 1) * 1e6


def scrape_with_partitions() -> list[float]:
    """20 scrape times of a broker with PARTITIONS partitions and a group's offsets committed on each."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"bus.metrics.listener": f"127.0.0.1:{port}"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topic = NewTopic("spread", num_partitions=PARTITIONS, replication_factor=1)
            admin.create_topics([topic], operation_timeout=120, request_timeout=130)["spread"].result(140)
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "loader"})
            consumer.commit(offsets=[TopicPartition("spread", p, 0) for p in range(PARTITIONS)], asynchronous=False)
            consumer.close()
            _scrape(port)  # warm
            return [_scrape(port) for _ in range(20)]
        finally:
            broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=5000, help="produce requests/s")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2, help="on/off pairs, alternating")
    args = parser.parse_args()
    mp.set_start_method("spawn")
    on, off = [], []
    for _ in range(args.rounds):
        off.append(cpu_per_produce(args, metrics_on=False))
        on.append(cpu_per_produce(args, metrics_on=True))
        print(f"round: off {off[-1]:.1f} us, on {on[-1]:.1f} us per produce request", flush=True)
    scrapes = scrape_with_partitions()
    off_us, on_us = statistics.median(off), statistics.median(on)
    print(f"\n{'figure':<58}{'value':>12}")
    print(f"{f'CPU us per produce request @ {args.rate}/s, metrics off':<58}{off_us:>12.1f}")
    print(f"{'  metrics on, scraped every second':<58}{on_us:>12.1f}")
    print(f"{'  on / off (target <= 1.05)':<58}{on_us / off_us:>12.3f}")
    median_ms = statistics.median(scrapes) * 1000
    print(f"{f'/metrics scrape with {PARTITIONS} partitions, median (ms)':<58}{median_ms:>12.1f}")
    print(f"{'  worst of 20 (ms)':<58}{max(scrapes) * 1000:>12.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
