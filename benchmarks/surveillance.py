"""Surveillance: capture produced -> hit consumed latency as `make up` deploys the service, and what one watch-stage
instance sustains.

1. Latency: 10,000 watched plates and 10,000 watched faces (commands published before the service starts,
   so its start-up also shows how long the watchlists take to load); captures produced at a paced rate
   (default 5,000 records/s, half vehicles, half faces; 1 % of them a watched plate or a watched face with
   recogniser noise) by a separate process; a consumer of ``surveillance.hits`` stamps each hit on
   arrival. Latency = arrival - the moment the capture was handed to the producer. Target (issue 12):
   p99 <= 100 ms.
2. Throughput: a backlog of captures is put on the bus with the service stopped, then one instance
   (watch stage only, a fresh group) is started; records/s = backlog / time until its committed offsets
   reach the end.

   The latency is measured with every stage running as `make up` runs them (``--layout deployed``: the watch stage
   in one process, the cloned-plate and statistics stages in a second one at ``[surveillance] analytics_nice``);
   ``--layout one-process`` runs every stage in one process (the earlier layout), ``--layout watch-only`` the
   watch stage alone (a partial figure: nobody deploys it so). Throughput is always the watch stage alone.

    .venv/bin/python benchmarks/surveillance.py [--rate 5000] [--seconds 15] [--backlog 200000]
        [--layout deployed|one-process|watch-only]

Starts its own broker (or --bootstrap). Print `uptime` with the figures: on a shared machine latencies vary.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from contracts.config import load as load_config
from contracts.records import encode, encode_feature
from contracts.topics import Topics
from deploy.processes.broker import BrokerProcess
from deploy.processes.surveillance import ServiceProcess
from deploy.surveillance import services as surveillance_services
from ingest import values
from surveillance.settings import Settings
from surveillance.streams import ensure_topics, service_topics
from testkit.surveillance import CHECKPOINTS, capture_time, face, vehicle, write_config

T = Topics()
PARTITIONS = 2
LAYOUTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "deployed": (),  # what deploy/surveillance.py starts for the config (layout())
    "one-process": ((),),
    "watch-only": (("--stages", "watch"),),
}
LAYOUT_LABELS = {
    "deployed": "every stage, as make up runs them (watch; cloned + stats at nice 10)",
    "one-process": "every stage in one process (the layout before issue 33)",
    "watch-only": "PARTIAL: the watch stage alone, no cloned-plate or statistics work",
}
GROUP = "surveillance-watch"


def watched_plate(n: int) -> str:
    return f"京Z{n:05d}"  # city letter Z: the simulator's random plates never carry it


def publish_watches(bootstrap: str, plates: int, faces: int, rng: random.Random) -> list[list[float]]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
    for n in range(plates):
        producer.produce(T.control_watchlist, encode({"watch_id": f"p{n}", "kind": "plate",
                                                      "plate": watched_plate(n)}), f"p{n}".encode())
        producer.poll(0)
    identities = []
    for n in range(faces):
        identity = values.unit_vector(rng)
        identities.append(identity)
        producer.produce(T.control_watchlist, encode({"watch_id": f"f{n}", "kind": "face", "threshold": 0.8,
                                                      "feature": encode_feature(identity)}), f"f{n}".encode())
        producer.poll(0)
    assert producer.flush(60) == 0
    return identities


def records(count: int, plates: int, identities: list[list[float]], share: float,
            seed: int) -> list[tuple[str, bytes, bytes, bool]]:
    """Pre-built captures (topic, key, value, watched): building faces costs more than sending them."""
    rng = random.Random(seed)
    out = []
    strangers = [values.feature(rng) for _ in range(500)]
    for n in range(count):
        checkpoint = CHECKPOINTS[n % len(CHECKPOINTS)]
        watched = rng.random() < share
        if n % 2 == 0:
            plate = watched_plate(rng.randrange(plates)) if watched else values.plate(rng, "blue")
            record, topic = vehicle(f"b{seed}-{n}", checkpoint, plate, rng, capture_time()), T.vehicle
        else:
            record, topic = face(f"b{seed}-{n}", checkpoint, rng, rng.choice(identities)), T.face
            if not watched:
                record["feature"] = strangers[n % len(strangers)]
        out.append((topic, checkpoint.encode(), encode(record), watched))
    return out


def paced_producer(bootstrap: str, batch: list[tuple[str, bytes, bytes, bool]], rate: int,
                   sent: mp.Queue) -> None:  # type: ignore[type-arg]
    """Child process: sends at ``rate``; reports (record_id -> send time) of the watched records."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "log_level": 3, "acks": "all"})
    stamps: dict[str, float] = {}
    start = time.monotonic()
    for n, (topic, key, value, watched) in enumerate(batch):
        due = start + n / rate
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        if watched:
            stamps[json.loads(value)["record_id"]] = time.time()
        producer.produce(topic, value, key)
        producer.poll(0)
    producer.flush(30)
    sent.put((stamps, time.monotonic() - start))


