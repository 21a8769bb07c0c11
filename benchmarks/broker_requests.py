"""What one request costs the broker, and what hostile clients cost it: ours against librdkafka's mock cluster.

1. Broker CPU (utime + stime from /proc/PID/stat) per request while one confluent-kafka producer sends
   single-record produce requests at a paced rate (default 10,000/s, linger.ms=0, acks=1), and per fetch
   while a consumer re-reads a window in small fetches. Request counts come from librdkafka's own
   statistics (brokers.*.req), the same on both sides. The mock cluster runs in a holder process, so its
   CPU is read the same way. Target (issue 15): produce ours/mock <= 1.5. A broker that answers slower
   lets librdkafka put more records in each request, so CPU per produced record is printed too.
   Below it, the CPython floor (`python_floor.py`): a uvloop server that only splits the frames, appends
   them to a file and answers each, at the same rate: what no CPython broker can spend less than.
2. The event loop's worst stall in each phase (our `bus_event_loop_stall_recent_max_seconds`, 10 s window),
   and under an idempotent producer writing 5,000 records/s over 1,000 partitions (target < 20 ms).
3. RSS of our broker (peak, over its idle RSS) while each hostile client of testkit/hostile.py
   attacks it, and meanwhile the produce round-trip latency of a well-behaved client.

    .venv/bin/python benchmarks/broker_requests.py [--rate 10000] [--seconds 8] [--skip-hostile]

Print `uptime` with the figures: on a shared machine the CPU figures hold up, latencies do not.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import python_floor as python_floor_server

from contracts.ports import free_port
from deploy.processes.broker import BrokerProcess

TOPIC = "requests"
SPREAD, SPREAD_PARTITIONS = "spread", 1000  # issue 15: the loop's worst stall under idempotent produce here < 20 ms
VALUE = b"x" * 100
WINDOW = 30_000  # records the consumer re-reads (the mock keeps ~5 MB per partition)
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _requests_of(stats: dict, name: str) -> int:  # type: ignore[type-arg]
    return sum(b.get("req", {}).get(name, 0) for b in stats.get("brokers", {}).values() if b.get("nodeid", -1) >= 0)


def _fresh(stats: list, pump) -> dict:  # type: ignore[no-untyped-def,type-arg]
    """The next statistics report (callbacks run inside poll), so counts include everything sent so far."""
    seen = len(stats)
    deadline = time.monotonic() + 5
    while len(stats) == seen and time.monotonic() < deadline:
        pump(0.05)
    return stats[-1]


def _mock_holder(ready: mp.Queue, stop: mp.Event) -> None:  # type: ignore[valid-type]
    from confluent_kafka import Producer

    holder = Producer({"test.mock.num.brokers": 1, "test.mock.broker.rtt": 0})
    brokers = holder.list_topics(timeout=10).brokers
    ready.put((os.getpid(), ",".join(f"{b.host}:{b.port}" for b in brokers.values())))
    stop.wait()


def _paced_produce(bootstrap: str, rate: int, seconds: float, go: mp.Event, out: mp.Queue) -> None:  # type: ignore[valid-type]
    """Single-record produce requests at `rate`/s; reports (records, Produce requests) once `go` is set."""
    from confluent_kafka import Producer

    stats: list[dict] = []  # type: ignore[type-arg]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "enable.idempotence": False,
                         "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))})
    producer.produce(TOPIC, VALUE, partition=0)
    producer.flush(30)
    out.put("ready")
    go.wait()
    before = _requests_of(_fresh(stats, producer.poll), "Produce")
    interval = 1.0 / rate
    total = int(rate * seconds)
    start = time.perf_counter()
    for i in range(total):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(TOPIC, VALUE, partition=0)
        producer.poll(0)
    producer.flush(30)
    out.put((total, _requests_of(_fresh(stats, producer.poll), "Produce") - before))


def _fetches(bootstrap: str, seconds: float, go: mp.Event, out: mp.Queue) -> None:  # type: ignore[valid-type]
    """Re-read the last WINDOW records in fetches of at most 4 KiB; reports (records, Fetch requests)."""
    from confluent_kafka import Consumer, TopicPartition

    stats: list[dict] = []  # type: ignore[type-arg]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "requests", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 5, "max.partition.fetch.bytes": 4096,
                         "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s))})
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    start_offset = max(low, high - WINDOW)
    consumer.assign([TopicPartition(TOPIC, 0, start_offset)])
    consumer.consume(100, 2.0)
    out.put("ready")
    go.wait()
    before = _requests_of(_fresh(stats, consumer.poll), "Fetch")
    seen = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        consumer.assign([TopicPartition(TOPIC, 0, start_offset)])
        position = start_offset
        while position < high - 1 and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                if message.error() is None:
                    seen += 1
                    position = message.offset()
    out.put((seen, _requests_of(_fresh(stats, consumer.poll), "Fetch") - before))
    consumer.close()


def _spread_produce(bootstrap: str, topic: str, rate: int, seconds: float, go: mp.Event,  # type: ignore[valid-type]
                    out: mp.Queue) -> None:  # type: ignore[valid-type]
    """An idempotent producer writing `rate` records/s round-robin over every partition of `topic`."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    partitions = len(producer.list_topics(topic, timeout=10).topics[topic].partitions)
    out.put("ready")
    go.wait()
    interval = 1.0 / rate
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        delay = start + i * interval - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, VALUE, partition=i % partitions)
        producer.poll(0)
    out.put((int(rate * seconds), producer.flush(60)))


def _create_spread(bootstrap: str) -> None:
    """The 1,000-partition topic (its creation takes longer than the test helpers wait)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic(SPREAD, num_partitions=SPREAD_PARTITIONS, replication_factor=1)
    admin.create_topics([topic], operation_timeout=120, request_timeout=130)[SPREAD].result(timeout=140)


def _fill(bootstrap: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for _ in range(records):
        producer.produce(TOPIC, VALUE, partition=0)
    producer.flush(60)


def _measured(pid: int, target, *args) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    """Run a client process; CPU seconds of `pid` from the client's go signal to its report, and the report."""
    out: mp.Queue = mp.Queue()
    go = mp.Event()
    proc = mp.Process(target=target, args=(*args, go, out))
    proc.start()
    assert out.get(timeout=120) == "ready"
    before = cpu_seconds(pid)
    go.set()
    result = out.get(timeout=600)
    spent = cpu_seconds(pid) - before
    proc.join(30)
    return spent, result


def measure(pid: int, bootstrap: str, args: argparse.Namespace,
            stall: Callable[[], float] = lambda: 0.0) -> dict[str, float]:
    """CPU per produce and per fetch; `stall` reads the worst event-loop stall of the phase just ended."""
    _fill(bootstrap, WINDOW)
    cpu, (records, requests) = _measured(pid, _paced_produce, bootstrap, args.rate, args.seconds)
    figures = {"produce_cpu_us": cpu / max(requests, 1) * 1e6, "produce_requests": requests,
               "record_cpu_us": cpu / records * 1e6, "produce_stall": stall(),
               "records_per_request": records / max(requests, 1), "core_share": cpu / args.seconds}
    cpu, (records, fetches) = _measured(pid, _fetches, bootstrap, args.seconds)
    figures |= {"fetch_cpu_us": cpu / max(fetches, 1) * 1e6, "fetches": fetches, "fetch_stall": stall()}
    return figures


def scrape(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return next(float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " "))


def hostile(broker: BrokerProcess) -> list[tuple[str, int, dict[str, float]]]:
    """(case, RSS growth in bytes, probe latency figures) for each hostile client."""
    import psutil

    from testkit import hostile as h
    from testkit.clients import create_topic
    from testkit.raw_kafka import RawKafka, produce_error

    create_topic(broker.bootstrap, "big")
    create_topic(broker.bootstrap, "probe")
    create_topic(broker.bootstrap, "compacted", config={"cleanup.policy": "compact"})
    h.fill_topic(broker.bootstrap, "big", 16)
    process = psutil.Process(broker.proc.pid)  # type: ignore[union-attr]

    def bomb() -> None:
        with RawKafka(broker.bootstrap, timeout=60) as raw:
            code = produce_error(raw, "compacted", 0, h.zstd_bomb_batch(30))[0]
            assert code == 2, f"the bomb was answered {code}, not CORRUPT_MESSAGE"

    cases = {
        "1,000 pipelined fetches, never read": lambda: h.FetchPipeliner(broker.bootstrap, "big", 1000),
        "2,000 idle connections": lambda: h.IdleConnections(broker.bootstrap, 2000),
        "1 MB zstd batch -> 30 GiB": bomb,
        "flood of tiny requests (4 conns)": lambda: h.TinyFlood(broker.bootstrap, 4, 5.0),
        "4 slow consumers (64 KiB/s)": lambda: [h.SlowConsumer(broker.bootstrap, "big") for _ in range(4)],
    }
    results = []
    for name, attack in cases.items():
        baseline = process.memory_info().rss
        peak = baseline
        probe = h.LatencyProbe(broker.bootstrap, "probe")
        handle = attack()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            peak = max(peak, process.memory_info().rss)
            time.sleep(0.05)
        figures = probe.stop()
        for item in handle if isinstance(handle, list) else [handle]:
            for method in ("close", "join"):
                if hasattr(item, method):
                    getattr(item, method)()
        results.append((name, peak - baseline, figures))
    return results