def latency(bootstrap: str, plates: int, identities: list[list[float]], rate: int, seconds: float) -> None:
    batch = records(int(rate * seconds), plates, identities, 0.01, seed=1)
    hits = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "log_level": 3, "fetch.wait.max.ms": 5})
    hits.assign([TopicPartition(T.surveillance_hits, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    arrived: dict[str, float] = {}
    spawn = mp.get_context("spawn")  # no fork of a process with librdkafka threads
    sent: mp.Queue = spawn.Queue()  # type: ignore[type-arg]
    child = spawn.Process(target=paced_producer, args=(bootstrap, batch, rate, sent))
    child.start()
    stamps: dict[str, float] | None = None
    took = 0.0
    deadline = time.monotonic() + seconds + 60
    while time.monotonic() < deadline:
        # poll, not consume(1000, timeout): consume waits until it has 1,000 hits or the timeout passes, which
        # stamped each hit up to 50 ms after it had arrived (p50 +25 ms in last session's figures).
        message = hits.poll(0.05)
        if message is not None and message.error() is None:
            hit = json.loads(message.value())
            if hit["kind"] != "cloned_plate":
                arrived.setdefault(hit["record_id"], time.time())
        if stamps is None and not sent.empty():
            stamps, took = sent.get()
        if stamps is not None and set(stamps) <= set(arrived):
            break
    child.join()
    hits.close()
    assert stamps is not None, "producer did not finish"
    waits = sorted((arrived[r] - stamps[r]) * 1000 for r in stamps if r in arrived)
    missing = sorted(set(stamps) - set(arrived))
    if missing:
        print(f"no hit (within {seconds + 60:.0f} s) for {len(missing)} watched records, e.g. {missing[:5]}")
    q = statistics.quantiles(waits, n=100)
    print(f"latency at {len(batch) / took:,.0f} records/s offered ({len(batch):,} records, {len(waits)} hits, "
          f"{len(missing)} missing): p50 {q[49]:.1f} ms, p99 {q[98]:.1f} ms, max {waits[-1]:.1f} ms")


def throughput(bootstrap: str, plates: int, identities: list[list[float]], backlog: int,
               service: ServiceProcess) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 3})
    for start in range(0, backlog, 20_000):
        for topic, key, value, _ in records(min(20_000, backlog - start), plates, identities, 0.01, seed=100 + start):
            while True:
                try:
                    producer.produce(topic, value, key)
                    break
                except BufferError:
                    producer.poll(0.05)
    assert producer.flush(60) == 0
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "log_level": 3})
    partitions = [TopicPartition(t, p) for t in T.captures for p in range(PARTITIONS)]
    ends = {(tp.topic, tp.partition): probe.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
    begun = sum(max(tp.offset, 0) for tp in probe.committed(partitions, timeout=10))
    todo = sum(ends.values()) - begun
    service.start(timeout=300)
    started = time.monotonic()
    while True:
        done = sum(max(tp.offset, 0) for tp in probe.committed(partitions, timeout=10)) - begun
        if done >= todo:
            break
        time.sleep(0.2)
    took = time.monotonic() - started
    probe.close()
    print(f"one instance (watch stage): {todo:,} backlog records in {took:.1f} s = {todo / took:,.0f} records/s")


def layout(name: str, config: Path) -> tuple[tuple[str, ...], ...]:
    """The stage arguments of each service process: for ``deployed``, those of make up's own commands."""
    if name != "deployed":
        return LAYOUTS[name]
    commands = [cmd for _, cmd, _ in surveillance_services(load_config(config)) if cmd[2] == "surveillance"]
    return tuple(tuple(cmd[cmd.index("--config") + 2:]) for cmd in commands)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", help="an existing bus (default: start a broker)")
    parser.add_argument("--rate", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--plates", type=int, default=10_000)
    parser.add_argument("--faces", type=int, default=10_000)
    parser.add_argument("--backlog", type=int, default=200_000)
    parser.add_argument("--layout", choices=tuple(LAYOUTS), default="deployed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        broker = None if args.bootstrap else BrokerProcess(directory / "broker").start()
        bootstrap = args.bootstrap or broker.bootstrap
        config = write_config(directory, bootstrap)
        services = [ServiceProcess(config, directory / f"service-{n}.log", stage_args)
                    for n, stage_args in enumerate(layout(args.layout, config))]
        service = ServiceProcess(config, directory / "watch.log", ("--stages", "watch"))  # throughput: watch alone
        settings = Settings.from_config(load_config(config))
        ensure_topics(settings, service_topics(settings))  # as deployed: control topics compacted
        try:
            started = time.monotonic()
            identities = publish_watches(bootstrap, args.plates, args.faces, random.Random(7))
            published = time.monotonic()
            for process in services:
                process.start(timeout=300)
            print(f"{args.plates:,} plates + {args.faces:,} faces watched: published in {published - started:.1f} s, "
                  f"service ready {time.monotonic() - published:.1f} s later")
            for process in services:
                assert process.process is not None
                rss = int(Path(f"/proc/{process.process.pid}/status").read_text().split("VmRSS:")[1].split()[0])
                print(f"process {' '.join(process.args)}: RSS with the watchlists loaded {rss / 1024:.0f} MiB")
            print(f"layout {args.layout}: {LAYOUT_LABELS[args.layout]}")
            latency(bootstrap, args.plates, identities, args.rate, args.seconds)
            for process in services:
                process.stop()
            throughput(bootstrap, args.plates, identities, args.backlog, service)
        finally:
            for process in (*services, service):
                process.stop()
            if broker is not None:
                broker.stop()
    print("load average:", os.getloadavg(), subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