def python_floor(args: argparse.Namespace) -> float:
    """CPU us per request of `python_floor.py`'s server at the produce phase's rate: what any CPython broker spends."""
    with tempfile.TemporaryDirectory() as tmp:
        ready: mp.Queue = mp.Queue()
        server = mp.Process(target=python_floor_server.serve, args=(str(Path(tmp) / "log"), ready))
        server.start()
        try:
            pid, port = ready.get(timeout=30)
            before = cpu_seconds(pid)
            sent = python_floor_server.drive(port, args.rate, args.seconds, python_floor_server.produce_frame())
            return (cpu_seconds(pid) - before) / sent * 1e6
        finally:
            server.kill()
            server.join(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=10_000, help="produce requests/s")
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each paced run (<= 10)")
    parser.add_argument("--skip-hostile", action="store_true")
    args = parser.parse_args()
    mp.set_start_method("spawn")

    ready: mp.Queue = mp.Queue()
    stop = mp.Event()
    holder = mp.Process(target=_mock_holder, args=(ready, stop))
    holder.start()
    mock_pid, mock_bootstrap = ready.get(timeout=30)
    print(f"librdkafka mock cluster at {mock_bootstrap} (pid {mock_pid})", flush=True)
    mock = measure(mock_pid, mock_bootstrap, args)
    stop.set()
    holder.join(10)
    floor_us = python_floor(args)

    metrics_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", {"num.partitions": "1", "log.cleaner.enable": "false",
                                                     "bus.metrics.listener": f"127.0.0.1:{metrics_port}"}).start()
        try:
            from testkit.clients import create_topic

            create_topic(broker.bootstrap, TOPIC)
            print(f"bus broker at {broker.bootstrap} (pid {broker.proc.pid})", flush=True)  # type: ignore[union-attr]
            def stall() -> float:
                return scrape(metrics_port, "bus_event_loop_stall_recent_max_seconds")

            # Steady state only: the start-up schema preload (about a second of CPU in a thread) would be
            # counted as produce CPU and its GIL hold-ups as produce-phase stalls.
            deadline = time.monotonic() + 120
            while (preload := scrape(metrics_port, "bus_schema_preload_seconds")) == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError("the broker's schema preload did not finish")
                time.sleep(0.2)
            print(f"schema preload took {preload:.2f} s; measuring from here", flush=True)
            time.sleep(3)  # the stall window (10 s) then holds no preload stall before the 8 s phase ends

            ours = measure(broker.proc.pid, broker.bootstrap, args, stall)  # type: ignore[union-attr]
            _create_spread(broker.bootstrap)
            ours["create_stall"] = stall()  # creating 1,000 partitions (logs made in a worker thread)
            time.sleep(10)  # a fresh 10 s stall window: the next figure is the produce load's alone
            _measured(broker.proc.pid, _spread_produce, broker.bootstrap, SPREAD, 5000,  # type: ignore[union-attr]
                      min(args.seconds, 9.0))
            ours["spread_stall"] = stall()
            attacks = [] if args.skip_hostile else hostile(broker)
        finally:
            broker.stop()

    print(f"\n{'figure':<44}{'bus':>12}{'mock':>12}{'bus/mock':>10}")
    for key, label in (("produce_cpu_us", f"CPU us per produce request @ {args.rate}/s"),
                       ("record_cpu_us", "CPU us per produced record (same pacing)"),
                       ("fetch_cpu_us", "CPU us per fetch request (4 KiB)")):
        print(f"{label:<44}{ours[key]:>12.1f}{mock[key]:>12.1f}{ours[key] / mock[key]:>10.2f}")
        if key == "produce_cpu_us":
            print(f"{'  CPython floor (split, append, answer)':<44}{floor_us:>12.1f}{mock[key]:>12.1f}"
                  f"{floor_us / mock[key]:>10.2f}")
    ours_rpr, mock_rpr = ours["records_per_request"], mock["records_per_request"]
    print(f"{'produce requests (records per request)':<44}{ours['produce_requests']:>6.0f} ({ours_rpr:.2f})"
          f"{mock['produce_requests']:>6.0f} ({mock_rpr:.2f})")
    print(f"{'broker core share during produce':<44}{ours['core_share']:>12.2f}{mock['core_share']:>12.2f}")
    print(f"{'worst event loop stall, produce phase (ms)':<44}{ours['produce_stall'] * 1000:>12.1f}")
    print(f"{'worst event loop stall, fetch phase (ms)':<44}{ours['fetch_stall'] * 1000:>12.1f}")
    print(f"{'worst stall, creating 1,000 partitions (ms)':<44}{ours['create_stall'] * 1000:>12.1f}")
    print(f"{'worst stall, idempotent 5,000/s on 1,000 p. (ms)':<44}{ours['spread_stall'] * 1000:>12.1f}")
    if attacks:
        print(f"\n{'hostile client (5 s)':<40}{'RSS +MiB':>10}{'probe n':>9}{'p50 ms':>9}{'p99 ms':>9}")
        for name, growth, fig in attacks:
            print(f"{name:<40}{growth / (1 << 20):>10.1f}{fig['count']:>9.0f}{fig['p50'] * 1000:>9.1f}"
                  f"{fig['p99'] * 1000:>9.1f}")
    print(f"\nload average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
